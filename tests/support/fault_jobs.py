"""Fault scenarios, each run in a fresh process by tests/engine/test_faults.py.

    python -m tests.support.fault_jobs SCENARIO RPC_TIMEOUT

The process is ``worker0`` of its own RPC group (tests.support.cluster.Cluster, short RPC
timeout); it breaks one worker (SIGSTOP, SIGKILL), observes, prints one JSON line
starting with ``RESULT `` and exits without a graceful RPC shutdown (a broken group
cannot shut down gracefully), killing its workers first. A scenario never waits without
a bound; the test runs the process under a timeout too.
"""
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from tests.support import graphs
from tests.support.cluster import Cluster
from tests.support.jobs import run_job
import plugin


def debug_info(worker: str):
    return rpc.rpc_sync(worker, graphs.engine_debug_info, timeout=5)


def wait_until(condition, limit_s: float, step_s: float = 0.02):
    """Polls ``condition`` until it returns true or ``limit_s`` passes; returns the time taken
    (None if it never became true)."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if condition():
            return time.monotonic() - start
        time.sleep(step_s)
    return None


def backward_in_thread(ctx, roots, mode):
    """Starts backward on a thread; returns (thread, outcome dict with error / elapsed_s)."""
    outcome = {}

    def run():
        start = time.monotonic()
        try:
            plugin.autograd.backward(ctx, roots, mode=mode)
            outcome["error"] = None
        except Exception as error:  # noqa: BLE001
            outcome["error"] = f"{type(error).__name__}: {error}"
        outcome["elapsed_s"] = time.monotonic() - start

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def running_on(worker: str) -> bool:
    return debug_info(worker)["num_running_passes"] > 0


def server_mid_backward(cluster: Cluster, sig, mode: str):
    """worker0 -> worker1 (mul) -> worker2 (a backward that blocks); once worker2 runs its
    part, it gets `sig` (None: it stays alive, its backward function stuck). Reports backward's error and how long it took, and what the other
    workers still hold."""
    timeout = cluster.rpc_timeout
    a = torch.rand(4, requires_grad=True)
    with dist_autograd.context() as ctx:
        b = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
        c = rpc.rpc_sync("worker2", graphs.udf_blocking_backward, args=(b,))
        thread, outcome = backward_in_thread(ctx, [c.sum()], mode)
        # (the pass cannot get past worker2's blocked backward function: any moment before
        # the root's deadline will do)
        reached = wait_until(lambda: running_on("worker2"), 0.8 * timeout)
        if sig is not None:
            os.kill(cluster._procs[1].pid, sig)  # worker2
        thread.join(timeout=4 * timeout)
        if sig is None:
            rpc.rpc_sync("worker2", graphs.release_blocked_backward, timeout=5)
        result = {"reached_worker2": reached is not None, "finished": not thread.is_alive(), **outcome}
        result["running_passes"] = {w: debug_info(w)["num_running_passes"] for w in ("worker1", "worker3")}
        result["root_running_passes"] = plugin.debug_info()["num_running_passes"]
    return result


def trainer_killed(cluster: Cluster):
    """worker1 trains through worker2 and worker3: one context mid-backward (blocked on
    worker3), one after a forward pass only; worker1 is killed. Reports how long worker2 and
    worker3 take to release both contexts."""
    timeout = cluster.rpc_timeout
    rpc.rpc_async("worker1", graphs.train_and_hang, args=("worker2", "worker3"), timeout=0)
    servers = ("worker2", "worker3")

    def both_contexts_everywhere():
        infos = [debug_info(w) for w in servers]
        return all(i["num_torch_contexts"] == 2 for i in infos) and debug_info("worker3")["num_running_passes"] == 1

    ready = wait_until(both_contexts_everywhere, 3 * timeout)
    before = {w: debug_info(w) for w in servers}
    os.kill(cluster._procs[0].pid, signal.SIGKILL)  # worker1
    killed_at = time.monotonic()

    def released():
        infos = [debug_info(w) for w in servers]
        return all(
            i["num_torch_contexts"] == 0 and i["num_live_contexts"] == 0 and i["num_running_passes"] == 0
            for i in infos
        )

    took = wait_until(released, 4 * timeout)
    rpc.rpc_sync("worker3", graphs.release_blocked_backward, timeout=5)
    return {
        "ready": ready is not None,
        "before": before,
        "release_s": took,
        "after": {w: debug_info(w) for w in servers},
        "since_kill_s": time.monotonic() - killed_at,
    }


def slow_trainer(cluster: Cluster):
    """worker0 runs a forward pass through worker1 and worker2, then computes for 2.5 RPC
    timeouts without any RPC, then runs backward: nothing may have been released."""
    timeout = cluster.rpc_timeout
    a = torch.rand(4, requires_grad=True)
    with dist_autograd.context() as ctx:
        b = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
        c = rpc.rpc_sync("worker2", torch.add, args=(b, a))
        end = time.monotonic() + 2.5 * timeout
        x = torch.rand(200, 200)
        while time.monotonic() < end:  # busy, holding the GIL most of the time
            x = torch.tanh(x @ x)
        during = {w: debug_info(w) for w in ("worker1", "worker2")}
        plugin.autograd.backward(ctx, [c.sum()])
        grad = plugin.autograd.get_gradients(ctx)[a]
    expected = (2 * a.detach() + 1).tolist()
    return {"during": during, "grad": grad.tolist(), "expected": expected}


SCENARIOS = {
    "stop_server_fast": lambda c: server_mid_backward(c, signal.SIGSTOP, "fast"),
    "stop_server_smart": lambda c: server_mid_backward(c, signal.SIGSTOP, "smart"),
    "kill_server": lambda c: server_mid_backward(c, signal.SIGKILL, "smart"),
    "stuck_server": lambda c: server_mid_backward(c, None, "smart"),
    "kill_trainer": trainer_killed,
    "slow_trainer": slow_trainer,
}


def main():
    scenario, rpc_timeout = sys.argv[1], float(sys.argv[2])
    cluster = Cluster(world_size=4, num_worker_threads=4, rpc_timeout=rpc_timeout, imports=("tests.support.graphs",))
    run_job(cluster, lambda: SCENARIOS[scenario](cluster))


if __name__ == "__main__":
    main()
