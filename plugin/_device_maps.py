"""Turns one world-wide device-map table into each worker's TensorPipe device maps.

The table has the form ``{worker: {peer: {device: device}}}`` and is given identically to
every rank. Row ``table[a][b]`` says where tensors that ``a`` sends to ``b`` land on ``b``;
the same row, inverted, says where tensors ``b`` sends to ``a`` land on ``a``. Each rank
keeps the rows it takes part in, in both directions, after checking the whole table, so
that every rank rejects a bad table the same way before RPC starts.
"""
from typing import Dict, Mapping, Sequence, Union

import torch

DeviceLike = Union[torch.device, str, int]
DeviceMap = Dict[torch.device, torch.device]


def _device(value: DeviceLike, where: str) -> torch.device:
    try:
        # An int means a CUDA device index, as in TensorPipeRpcBackendOptions.
        return torch.device("cuda", value) if isinstance(value, int) else torch.device(value)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device_maps{where}: {value!r} is not a device ({e})") from None


def _normalize(table, worker_names: Sequence[str]) -> Dict[str, Dict[str, DeviceMap]]:
    known = set(worker_names)
    if not isinstance(table, Mapping):
        raise TypeError(f"device_maps must be a dict {{worker: {{peer: {{device: device}}}}}}, got {type(table).__name__}")
    result: Dict[str, Dict[str, DeviceMap]] = {}
    for worker, rows in table.items():
        if worker not in known:
            raise ValueError(f"device_maps: unknown worker {worker!r} (workers: {', '.join(worker_names)})")
        if not isinstance(rows, Mapping):
            raise TypeError(f"device_maps[{worker!r}] must be a dict {{peer: {{device: device}}}}")
        for peer, mapping in rows.items():
            where = f"[{worker!r}][{peer!r}]"
            if peer not in known:
                raise ValueError(f"device_maps[{worker!r}]: unknown worker {peer!r} (workers: {', '.join(worker_names)})")
            if peer == worker:
                raise ValueError(f"device_maps{where}: a worker has no device map to itself")
            if not isinstance(mapping, Mapping) or not mapping:
                raise ValueError(f"device_maps{where} must be a non-empty dict {{device: device}}")
            devices = {_device(k, where): _device(v, where) for k, v in mapping.items()}
            targets: Dict[torch.device, torch.device] = {}
            for source, target in devices.items():
                if target in targets:
                    raise ValueError(
                        f"device_maps{where} cannot be inverted: {targets[target]} and {source} both map to "
                        f"{target}, so gradients and replies from {peer!r} could not find their way back"
                    )
                targets[target] = source
            result.setdefault(worker, {})[peer] = devices
    return result


def _inverse(mapping: DeviceMap) -> DeviceMap:
    return {target: source for source, target in mapping.items()}


def resolve_device_maps(
    table: Mapping, me: str, worker_names: Sequence[str], cuda_device_count: int
) -> Dict[str, DeviceMap]:
    """The device maps worker ``me`` must set, peer by peer.

    Args:
        table: ``{worker: {peer: {device: device}}}``, the same on every rank; devices as
            ``torch.device``, strings (``"cuda:0"``) or ints (CUDA indices).
        me: this worker's name.
        worker_names: the names of all workers, in rank order.
        cuda_device_count: CUDA devices on this machine, to check this worker's devices.

    Returns:
        Dict[str, Dict[torch.device, torch.device]]: ``{peer: {local device: device on peer}}`` for every peer this worker shares a row
        with, in either direction.

    Raises:
        TypeError: the table is not nested dicts.
        ValueError: an unknown worker, a map from a worker to itself, an empty map, a value
            that is not a device, a map that cannot be inverted (two devices onto one), two
            rows that disagree (``table[a][b]`` is not the inverse of ``table[b][a]``), or a
            device of this worker that does not exist here.
    """
    rows = _normalize(table, worker_names)
    for a, peers in rows.items():
        for b, forward in peers.items():
            backward = rows.get(b, {}).get(a)
            if backward is not None and backward != _inverse(forward):
                raise ValueError(
                    f"device_maps[{a!r}][{b!r}] and device_maps[{b!r}][{a!r}] are inconsistent: each must be the "
                    f"inverse of the other (got {_fmt(forward)} and {_fmt(backward)})"
                )
    maps: Dict[str, DeviceMap] = {}
    for peer, mapping in rows.get(me, {}).items():
        maps[peer] = dict(mapping)
    for worker, peers in rows.items():
        if me in peers and worker not in maps:
            maps[worker] = _inverse(peers[me])
    for peer, mapping in maps.items():
        for device in mapping:
            if device.type == "cuda" and not (device.index is not None and 0 <= device.index < cuda_device_count):
                raise ValueError(
                    f"device_maps: {device} (in the map between {me!r} and {peer!r}) does not exist on {me!r}, "
                    f"which has {cuda_device_count} CUDA device(s)"
                )
            if device.type not in ("cuda", "cpu"):
                raise ValueError(f"device_maps: {device} is neither a CPU nor a CUDA device")
    return maps


def _fmt(mapping: DeviceMap) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in mapping.items()) + "}"
