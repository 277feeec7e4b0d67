"""Native lookups (plugin.embedding) under faults, in a fresh process run by
tests/rpc/test_lookup_faults.py.

    python -m tests.support.lookup_jobs RPC_TIMEOUT

The process is ``worker0`` of its own RPC group (tests.support.cluster.Cluster, 4 workers, a
short RPC timeout); worker1, worker2 and worker3 each own two tables. In order: lookups whose
context is released before their answers arrive (the live contexts counted on the caller and
the owner before and after); a lookup the owner refuses; an owner whose RPC threads are all
busy (timeout); an owner frozen with SIGSTOP (timeout); an owner killed with SIGKILL, while a
lookup waits for it and then for a new lookup. Each lookup's error and how long it took are
reported. Prints one JSON line starting with ``RESULT `` and exits without a graceful RPC
shutdown (a broken group cannot shut down gracefully), killing its workers first. Every wait
is bounded; the test runs the process under a timeout too.
"""
import json
import os
import signal
import sys
import threading
import time
import traceback

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
import plugin.embedding
from tests.support import embedding_remote as remote
from tests.support import graphs
from tests.support.cluster import Cluster
from tests.support.fault_jobs import wait_until

INPUTS = [torch.tensor([1, 2, 4, 4, 0, 7]), torch.tensor([3, 5, 5])]
OFFSETS = [torch.tensor([0, 2, 4, 6]), torch.tensor([0, 1, 1, 3])]
ABANDONED = 100


def share_tables(owner: str):
    return [rpc.rpc_sync(owner, remote.make_table, args=(f"{owner}_{i}", 8, d, "sum", 7 + i)) for i, d in enumerate((3, 2))]


def counts(worker: str):
    """The live distributed autograd contexts on `worker`: torch's and the plugin engine's."""
    info = rpc.rpc_sync(worker, graphs.engine_debug_info, timeout=5) if worker != "worker0" else plugin.autograd.debug_info()
    return {"torch": info["num_torch_contexts"], "engine": info["num_live_contexts"]}


def timed_error(future):
    """(the future's error as 'Type: message', or None; seconds until it completed)."""
    start = time.monotonic()
    try:
        future.wait()
        error = None
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    return error, time.monotonic() - start


def lookup_error(owner: str, handles, inputs=INPUTS, offsets=OFFSETS, context_id=None):
    """Sends a lookup and waits for it: (error or None, seconds from the call to the outcome)."""
    start = time.monotonic()
    try:
        plugin.embedding.lookup_bags_async(owner, context_id, handles, inputs, offsets).wait()
        error = None
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    return error, time.monotonic() - start


def abandoned(cluster: Cluster, owner: str, handles, frozen: bool):
    """ABANDONED lookups, each in its own context, exited before the lookup's answer arrives (with
    `frozen`, the owner is stopped while they are sent and the contexts exited, so that every
    answer comes after its context's release; else as fast as the group answers). Reports the
    live contexts on the caller and the owner before and after (after the answers and a bounded
    wait for the releases), the lookups' outcomes, and the contexts' ids still known on either
    side."""
    before = {"caller": counts("worker0"), "owner": counts(owner)}
    pid = cluster._procs[int(owner[len("worker"):]) - 1].pid
    futures, ids = [], []
    if frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(ABANDONED):
            with dist_autograd.context() as ctx:
                ids.append(ctx)
                futures.append(plugin.embedding.lookup_bags_async(owner, ctx, handles, INPUTS, OFFSETS))
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)
    outcomes = {"answered": 0, "released_first": 0, "other": []}
    for future in futures:
        error, _ = timed_error(future)
        if error is None:
            outcomes["answered"] += 1
        elif "was released on this worker before the answer of worker '" + owner + "'" in error:
            outcomes["released_first"] += 1
        else:
            outcomes["other"].append(error)
    settled = wait_until(lambda: counts(owner) == before["owner"] and counts("worker0") == before["caller"], 10.0)
    from tests.support import optim_remote

    return {
        "before": before,
        "after": {"caller": counts("worker0"), "owner": counts(owner)},
        "settled_s": settled,
        "outcomes": outcomes,
        "known_on_owner": len(rpc.rpc_sync(owner, optim_remote.contexts_known, args=(ids,))),
        "known_on_caller": len(optim_remote.contexts_known(ids)),
    }


def busy_owner(owner: str, handles, threads: int, timeout: float):
    """Every RPC thread of `owner` runs a Python sleep of 2.5 RPC timeouts: a lookup gets no answer."""
    sleepers = [rpc.rpc_async(owner, time.sleep, args=(2.5 * timeout,), timeout=0) for _ in range(threads)]
    time.sleep(0.5)  # the sleepers take the owner's threads
    error, elapsed = lookup_error(owner, handles)
    for s in sleepers:
        s.wait()
    return {"error": error, "elapsed_s": elapsed}


def killed_owner(cluster: Cluster, owner: str, handles):
    """A lookup waits for `owner` (stopped), which is then killed; then a new lookup is sent."""
    pid = cluster._procs[int(owner[len("worker"):]) - 1].pid
    os.kill(pid, signal.SIGSTOP)
    outcome = {}

    def in_flight():
        outcome["error"], outcome["elapsed_s"] = lookup_error(owner, handles)

    thread = threading.Thread(target=in_flight, daemon=True)
    thread.start()
    time.sleep(0.3)  # the lookup is sent
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=4 * cluster.rpc_timeout)
    after_error, after_elapsed = lookup_error(owner, handles)
    return {"in_flight": outcome, "after": {"error": after_error, "elapsed_s": after_elapsed}}


def main():
    rpc_timeout = float(sys.argv[1])
    cluster = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=rpc_timeout,
                      imports=("tests.support.graphs", "tests.support.optim_remote", "tests.support.embedding_remote"))
    code = 0
    try:
        cluster.start()
        handles = {w: share_tables(w) for w in ("worker1", "worker2", "worker3")}
        result = {
            "abandoned_frozen": abandoned(cluster, "worker1", handles["worker1"], frozen=True),
            "abandoned": abandoned(cluster, "worker2", handles["worker2"], frozen=False),
        }
        error, elapsed = lookup_error("worker1", handles["worker1"], inputs=[INPUTS[0], torch.tensor([3, 9, 5])])
        result["refused"] = {"error": error, "elapsed_s": elapsed}
        error, elapsed = lookup_error("worker1", [handles["worker1"][0], 424242])
        result["unknown_handle"] = {"error": error, "elapsed_s": elapsed}
        result["busy"] = busy_owner("worker3", handles["worker3"], cluster.num_worker_threads, rpc_timeout)
        os.kill(cluster._procs[0].pid, signal.SIGSTOP)  # worker1, for good
        error, elapsed = lookup_error("worker1", handles["worker1"])
        result["frozen"] = {"error": error, "elapsed_s": elapsed}
        result["killed"] = killed_owner(cluster, "worker2", handles["worker2"])
        print("RESULT " + json.dumps(result), flush=True)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        for p in cluster._procs:
            try:
                os.kill(p.pid, signal.SIGKILL)  # also ends a stopped process
            except ProcessLookupError:
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
