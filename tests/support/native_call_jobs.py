"""The native RPC calls that a backward pass follows (the lookups of plugin.embedding, the
forwards of plugin.nn.RemoteModule) under faults, in a fresh process run by
tests/rpc/test_native_call_faults.py.

    python -m tests.support.native_call_jobs {lookup,forward} RPC_TIMEOUT

The process is ``worker0`` of its own RPC group (tests.support.cluster.Cluster, 4 workers, a
short RPC timeout); worker1, worker2 and worker3 each own two tables (lookup) or a module
(forward). In order: calls whose context is released before their answers arrive (the live
contexts counted on the caller and the owner before and after); a call the owner refuses; a
call of an unknown handle; an owner whose RPC threads are all busy (timeout); an owner frozen
with SIGSTOP (timeout); an owner killed with SIGKILL, while a call waits for it and then for a
new call. Each call's error and how long it took are reported. Prints one JSON line starting with ``RESULT `` and exits without a graceful RPC
shutdown (a broken group cannot shut down gracefully), killing its workers first. Every wait
is bounded; the test runs the process under a timeout too.
"""
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
import plugin.embedding
from plugin import _rpc_functions
from tests.support import embedding_remote as remote
from tests.support import graphs
from tests.support.cluster import Cluster
from tests.support.jobs import run_job
from tests.support.fault_jobs import wait_until

INPUTS = [torch.tensor([1, 2, 4, 4, 0, 7]), torch.tensor([3, 5, 5])]
OFFSETS = [torch.tensor([0, 2, 4, 6]), torch.tensor([0, 1, 1, 3])]
ABANDONED = 100


class Lookups:
    """Native lookups of two tables per owner."""

    def __init__(self, owners):
        self.handles = {w: [rpc.rpc_sync(w, remote.make_table, args=(f"{w}_{i}", 8, d, "sum", 7 + i))
                            for i, d in enumerate((3, 2))] for w in owners}

    def send(self, owner: str, context_id=None):
        return plugin.embedding.lookup_bags_async(owner, context_id, self.handles[owner], INPUTS, OFFSETS)

    def refused(self, owner: str):
        """A row out of the table's range (only the owner can check it)."""
        return plugin.embedding.lookup_bags_async(owner, None, self.handles[owner], [INPUTS[0], torch.tensor([3, 9, 5])],
                                                  OFFSETS)

    def unknown(self, owner: str):
        return plugin.embedding.lookup_bags_async(owner, None, [self.handles[owner][0], 424242], INPUTS, OFFSETS)


class Forwards:
    """Native forwards of one small module per owner (plugin.nn.RemoteModule)."""

    def __init__(self, owners):
        from plugin.nn import RemoteModule
        from tests.support import nn_modules

        # The construction exports the module on each owner: seconds of CPU, more under CI's load
        # than the fault scenarios' short RPC timeout, which applies from the first forward on.
        timeout = rpc.get_rpc_timeout()
        rpc._set_rpc_timeout(120.0)
        try:
            self.modules = {w: RemoteModule(f"{w}/cpu", nn_modules.MLP, example_inputs=(torch.randn(2, 6),))
                            for w in owners}
        finally:
            rpc._set_rpc_timeout(timeout)
        self.x = torch.randn(3, 6, requires_grad=True)

    def send(self, owner: str, context_id=None):
        if context_id is None:
            return self.modules[owner].forward_async(self.x.detach())
        return self.modules[owner].forward_async(self.x)  # in the thread's current context

    def refused(self, owner: str):
        """An input of the program's key (dtype, rank) but another fixed size (checked by the owner;
        another dtype would be another key, exported at its first call)."""
        return self.modules[owner].forward_async(torch.randn(3, 7))

    def unknown(self, owner: str):
        return _rpc_functions.call(owner, "_remote_forward", (424242, -1, -1, [torch.randn(3, 6)], [False], False))


def counts(worker: str):
    """The live distributed autograd contexts on `worker`: torch's and the plugin engine's."""
    info = rpc.rpc_sync(worker, graphs.engine_debug_info, timeout=5) if worker != "worker0" else plugin.debug_info()
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


def call_error(send, *args):
    """Sends a call (``send(*args)``, a future) and waits for it: (error or None, seconds from the
    call to the outcome)."""
    start = time.monotonic()
    try:
        send(*args).wait()
        error = None
    except Exception as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
    return error, time.monotonic() - start


def abandoned(cluster: Cluster, owner: str, calls, frozen: bool):
    """ABANDONED calls, each in its own context, exited before the call's answer arrives (with
    `frozen`, the owner is stopped while they are sent and the contexts exited, so that every
    answer comes after its context's release; else as fast as the group answers). Reports the
    live contexts on the caller and the owner before and after (after the answers and a bounded
    wait for the releases), the calls' outcomes, and the contexts' ids still known on either
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
                futures.append(calls.send(owner, ctx))
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)
    outcomes = {"answered": 0, "released_first": 0, "other": []}
    for future in futures:
        error, _ = timed_error(future)
        if error is None:
            outcomes["answered"] += 1
        elif ("was released on this worker before the answer of worker '" + owner + "'" in error
              or (f"failed on owner '{owner}'" in error and "was released on this worker while the call ran" in error)):
            # released here before the answer came, or (the release told to the owner, which
            # the context knows) released on the owner while its call ran: nothing recorded
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


def busy_owner(owner: str, calls, threads: int, timeout: float):
    """Every RPC thread of `owner` runs a Python sleep of 2.5 RPC timeouts: a call gets no answer."""
    sleepers = [rpc.rpc_async(owner, time.sleep, args=(2.5 * timeout,), timeout=0) for _ in range(threads)]
    time.sleep(0.5)  # the sleepers take the owner's threads
    error, elapsed = call_error(calls.send, owner)
    for s in sleepers:
        s.wait()
    return {"error": error, "elapsed_s": elapsed}


def killed_owner(cluster: Cluster, owner: str, calls):
    """A call waits for `owner` (stopped), which is then killed; then a new call is sent."""
    pid = cluster._procs[int(owner[len("worker"):]) - 1].pid
    os.kill(pid, signal.SIGSTOP)
    outcome = {}

    def in_flight():
        outcome["error"], outcome["elapsed_s"] = call_error(calls.send, owner)

    thread = threading.Thread(target=in_flight, daemon=True)
    thread.start()
    time.sleep(0.3)  # the call is sent
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=4 * cluster.rpc_timeout)
    after_error, after_elapsed = call_error(calls.send, owner)
    return {"in_flight": outcome, "after": {"error": after_error, "elapsed_s": after_elapsed}}


def main():
    kind, rpc_timeout = sys.argv[1], float(sys.argv[2])
    cluster = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=rpc_timeout,
                      imports=("tests.support.graphs", "tests.support.optim_remote", "tests.support.embedding_remote",
                               "tests.support.nn_modules"))
    def compute():
        owners = ("worker1", "worker2", "worker3")
        calls = Lookups(owners) if kind == "lookup" else Forwards(owners)  # (these call the owners)
        result = {
            "abandoned_frozen": abandoned(cluster, "worker1", calls, frozen=True),
            "abandoned": abandoned(cluster, "worker2", calls, frozen=False),
        }
        error, elapsed = call_error(calls.refused, "worker1")
        result["refused"] = {"error": error, "elapsed_s": elapsed}
        error, elapsed = call_error(calls.unknown, "worker1")
        result["unknown_handle"] = {"error": error, "elapsed_s": elapsed}
        error, elapsed = call_error(calls.send, "worker1")
        result["serving_after_refusals"] = {"error": error, "elapsed_s": elapsed}
        result["busy"] = busy_owner("worker3", calls, cluster.num_worker_threads, rpc_timeout)
        os.kill(cluster._procs[0].pid, signal.SIGSTOP)  # worker1, for good
        error, elapsed = call_error(calls.send, "worker1")
        result["frozen"] = {"error": error, "elapsed_s": elapsed}
        result["killed"] = killed_owner(cluster, "worker2", calls)
        return result

    run_job(cluster, compute)


if __name__ == "__main__":
    main()
