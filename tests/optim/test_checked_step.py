"""DistributedOptimizer.step over several owners after a backward pass of the plugin's engine.

Each worker's part of the pass checks that every gradient it holds fits its parameter (dense,
the parameter's shape, dtype and device) and reports it with the pass's completion
(plugin/csrc/optim/part_end_hook.h). When every owner reported gradients that fit, the step goes to
all owners at once, with no validation round first (:func:`checked`); whenever the pass cannot
vouch for an owner, or an owner's local optimizer is not native, the step takes two phases
(prepare on every owner, then commit), and nothing is applied unless every owner prepared.
A sparse gradient is vouched for when every owner's optimizer takes sparse gradients (SGD,
Adagrad); otherwise the step takes two phases and the owner's rejection changes no owner.
"""
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from plugin.optim import DistributedOptimizer, PythonStepWarning
from tests.support import graphs, optim_remote
from tests.support.user_optim import HeavyBall

F64 = dict(dtype=torch.float64)


def checked(opt, ctx):
    """Whether ``opt.step(ctx)`` would take the checked step (one round trip) rather than two
    phases."""
    return bool(opt._checked_versions(ctx))


def make(owner, name, shape, seed):
    return rpc.rpc_sync(owner, optim_remote.make_param, args=(name, shape, seed))


def value(owner, name):
    return rpc.rpc_sync(owner, optim_remote.param_value, args=(name,))


def squares(owners, names, x):
    """sum over owners of (x * p)^2, each owner's product computed there."""
    return sum((rpc.rpc_sync(o, optim_remote.use_param, args=(x, n)) ** 2).sum() for o, n in zip(owners, names))


@pytest.mark.parametrize("owners", [["worker1", "worker2"], ["worker1", "worker2", "worker3"]], ids=["two", "three"])
def test_checked_steps_match_torch(cluster, owners):
    """4 Adam steps, each after a pass of the plugin's engine: every step is checked (no
    validation round) and the parameters equal torch.optim.Adam's."""
    names = [f"chk_{len(owners)}_{i}" for i in range(len(owners))]
    rrefs = [make(o, n, (5,), 30 + i) for i, (o, n) in enumerate(zip(owners, names))]
    local = [value(o, n).requires_grad_() for o, n in zip(owners, names)]
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.05)
    reference = torch.optim.Adam(local, lr=0.05)
    for step in range(4):
        x = torch.full((5,), 1.0 + step, **F64)
        with dist_autograd.context() as ctx:
            plugin.autograd.backward(ctx, [squares(owners, names, x)])
            assert checked(opt, ctx)
            opt.step(ctx)
        reference.zero_grad()
        sum(((x * p) ** 2).sum() for p in local).backward()
        reference.step()
    for o, n, p in zip(owners, names, local):
        torch.testing.assert_close(value(o, n), p.detach(), rtol=1e-10, atol=1e-12)


def test_the_caller_as_an_owner_reports_its_own_gradients(cluster):
    """One parameter on the caller itself, one on worker1: the caller's own part of the pass
    is checked too."""
    mine = torch.rand(3, generator=torch.Generator().manual_seed(40), **F64).requires_grad_()
    theirs = make("worker1", "chk_caller_peer", (3,), 41)
    start = (mine.detach().clone(), value("worker1", "chk_caller_peer"))
    opt = DistributedOptimizer(torch.optim.SGD, [rpc.RRef(mine), theirs], lr=0.5)
    x = torch.full((3,), 2.0, **F64)
    with dist_autograd.context() as ctx:
        loss = (x * mine).sum() + rpc.rpc_sync("worker1", optim_remote.use_param, args=(x, "chk_caller_peer")).sum()
        plugin.autograd.backward(ctx, [loss])
        assert checked(opt, ctx)
        opt.step(ctx)
    torch.testing.assert_close(mine.detach(), start[0] - 1.0, rtol=0, atol=1e-12)
    torch.testing.assert_close(value("worker1", "chk_caller_peer"), start[1] - 1.0, rtol=0, atol=1e-12)


def test_torchs_engine_leaves_the_check_to_the_owners(cluster):
    """After torch's backward pass no worker reported: the step validates on the owners (the
    two phases, for two owners and for three)."""
    owners = ["worker1", "worker2", "worker3"]
    names = [f"chk_torch_{i}" for i in range(3)]
    rrefs = [make(o, n, (5,), 50 + i) for i, (o, n) in enumerate(zip(owners, names))]
    two, three = DistributedOptimizer(torch.optim.SGD, rrefs[:2], lr=0.1), DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.1)
    with dist_autograd.context() as ctx:
        dist_autograd.backward(ctx, [squares(owners, names, torch.ones(5, **F64))])
        assert not checked(two, ctx) and not checked(three, ctx)


def test_the_check_reaches_the_caller_from_owners_it_never_contacted(cluster):
    """trainer -> worker1 -> worker2: worker2's part of the pass is answered to worker1, whose
    answer carries worker2's finding to the caller. Dense: checked, and the step equals the
    gradients' (SGD). A sparse gradient on worker2: not checked, so worker2's rejection (Adam)
    changes neither owner. The same step forced through without the validation round applies
    on worker1 alone: what the check prevents."""
    a = make("worker1", "chk_nest_a", (4,), 60)
    b = make("worker2", "chk_nest_b", (4,), 61)
    table = make("worker2", "chk_nest_t", (6, 3), 62)
    x = torch.linspace(0.5, 2.0, 4, **F64)
    a0, b0, t0 = value("worker1", "chk_nest_a"), value("worker2", "chk_nest_b"), value("worker2", "chk_nest_t")

    opt = DistributedOptimizer(torch.optim.SGD, [a, b], lr=0.1)
    with dist_autograd.context() as ctx:
        loss = rpc.rpc_sync("worker1", optim_remote.use_param_then, args=(x, "chk_nest_a", "worker2", "chk_nest_b", False))
        plugin.autograd.backward(ctx, [loss])
        assert checked(opt, ctx)
        opt.step(ctx)
    torch.testing.assert_close(value("worker1", "chk_nest_a"), a0 - 0.1 * x * b0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(value("worker2", "chk_nest_b"), b0 - 0.1 * x * a0, rtol=1e-12, atol=1e-12)

    a1 = value("worker1", "chk_nest_a")
    adam = DistributedOptimizer(torch.optim.Adam, [a, table], lr=0.1)
    with dist_autograd.context() as ctx:
        loss = rpc.rpc_sync("worker1", optim_remote.use_param_then, args=(x, "chk_nest_a", "worker2", "chk_nest_t", True))
        plugin.autograd.backward(ctx, [loss])
        assert not checked(adam, ctx)
        with pytest.raises(RuntimeError, match=r"failed on owner 'worker2'.*sparse gradients.*no owner applied the step"):
            adam.step(ctx)
        assert torch.equal(value("worker1", "chk_nest_a"), a1)
        assert torch.equal(value("worker2", "chk_nest_t"), t0)
        # the checked step, forced although the pass found a sparse gradient Adam does not take
        versions = plugin.ops._checked_versions(ctx, adam._owner_ids, True)
        assert versions
        with pytest.raises(RuntimeError, match=r"failed on owner 'worker2'.*sparse gradients.*applied on owners \['worker1'\]"):
            adam._checked_step(ctx, versions, f"step({ctx})")
    assert not torch.equal(value("worker1", "chk_nest_a"), a1)
    assert torch.equal(value("worker2", "chk_nest_t"), t0)


def test_a_later_pass_with_a_sparse_gradient_turns_the_check_off(cluster):
    """Two passes in one context: the first gives dense gradients on both owners (checked);
    the second reaches both again, with another dense gradient on worker1 and a sparse one on
    worker2, whose finding then says no: the step validates first, and Adam's rejection on
    worker2 changes neither owner."""
    a = make("worker1", "chk_later_a", (3,), 70)
    b = make("worker2", "chk_later_b", (3,), 71)
    table = make("worker2", "chk_later_t", (6, 3), 72)
    opt = DistributedOptimizer(torch.optim.Adam, [a, b, table], lr=0.1)
    before = [value("worker1", "chk_later_a"), value("worker2", "chk_later_b"), value("worker2", "chk_later_t")]
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [squares(["worker1", "worker2"], ["chk_later_a", "chk_later_b"], torch.ones(3, **F64))])
        assert checked(opt, ctx)
        rows = rpc.rpc_sync("worker2", optim_remote.use_param_sparse, args=(torch.tensor([0, 2]), "chk_later_t"))
        plugin.autograd.backward(ctx, [rows.sum() + squares(["worker1"], ["chk_later_a"], torch.ones(3, **F64))])
        assert not checked(opt, ctx)
        with pytest.raises(RuntimeError, match=r"failed on owner 'worker2'.*sparse gradients.*no owner applied the step"):
            opt.step(ctx)
    after = [value("worker1", "chk_later_a"), value("worker2", "chk_later_b"), value("worker2", "chk_later_t")]
    assert all(torch.equal(x, y) for x, y in zip(before, after))
    assert opt.state_dict()["state"] == {}


def test_a_failed_pass_turns_the_check_off(cluster):
    """A second pass in the context fails (the graph was freed by the first): the findings of
    the first are dropped when the second starts, and the step validates on the owners."""
    owners, names = ["worker1", "worker2"], ["chk_fail_a", "chk_fail_b"]
    rrefs = [make(o, n, (3,), 80 + i) for i, (o, n) in enumerate(zip(owners, names))]
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.1)
    with dist_autograd.context() as ctx:
        loss = squares(owners, names, torch.ones(3, **F64))
        plugin.autograd.backward(ctx, [loss])
        assert checked(opt, ctx)
        with pytest.raises(RuntimeError):
            plugin.autograd.backward(ctx, [loss])
        assert not checked(opt, ctx)
        opt.step(ctx)  # the first pass's gradients, validated on the owners


def test_an_owner_the_pass_did_not_reach_is_not_checked(cluster):
    """The pass reaches worker1 only: worker2 sent no finding, so the step validates on the
    owners (worker2 then skips its parameter, as torch skips a None .grad)."""
    a = make("worker1", "chk_reach_a", (3,), 90)
    b = make("worker2", "chk_reach_b", (3,), 91)
    opt = DistributedOptimizer(torch.optim.SGD, [a, b], lr=0.1)
    b0 = value("worker2", "chk_reach_b")
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [rpc.rpc_sync("worker1", optim_remote.use_param, args=(torch.ones(3, **F64), "chk_reach_a")).sum()])
        assert not checked(opt, ctx)
        opt.step(ctx)
    assert torch.equal(value("worker2", "chk_reach_b"), b0)


def test_an_earlier_sparse_gradient_keeps_the_check_off(cluster):
    """A sparse gradient from a first pass stays in the context, so the caller's check stays
    off; a second, dense pass adds a dense gradient to it, which makes the sum dense (torch's
    AccumulateGrad: dense + sparse), and Adam steps with that sum on the owner."""
    a = make("worker1", "chk_early_a", (3,), 100)
    table = make("worker2", "chk_early_t", (6, 3), 101)
    t0 = value("worker2", "chk_early_t")
    opt = DistributedOptimizer(torch.optim.Adam, [a, table], lr=0.1)
    with dist_autograd.context() as ctx:
        rows = rpc.rpc_sync("worker2", optim_remote.use_param_sparse, args=(torch.tensor([0, 2]), "chk_early_t"))
        plugin.autograd.backward(ctx, [rows.sum()])
        dense = rpc.rpc_sync("worker2", optim_remote.dense_scaled, args=(torch.ones(3, **F64), "chk_early_t"))
        plugin.autograd.backward(ctx, [dense + squares(["worker1"], ["chk_early_a"], torch.ones(3, **F64))])
        assert not checked(opt, ctx)
        opt.step(ctx)
    # d(rows.sum())/dtable: ones on rows 0 and 2 (sparse); d(dense)/dtable: ones everywhere.
    expected = t0.clone().requires_grad_()
    expected.grad = torch.ones(6, 3, **F64)
    expected.grad[[0, 2]] += 1
    torch.optim.Adam([expected], lr=0.1).step()
    assert torch.equal(value("worker2", "chk_early_t"), expected.detach())


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adam], ids=["sgd", "adam"])
def test_a_sparse_gradient_on_the_caller(cluster, optimizer):
    """The caller owns an embedding table that gets a sparse gradient: its own finding says
    so. SGD takes sparse gradients: the step is checked and equals the gradient's. Adam does
    not: two phases, the caller's own phase 1 refuses, and worker1 is left unchanged."""
    table = torch.rand(6, 3, generator=torch.Generator().manual_seed(110), **F64).requires_grad_()
    name = f"chk_callsparse_{optimizer.__name__}"
    b = make("worker1", name, (3,), 111)
    t0, b0 = table.detach().clone(), value("worker1", name)
    opt = DistributedOptimizer(optimizer, [rpc.RRef(table), b], lr=0.1)
    with dist_autograd.context() as ctx:
        rows = torch.nn.functional.embedding(torch.tensor([0, 2]), table, sparse=True)
        plugin.autograd.backward(ctx, [rows.sum() + squares(["worker1"], [name], torch.ones(3, **F64))])
        if optimizer is torch.optim.SGD:
            assert checked(opt, ctx)
            opt.step(ctx)
            expected = t0.clone()
            expected[[0, 2]] -= 0.1
            torch.testing.assert_close(table.detach(), expected, rtol=0, atol=1e-12)
            torch.testing.assert_close(value("worker1", name), b0 - 0.1 * 2 * b0, rtol=1e-12, atol=1e-12)
        else:
            assert not checked(opt, ctx)
            with pytest.raises(RuntimeError, match=r"sparse gradients.*no owner applied the step"):
                opt.step(ctx)
            assert torch.equal(table.detach(), t0) and torch.equal(value("worker1", name), b0)


def test_a_worker_the_pass_reached_without_gradients_is_not_vouched_for(cluster):
    """worker2 relays the forward pass (a multiplication, no parameter of its own used): the
    engine holds no gradient there, so its finding says no (a step there would read torch's
    gradients, which the pass did not check)."""
    a = make("worker1", "chk_relay_a", (3,), 120)
    b = make("worker2", "chk_relay_b", (3,), 121)
    opt = DistributedOptimizer(torch.optim.SGD, [a, b], lr=0.1)
    with dist_autograd.context() as ctx:
        y = rpc.rpc_sync("worker1", optim_remote.use_param, args=(torch.ones(3, **F64), "chk_relay_a"))
        plugin.autograd.backward(ctx, [rpc.rpc_sync("worker2", torch.mul, args=(y, 2.0)).sum()])
        assert not checked(opt, ctx)


def test_a_pass_that_fails_on_another_worker_leaves_no_check(cluster):
    """A first pass is checked; a second fails on worker2 (a backward function raises
    there), after worker1's part may have reported: no finding is kept."""
    owners, names = ["worker1", "worker2"], ["chk_rfail_a", "chk_rfail_b"]
    rrefs = [make(o, n, (3,), 130 + i) for i, (o, n) in enumerate(zip(owners, names))]
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.1)
    rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(True,))
    try:
        with dist_autograd.context() as ctx:
            plugin.autograd.backward(ctx, [squares(owners, names, torch.ones(3, **F64))])
            assert checked(opt, ctx)
            failing = rpc.rpc_sync("worker2", graphs.udf_failing_backward, args=(torch.ones(3, **F64).requires_grad_(),))
            with pytest.raises(plugin.autograd.BackwardError, match="boom in FailingBackward"):
                plugin.autograd.backward(ctx, [failing.sum() + squares(owners, names, torch.ones(3, **F64))])
            assert not checked(opt, ctx)
    finally:
        rpc.rpc_sync("worker2", graphs.set_fail_backward, args=(False,))


def test_fast_mode_is_checked_too(cluster):
    owners, names = ["worker1", "worker2"], ["chk_fast_a", "chk_fast_b"]
    rrefs = [make(o, n, (3,), 140 + i) for i, (o, n) in enumerate(zip(owners, names))]
    start = [value(o, n) for o, n in zip(owners, names)]
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.5)
    with dist_autograd.context() as ctx:
        loss = sum(rpc.rpc_sync(o, optim_remote.use_param, args=(torch.ones(3, **F64), n)).sum() for o, n in zip(owners, names))
        plugin.autograd.backward(ctx, [loss], mode="fast")
        assert checked(opt, ctx)
        opt.step(ctx)
    for o, n, s in zip(owners, names, start):
        torch.testing.assert_close(value(o, n), s - 0.5, rtol=0, atol=1e-12)


def test_a_python_local_optimizer_validates_on_the_owners(cluster):
    """A class without a functional counterpart steps in Python, whose own checks are not
    known in advance: its phase 1 always runs."""
    rrefs = [make(o, f"chk_py_{o}", (3,), 150 + i) for i, o in enumerate(["worker1", "worker2"])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PythonStepWarning)  # warned once per class per process
        opt = DistributedOptimizer(HeavyBall, rrefs, lr=0.1)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [squares(["worker1", "worker2"], ["chk_py_worker1", "chk_py_worker2"], torch.ones(3, **F64))])
        assert not checked(opt, ctx)


def test_gradients_changed_after_the_check_are_refused(cluster):
    """After the caller's checked pass, worker1 starts a pass of the same context that adds a
    gradient on worker2. The caller's findings cannot know it; worker2 sees its gradients'
    version changed and refuses its part (nothing applied there), and the error lists the
    owner that applied."""
    a = make("worker1", "chk_foreign_a", (3,), 160)
    b = make("worker2", "chk_foreign_b", (3,), 161)
    opt = DistributedOptimizer(torch.optim.SGD, [a, b], lr=0.1)
    a0, b0 = value("worker1", "chk_foreign_a"), value("worker2", "chk_foreign_b")
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [squares(["worker1", "worker2"], ["chk_foreign_a", "chk_foreign_b"], torch.ones(3, **F64))])
        rpc.rpc_sync("worker1", optim_remote.backward_from_here_in, args=(ctx, "worker2", "chk_foreign_b"))
        assert checked(opt, ctx)
        with pytest.raises(RuntimeError, match=r"failed on owners \['worker2'\]; the step was applied on owners "
                                               r"\['worker1'\]; owner 'worker2' refused it: the context's gradients there "
                                               r"changed after the backward pass checked them"):
            opt.step(ctx)
    assert not torch.equal(value("worker1", "chk_foreign_a"), a0)
    assert torch.equal(value("worker2", "chk_foreign_b"), b0)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_a_worker_reached_from_two_parents_reports_once(cluster, sparse):
    """trainer -> worker1 -> worker3 and trainer -> worker2 -> worker3: worker3 gets the pass
    from two workers, answers one of them with its finding (first contact) and the other with
    none. Dense everywhere, or a sparse gradient on worker3 (which SGD takes): checked."""
    tag = "s" if sparse else "d"
    a, b = make("worker1", f"chk_dia_a{tag}", (3,), 170), make("worker2", f"chk_dia_b{tag}", (3,), 171)
    c = make("worker3", f"chk_dia_c{tag}", (6, 3) if sparse else (3,), 172)
    opt = DistributedOptimizer(torch.optim.SGD, [a, b, c], lr=0.1)
    x = torch.ones(3, **F64)
    with dist_autograd.context() as ctx:
        loss = sum(rpc.rpc_sync(w, optim_remote.use_param_then, args=(x, n, "worker3", f"chk_dia_c{tag}", sparse))
                   for w, n in (("worker1", f"chk_dia_a{tag}"), ("worker2", f"chk_dia_b{tag}")))
        plugin.autograd.backward(ctx, [loss])
        assert checked(opt, ctx)
        opt.step(ctx)


def test_the_last_worker_to_end_has_reported_when_backward_returns(cluster):
    """trainer -> worker1 -> worker2, worker2's backward taking 0.5 s: its finding is in
    the caller's record as soon as backward returns."""
    a = make("worker1", "chk_slow_a", (3,), 180)
    b = make("worker2", "chk_slow_b", (3,), 181)
    opt = DistributedOptimizer(torch.optim.SGD, [a, b], lr=0.1)
    with dist_autograd.context() as ctx:
        loss = rpc.rpc_sync("worker1", optim_remote.use_param_then_slow,
                            args=(torch.ones(3, **F64), "chk_slow_a", "worker2", "chk_slow_b"))
        plugin.autograd.backward(ctx, [loss])
        assert checked(opt, ctx)
