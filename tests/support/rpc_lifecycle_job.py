"""One process of a start-up or shutdown test of plugin.rpc (tests/rpc/test_rpc_lifecycle.py).

    python tests/support/rpc_lifecycle_job.py --rank R --world-size N --port P
        [--worker-names a,b,c] [--init-timeout S] [--hold S]
        [--kill-rank K] [--shutdown-timeout S] [--rpc-timeout S]

Prints one JSON line per event, flushed: {"event": "init_error", "type", "message",
"seconds"} when init_rpc raises (then exits with status 3); {"event": "started", "name"}
once RPC runs; after that every worker sends one RPC to every peer, rank K (if given)
kills itself with SIGKILL, and the others call plugin.rpc.shutdown and print
{"event": "shutdown", "result", "warnings", "seconds"}. ``--hold`` keeps a started
worker waiting that long before it shuts down (a test starts a late process meanwhile).
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
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--shutdown-timeout", type=float, default=None)
    args = parser.parse_args()

    start = time.monotonic()
    try:
        info = plugin.rpc.init_rpc(
            rank=args.rank, world_size=args.world_size, master_port=args.port, num_worker_threads=4,
            rpc_timeout=args.rpc_timeout, init_timeout=args.init_timeout, transports=["uv"],
            worker_names=args.worker_names.split(",") if args.worker_names else None,
        )
    except Exception as e:  # noqa: BLE001 (reported to the test)
        emit(event="init_error", type=type(e).__name__, message=str(e), seconds=time.monotonic() - start)
        sys.exit(3)
    emit(event="started", name=info.name)
    time.sleep(args.hold)
    names = plugin.rpc._worker_names()  # in rank order
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
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            rpc.rpc_sync(victim, _done, args=(len(names) - 1,))
        except RuntimeError:
            pass  # the victim died after counting this call, before answering it
        time.sleep(1.0)
    start = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        result = plugin.rpc.shutdown(timeout=args.shutdown_timeout)
    emit(
        event="shutdown", result=result, seconds=time.monotonic() - start,
        warnings=[str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    )


if __name__ == "__main__":
    main()
