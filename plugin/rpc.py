"""Starting and stopping TensorPipe RPC for the plugin: start-up from arguments or from
torchrun's environment, checked across the group before torch's rendezvous, and a shutdown
that returns when a worker has died."""
import os
import threading
import time
import warnings
from typing import Dict, List, Mapping, Optional, Sequence, Union

import torch
import torch.distributed.rpc as _rpc

from . import _auth
from ._auth import AUTH_TRANSPORT, read_auth_key_file  # noqa: F401 (AUTH_TRANSPORT: the name, as before)
from ._device_maps import resolve_device_maps
from ._errors import remote_error_summary
from ._rendezvous import RendezvousError, check_group, init_method_for, resolve_host

__all__ = ["RendezvousError", "init_rpc", "read_auth_key_file", "resolve_device_maps", "shutdown"]

def _ipv4_of_interface(ifname: str) -> Optional[str]:
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            request = struct.pack("256s", ifname.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, request)[20:24])  # SIOCGIFADDR
        except OSError:
            return None


def _ipv6_of_interface(ifname: str) -> Optional[str]:
    """The interface's IPv6 address (from ``/proc/net/if_inet6``): a global or loopback one
    first, else a link-local one with its scope (``fe80::1%eth0``); None when it has none."""
    import socket

    found = []
    try:
        with open("/proc/net/if_inet6") as table:
            for line in table:
                fields = line.split()  # address, index, prefix length, scope, flags, name
                if len(fields) == 6 and fields[5] == ifname:
                    address = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))
                    link_local = int(fields[3], 16) == 0x20
                    found.append((link_local, f"{address}%{ifname}" if link_local else address))
    except OSError:
        return None
    return min(found)[1] if found else None


def _address_of_interface(ifname: str, family) -> Optional[str]:
    """The interface's address of ``family`` (``socket.AF_INET`` or ``AF_INET6``), or None."""
    import socket

    return _ipv4_of_interface(ifname) if family == socket.AF_INET else _ipv6_of_interface(ifname)


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
    Linux only (``SIOCGIFADDR``, ``/proc/net/if_inet6``); ``master_addr``'s IPv4 address
    when it has one, else its IPv6 address.
    """
    import socket

    try:
        family, target = resolve_host(master_addr)
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))  # UDP: picks the route and source address, sends nothing
            source = socket.inet_pton(family, s.getsockname()[0].split("%")[0])
        for _, ifname in socket.if_nameindex():
            address = _address_of_interface(ifname, family)  # None: no address of that family there
            if address is not None and socket.inet_pton(family, address.split("%")[0]) == source:
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
    init_timeout: float = 120.0,
    auth_key: Optional[Union[str, bytes]] = None,
) -> _rpc.WorkerInfo:
    """Starts TensorPipe RPC on this process and returns its ``WorkerInfo``.

    Every argument left out is read from torchrun's environment: ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` (default ``localhost``), ``MASTER_PORT`` and ``LOCAL_RANK`` (the CUDA
    device made current, when CUDA is available). Workers are named ``worker0`` ..
    ``worker{world_size-1}`` unless ``worker_names`` says otherwise.

    Before torch's rendezvous starts, the processes compare what each was given, through
    the rendezvous store: the world size, the ``worker_names`` list, and their ranks (each
    rank exactly once). Rank 0 decides, and every process that arrived raises the same
    :class:`RendezvousError`, naming the ranks, workers, hosts and process ids that
    disagreed, when they disagree or when not all ranks arrived within ``init_timeout``
    seconds. After a disagreement rank 0, whose process hosts the store, stays until the
    ranks that some process expects have arrived and read why, or until its
    ``init_timeout`` has passed. A process that arrives after a complete, consistent group
    has started gets the error alone (the group cannot tell it from another job's
    process). Rank 0 hosts the store at ``master_addr:master_port``; under torchrun,
    torchrun's agent does. After the check, torch's own start-up (its process group, the
    exchange of addresses) waits at most ``rpc_timeout`` per store operation (``init_timeout``
    when ``rpc_timeout`` is 0). Algorithm
    and limits: the "Start-up and shutdown" section of ``docs/failures.md``.

    A group that torchrun restarts (``--max-restarts``) starts afresh: torchrun's store
    outlives the dead group, and both the start-up check and torch's own start-up use keys
    of their own per restart (``TORCHELASTIC_RESTART_COUNT``), so the new group never reads
    the dead group's addresses.

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
        init_timeout (float): seconds to wait for every rank to arrive at the start-up
            check (rank 0's store first, then the others). Default: 120.
        auth_key (str or bytes, optional): the job's authentication key (at least 16
            bytes; every worker needs the same). Default: the environment variable
            ``GILFREE_RPC_AUTH_KEY``, else the file named by ``GILFREE_RPC_AUTH_KEY_FILE``
            (:func:`read_auth_key_file`), else none. With a key, workers talk over the
            transport ``"gilfree_auth"`` only (TCP, IPv4 or IPv6; every connection proves
            the key in a challenge-response, and every message, tensors included, is
            encrypted and authenticated with AES-256-GCM under keys of that connection,
            checked before TensorPipe reads it; the basic channels, so tensors travel
            through the same connections), and the rendezvous store's values carry a MAC.
            See ``docs/security.md``.

    Listening sockets: rank 0's rendezvous store listens on the address ``master_addr``
    resolves to (only on that interface; loopback for ``localhost``), TensorPipe (and the
    Gloo group torch starts for its start-up barriers) on the interface toward
    ``master_addr`` (below).

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
        TypeError: ``device_maps`` is not nested dicts, or ``auth_key`` is not str or bytes.
        RendezvousError: the start-up check failed: ranks that disagree on the world size
            or on ``worker_names``, a rank started twice, a rank (or rank 0's store) that
            did not arrive within ``init_timeout``, this process arrived after its group
            had started, or the workers' authentication keys differ (or some have none).
            RPC has not started.
        RuntimeError: a key was given and this machine has no OpenSSL libcrypto, or the
            transport's check of torch's TensorPipe failed ("gilfree_auth refuses to
            start: ...", naming the torch version and what differed; ``docs/security.md``).
            RPC has not started.
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
    if not init_timeout > 0:
        raise ValueError(f"init_rpc(): init_timeout must be > 0 seconds, got {init_timeout}")

    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    maps = resolve_device_maps(device_maps or {}, name, names, cuda_count)

    local_rank = os.environ.get("LOCAL_RANK")
    if cuda_count and local_rank is not None:
        torch.cuda.set_device(int(local_rank) % cuda_count)

    key = _auth.job_key(auth_key)
    if key is not None:
        _auth.check_transports(transports)

    _choose_interfaces(master_addr)
    if key is not None:
        _configure_auth_transport(key, master_addr)  # registers the transport, for the options below
    else:
        _auth.keyless_start()

    extra = {}
    if key is not None:
        extra.update(_auth.backend_options(maps))
    elif transports is not None:
        # TensorPipe's transport list is an underscore-prefixed option of
        # TensorPipeRpcBackendOptions (torch documents no other way to choose it).
        extra["_transports"] = list(transports)
    # torch's init_rpc gives its rendezvous store the RPC timeout, and a store timeout of 0
    # expires every store operation at once (DistStoreError; torch 2.13 and 2.15): with no RPC
    # timeout, start-up runs under init_timeout, and the agent's default timeout is set to 0
    # (none) once it runs.
    options = _rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=num_worker_threads, rpc_timeout=rpc_timeout or init_timeout, init_method="env://", **extra
    )
    devices = set()
    for peer, mapping in maps.items():
        options.set_device_map(peer, {str(k): str(v) for k, v in mapping.items()})
        devices.update(d for d in mapping if d.type == "cuda")
    if devices:
        options.set_devices(sorted(devices, key=lambda d: d.index))

    store = check_group(master_addr, master_port, rank, world_size, name, names, init_timeout, auth_key=key)
    options.init_method = init_method_for(store, rank, world_size, auth_key=key)
    with _arrivals:
        _arrived.clear()
    _fresh_torch_keys_after_a_restart()
    with warnings.catch_warnings():
        # torch's own rendezvous code warns about its own use of a deprecated API
        warnings.filterwarnings("ignore", message="You are using a Backend .* as a ProcessGroup", category=UserWarning)
        _rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if rpc_timeout == 0:
        _rpc._set_rpc_timeout(0)  # torch.distributed.rpc's own setter (torch 2.13 and 2.15): 0 is none
    return _rpc.get_worker_info()


def _configure_auth_transport(key: bytes, master_addr: str) -> None:
    """Gives the plugin's transport (plugin._auth) its key and its listening address: that
    of ``TP_SOCKET_IFNAME``'s interface, as torch's uv transport would use, of
    ``master_addr``'s family (IPv4 or IPv6) where it has one."""
    import socket

    interface = os.environ.get("TP_SOCKET_IFNAME")
    host = None
    if interface:
        try:
            family = resolve_host(master_addr)[0]
        except OSError:
            family = socket.AF_INET
        other = socket.AF_INET6 if family == socket.AF_INET else socket.AF_INET
        host = _address_of_interface(interface, family) or _address_of_interface(interface, other)
    if host is None:
        raise ValueError(
            f"init_rpc(): cannot tell which address to listen on toward master_addr={master_addr!r} "
            f"(TP_SOCKET_IFNAME={interface!r}); set TP_SOCKET_IFNAME to the interface other workers reach"
        )
    _auth.configure_transport(key, host)


def _fresh_torch_keys_after_a_restart() -> None:
    """Keeps a group that torchrun restarted (``--max-restarts``) from reading the dead
    group's keys in torch's own start-up.

    torchrun's store outlives a restart, and torch's ``rpc.init_rpc`` keeps its rendezvous
    keys (among them the addresses of the Gloo group its agent starts) under
    ``rpc_prefix_<n>``, ``n`` counting the calls in this process: 0 again in every
    restarted worker, so the restarted group would connect to the dead group's addresses
    and hang or fail. Starting the count at a number of its own per restart
    (``TORCHELASTIC_RESTART_COUNT``, set by torchrun) gives each group fresh keys; every
    process of a group was restarted the same number of times, so they agree on it. (The
    start-up check's own keys carry the restart count in their prefix already.)
    """
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restart:
        # torch internal: the module-level counter of torch/distributed/rpc/__init__.py
        # that init_rpc names its PrefixStore after (checked on torch 2.11 and 2.13).
        with _rpc._init_counter_lock:
            _rpc._init_counter = max(_rpc._init_counter, 1000 * restart)


# Shutdown. Each worker tells every peer that it has reached shutdown(); the peers' RPC
# threads record it here.
_arrivals = threading.Condition()
_arrived = set()


def _note_arrival(worker: str) -> bool:
    """Called by RPC from a peer that has reached :func:`shutdown`."""
    with _arrivals:
        _arrived.add(worker)
        _arrivals.notify_all()
    return True


def _worker_names() -> List[str]:
    # torch has no public list of an RPC group's workers: the current agent's
    # get_worker_infos() is what torch's own _all_gather uses (checked on torch 2.13).
    infos = _rpc.api._get_current_rpc_agent().get_worker_infos()
    return [info.name for info in sorted(infos, key=lambda info: info.id)]


def _remaining(deadline: Optional[float]) -> float:
    """Seconds left before ``deadline`` (None: no bound, which torch spells 0)."""
    return 0.0 if deadline is None else max(0.001, deadline - time.monotonic())


# Seconds between two liveness probes of a peer that has not reached shutdown yet.
_PROBE_INTERVAL = 0.5


def shutdown(graceful: bool = True, timeout: Optional[float] = None) -> List[str]:
    """Stops RPC on this worker; returns the workers a graceful shutdown could not wait for.

    A graceful shutdown (torch's ``rpc.shutdown()``) waits until every worker has called it,
    then for outstanding work, so that no worker stops while a peer still needs it. When a
    worker has died, torch's waits for it without bound. This one tells every peer that this
    worker has arrived, then waits for each peer to arrive too, while probing the peers that
    have not arrived (one small RPC every 0.5 s, a builtin op that needs no GIL there):

    - a peer that answers is alive and still working, and is waited for, as torch does
      (until ``timeout``, when one is given);
    - a peer whose probe fails (at once for a process that has exited: its connection is
      closed) or is not answered within the RPC timeout (a hung process or host) is
      *unreachable*.

    When every peer has arrived, it runs torch's graceful shutdown, bounded by the RPC
    timeout (or the time left). Otherwise it warns, naming each unreachable worker (and
    why), each one that did not arrive within ``timeout``, and each one that arrived and
    then stopped without waiting for this one; shuts down without waiting
    (``graceful=False``); and returns the names of the first two kinds. So after a worker
    died, every survivor returns once the survivors have all arrived, within the RPC
    timeout of the death (at once, on one machine).

    Why a warning and a returned list, not an exception: shutdown usually runs in a
    ``finally`` block or at exit, where an exception would hide the one that is being
    handled, and this worker's RPC is stopped either way; a caller that must fail checks
    the list.

    Every worker of the group must shut down with this function: a peer that calls
    torch's ``rpc.shutdown()`` instead never announces its arrival (it is waited for as a
    live peer, or reported as late when ``timeout`` is given). Each worker sends one
    message to each peer, ``N * (N - 1)`` in all, plus the probes while it waits.

    Args:
        graceful (bool): wait for the other workers (True), or stop this worker at once
            (False, torch's ``rpc.shutdown(graceful=False)``). Default: True.
        timeout (float, optional): seconds to wait in all, for live peers too. Default:
            ``None``: live peers are waited for without bound, as torch does, and an
            unresponsive one for the RPC timeout (``rpc_timeout`` of :func:`init_rpc`;
            if that is 0, without bound: only peers that have exited are detected).

    Returns:
        List[str]: the names of the workers that were unreachable or did not arrive within
        ``timeout``, in rank order; empty after a graceful shutdown, when every worker
        arrived (even if some stopped before this one; the warning says so), or when
        ``graceful`` is False.

    Raises:
        ValueError: ``timeout`` is not positive.
        RuntimeError: RPC is not running on this process (from torch).

    Warns:
        RuntimeWarning: the graceful shutdown fell back to a shutdown without waiting; the
        message names the workers and the reasons. Also when torch's graceful shutdown
        failed after every worker had arrived (a worker died in between).
    """
    if timeout is not None and not timeout > 0:
        raise ValueError(f"shutdown(): timeout must be > 0 seconds (or None), got {timeout}")
    try:
        if not graceful:
            _rpc.shutdown(graceful=False)
            return []
        return _shutdown_gracefully(timeout)
    finally:
        with _arrivals:
            _arrived.clear()


def _shutdown_gracefully(timeout: Optional[float]) -> List[str]:
    rpc_timeout = _rpc.get_rpc_timeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    me = _rpc.get_worker_info().name
    peers = [name for name in _worker_names() if name != me]
    answered = set()  # peers that answered our announcement
    failed: Dict[str, str] = {}  # peers an RPC to which failed: why
    probing = set()  # peers with a probe in flight
    next_probe = {peer: 0.0 for peer in peers}

    def rpc_timeout_now() -> float:
        # torch's RPC timeout argument: 0 means none
        if deadline is None:
            return rpc_timeout
        return _remaining(deadline) if rpc_timeout == 0 else min(rpc_timeout, _remaining(deadline))

    def on_answer(peer, probe):
        def callback(future):
            try:
                future.wait()
                error = None
            except Exception as e:  # noqa: BLE001 (any failure means: not reachable)
                error = remote_error_summary(e)
            with _arrivals:
                if probe:
                    probing.discard(peer)
                    next_probe[peer] = time.monotonic() + _PROBE_INTERVAL
                elif error is None:
                    answered.add(peer)
                if error is not None:
                    failed.setdefault(peer, error)
                _arrivals.notify_all()

        return callback

    def send(peer, fn, args, probe):
        try:
            future = _rpc.rpc_async(peer, fn, args=args, timeout=rpc_timeout_now())
        except Exception as e:  # noqa: BLE001
            with _arrivals:
                failed.setdefault(peer, remote_error_summary(e))
                probing.discard(peer)
            return
        future.add_done_callback(on_answer(peer, probe))

    for peer in peers:
        send(peer, _note_arrival, (me,), probe=False)

    def settled(peer):
        # Our announcement got an answer (or failed), and the peer arrived (or failed).
        return peer in failed or (peer in answered and peer in _arrived)

    with _arrivals:
        while not all(settled(p) for p in peers):
            if deadline is not None and time.monotonic() >= deadline:
                break
            now = time.monotonic()
            for peer in peers:
                if peer in _arrived or peer in failed or peer in probing or now < next_probe[peer]:
                    continue
                probing.add(peer)
                # a builtin op: the peer answers from its RPC threads without the GIL
                send(peer, torch.add, (torch.zeros(()), 0), probe=True)
            _arrivals.wait(timeout=0.1 if deadline is None else min(0.1, _remaining(deadline)))
        unreachable = {p: failed[p] for p in peers if p in failed and p not in _arrived}
        left = [p for p in peers if p in failed and p in _arrived]
        late = [p for p in peers if not settled(p)]

    if not failed and not late:
        try:
            _rpc.shutdown(graceful=True, timeout=rpc_timeout_now())
        except Exception as e:  # noqa: BLE001 (torch has shut the agent down in any case)
            warnings.warn(
                f"plugin.rpc.shutdown(): every worker had arrived, but torch's graceful shutdown of {me!r} "
                f"failed (a worker died meanwhile?): {remote_error_summary(e)}",
                RuntimeWarning,
                stacklevel=3,
            )
        return []

    reasons = [f"{p!r} is unreachable ({why})" for p, why in unreachable.items()]
    if late:
        reasons.append(f"{', '.join(repr(p) for p in late)} did not reach shutdown() within {timeout:g} s")
    if left:
        # They arrived, then stopped without waiting for this worker (their own timeout,
        # or another worker's failure); a message to them fails now.
        reasons.append(f"{', '.join(repr(p) for p in left)} reached shutdown() and stopped before this worker did")
    warnings.warn(
        f"plugin.rpc.shutdown(): {me!r} shut down without waiting for the other workers: " + "; ".join(reasons),
        RuntimeWarning,
        stacklevel=3,
    )
    _rpc.shutdown(graceful=False)
    return [p for p in peers if p in unreachable or p in late]
