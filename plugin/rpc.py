"""Starting TensorPipe RPC for the plugin, from arguments or from torchrun's environment."""
import os
import warnings
from typing import Mapping, Optional, Sequence

import torch
import torch.distributed.rpc as _rpc

from ._device_maps import resolve_device_maps

__all__ = ["init_rpc", "resolve_device_maps"]


def _setting(value, env: str, what: str, convert=str, default=None):
    if value is not None:
        return value
    if env in os.environ:
        try:
            return convert(os.environ[env])
        except ValueError:
            raise ValueError(f"init_rpc(): {env}={os.environ[env]!r} is not a valid {what}") from None
    if default is not None:
        return default
    raise ValueError(f"init_rpc(): {what} was not given and {env} is not set (torchrun sets it)")


def _interface_toward(master_addr: str) -> Optional[str]:
    """Name of this host's network interface whose address the kernel would use to reach
    ``master_addr`` (``"lo"`` for a loopback address), or ``None`` when it cannot tell.

    TensorPipe listens on one address per worker, which it finds from ``TP_SOCKET_IFNAME``
    or else from this host's name; on a host whose name resolves to an address other
    workers cannot reach (a container, a network namespace, a second interface), workers
    on other hosts cannot connect. The address toward the master is one they can reach.
    Linux only (``SIOCGIFADDR``); IPv4 only.
    """
    import fcntl
    import socket
    import struct

    try:
        target = socket.getaddrinfo(master_addr, None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))  # UDP: picks the route and source address, sends nothing
            source = s.getsockname()[0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, ifname in socket.if_nameindex():
                try:
                    request = struct.pack("256s", ifname.encode()[:15])
                    address = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24])  # SIOCGIFADDR
                except OSError:  # no IPv4 address on this interface
                    continue
                if address == source:
                    return ifname
    except OSError:
        return None
    return None


def _choose_interfaces(master_addr: str) -> None:
    """Sets ``TP_SOCKET_IFNAME`` (TensorPipe's listening address) and ``GLOO_SOCKET_IFNAME``
    (the Gloo group TensorPipe's agent starts for its barriers) to the interface toward
    ``master_addr``, each only where it is not set already."""
    unset = [v for v in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME") if v not in os.environ]
    interface = _interface_toward(master_addr) if unset else None
    if interface is not None:
        for variable in unset:
            os.environ[variable] = interface


def init_rpc(
    name: Optional[str] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    *,
    master_addr: Optional[str] = None,
    master_port: Optional[int] = None,
    num_worker_threads: int = 16,
    rpc_timeout: float = 60.0,
    device_maps: Optional[Mapping] = None,
    worker_names: Optional[Sequence[str]] = None,
    transports: Optional[Sequence[str]] = None,
) -> _rpc.WorkerInfo:
    """Starts TensorPipe RPC on this process and returns its ``WorkerInfo``.

    Every argument left out is read from torchrun's environment: ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` (default ``localhost``), ``MASTER_PORT`` and ``LOCAL_RANK`` (the CUDA
    device made current, when CUDA is available). Workers are named ``worker0`` ..
    ``worker{world_size-1}`` unless ``worker_names`` says otherwise.

    Device maps are one world-wide table given identically to every rank,
    ``{worker: {peer: {device: device}}}``; row ``device_maps[a][b]`` says where a tensor
    that ``a`` sends to ``b`` lands on ``b``. Each rank applies the rows it takes part in,
    in both directions (the inverse of ``device_maps[a][b]`` is ``b``'s map to ``a``), so
    CUDA gradients of a distributed backward pass travel back to the device their
    tensors came from. The whole table is checked before RPC starts.

    Args:
        name (str, optional): this worker's name. Default: ``worker_names[rank]``.
        rank (int, optional): this worker's rank, ``0 <= rank < world_size``.
        world_size (int, optional): number of workers.
        master_addr (str, optional): address of rank 0's rendezvous store.
        master_port (int, optional): port of that store.
        num_worker_threads (int): threads serving RPCs on this worker. Default: 16.
        rpc_timeout (float): default RPC timeout in seconds (0: none). Default: 60.
        device_maps (dict, optional): the world-wide device-map table (devices as
            ``torch.device``, ``"cuda:0"``-style strings or CUDA indices).
        worker_names (Sequence[str], optional): names of all workers in rank order.
        transports (Sequence[str], optional): the TensorPipe transports to use, e.g.
            ``["uv"]`` (TCP through libuv). Default: TensorPipe's choice, which on one machine
            includes shared memory, whose reactor thread busy-polls a CPU core in every
            process even when idle (fastest messages, but on a machine with fewer cores than
            processes the polling competes with the work).

    Network interface: TensorPipe listens on the address of the interface named by the
    ``TP_SOCKET_IFNAME`` environment variable, and the Gloo group its agent starts on that of
    ``GLOO_SOCKET_IFNAME``; without them, both use the address this host's name resolves to,
    which other hosts may not reach (``127.0.0.1`` on many machines). Each variable that is
    not set is set here to the interface whose address routes to ``master_addr`` (``lo``
    for ``localhost``), an address the other hosts of a multi-host job reach; set them
    yourself to choose another interface.

    Returns:
        torch.distributed.rpc.WorkerInfo: this worker's name and id.

    Raises:
        ValueError: a setting is missing or malformed (the message names it and the
            environment variable it comes from), ``name`` contradicts ``worker_names``, or
            the device-map table is invalid: unknown worker, a map from a worker to
            itself, a map that cannot be inverted, two rows that disagree, or a device that
            does not exist on this worker. Nothing has started when it raises.
        TypeError: ``device_maps`` is not nested dicts.
    """
    rank = _setting(rank, "RANK", "rank", int)
    world_size = _setting(world_size, "WORLD_SIZE", "world size", int)
    master_addr = _setting(master_addr, "MASTER_ADDR", "master address", str, default="localhost")
    master_port = _setting(master_port, "MASTER_PORT", "master port", int)
    if not 0 <= rank < world_size:
        raise ValueError(f"init_rpc(): rank must be in [0, {world_size}), got {rank}")
    names = list(worker_names) if worker_names is not None else [f"worker{r}" for r in range(world_size)]
    if len(names) != world_size or len(set(names)) != world_size:
        raise ValueError(f"init_rpc(): worker_names must hold {world_size} distinct names, got {names}")
    if name is None:
        name = names[rank]
    elif name != names[rank]:
        raise ValueError(f"init_rpc(): name {name!r} is not worker_names[{rank}] = {names[rank]!r}")
    if num_worker_threads < 1:
        raise ValueError(f"init_rpc(): num_worker_threads must be >= 1, got {num_worker_threads}")
    if rpc_timeout < 0:
        raise ValueError(f"init_rpc(): rpc_timeout must be >= 0 seconds, got {rpc_timeout}")

    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    maps = resolve_device_maps(device_maps or {}, name, names, cuda_count)

    local_rank = os.environ.get("LOCAL_RANK")
    if cuda_count and local_rank is not None:
        torch.cuda.set_device(int(local_rank) % cuda_count)

    extra = {}
    if transports is not None:
        # TensorPipe's transport list is an underscore-prefixed option of
        # TensorPipeRpcBackendOptions (torch documents no other way to choose it).
        extra["_transports"] = list(transports)
    options = _rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=num_worker_threads,
        rpc_timeout=rpc_timeout,
        init_method=f"tcp://{master_addr}:{master_port}",
        **extra,
    )
    devices = set()
    for peer, mapping in maps.items():
        options.set_device_map(peer, {str(k): str(v) for k, v in mapping.items()})
        devices.update(d for d in mapping if d.type == "cuda")
    if devices:
        options.set_devices(sorted(devices, key=lambda d: d.index))

    _choose_interfaces(master_addr)

    from . import _handlers  # noqa: F401  (peers call the engine's handlers by name)

    with warnings.catch_warnings():
        # torch's own rendezvous code warns about its own use of a deprecated API
        warnings.filterwarnings("ignore", message="You are using a Backend .* as a ProcessGroup", category=UserWarning)
        _rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    return _rpc.get_worker_info()
