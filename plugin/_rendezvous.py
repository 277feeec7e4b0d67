"""The start-up check that ``plugin.rpc.init_rpc`` runs before torch's rendezvous.

torch's ``rpc.init_rpc`` trusts every process to agree on the world size, its rank and the
names of the workers. When they do not, it hangs: the ``tcp://`` rendezvous store waits
30 minutes for ranks that never come, and different ``worker_names`` lists are accepted
silently. This module first exchanges what each process believes through the same key-value
store, with a deadline, and raises a ``RendezvousError`` naming what disagreed on every
process that takes part; only a consistent, complete group goes on to torch's start-up,
which is handed the same store (a rendezvous handler of our own, registered with
``torch.distributed.rendezvous.register_rendezvous_handler``, the public way to do so).

The protocol, on the store (keys under a prefix that is unique to this start-up):

1. Every process takes an arrival number, ``add("joined", 1)``, and writes its record
   (rank, world size, name, worker names, host, pid) under ``record/<number>``.
2. Rank 0 judges: it reads the records as they arrive and checks each against its own. A
   disagreement (world size, worker names, a rank taken twice) is decided at once. The
   group is complete when ranks ``0 .. world_size-1`` have each arrived once. Either way,
   rank 0 seals the arrivals with one atomic ``add("joined", SEAL)``, whose result says
   exactly who arrived before the seal, and writes the verdict. Without a decision by its
   deadline, rank 0 writes a verdict that lists the missing ranks.
3. Every other process waits for the verdict, and raises it unless it is "ok". A process
   whose arrival number is above ``SEAL`` came after the seal: it reads the verdict and
   raises, saying the check had ended without it (after an "ok", the group goes on).
4. After an error verdict, rank 0 stays (its process hosts the store; leaving would cut
   the others off before they read why) until every process that arrived has read it and
   every rank that any of them expects has arrived, at most until its deadline (or a few
   seconds, if that has passed).
5. A process that sees no rank 0 by its own deadline (possible only with torchrun's
   agent store, since rank 0 hosts the store otherwise) takes the judge's place with a
   ``compare_set``, so that a rank 0 arriving later cannot start a group that the others
   have given up on, and writes the verdict.

With an authentication key (``init_rpc(auth_key=...)``), each record also says that its
process has a key and carries a proof of it (an HMAC under the key of the record's prefix,
rank, process id and host); rank 0 checks every proof against its own key, so workers whose
keys differ, or a worker without a key among workers with one, make the verdict an error
that names them. The key itself never enters the store. torch's own start-up then gets the
store behind ``plugin._auth.AuthenticatedStore``, whose values carry a MAC (the proofs and the
MAC are the authenticated transport's room, ``plugin/_auth/store.py``).

The key prefix counts the start-ups of this process, as torch's own ``rpc.init_rpc``
does: processes that call ``init_rpc`` again (after a shutdown) must all do so.

Who hosts the store: rank 0 (``MASTER_ADDR:MASTER_PORT``), unless torchrun's agent already
hosts one there (torchrun sets ``TORCHELASTIC_USE_AGENT_STORE=True``; torch's own
``tcp://`` rendezvous reads the same variable), in which case every rank is a client.
"""
import datetime
import errno
import json
import os
import socket
import threading
import time
import warnings
from typing import Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

import torch.distributed as dist

from ._auth import authenticated_store, proves_key, record_proof

__all__ = ["RendezvousError", "check_group", "init_method_for", "listening_socket", "resolve_host"]

# Added to the arrival counter to seal it: an arrival number above it came after the verdict.
SEAL = 1 << 40
# Seconds rank 0 waits, past its deadline, for the others to read an error verdict.
_ACK_WAIT = 5.0
_POLL = 0.05
_SCHEME = "gilfree-store"

_lock = threading.Lock()
_starts = 0  # start-ups in this process; part of the key prefix, as torch's own counter
_pending: Dict[str, Tuple[dist.Store, int, int]] = {}
_registered = False


class RendezvousError(RuntimeError):
    """Raised by :func:`plugin.rpc.init_rpc` when the processes starting an RPC group
    disagree (world size, worker names, a rank started twice) or do not all arrive within
    ``init_timeout``. Raised on every process that took part in the check, with the
    verdict of rank 0, which names the ranks, workers, hosts and process ids involved;
    RPC has not started on any of them. A ``RuntimeError``, as torch's own rendezvous
    errors are.

    Args:
        message (str): what went wrong, starting with ``init_rpc():``.

    Raises nothing.
    """

    def __init__(self, message: str):
        super().__init__(message)


def _describe(record: dict) -> str:
    return f"rank {record['rank']} ({record['name']!r}, pid {record['pid']} on {record['host']})"


def _names_differ(mine: List[str], theirs: List[str]) -> str:
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            return f"worker_names[{i}] is {a!r} on one and {b!r} on the other"
    return f"one lists {len(mine)} names, the other {len(theirs)}"


def _problems(judge: dict, records: Sequence[dict]) -> Optional[str]:
    """The first disagreement between ``judge`` and ``records`` (in arrival order), or None."""
    for r in records:
        if r["world_size"] != judge["world_size"]:
            return (
                f"the processes disagree on the world size: {_describe(r)} was started with "
                f"world_size={r['world_size']}, {_describe(judge)} with world_size={judge['world_size']}"
            )
    for r in records:
        if r["worker_names"] != judge["worker_names"]:
            return (
                f"the processes disagree on worker_names: {_describe(r)} has {r['worker_names']}, "
                f"{_describe(judge)} has {judge['worker_names']} ({_names_differ(judge['worker_names'], r['worker_names'])})"
            )
    for r in records:
        problem = _key_problem(judge, r)
        if problem:
            return problem
    by_rank: Dict[int, dict] = {}
    for r in records:
        if r["rank"] in by_rank:
            return (
                f"rank {r['rank']} was started twice: by {_describe(by_rank[r['rank']])} and by "
                f"{_describe(r)}"
            )
        by_rank[r["rank"]] = r
    return None


# The judge's key, which never enters the store (set by check_group for its own call).
_judge_keys: Dict[str, Optional[bytes]] = {}


def _key_problem(judge: dict, record: dict) -> Optional[str]:
    """Whether ``record``'s process was started with another authentication key than the
    judge's (or one of them without a key)."""
    if record is judge:
        return None
    judge_keyed, keyed = judge.get("keyed", False), record.get("keyed", False)
    if judge_keyed and not keyed:
        return (
            f"{_describe(record)} was started without an authentication key, {_describe(judge)} with one "
            f"(give every worker the same auth_key, GILFREE_RPC_AUTH_KEY or GILFREE_RPC_AUTH_KEY_FILE)"
        )
    if keyed and not judge_keyed:
        return (
            f"{_describe(record)} was started with an authentication key, {_describe(judge)} without one "
            f"(give every worker the same auth_key, GILFREE_RPC_AUTH_KEY or GILFREE_RPC_AUTH_KEY_FILE)"
        )
    if keyed:
        key = _judge_keys.get(judge["prefix"])
        if key is None or not proves_key(key, judge["prefix"], record):
            return (
                f"{_describe(record)} was started with another authentication key than {_describe(judge)} "
                f"(every worker needs the same key)"
            )
    return None


def _missing(world_size: int, records: Sequence[dict]) -> List[int]:
    present = {r["rank"] for r in records}
    return [r for r in range(world_size) if r not in present]


def _timeout_message(timeout: float, world_size: int, records: Sequence[dict], where: str) -> str:
    missing = _missing(world_size, records)
    arrived = ", ".join(_describe(r) for r in sorted(records, key=lambda r: r["rank"])) or "none"
    return (
        f"not every rank arrived within init_timeout={timeout:g} s: rank(s) {missing} of world_size="
        f"{world_size} never started (or use another MASTER_ADDR/MASTER_PORT than {where}); arrived: {arrived}"
    )


def _wait_for_port(host: str, port: int, deadline: float) -> bool:
    """Whether something accepts TCP connections on host:port before the deadline (polled
    quietly here, because a TCPStore client that cannot connect logs every retry)."""
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def _uses_agent_store() -> bool:
    # torchrun hosts the store itself and says so with this variable (read the same way by
    # torch.distributed.rendezvous._torchelastic_use_agent_store; checked on torch 2.13).
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True)


def _open_store(host: str, port: int, rank: int, timeout: float, deadline: float) -> dist.Store:
    """Hosts the store (rank 0) or joins it. Raises RendezvousError when none can be reached."""
    where = f"{host}:{port}"
    span = datetime.timedelta(seconds=timeout)
    if rank == 0 and not _uses_agent_store():
        try:
            listener = listening_socket(host, port)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise RendezvousError(f"init_rpc(): rank 0 could not host the rendezvous store on {where}: {e}") from e
            # Another process holds the port: another rank 0 of this group, or something
            # else. Join it as a client; a second rank 0 is then reported as a duplicate.
        else:
            try:
                # torch's TCPStore binds every interface; given a socket bound here, it
                # listens on that one only (master_listen_fd; the store owns the fd).
                return dist.TCPStore(
                    host, port, None, True, span, wait_for_workers=False, multi_tenant=True,
                    master_listen_fd=listener.detach(),
                )
            except RuntimeError as e:
                raise RendezvousError(f"init_rpc(): rank 0 could not host the rendezvous store on {where}: {e}") from e
    if not _wait_for_port(host, port, deadline):
        who = "torchrun's agent" if _uses_agent_store() else "rank 0"
        raise RendezvousError(
            f"init_rpc(): rank {rank} found no rendezvous store at {where} within init_timeout={timeout:g} s: "
            f"{who} hosts it there; rank 0 never started, or the ranks were given different "
            f"MASTER_ADDR/MASTER_PORT"
        )
    try:
        remaining = datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))
        return dist.TCPStore(host, port, None, False, remaining, wait_for_workers=False)
    except RuntimeError as e:
        raise RendezvousError(f"init_rpc(): rank {rank} could not join the rendezvous store at {where}: {e}") from e


def resolve_host(host: str):
    """``(family, address)`` of ``host``: its IPv4 address when it has one (``127.0.0.1``
    for ``localhost``), else its IPv6 address (``::1``, or a name with IPv6 addresses only).
    Raises OSError (``socket.gaierror``) when it has neither."""
    try:
        return socket.AF_INET, socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror:
        return socket.AF_INET6, socket.getaddrinfo(host, None, socket.AF_INET6, socket.SOCK_STREAM)[0][4][0]


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host``'s address (:func:`resolve_host`: ``127.0.0.1`` for
    ``localhost``, ``::1`` for ``::1``), port ``port``; only that interface, never every one.

    When that address is not one of this host's (``EADDRNOTAVAIL``: ``host`` names another
    machine, or an address translated on the way), it listens on every interface, as torch's
    ``TCPStore`` does, and warns. Raises OSError (``EADDRINUSE`` when the port is taken)."""
    family, address = resolve_host(host)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as e:
            if e.errno != errno.EADDRNOTAVAIL:
                raise
            warnings.warn(
                f"init_rpc(): {host} ({address}) is not an address of this host: the rendezvous store "
                f"listens on every interface (port {port})",
                RuntimeWarning,
                stacklevel=3,
            )
            sock.bind(("", port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def _prefix() -> str:
    global _starts
    with _lock:
        _starts += 1
        count = _starts
    # A torchrun agent's store outlives restarts of the workers; each restart starts afresh.
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"gilfree_init/{restart}/{count}/"


def _read_records(store: dist.Store, prefix: str, upto: int, records: Dict[int, dict], first: int = 1) -> None:
    """Reads the records numbered first..upto not read yet (those already written)."""
    for i in range(first, upto + 1):
        if i not in records and store.check([f"{prefix}record/{i}"]):
            records[i] = json.loads(store.get(f"{prefix}record/{i}"))


def _verdict(store: dist.Store, prefix: str) -> Optional[dict]:
    if store.check([prefix + "verdict"]):
        return json.loads(store.get(prefix + "verdict"))
    return None


def check_group(
    host: str, port: int, rank: int, world_size: int, name: str, worker_names: Sequence[str], timeout: float,
    auth_key: Optional[bytes] = None,
) -> dist.Store:
    """Runs the start-up check; returns the store, for torch's rendezvous, when the group
    is complete and consistent (and, with ``auth_key``, every process holds that key).
    Raises RendezvousError otherwise: within ``timeout`` seconds of this call when rank 0
    has not arrived, else within ``timeout`` seconds of rank 0's arrival (plus
    ``_ACK_WAIT`` on rank 0 after an error)."""
    deadline = time.monotonic() + timeout
    where = f"{host}:{port}"
    store = _open_store(host, port, rank, timeout, deadline)
    prefix = _prefix()
    mine = {
        "rank": rank, "world_size": world_size, "name": name, "worker_names": list(worker_names),
        "host": socket.gethostname(), "pid": os.getpid(), "keyed": auth_key is not None, "prefix": prefix,
    }
    if auth_key is not None:
        mine["key_proof"] = record_proof(auth_key, prefix, mine)
        _judge_keys[prefix] = auth_key
    try:
        number = store.add(prefix + "joined", 1)
        store.set(f"{prefix}record/{number}", json.dumps(mine))
        if number > SEAL:
            _late(store, prefix, mine, deadline)
        elif rank == 0 and _claim_judge(store, prefix, f"rank0:{number}"):
            _judge(store, prefix, mine, timeout, deadline, where)
        else:
            _follow(store, prefix, mine, timeout, deadline, where)
    except RendezvousError:
        raise
    except RuntimeError as e:  # the store went away (its host exited), or a store timeout
        raise RendezvousError(f"init_rpc(): the start-up check of {_describe(mine)} failed: {e}") from e
    finally:
        _judge_keys.pop(prefix, None)
    return store


def _claim_judge(store: dist.Store, prefix: str, claim: str) -> bool:
    """Whether this process now judges. The first rank 0 to arrive does (a second one is
    a duplicate, which the first reports), or a process that gave up waiting for rank 0,
    which thereby keeps a rank 0 arriving later from judging."""
    return store.compare_set(prefix + "judge", "", claim).decode() == claim


def _seal(store: dist.Store, prefix: str) -> int:
    """Closes the arrivals; returns how many processes arrived before."""
    return store.add(prefix + "joined", SEAL) - SEAL


def _late(store, prefix, mine, deadline) -> None:
    verdict = None
    while verdict is None and time.monotonic() < deadline + _ACK_WAIT:
        verdict = _verdict(store, prefix)
        time.sleep(0 if verdict else _POLL)
    if verdict is not None and not verdict["ok"]:
        store.add(prefix + "acks", 1)
    if verdict is None:
        what = "its verdict was not written"
    elif verdict["ok"]:
        what = f"the group of {verdict['world_size']} workers {verdict['names']} started without it"
    else:
        what = verdict["message"]
    raise RendezvousError(
        f"init_rpc(): {_describe(mine)} arrived after the start-up check had ended ({what})"
    )


def _judge(store, prefix, mine, timeout, deadline, where) -> None:
    records: Dict[int, dict] = {}
    world_size = mine["world_size"]
    while True:
        count = store.add(prefix + "joined", 0)
        _read_records(store, prefix, count, records)
        arrived = [records[i] for i in sorted(records)]
        # (a rank outside the world implies another world size: init_rpc checks the rank locally)
        problem = _problems(mine, arrived)
        complete = problem is None and len(records) == count and not _missing(world_size, arrived)
        if problem is None and not complete and time.monotonic() < deadline:
            time.sleep(_POLL)
            continue
        sealed = _seal(store, prefix)
        if sealed > count:  # arrivals between the last read and the seal: all extras
            late_deadline = time.monotonic() + 2.0
            while len(records) < sealed and time.monotonic() < late_deadline:
                _read_records(store, prefix, sealed, records)
                time.sleep(_POLL)
            arrived = [records[i] for i in sorted(records)]
            if problem is None and complete:
                problem = _problems(mine, arrived) or (
                    f"{sealed - world_size} process(es) more than world_size={world_size} arrived: "
                    + ", ".join(_describe(r) for r in arrived)
                )
        if problem is None and not complete:
            problem = _timeout_message(timeout, world_size, arrived, where)
        if problem is None:
            store.set(prefix + "verdict", json.dumps(
                {"ok": True, "message": "", "world_size": world_size, "names": mine["worker_names"]}))
            return
        message = f"init_rpc(): {problem}"
        store.set(prefix + "verdict", json.dumps({"ok": False, "message": message}))
        _await_readers(store, prefix, records, sealed, deadline)
        raise RendezvousError(message)


def _await_readers(store, prefix, records: Dict[int, dict], sealed: int, deadline: float) -> None:
    """After an error verdict, keeps this process (which may host the store) in the check
    until every process that arrived has read the verdict and, before the deadline, every
    rank that any of them expects has arrived (those still starting read it as late
    arrivals); at most until the deadline or ``_ACK_WAIT`` from now, whichever is later. Leaving at once would make the
    store vanish before the others learn why."""
    until = max(deadline, time.monotonic() + _ACK_WAIT)
    while time.monotonic() < until:
        total = store.add(prefix + "joined", 0) - SEAL
        _read_records(store, prefix, SEAL + total, records, first=SEAL + sealed + 1)
        expected = max(r["world_size"] for r in records.values())
        present = {r["rank"] for r in records.values()}
        everyone = all(r in present for r in range(expected)) or time.monotonic() >= deadline
        if store.add(prefix + "acks", 0) >= max(total, sealed) - 1 and everyone:
            return
        time.sleep(_POLL)


def _follow(store, prefix, mine, timeout, deadline, where) -> None:
    judge_seen = None  # when this process first saw that a judge exists
    while True:
        verdict = _verdict(store, prefix)
        if verdict is not None:
            if verdict["ok"]:
                return
            store.add(prefix + "acks", 1)
            raise RendezvousError(verdict["message"])
        now = time.monotonic()
        if judge_seen is None and store.check([prefix + "judge"]):
            judge_seen = now
        if judge_seen is None and now >= deadline:
            # Rank 0 never arrived. Claiming the judge's place keeps a rank 0 that arrives
            # now from starting a group that this process has already given up on.
            if _claim_judge(store, prefix, f"timeout:{mine['rank']}"):
                sealed = _seal(store, prefix)
                records: Dict[int, dict] = {}
                _read_records(store, prefix, sealed, records)
                arrived = [records[i] for i in sorted(records)]
                problem = _problems(mine, arrived) or _timeout_message(timeout, mine["world_size"], arrived, where)
                message = f"init_rpc(): {problem}"
                store.set(prefix + "verdict", json.dumps({"ok": False, "message": message}))
                raise RendezvousError(message)
            judge_seen = now  # someone else judges: wait for its verdict
        if judge_seen is not None and now >= judge_seen + timeout + 2 * _ACK_WAIT:
            raise RendezvousError(
                f"init_rpc(): {_describe(mine)} got no verdict from the start-up check within "
                f"{timeout:g} s of rank 0's arrival"
            )
        time.sleep(_POLL)


def _handler(url: str, **kwargs):
    token = urlparse(url).netloc
    with _lock:
        store, rank, world_size = _pending.pop(token)
    yield store, rank, world_size
    raise RuntimeError("plugin.rpc: the checked store cannot be used for a second rendezvous")


def init_method_for(store: dist.Store, rank: int, world_size: int, auth_key: Optional[bytes] = None) -> str:
    """An ``init_method`` URL that hands ``store`` to torch's ``rpc.init_rpc`` (once);
    behind a ``plugin._auth.AuthenticatedStore`` under a key derived from ``auth_key`` if given."""
    global _registered
    if auth_key is not None:
        store = authenticated_store(store, auth_key)
    with _lock:
        if not _registered:
            dist.register_rendezvous_handler(_SCHEME, _handler)
            _registered = True
        token = f"s{len(_pending)}x{time.monotonic_ns()}"
        _pending[token] = (store, rank, world_size)
    return f"{_SCHEME}://{token}"
