"""One process of a start-up or shutdown test of plugin.rpc (tests/rpc/test_rpc_lifecycle.py).

    python tests/support/rpc_lifecycle_job.py --rank R --world-size N --port P
        [--worker-names a,b,c] [--init-timeout S] [--rpc-timeout S] [--wait-file F]
        [--kill-rank K [--signal SIGSTOP]] [--late-rank K --late-by S] [--shutdown-timeout S]
        [--torch-shutdown]

Prints one JSON line per event, flushed: {"event": "init_error", "type", "message",
"seconds"} when init_rpc raises (then exits with status 3); {"event": "started", "name"}
once RPC runs. Then a started worker waits for the file F to exist (``--wait-file``; a
test starts a late process meanwhile), sends one RPC to every peer, and, with
``--kill-rank K``, rank K kills itself with SIGKILL (or ``--signal``, e.g. SIGSTOP) once
every other worker has done so.
The others shut down (rank ``--late-rank`` after ``--late-by`` seconds) with
plugin.rpc.shutdown(timeout=...) and print {"event": "shutdown", "result", "warnings",
"seconds"}, or, with ``--torch-shutdown``, with torch's rpc.shutdown() (the comparison).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import warnings

import torch
import torch.distributed.rpc as rpc

warnings.filterwarnings("ignore", category=DeprecationWarning)

import plugin.rpc  # noqa: E402


_done_count = 0
_done_lock = threading.Lock()
_all_done = threading.Event()


def _done(expected: int) -> None:
    """Called by RPC on the victim by each other worker (this script is every worker's __main__)."""
    global _done_count
    with _done_lock:
        _done_count += 1
        if _done_count == expected:
            _all_done.set()


def emit(**event):
    print(json.dumps(event), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--worker-names", default=None)
    parser.add_argument("--init-timeout", type=float, default=120.0)
    parser.add_argument("--rpc-timeout", type=float, default=60.0)
    parser.add_argument("--wait-file", default=None)
    parser.add_argument("--late-rank", type=int, default=None)
    parser.add_argument("--late-by", type=float, default=0.0)
    parser.add_argument("--torch-shutdown", action="store_true")
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--signal", default="SIGKILL", help="what the victim sends itself (SIGSTOP: it hangs)")
    parser.add_argument("--shutdown-timeout", type=float, default=None)
    args = parser.parse_args()

    start = time.monotonic()
    try:
        info = plugin.rpc.init_rpc(
            rank=args.rank, world_size=args.world_size, master_port=args.port, num_worker_threads=4,
            rpc_timeout=args.rpc_timeout, init_timeout=args.init_timeout,
            # TCP; with a key (GILFREE_RPC_AUTH_KEY: the suite run with one) the authenticating
            # transport, which is TCP too and the only one init_rpc accepts then
            transports=None if os.environ.get("GILFREE_RPC_AUTH_KEY") else ["uv"],
            worker_names=args.worker_names.split(",") if args.worker_names else None,
        )
    except Exception as e:  # noqa: BLE001 (reported to the test)
        emit(event="init_error", type=type(e).__name__, message=str(e), seconds=time.monotonic() - start)
        sys.exit(3)
    emit(event="started", name=info.name)
    if args.wait_file:
        give_up = time.monotonic() + 120
        while not os.path.exists(args.wait_file) and time.monotonic() < give_up:
            time.sleep(0.1)
    names = args.worker_names.split(",") if args.worker_names else [f"worker{r}" for r in range(args.world_size)]
    for peer in names:
        if peer != info.name:
            rpc.rpc_sync(peer, torch.add, args=(torch.ones(1), 1))
    if args.kill_rank is not None:
        # The victim dies once every other worker has talked to every worker.
        victim = names[args.kill_rank]
        if info.name == victim:
            if not _all_done.wait(timeout=60):
                emit(event="barrier_timeout")
            time.sleep(0.5)  # lets the last answer go out
            os.kill(os.getpid(), getattr(signal, args.signal))
        try:
            rpc.rpc_sync(victim, _done, args=(len(names) - 1,))
        except RuntimeError:
            pass  # the victim died after counting this call, before answering it
        time.sleep(1.0)
    if info.id == args.late_rank:
        time.sleep(args.late_by)
    start = time.monotonic()
    if args.torch_shutdown:
        emit(event="torch_shutdown_called")
        rpc.shutdown()
        emit(event="shutdown", result=None, seconds=time.monotonic() - start, warnings=[])
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        result = plugin.rpc.shutdown(timeout=args.shutdown_timeout)
    emit(
        event="shutdown", result=result, seconds=time.monotonic() - start,
        warnings=[str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    )


if __name__ == "__main__":
    main()
