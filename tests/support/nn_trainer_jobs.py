"""plugin.nn.RemoteModule under several trainers, in a fresh process run by
tests/nn/test_remote_module_trainers.py (a group of six workers cannot share the test process
with the suite's four-worker group).

    python -m tests.support.nn_trainer_jobs

The process is ``worker0`` (trainer A) of its own RPC group (tests.support.cluster.Cluster, 6
workers): worker1 owns the modules, worker2 .. worker5 are trainers. In order: the stale case
with both engines and both kinds of owner step; four trainers training one module; forwards
during a writer that holds the parameters' locks; concurrent train-mode forwards of a module
with BatchNorm. Each scenario reports what the test checks (differences from eager, counts).
Prints one JSON line starting with ``RESULT `` and exits without a graceful shutdown of a broken
group, killing its workers first.
"""
import threading

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from plugin import ops
from plugin.nn import RemoteModule
from tests.support import nn_modules as mods
from tests.support.cluster import Cluster
from tests.support.jobs import run_job


def outside_context(call):
    """``call()`` with no current distributed autograd context on this thread (an RPC sent inside
    one carries it to the receiver, whose own `with context()` would then fail)."""
    previous = ops._swap_current_context(-1)
    try:
        return call()
    finally:
        ops._swap_current_context(previous)


def diff(a, b) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item()


def twin_at(values):
    twin = mods.MLP()
    twin.load_state_dict(values)
    return twin


def stale(engine: str, owner_step: str) -> dict:
    """A's forward; B's (worker2's) whole iteration with a large step (the owner's native step, or
    a step in Python: torch.optim's foreach Adam); A's backward: its gradients against eager's at
    the weights A's forward saw, and the next forward against eager's at the new weights."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    seen = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
    x = torch.randn(4, 6, requires_grad=True)
    weights = torch.linspace(-1, 1, 16).reshape(4, 4)
    with dist_autograd.context() as ctx:
        out = remote(x)
        outside_context(lambda: rpc.rpc_sync("worker2", mods.iteration, args=(
            remote, (torch.randn(5, 6),), 10.0, "Adam", True if owner_step == "python" else None)))
        after = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
        loss = (out * weights).sum()
        input_grad = mods.backward_input_gradient(engine, ctx, loss, x)
        param_grads = rpc.rpc_sync("worker1", mods.parameter_gradients, args=(remote.module_rref, ctx, engine))
    twin = twin_at(seen)
    y = x.detach().clone().requires_grad_(True)
    want = twin(y)
    (want * weights).sum().backward()
    return {
        "step_changed_weights": diff(after["layers.0.weight"], seen["layers.0.weight"]),
        "out": diff(out, want),
        "input_grad": diff(input_grad, y.grad),
        "param_grads": max(diff(g, p.grad) for g, p in zip(param_grads, twin.parameters())),
        "next_forward": diff(remote(x.detach()), twin_at(after)(x.detach())),
    }


def four_trainers(steps: int = 25) -> dict:
    """Four trainers, each with its own DistributedOptimizer (Adam) and data, train one module
    (no weight clones) at the same time."""
    remote = RemoteModule("worker1/cpu", mods.MLP, example_inputs=(torch.randn(3, 6),))
    futures = [rpc.rpc_async(f"worker{w}", mods.train, args=(remote, w, steps, 0.02)) for w in range(2, 6)]
    return {"losses": [f.wait()["losses"] for f in futures], "info": remote._debug_info(), "steps": steps}


def half_steps(n: int = 64) -> dict:
    """A writer on the owner sets every parameter to one value at a time, holding the parameters'
    locks and pausing between parameters; two trainers' forwards run meanwhile."""
    remote = RemoteModule("worker1/cpu", mods.Uniform, (n,), example_inputs=(torch.ones(2, n),))
    values = [float(k) for k in range(1, 9)]
    writer = rpc.rpc_async("worker1", mods.write_uniform, args=(remote.module_rref, values, 0.01))
    outputs = []

    def read():
        while not writer.done():  # forwards all the while the writer writes
            outputs.append(remote(torch.ones(2, n)))

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    writes = writer.wait()
    allowed = [n * k * (n * k + k) + k for k in [0.0] + values]
    mixed = sum(1 for out in outputs if not torch.all(out == out[0, 0]).item())
    foreign = [out[0, 0].item() for out in outputs
               if not any(abs(out[0, 0].item() - a) <= 1e-3 * max(1.0, abs(a)) for a in allowed)]
    seen = sorted({round(out[0, 0].item(), 3) for out in outputs})
    return {"writes": writes, "forwards": len(outputs), "mixed": mixed, "foreign": foreign, "values_seen": len(seen)}


def racing_buffers(times: int = 25) -> dict:
    """Four trainers run train-mode forwards of modules with BatchNorm at the same time: one that
    applies it once, one that applies it twice per forward."""
    out = {}
    for cls in (mods.ConvNet, mods.DoubleNorm):
        remote = RemoteModule("worker1/cpu", cls, example_inputs=(torch.randn(2, 3, 8, 8),))
        futures = [rpc.rpc_async(f"worker{w}", mods.forwards, args=(remote, times, w)) for w in range(2, 6)]
        done = [f.wait() for f in futures]
        state = rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,))
        out[cls.__name__] = {"forwards": sum(done), "num_batches_tracked": state["bn.num_batches_tracked"].item(),
                             "finite": bool(torch.isfinite(state["bn.running_mean"]).all()),
                             "variance_positive": bool((state["bn.running_var"] > 0).all())}
    return out


def main():
    cluster = Cluster(world_size=6, num_worker_threads=8, rpc_timeout=60.0, imports=("tests.support.nn_modules",))
    run_job(cluster, lambda: {
        "stale": {f"{e}-{s}": stale(e, s) for e in ("plugin", "torch") for s in ("native", "python")},
        "four_trainers": four_trainers(), "half_steps": half_steps(), "racing_buffers": racing_buffers()}, stop=True)


if __name__ == "__main__":
    main()
