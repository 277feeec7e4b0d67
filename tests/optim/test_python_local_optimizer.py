"""DistributedOptimizer with a torch.optim.Optimizer subclass that has no functional
counterpart: each owner steps it in Python (plugin.optim.PythonLocalOptimizer), against torch's
own DistributedOptimizer and torch.optim with the same class."""
import threading
import warnings

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import plugin
from plugin.optim import DistributedOptimizer, PythonLocalOptimizer, PythonStepWarning, _python
from tests.support import optim_remote
from tests.support.optim_checks import assert_sparse_rejection_changes_neither, step_ones_on_trainer
from tests.support.user_optim import FailsHalfway, HeavyBall

pytestmark = pytest.mark.filterwarnings("ignore::plugin.optim.PythonStepWarning")

# name -> (owner, shape, seed)
OWNERS = {
    "py1": ("worker1", (3, 4), 1),
    "py2": ("worker2", (4,), 2),
    "py3": ("worker3", (2, 4), 3),
}
KWARGS = dict(lr=0.05, momentum=0.8, weight_decay=0.1)


def make_params(names, prefix):
    return {n: rpc.rpc_sync(OWNERS[n][0], optim_remote.make_param, args=(prefix + n, OWNERS[n][1], OWNERS[n][2]))
            for n in names}


def values(names, prefix):
    return {n: rpc.rpc_sync(OWNERS[n][0], optim_remote.param_value, args=(prefix + n,)) for n in names}


def train(opt, names, prefix, steps, engine, first_step=0, step_async=False, on_step=None):
    """loss = sum over params of (x * p)^2 / 2, x changing every step."""
    for step in range(first_step, first_step + steps):
        with dist_autograd.context() as ctx:
            loss = 0
            for n in names:
                owner, shape, _ = OWNERS[n]
                x = torch.full((shape[-1],), 0.5 + 0.1 * step, dtype=torch.float64)
                loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, prefix + n)) ** 2).sum() / 2
            if engine == "plugin":
                plugin.autograd.backward(ctx, [loss])
            else:
                dist_autograd.backward(ctx, [loss])
            if step_async:
                opt.step_async(ctx).wait()
            else:
                opt.step(ctx)
        if on_step is not None:
            on_step()


def local_run(names, steps, make_scheduler=None):
    """The same training with HeavyBall in this process."""
    params = {}
    for n in names:
        _, shape, seed = OWNERS[n]
        params[n] = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).requires_grad_()
    opt = HeavyBall(list(params.values()), **KWARGS)
    scheduler = make_scheduler(opt) if make_scheduler else None
    for step in range(steps):
        opt.zero_grad()
        loss = 0
        for n in names:
            x = torch.full((OWNERS[n][1][-1],), 0.5 + 0.1 * step, dtype=torch.float64)
            loss = loss + ((x * params[n]) ** 2).sum() / 2
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()
    return {n: p.detach() for n, p in params.items()}, opt


@pytest.mark.torchscript  # torch 2.13's torch.distributed.optim scripts its functional optimizers at import
@pytest.mark.parametrize("names,step_async", [
    (["py1"], False), (["py1", "py2"], False), (["py1", "py2", "py3"], False), (["py1", "py2"], True),
], ids=["one-owner", "two-owners", "three-owners", "two-owners-step_async"])
def test_same_parameters_as_torchs_distributed_optimizer(cluster, names, step_async):
    """The same class, model and gradients through torch's DistributedOptimizer (which steps
    it in Python too) and ours: identical parameters after 4 steps, and equal to torch.optim's
    in one process."""
    ours = make_params(names, "ours_")
    theirs = make_params(names, "torch_")
    start = values(names, "ours_")
    opt = DistributedOptimizer(HeavyBall, list(ours.values()), **KWARGS)
    import torch.distributed.optim

    reference = torch.distributed.optim.DistributedOptimizer(HeavyBall, list(theirs.values()), **KWARGS)
    train(opt, names, "ours_", 4, "plugin", step_async=step_async)
    train(reference, names, "torch_", 4, "torch")
    got, expected = values(names, "ours_"), values(names, "torch_")
    local, _ = local_run(names, 4)
    for n in names:
        assert torch.equal(got[n], expected[n]), n
        torch.testing.assert_close(got[n], local[n], rtol=1e-12, atol=1e-14, msg=n)
        assert not torch.equal(got[n], start[n]), n


def test_one_warning_per_class(cluster, monkeypatch):
    monkeypatch.setattr(_python, "_WARNED", set())
    params = list(make_params(["py1", "py2"], "warn_").values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DistributedOptimizer(HeavyBall, params, lr=0.1)
        DistributedOptimizer(HeavyBall, params, lr=0.2)
        DistributedOptimizer(torch.optim.SGD, params, lr=0.1)  # built in: native, no warning
        DistributedOptimizer(FailsHalfway, params)
        PythonLocalOptimizer(FailsHalfway, [torch.zeros(2, requires_grad=True)])  # not through the caller: none
    ours = [w for w in caught if issubclass(w.category, PythonStepWarning)]
    assert [w.filename for w in ours] == [__file__, __file__]
    first, second = (str(w.message) for w in ours)
    assert first.startswith("tests.support.user_optim.HeavyBall steps in Python on its owners because it has no "
                            "functional counterpart")
    assert second.startswith("tests.support.user_optim.FailsHalfway steps in Python on its owners because it has no "
                             "functional counterpart")
    assert "hold the owner's GIL" in first
    assert "functional_optim.register_functional_optimizer(HeavyBall, YourFunctionalClass)" in first


def test_constructor_errors_reach_the_caller_naming_the_owner(cluster):
    params = list(make_params(["py1", "py2"], "ctor_").values())
    with pytest.raises(ValueError, match=r"^DistributedOptimizer: building the local optimizer failed on owner "
                                         r"'worker1': ValueError: Invalid learning rate: -1; also failed on owner "
                                         r"'worker2': ValueError: Invalid learning rate: -1$"):
        DistributedOptimizer(HeavyBall, params, lr=-1)
    with pytest.raises(TypeError, match=r"failed on owner 'worker1': TypeError: .*unexpected keyword argument 'betas'"):
        DistributedOptimizer(HeavyBall, params, betas=(0.9, 0.99))
    with pytest.raises(KeyError, match=r"no functional optimizer registered for 'dict'.*not a torch.optim.Optimizer"):
        DistributedOptimizer(dict, params)


def test_step_errors_reach_the_caller_and_change_nothing(cluster):
    """FailsHalfway changes its first parameter, then raises: the error reaches the caller
    with its type and message, naming the owner, and the owner's parameters and state are as
    before (one owner: the step path; two owners: the two phases)."""
    a = rpc.rpc_sync("worker1", optim_remote.make_param, args=("half_a", (3,), 1))
    b = rpc.rpc_sync("worker1", optim_remote.make_param, args=("half_b", (3,), 2))
    c = rpc.rpc_sync("worker2", optim_remote.make_param, args=("half_c", (3,), 3))
    where = {"half_a": "worker1", "half_b": "worker1", "half_c": "worker2"}
    before = {n: rpc.rpc_sync(w, optim_remote.param_value, args=(n,)) for n, w in where.items()}
    for params in ([a, b], [a, b, c]):
        opt = DistributedOptimizer(FailsHalfway, params)
        with dist_autograd.context() as ctx:
            one = torch.tensor(1.0, dtype=torch.float64)
            loss = sum(rpc.rpc_sync(w, optim_remote.use_param, args=(one, n)).sum() for n, w in where.items())
            plugin.autograd.backward(ctx, [loss])
            with pytest.raises(ArithmeticError, match=r"^DistributedOptimizer: step\(\d+\) failed on owner 'worker1': "
                                                      r"ArithmeticError: FailsHalfway gives up at parameter 1"):
                opt.step(ctx)
        for n, w in where.items():
            assert torch.equal(rpc.rpc_sync(w, optim_remote.param_value, args=(n,)), before[n]), n
        assert opt.state_dict()["state"] == {}


def test_a_gradient_one_owner_rejects_changes_neither(cluster):
    """HeavyBall rejects sparse gradients: worker2 gets one, worker1 a valid one. step and
    step_async raise naming worker2, and neither owner changed; nothing stays prepared."""
    assert_sparse_rejection_changes_neither(
        HeavyBall, "py_dense", "py_table",
        r"step\(\d+\) failed on owner 'worker2': RuntimeError: HeavyBall does not support sparse gradients; no "
        r"owner applied the step",
    )


def test_python_and_native_optimizers_over_overlapping_parameters_lose_no_update(cluster):
    """One trainer steps [w, b] with HeavyBall (Python), the other [w] with SGD (native),
    at the same time on one server: both take w's lock, so w ends exactly 2 x 20 lower and
    b 20 lower."""
    n, steps = 1 << 22, 20
    w = rpc.rpc_sync("worker3", optim_remote.make_param, args=("mix_w", (n,), 7))
    b = rpc.rpc_sync("worker3", optim_remote.make_param, args=("mix_b", (n // 4,), 8))
    start = {name: rpc.rpc_sync("worker3", optim_remote.param_value, args=(name,)) for name in ("mix_w", "mix_b")}
    futs = [
        rpc.rpc_async("worker1", step_ones_on_trainer,
                       args=(HeavyBall, {"momentum": 0.0}, ["mix_w", "mix_b"], [w, b], steps)),
        rpc.rpc_async("worker2", step_ones_on_trainer, args=(torch.optim.SGD, {}, ["mix_w"], [w], steps)),
    ]
    assert [f.wait() for f in futs] == [steps, steps]
    expected_w, expected_b = start["mix_w"].clone(), start["mix_b"].clone()
    for _ in range(2 * steps):  # the same float64 operations as the steps, in one thread
        expected_w -= 1.0
    for _ in range(steps):
        expected_b -= 1.0
    assert torch.equal(rpc.rpc_sync("worker3", optim_remote.param_value, args=("mix_w",)), expected_w)
    assert torch.equal(rpc.rpc_sync("worker3", optim_remote.param_value, args=("mix_b",)), expected_b)


def test_python_step_waits_for_the_parameters_locks():
    """In one process: while the locks of [p, q] are held (a StepLock over them, what a native
    local optimizer over [p, q] holds while it steps), a Python local optimizer over [q] waits
    (the same per-parameter lock), and one over another tensor does not."""
    p, q = torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)
    held = torch.classes.gilfree_rpc.StepLock([p, q])
    python = PythonLocalOptimizer(HeavyBall, [q], lr=1.0)
    other = PythonLocalOptimizer(HeavyBall, [torch.zeros(2, requires_grad=True)], lr=1.0)
    done = threading.Event()
    held.__enter__()
    try:
        thread = threading.Thread(target=lambda: (python.step_gradients([torch.ones(2)]), done.set()))
        thread.start()
        other.step_gradients([torch.ones(2)])
        assert not done.wait(0.3)
        assert torch.equal(q.detach(), torch.zeros(2))
    finally:
        held.__exit__(None, None, None)
    assert done.wait(10)
    thread.join()
    assert torch.equal(q.detach(), -torch.ones(2)) and q.grad is None


def test_grad_is_restored_after_a_step():
    p = torch.zeros(2, requires_grad=True)
    p.grad = torch.full((2,), 7.0)
    local = PythonLocalOptimizer(HeavyBall, [p], lr=1.0, momentum=0.0)
    local.step_gradients([torch.ones(2)])
    assert torch.equal(p.detach(), -torch.ones(2)) and torch.equal(p.grad, torch.full((2,), 7.0))
    with pytest.raises(ValueError, match=r"gradients\[0\]: expected shape \[2\]"):
        local.step_gradients([torch.ones(3)])


def test_state_dict_round_trip(cluster):
    """torch.optim's state dict (with HeavyBall's int 'count'), equal to the local HeavyBall's;
    loaded into a fresh DistributedOptimizer, the next steps give identical parameters."""
    names = ["py1", "py2", "py3"]
    rrefs = make_params(names, "sd_")
    params = list(rrefs.values())
    opt = DistributedOptimizer(HeavyBall, params, **KWARGS)
    train(opt, names, "sd_", 3, "plugin")
    saved = opt.state_dict()
    _, reference = local_run(names, 3)
    torch_sd = reference.state_dict()
    assert saved["param_groups"] == torch_sd["param_groups"]
    assert saved["state"].keys() == torch_sd["state"].keys()
    for i, entry in torch_sd["state"].items():
        assert saved["state"][i]["count"] == entry["count"] == 3
        torch.testing.assert_close(saved["state"][i]["buf"], entry["buf"], rtol=1e-12, atol=1e-14)

    fresh = assert_loaded_state_continues(
        opt, saved, lambda: DistributedOptimizer(HeavyBall, params, lr=1.0), names, "sd_"  # other values: loaded
    )
    assert fresh.state_dict()["param_groups"] == saved["param_groups"]


def assert_loaded_state_continues(opt, saved, build_fresh, names, prefix):
    """``opt`` (3 steps taken) takes steps 3 and 4; then the parameters go back to their values
    before them, a fresh optimizer from ``build_fresh()`` loads ``saved`` and takes the same two
    steps: the parameters end identical. Returns the fresh optimizer."""
    snapshot = values(names, prefix)
    train(opt, names, prefix, 2, "plugin", first_step=3)
    after_original = values(names, prefix)
    for n in names:
        rpc.rpc_sync(OWNERS[n][0], optim_remote.set_param, args=(prefix + n, snapshot[n]))
    fresh = build_fresh()
    fresh.load_state_dict(saved)
    train(fresh, names, prefix, 2, "plugin", first_step=3)
    after_fresh = values(names, prefix)
    for n in names:
        assert torch.equal(after_fresh[n], after_original[n]), n
    return fresh


def test_lr_scheduler_drives_it(cluster):
    """StepLR halves the learning rate every 2 steps on every owner, as on torch.optim's
    HeavyBall; set_hyperparameter and param_groups writes reach the owners too."""
    names = ["py1", "py2"]
    params = list(make_params(names, "lr_").values())
    opt = DistributedOptimizer(HeavyBall, params, **KWARGS)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    train(opt, names, "lr_", 5, "plugin", on_step=lambda: (scheduler.step(), lrs.append(opt.state_dict()["param_groups"][0]["lr"])))
    expected, reference = local_run(names, 5, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5))
    assert lrs == [0.05, 0.025, 0.025, 0.0125, 0.0125]
    assert opt.param_groups[0]["lr"] == reference.param_groups[0]["lr"] == 0.0125
    got = values(names, "lr_")
    for n in names:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-12, atol=1e-14, msg=n)

    opt.set_hyperparameter(0, "momentum", 0.5)
    opt.param_groups[0]["weight_decay"] = 0.25
    group = opt.state_dict()["param_groups"][0]
    assert (group["momentum"], group["weight_decay"], group["initial_lr"]) == (0.5, 0.25, 0.05)
    with pytest.raises(ValueError, match=r"failed on owner 'worker1': ValueError: HeavyBall has no hyperparameter 'beta1'"):
        opt.set_hyperparameter(0, "beta1", 0.5)
    # the owner's PythonLocalOptimizer checks the group as every optimizer does (the same message)
    local = PythonLocalOptimizer(HeavyBall, [torch.zeros(2)], **KWARGS)
    with pytest.raises(ValueError, match=r"^parameter group 1 does not exist \(the optimizer has 1 groups\)$"):
        local.set_hyperparameter(1, "momentum", 0.5)
    local.set_hyperparameter(0, "momentum", 0.25)
    assert local.optimizer.param_groups[0]["momentum"] == 0.25


def test_loads_the_state_dict_that_torch_optim_saved(cluster):
    """HeavyBall's own state dict (3 steps in this process, with its int 'count') loads into a
    DistributedOptimizer whose parameters hold the same values, and the next 2 steps continue
    as HeavyBall's do in this process."""
    names = ["py1", "py2", "py3"]
    at_save, reference = local_run(names, 3)
    saved = reference.state_dict()
    expected, _ = local_run(names, 5)
    params = list(make_params(names, "tsd_").values())
    for n in names:
        rpc.rpc_sync(OWNERS[n][0], optim_remote.set_param, args=("tsd_" + n, at_save[n]))
    opt = DistributedOptimizer(HeavyBall, params, lr=1.0)
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["lr"] == KWARGS["lr"]
    train(opt, names, "tsd_", 2, "plugin", first_step=3)
    assert [opt.state_dict()["state"][i]["count"] for i in range(3)] == [5, 5, 5]
    got = values(names, "tsd_")
    for n in names:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-12, atol=1e-14, msg=n)


def test_a_builtin_optimizer_without_its_fused_configuration_steps_in_python(cluster, monkeypatch):
    """torch.optim.Adam(foreach=True): each owner builds a Python local optimizer, the caller
    warns once with the reason, and the steps are torch.optim's."""
    monkeypatch.setattr(_python, "_WARNED", set())
    names = ["py1", "py2"]
    params = list(make_params(names, "fe_").values())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = DistributedOptimizer(torch.optim.Adam, params, lr=0.05, foreach=True)
    assert set(opt.local_optimizer_kinds.values()) == {"python"}
    ours = [str(w.message) for w in caught if issubclass(w.category, PythonStepWarning)]
    assert len(ours) == 1 and ours[0].startswith("torch.optim.adam.Adam steps in Python on its owners because "
                                                 "foreach=True (on owner 'worker1')"), ours
    train(opt, names, "fe_", 3, "plugin")
    local = {}
    for n in names:
        _, shape, seed = OWNERS[n]
        local[n] = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).requires_grad_()
    reference = torch.optim.Adam(list(local.values()), lr=0.05, foreach=True)
    for step in range(3):
        reference.zero_grad()
        loss = sum(((torch.full((OWNERS[n][1][-1],), 0.5 + 0.1 * step, dtype=torch.float64) * local[n]) ** 2).sum() / 2
                   for n in names)
        loss.backward()
        reference.step()
    got = values(names, "fe_")
    for n in names:
        torch.testing.assert_close(got[n], local[n].detach(), rtol=1e-12, atol=1e-14, msg=n)


def test_an_optimizer_that_needs_a_closure_fails_at_step_naming_the_owners(cluster):
    """torch.optim.LBFGS builds (in Python) but its step needs a closure: step raises the
    owners' TypeError, naming them, and no owner applied anything."""
    names = ["py1", "py2"]
    params = list(make_params(names, "lb_").values())
    before = values(names, "lb_")
    opt = DistributedOptimizer(torch.optim.LBFGS, params, lr=0.1)
    with pytest.raises(TypeError, match=r"^DistributedOptimizer: step\(\d+\) failed on owner 'worker1': TypeError: "
                                        r".*step\(\) missing 1 required positional argument: 'closure'"):
        train(opt, names, "lb_", 1, "plugin")
    after = values(names, "lb_")
    for n in names:
        assert torch.equal(after[n], before[n]), n
