"""Profiler events of a backward pass, against torch's engine on the same graph.

Under ``torch.autograd.profiler.profile`` (and ``torch.profiler.profile``) a pass of either
engine records, on the worker that calls backward, one event per backward function run
there, named as torch's engine names them (``MulBackward0``, ``torch::autograd::GraphRoot``,
``torch::distributed::autograd::SendRpcBackward``, ``...RecvRpcBackward``), and the event
``torch::distributed::autograd::backward`` around the pass. The checks are those of torch's
own ``test_dist_autograd_profiling`` (torch/testing/_internal/distributed/rpc/
dist_autograd_test.py), run on both engines.
"""
import collections
import re

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from tests.support import graphs

BACKWARD_KEY = "torch::distributed::autograd::backward"
SEND = "torch::distributed::autograd::SendRpcBackward"
RECV = "torch::distributed::autograd::RecvRpcBackward"


def is_backward_event(name: str) -> bool:
    """The events a pass promises: backward functions, the graph root, the pass itself."""
    return bool(re.search(r"Backward\d*$", name)) or name in ("torch::autograd::GraphRoot", BACKWARD_KEY)


def case_torch_suite(ctx):
    """The graph of torch's test_dist_autograd_profiling."""
    t1 = graphs.make_leaf("t1", (3, 3), 1)
    t2 = graphs.make_leaf("t2", (3, 3), 2)
    return [rpc.rpc_sync("worker1", torch.add, args=(t1, t2)).sum()]


def profiled_backward(case: str, engine: str, mode: str = "fast", api: str = "autograd"):
    """Builds ``case`` and runs backward under the profiler; returns its function events."""
    workers = [info.name for info in rpc._get_current_rpc_agent().get_worker_infos()]
    for w in workers:
        rpc.rpc_sync(w, graphs.clear_leaves)
    with dist_autograd.context() as ctx:
        roots = case_torch_suite(ctx) if case == "torch_suite" else graphs.CASES[case](ctx)
        profiler = torch.autograd.profiler.profile() if api == "autograd" else torch.profiler.profile()
        with profiler as p:
            if engine == "torch":
                dist_autograd.backward(ctx, roots)
            else:
                plugin.autograd.backward(ctx, roots, mode=mode)
    return p.function_events if api == "autograd" else p.events()


def counts(events):
    return collections.Counter(e.name for e in events if is_backward_event(e.name))


# Cases with send and recv functions on the calling worker (worker0).
CASES = ["builtin_rpc_sync", "nested_three_workers", "several_round_trips", "worker_calls_itself", "mlp_shards"]


@pytest.mark.parametrize("mode", ["fast", "smart"])
@pytest.mark.parametrize("case", CASES)
def test_events_named_as_torch(cluster, case, mode):
    theirs = counts(profiled_backward(case, "torch"))
    ours = counts(profiled_backward(case, "plugin", mode=mode))
    # torch's engine records these; a test that finds none would prove nothing.
    assert theirs[SEND] >= 1 and theirs[RECV] >= 1 and theirs[BACKWARD_KEY] == 1, theirs
    assert set(ours) == set(theirs), (ours, theirs)
    # Every send and recv function runs once per pass in both engines. Other nodes may
    # show twice in ours: a node whose outputs go to another worker and to local leaves
    # runs in two calls (docs/engine.md, "Outputs for other workers first").
    for name in (SEND, RECV, BACKWARD_KEY, "torch::autograd::GraphRoot"):
        assert ours[name] == theirs[name], (name, ours, theirs)


@pytest.mark.parametrize("engine", ["torch", "plugin"])
def test_dist_autograd_profiling_as_torch_suite(cluster, engine):
    function_events = profiled_backward("torch_suite", engine)

    def get_event(partial_key):
        return next(event for event in function_events if partial_key in event.name)

    send_event = get_event("SendRpcBackward")
    recv_event = get_event("RecvRpcBackward")
    backward_event = get_event(BACKWARD_KEY)
    assert send_event.count == 1
    assert recv_event.count == 1
    assert backward_event.cpu_time_total > send_event.cpu_time_total
    assert backward_event.cpu_time_total > recv_event.cpu_time_total


@pytest.mark.parametrize("engine", ["torch", "plugin"])
def test_dist_autograd_profiling_on_every_worker(cluster, engine):
    """torch's suite runs test_dist_autograd_profiling on every rank, each calling backward
    over an RPC to the next: here every worker of the group does, one after the other."""
    from tests.support import profiling

    for w in ["worker0", "worker1", "worker2", "worker3"]:
        found = rpc.rpc_sync(w, profiling.dist_autograd_profiling, args=(engine,))
        assert found["send_count"] == 1 and found["recv_count"] == 1, (w, found)
        assert found["backward_cpu_total"] > found["send_cpu_total"], (w, found)
        assert found["backward_cpu_total"] > found["recv_cpu_total"], (w, found)


def test_caller_profile_as_torch(cluster):
    """Every event torch's engine records on the caller, ours records as often (the graph of
    torch's test_dist_autograd_profiling), ops included; ours adds the dispatcher's event
    for its op."""
    for api in ("autograd", "profiler"):
        theirs = collections.Counter(e.name for e in profiled_backward("torch_suite", "torch", api=api))
        ours = collections.Counter(e.name for e in profiled_backward("torch_suite", "plugin", api=api))
        assert ours.pop("gilfree_rpc::backward") == 1, ours
        assert theirs[SEND] == 1 and theirs[RECV] == 1 and theirs[BACKWARD_KEY] == 1, theirs
        assert ours == theirs, (api, ours, theirs)


def test_torch_profiler_api(cluster):
    theirs = counts(profiled_backward("builtin_rpc_sync", "torch", api="profiler"))
    ours = counts(profiled_backward("builtin_rpc_sync", "plugin", api="profiler"))
    assert theirs[SEND] == ours[SEND] == 1 and theirs[RECV] == ours[RECV] == 1
    assert set(ours) == set(theirs)



# --- the other workers' events ----------------------------------------------------------
#
# torch's engine sends the gradients of a backward pass with plain RPCs (RecvRpcBackward
# calls the agent's send), so a profile on the caller holds none of the other workers'
# events, and neither does ours (docs/engine.md, "Profiling"). On each worker, torch's
# server-process global profiler records that worker's part of a pass.

NESTED_WORKERS = ("worker1", "worker2", "worker3")
# What runs on each of worker1..3 in the nested case (a Sin and a Mul per worker, between
# the recv function of its input and the send function of its output).
NESTED_NODES = {"MulBackward0", "SinBackward0", SEND, RECV}


@pytest.mark.parametrize("engine", ["torch", "plugin"])
def test_caller_profile_holds_no_remote_events(cluster, engine):
    """Under torch's legacy profiler, whose RPC profiling brings a callee's events back for
    rpc_async: neither engine's gradient messages do (nested over three workers)."""
    for w in ["worker0", *NESTED_WORKERS]:
        rpc.rpc_sync(w, graphs.clear_leaves)
    with dist_autograd.context() as ctx:
        roots = graphs.CASES["nested_three_workers"](ctx)
        with torch.autograd.profiler_legacy.profile() as p:
            if engine == "torch":
                dist_autograd.backward(ctx, roots)
            else:
                plugin.autograd.backward(ctx, roots)
    events = p.function_events
    assert not any(e.is_remote for e in events)
    local = counts(events)
    assert local[SEND] == 1 and local[RECV] == 1 and local[BACKWARD_KEY] == 1, local


def server_profiled_backward(engine: str):
    """Each of worker1..3 runs torch's server-process global profiler during a pass."""
    from tests.support import profiling

    for w in ["worker0", *NESTED_WORKERS]:
        rpc.rpc_sync(w, graphs.clear_leaves)
    with dist_autograd.context() as ctx:
        roots = graphs.CASES["nested_three_workers"](ctx)
        for w in NESTED_WORKERS:
            rpc.rpc_sync(w, profiling.start_server_profile)
        try:
            if engine == "torch":
                dist_autograd.backward(ctx, roots)
            else:
                plugin.autograd.backward(ctx, roots)
        finally:
            names = {w: rpc.rpc_sync(w, profiling.stop_server_profile) for w in NESTED_WORKERS}
    return {w: {n for n in ns if is_backward_event(n)} for w, ns in names.items()}


def test_server_process_global_profiler_on_every_worker(cluster):
    """As torch's test_server_process_global_profiler, with a backward pass: the profiler
    that torch's RPC server runs for every request records, on each worker, the backward
    functions of that worker's part of the pass, named as torch names them."""
    theirs = server_profiled_backward("torch")
    ours = server_profiled_backward("plugin")
    for w in NESTED_WORKERS:
        assert ours[w] == NESTED_NODES, (w, ours[w], "torch:", theirs[w])
