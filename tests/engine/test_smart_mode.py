"""Smart mode against plain autograd in one process (torch's engine hangs on these graphs)."""
import threading

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from tests.support import graphs
import plugin
from tests.support import smart_graphs
from tests.support.smart_graphs import RpcNet


def workers():
    return sorted(info.name for info in rpc._get_current_rpc_agent().get_worker_infos())


def clear_all_leaves():
    for w in workers():
        rpc.rpc_sync(w, graphs.clear_leaves)


def gather(ctx):
    """Gradients of every worker in the context, merged by (unique) leaf name."""
    merged = {}
    for w in workers():
        merged.update(rpc.rpc_sync(w, graphs.collect_gradients, args=(ctx, "plugin")))
    return merged


def assert_same(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-12, atol=0, msg=name)


@pytest.fixture
def short_rpc_timeout(cluster):
    """An RPC timeout of 10 s, so that a pass that waits for a gradient that never comes
    fails the test instead of stalling it (torch waits 60 s by default)."""
    rpc._set_rpc_timeout(10)
    yield
    rpc._set_rpc_timeout(cluster.rpc_timeout)


@pytest.mark.parametrize("case", sorted(smart_graphs.SMART_CASES))
def test_smart_matches_local_autograd(short_rpc_timeout, case):
    expected = smart_graphs.local_reference(case)
    clear_all_leaves()
    with plugin.autograd.context() as ctx:
        roots = smart_graphs.SMART_CASES[case](RpcNet())
        plugin.autograd.backward(ctx, roots)  # smart is the default
        got = gather(ctx)
    assert_same(got, expected)


def test_design_note_example_by_name(short_rpc_timeout):
    """d = a + b is used and e = b * c is not: a and b get 1s from d, c gets nothing."""
    clear_all_leaves()
    with plugin.autograd.context() as ctx:
        roots = smart_graphs.design_note(RpcNet())
        plugin.autograd.backward(ctx, roots, mode="smart")
        grads = gather(ctx)
    assert sorted(grads) == ["a", "b"]
    torch.testing.assert_close(grads["a"], torch.ones(3, 3, dtype=torch.float64))
    torch.testing.assert_close(grads["b"], torch.ones(3, 3, dtype=torch.float64))


def test_intermediate_root_and_two_roots_in_one_context(short_rpc_timeout):
    """Two passes (retain_graph) from two roots, each reaching a different subset of the RPCs."""
    def build(net):
        x = graphs.make_leaf("x", (3,), 1)
        h = net.sync("worker1", smart_graphs.leaf_times, x, "h1", 2)  # reached by both roots
        p = net.sync("worker2", smart_graphs.leaf_times, h, "p", 3)  # reached by root 1 only
        q = net.sync("worker3", smart_graphs.leaf_times, h, "q", 4)  # reached by root 2 only
        return h, p, q

    # reference: plain autograd, the two roots one after the other
    graphs.clear_leaves()
    h, p, q = build(smart_graphs.LocalNet())
    names = list(graphs.LEAVES)
    leaves = [graphs.LEAVES[n] for n in names]
    expected = {}
    for root in (p.sum(), (q * h).sum()):
        for n, g in zip(names, torch.autograd.grad(root, leaves, retain_graph=True, allow_unused=True)):
            if g is not None:
                expected[n] = expected[n] + g if n in expected else g

    clear_all_leaves()
    with plugin.autograd.context() as ctx:
        h, p, q = build(RpcNet())
        plugin.autograd.backward(ctx, [p.sum()], retain_graph=True)
        after_first = gather(ctx)
        assert "q" not in after_first and "p" in after_first
        plugin.autograd.backward(ctx, [(q * h).sum()], retain_graph=True)
        got = gather(ctx)
    assert_same(got, expected)

    # an intermediate (non-leaf) tensor as the root
    clear_all_leaves()
    with plugin.autograd.context() as ctx:
        h, p, q = build(RpcNet())
        plugin.autograd.backward(ctx, [h.sum()])
        got = gather(ctx)
    assert sorted(got) == ["h1", "x"]


def test_fast_mode_reports_unused_rpc_instead_of_hanging(cluster):
    """Fast mode cannot finish the design note's example; it fails at the RPC timeout with a
    message that points at smart mode."""
    rpc._set_rpc_timeout(2)
    try:
        clear_all_leaves()
        with plugin.autograd.context() as ctx:
            roots = smart_graphs.design_note(RpcNet())
            with pytest.raises(RuntimeError, match=r"(?s)^Error on Node \d+: the pass did not finish.*mode=\"smart\" \[on worker '"):
                plugin.autograd.backward(ctx, roots, mode="fast")
            # the context still works, in smart mode
            plugin.autograd.backward(ctx, roots, mode="smart")
            assert sorted(gather(ctx)) == ["a", "b"]
    finally:
        rpc._set_rpc_timeout(cluster.rpc_timeout)
    for w in workers():
        assert rpc.rpc_sync(w, plugin.debug_info)["num_running_passes"] == 0, w
