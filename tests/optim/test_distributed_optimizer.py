"""plugin.optim.DistributedOptimizer against torch.optim on the same parameters and gradients."""
import copy
import threading
import time

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import functional_optim
from tests.support import optim_remote
from tests.support.optim_checks import assert_sparse_rejection_changes_neither, step_ones_on_trainer
import plugin
from tests.support.optim_configs import INFOS
from plugin.optim import DistributedOptimizer, NativeLocalOptimizer

OWNERS = {"p1": ("worker1", (3, 4), 1), "p2": ("worker2", (4,), 2), "p3": ("worker2", (2, 4), 3)}
# Muon takes matrices only: p2 as a 1 x 4 matrix.
MATRIX_OWNERS = {**OWNERS, "p2": ("worker2", (1, 4), 2)}


def make_remote_params(dtype=torch.float64, owners=OWNERS):
    return {
        name: rpc.rpc_sync(owner, optim_remote.make_param, args=(name, shape, seed, dtype))
        for name, (owner, shape, seed) in owners.items()
    }


def remote_values(owners=OWNERS):
    return {name: rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)) for name, (owner, _, _) in owners.items()}


def forward_backward(step, engine="plugin", mode="smart", owners=OWNERS):
    """loss = sum over params of (x * p)^2 / 2 with an x that changes every step."""
    with dist_autograd.context() as ctx:
        loss = 0
        for name, (owner, shape, _) in owners.items():
            x = torch.full((shape[-1],), 0.5 + 0.1 * step, dtype=torch.float64)
            loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, name)) ** 2).sum() / 2
        if engine == "plugin":
            plugin.autograd.backward(ctx, [loss], mode=mode)
        else:
            dist_autograd.backward(ctx, [loss])
        yield ctx


def local_params(owners=OWNERS):
    """The parameters that make_remote_params makes on the owners, made in this process."""
    params = {}
    for name, (_, shape, seed) in owners.items():
        gen = torch.Generator().manual_seed(seed)
        params[name] = torch.rand(shape, generator=gen, dtype=torch.float64).requires_grad_()
    return params


def local_loss(params, step, owners=OWNERS):
    """The loss of forward_backward, computed in this process."""
    loss = 0
    for name, (_, shape, _) in owners.items():
        x = torch.full((shape[-1],), 0.5 + 0.1 * step, dtype=torch.float64)
        loss = loss + ((x * params[name]) ** 2).sum() / 2
    return loss


def local_reference(torch_class, kwargs, steps, owners=OWNERS):
    """The same training with torch.optim in this process."""
    params = local_params(owners)
    opt = torch_class(list(params.values()), **kwargs)
    for step in range(steps):
        opt.zero_grad()
        local_loss(params, step, owners).backward()
        opt.step()
    return {n: p.detach() for n, p in params.items()}, opt


def first_config(info):
    """The first single-group parity config of an optimizer, with the default implementation."""
    for config in info.configs:
        if config.groups is None:
            return {k: v for k, v in config.kwargs.items() if k not in ("foreach", "fused")}
    return {}


@pytest.mark.parametrize("info", INFOS, ids=lambda i: i.name)
@pytest.mark.parametrize("given", ["functional", "torch"])
def test_matches_torch_optim(cluster, info, given):
    kwargs = first_config(info)
    owners = MATRIX_OWNERS if info.name == "Muon" else OWNERS
    rrefs = make_remote_params(owners=owners)
    opt = DistributedOptimizer(info.ours if given == "functional" else info.torch_class, list(rrefs.values()), **kwargs)
    assert opt.owners == ["worker1", "worker2"]
    assert opt.local_optimizer_kinds == {"worker1": "native", "worker2": "native"}
    for step in range(5):
        for ctx in forward_backward(step, owners=owners):
            opt.step(ctx)
    expected, _ = local_reference(info.torch_class, kwargs, 5, owners)
    got = remote_values(owners)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-10, atol=1e-12, msg=name)


def test_steps_on_gradients_from_torchs_engine(cluster):
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.Adam, list(rrefs.values()), lr=0.05)
    for step in range(3):
        for ctx in forward_backward(step, engine="torch"):
            opt.step(ctx)
    expected, _ = local_reference(torch.optim.Adam, {"lr": 0.05}, 3)
    for name, value in remote_values().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-10, atol=1e-12)


def test_step_async(cluster):
    rrefs = make_remote_params()
    opt = DistributedOptimizer(functional_optim.SGD, list(rrefs.values()), lr=0.1, momentum=0.9)
    for step in range(2):
        for ctx in forward_backward(step):
            fut = opt.step_async(ctx)
            assert fut.wait() is None
    expected, _ = local_reference(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, 2)
    for name, value in remote_values().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-10, atol=1e-12)


def test_state_dict_round_trip(cluster):
    """Save, load into a fresh DistributedOptimizer over the same RRefs: the next steps give
    identical parameters. The saved dict is the one torch.optim would save."""
    rrefs = make_remote_params()
    params = list(rrefs.values())
    opt = DistributedOptimizer(torch.optim.Adam, params, lr=0.05, amsgrad=True)
    for step in range(3):
        for ctx in forward_backward(step):
            opt.step(ctx)
    saved = opt.state_dict()
    # the local optimizers run a fused kernel by default with the flags left None, as torch's
    # default; its state equals the single-tensor step's up to rounding
    _, reference = local_reference(torch.optim.Adam, {"lr": 0.05, "amsgrad": True}, 3)
    torch_sd = reference.state_dict()
    assert saved["param_groups"] == torch_sd["param_groups"]
    assert saved["state"].keys() == torch_sd["state"].keys()
    for i in torch_sd["state"]:
        for key, value in torch_sd["state"][i].items():
            torch.testing.assert_close(saved["state"][i][key], value, rtol=1e-10, atol=1e-12, msg=f"{i}/{key}")

    snapshot = remote_values()
    for step in range(3, 5):
        for ctx in forward_backward(step):
            opt.step(ctx)
    after_original = remote_values()

    for name, (owner, _, _) in OWNERS.items():
        rpc.rpc_sync(owner, optim_remote.set_param, args=(name, snapshot[name]))
    fresh = DistributedOptimizer(torch.optim.Adam, params, lr=0.05, amsgrad=True)
    fresh.load_state_dict(saved)
    for step in range(3, 5):
        for ctx in forward_backward(step):
            fresh.step(ctx)
    after_fresh = remote_values()
    for name in after_original:
        assert torch.equal(after_fresh[name], after_original[name]), name


def test_loads_the_state_dict_that_torch_optim_saved(cluster):
    """A state dict saved by torch.optim.Adam (3 steps in this process) loads into a
    DistributedOptimizer whose parameters hold the same values (other hyperparameters given:
    the loaded ones win), and the next 2 steps continue as torch.optim's do."""
    kwargs = {"lr": 0.05, "amsgrad": True}
    params = local_params()
    reference = torch.optim.Adam(list(params.values()), **kwargs)
    for step in range(5):
        if step == 3:
            saved, at_save = copy.deepcopy(reference.state_dict()), {n: p.detach().clone() for n, p in params.items()}
        reference.zero_grad()
        local_loss(params, step).backward()
        reference.step()
    rrefs = make_remote_params()
    for name, (owner, _, _) in OWNERS.items():
        rpc.rpc_sync(owner, optim_remote.set_param, args=(name, at_save[name]))
    opt = DistributedOptimizer(torch.optim.Adam, list(rrefs.values()), lr=1.0)
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["lr"] == 0.05 and opt.param_groups[0]["amsgrad"] is True
    for step in range(3, 5):
        for ctx in forward_backward(step):
            opt.step(ctx)
    got = remote_values()
    for name, p in params.items():
        torch.testing.assert_close(got[name], p.detach(), rtol=1e-10, atol=1e-12, msg=name)


def test_load_state_dict_rejects_wrong_size_before_sending(cluster):
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.SGD, list(rrefs.values()), lr=0.1)
    with pytest.raises(ValueError, match="has 2 parameters, this optimizer 3"):
        opt.load_state_dict({"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]})


def test_constructor_errors_name_the_owner(cluster):
    rrefs = make_remote_params()
    with pytest.raises(ValueError, match=r"^DistributedOptimizer: building the local optimizer failed on owner "
                                         r"'worker1': ValueError: Invalid learning rate: -1.0; also failed on owner "
                                         r"'worker2': ValueError: Invalid learning rate: -1.0$"):
        DistributedOptimizer(torch.optim.Adam, list(rrefs.values()), lr=-1.0)
    bad = rpc.rpc_sync("worker3", optim_remote.not_a_tensor)
    with pytest.raises(TypeError, match=r"owner 'worker3': TypeError: params_rref\[0\] refers to a str"):
        DistributedOptimizer(torch.optim.SGD, [rrefs["p1"], bad], lr=0.1)
    with pytest.raises(KeyError, match="no functional optimizer registered for 'dict'"):
        DistributedOptimizer(dict, list(rrefs.values()))  # torch.optim.LBFGS would step in Python
    with pytest.raises(TypeError, match=r"params_rref\[1\] is a Tensor, not an RRef"):
        DistributedOptimizer(torch.optim.SGD, [rrefs["p1"], torch.zeros(1)])


def test_a_gradient_one_owner_rejects_changes_no_owner(cluster):
    """Adam rejects sparse gradients: worker2 gets one, worker1 a valid one. The step raises
    naming worker2, and neither owner changed (parameters and optimizer state); nothing stays
    prepared on worker1."""
    assert_sparse_rejection_changes_neither(
        torch.optim.Adam, "dense", "table",
        r"step\(\d+\) failed on owner 'worker2'.*does not support sparse gradients.*no owner applied the step",
    )


THREE = ["worker1", "worker2", "worker3"]


def _step_over(opt, owners, names, x, sparse_on=None):
    """One forward (each owner's parameter times x, squared; or an embedding lookup on
    ``sparse_on``), backward and step."""
    with dist_autograd.context() as ctx:
        loss = 0
        for owner, name in zip(owners, names):
            if owner == sparse_on:
                loss = loss + rpc.rpc_sync(owner, optim_remote.use_param_sparse, args=(torch.tensor([0, 2]), name)).sum()
            else:
                loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, name)) ** 2).sum()
        plugin.autograd.backward(ctx, [loss])
        opt.step(ctx)


def test_steps_over_three_owners_match_torch(cluster, step_protocol):
    """Three owners, each step checked by the backward pass or taken in two phases: 4 Adam
    steps equal torch.optim.Adam's over the same parameters."""
    names = [f"three_{i}_{step_protocol}" for i in range(len(THREE))]
    rrefs = [rpc.rpc_sync(o, optim_remote.make_param, args=(n, (5,), 10 + i)) for i, (o, n) in enumerate(zip(THREE, names))]
    local = [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)).requires_grad_() for o, n in zip(THREE, names)]
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.05)
    reference = torch.optim.Adam(local, lr=0.05)
    for step in range(4):
        x = torch.full((5,), 1.0 + step, dtype=torch.float64)
        _step_over(opt, THREE, names, x)
        reference.zero_grad()
        sum(((x * p) ** 2).sum() for p in local).backward()
        reference.step()
    for o, n, p in zip(THREE, names, local):
        torch.testing.assert_close(rpc.rpc_sync(o, optim_remote.param_value, args=(n,)), p.detach(), rtol=1e-10, atol=1e-12)
    assert all(rpc.rpc_sync(o, optim_remote.optimizer_debug_info)["num_prepared_steps"] == 0 for o in THREE)


def test_a_gradient_one_of_three_owners_rejects_changes_no_owner(cluster):
    """Three owners, Adam: worker3 gets a sparse gradient. The step raises naming worker3, no
    owner changed, and no prepared step is left on any owner."""
    names = ["rej3_a", "rej3_b", "rej3_table"]
    shapes = [(3,), (3,), (6, 3)]
    rrefs = [rpc.rpc_sync(o, optim_remote.make_param, args=(n, s, 20 + i))
             for i, (o, n, s) in enumerate(zip(THREE, names, shapes))]
    before = [rpc.rpc_sync(o, optim_remote.param_value, args=(n,)) for o, n in zip(THREE, names)]
    opt = DistributedOptimizer(torch.optim.Adam, rrefs, lr=0.1)
    with pytest.raises(RuntimeError, match=r"step\(\d+\) failed on owner 'worker3'.*does not support sparse "
                                           r"gradients.*no owner applied the step"):
        _step_over(opt, THREE, names, torch.ones(3, dtype=torch.float64), sparse_on="worker3")
    for o, n, b in zip(THREE, names, before):
        assert torch.equal(rpc.rpc_sync(o, optim_remote.param_value, args=(n,)), b), o
    assert opt.state_dict()["state"] == {}
    time.sleep(0.5)  # the drops of the other owners' prepared steps are not waited for
    assert all(rpc.rpc_sync(o, optim_remote.optimizer_debug_info)["num_prepared_steps"] == 0 for o in THREE)


@pytest.mark.parametrize("owners", [["worker1"], ["worker1", "worker2"]])
def test_step_async_racing_the_context_exit_always_applies(cluster, owners):
    """step_async inside the context, waited on after the block exits, 200 times: every step
    applies (SGD, lr=1, gradient of ones: exactly -1 per try), and no owner is left with a
    context of those ids."""
    names = [f"race_{owner}" for owner in owners]
    rrefs = [rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (1000,), 3)) for owner, name in zip(owners, names)]
    start = [rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)) for owner, name in zip(owners, names)]
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=1.0)
    one = torch.tensor(1.0, dtype=torch.float64)
    tries, context_ids = 200, []
    for _ in range(tries):
        with dist_autograd.context() as ctx:
            loss = sum(rpc.rpc_sync(o, optim_remote.use_param, args=(one, n)).sum() for o, n in zip(owners, names))
            plugin.autograd.backward(ctx, [loss])
            fut = opt.step_async(ctx)
        context_ids.append(ctx)
        assert fut.wait() is None
    for owner, name, value in zip(owners, names, start):
        for _ in range(tries):  # the steps' float64 operations, one by one
            value = value - 1.0
        assert torch.equal(rpc.rpc_sync(owner, optim_remote.param_value, args=(name,)), value), owner
    deadline = time.time() + 10  # torch's cleanup messages are asynchronous
    for owner in owners:
        while rpc.rpc_sync(owner, optim_remote.contexts_known, args=(context_ids,)) and time.time() < deadline:
            time.sleep(0.05)
        assert rpc.rpc_sync(owner, optim_remote.contexts_known, args=(context_ids,)) == [], owner


def test_step_of_a_released_context_raises_and_creates_none(cluster):
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.SGD, list(rrefs.values()), lr=0.1)
    before = remote_values()
    for ctx in forward_backward(0):
        pass
    with pytest.raises(RuntimeError, match=rf"step\({ctx}\): no distributed autograd context {ctx} on this worker"):
        opt.step(ctx)
    with pytest.raises(RuntimeError, match="no distributed autograd context"):
        opt.step_async(ctx)
    for name, value in remote_values().items():
        assert torch.equal(value, before[name]), name
    time.sleep(0.2)
    for owner in ("worker1", "worker2"):
        assert rpc.rpc_sync(owner, optim_remote.contexts_known, args=([ctx],)) == [], owner


def test_an_owner_the_backward_pass_never_reached_skips_its_parameters(cluster):
    """The forward pass uses only p1 (worker1): p2 and p3 (worker2, which never sees the
    context) are skipped, as torch.optim skips parameters whose .grad is None."""
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.SGD, list(rrefs.values()), lr=0.5)
    before = remote_values()
    with dist_autograd.context() as ctx:
        y = rpc.rpc_sync("worker1", optim_remote.use_param, args=(torch.ones(4, dtype=torch.float64), "p1"))
        plugin.autograd.backward(ctx, [y.sum()])
        opt.step(ctx)
    after = remote_values()
    torch.testing.assert_close(after["p1"], before["p1"] - 0.5, rtol=0, atol=1e-12)
    assert torch.equal(after["p2"], before["p2"]) and torch.equal(after["p3"], before["p3"])


def trainer_steps(param_rref, steps):
    """Runs on a trainer: its own DistributedOptimizer (SGD, lr=1) over a shared parameter,
    stepping with a gradient of ones each time."""
    opt = DistributedOptimizer(torch.optim.SGD, [param_rref], lr=1.0)
    for _ in range(steps):
        with dist_autograd.context() as ctx:
            y = rpc.rpc_sync(param_rref.owner(), optim_remote.use_param, args=(torch.tensor(1.0, dtype=torch.float64), "shared"))
            plugin.autograd.backward(ctx, [y.sum()])
            opt.step(ctx)
    return steps


def test_concurrent_trainers_on_shared_parameters(cluster):
    """Three trainers step the same 1M-element parameter concurrently, 20 times each: every
    update lands (the owner serializes steps of optimizers over the same parameters)."""
    shared = rpc.rpc_sync("worker3", optim_remote.make_param, args=("shared", (1 << 20,), 5))
    start = rpc.rpc_sync("worker3", optim_remote.param_value, args=("shared",))
    futs = [rpc.rpc_async(w, trainer_steps, args=(shared, 20)) for w in ("worker1", "worker2")]
    trainer_steps(shared, 20)
    assert [f.wait() for f in futs] == [20, 20]
    end = rpc.rpc_sync("worker3", optim_remote.param_value, args=("shared",))
    torch.testing.assert_close(end, start - 60, rtol=0, atol=1e-9)


def native(optim_class, params, *args, **kwargs):
    """The native local optimizer an owner builds for ``optim_class`` over local ``params``."""
    return NativeLocalOptimizer(functional_optim.functional_optimizer_for(optim_class), params, *args, **kwargs)


@pytest.mark.parametrize("optim_class", [
    torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad, torch.optim.RMSprop,
    torch.optim.Adamax, torch.optim.Adadelta, torch.optim.Rprop, torch.optim.NAdam, torch.optim.RAdam,
], ids=lambda c: c.__name__)
def test_every_optimizer_steps_natively_unless_told_otherwise(optim_class):
    """The fused kernels cover every built-in optimizer by default; the flags that ask for
    another implementation send it to Python, with the reason."""
    functional_class = functional_optim.functional_optimizer_for(optim_class)
    p = [torch.zeros(3, requires_grad=True)]
    assert NativeLocalOptimizer.why_not_native(functional_class, p, lr=0.1) is None
    assert "fused=False" in NativeLocalOptimizer.why_not_native(functional_class, p, lr=0.1, fused=False)
    assert "foreach=True" in NativeLocalOptimizer.why_not_native(functional_class, p, lr=0.1, foreach=True)


def test_local_optimizers_that_share_a_parameter_share_its_lock():
    """The locks of [p0, p1] are held (a StepLock over them, as any local optimizer over them
    takes): native optimizers over the same set reversed (b) and over p1 alone (d) wait for
    them; one over another tensor (c) does not."""
    p = [torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)]
    held = torch.classes.gilfree_rpc.StepLock(p)
    b = native(torch.optim.Adam, list(reversed(p)))
    c = native(torch.optim.SGD, [torch.zeros(3, requires_grad=True)], lr=0.1)
    d = native(torch.optim.SGD, [p[1]], lr=0.1)
    held.__enter__()
    try:
        done = {name: threading.Event() for name in "bd"}
        threads = [
            threading.Thread(target=lambda: (b.step_gradients([torch.ones(2), torch.ones(3)]), done["b"].set())),
            threading.Thread(target=lambda: (d.step_gradients([torch.ones(2)]), done["d"].set())),
        ]
        for t in threads:
            t.start()
        c.step_gradients([torch.ones(3)])
        assert not done["b"].wait(0.2) and not done["d"].is_set()
    finally:
        held.__exit__(None, None, None)
    for name in "bd":
        assert done[name].wait(10), name
    for t in threads:
        t.join()


def test_overlapping_parameter_sets_lose_no_update_and_do_not_deadlock():
    """Four threads step native optimizers over overlapping sets that form a cycle ([p, q],
    [q, r], [r, p]) and the whole set, 30 SGD steps each (lr=1, gradients of ones) on
    1M-element tensors: every update lands, exactly, and no thread waits forever."""
    n, steps = 1 << 20, 30
    p, q, r = (torch.zeros(n, requires_grad=True) for _ in range(3))
    sets = [[p, q], [q, r], [r, p], [r, q, p]]
    optimizers = [native(torch.optim.SGD, s, lr=1.0) for s in sets]
    errors = []

    def run(opt, size):
        try:
            for _ in range(steps):
                opt.step_gradients([torch.ones(n)] * size)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(o, len(s)), daemon=True) for o, s in zip(optimizers, sets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a step is stuck (deadlock)"
    assert not errors
    for tensor in (p, q, r):  # each is in three of the four sets
        assert torch.equal(tensor.detach(), torch.full((n,), -3.0 * steps))


def test_locks_of_freed_parameters_are_freed():
    """One lock per parameter, shared by the optimizers over it, freed with the last of them."""
    import gc

    def count():
        return plugin.debug_info()["num_param_locks"]

    gc.collect()
    before = count()
    shared = torch.zeros(2, requires_grad=True)
    optimizers = [native(torch.optim.SGD, [shared, torch.zeros(2, requires_grad=True)], lr=0.1) for _ in range(50)]
    assert count() == before + 51  # the shared parameter has one lock
    del optimizers
    gc.collect()
    assert count() == before


def test_overlapping_optimizers_from_two_trainers_lose_no_update(cluster):
    """The issue's case: one trainer's optimizer over [w, b], the other's over [w], stepping
    concurrently on one server: w ends exactly 2 x 20 updates lower, b 20 lower."""
    n, steps = 1 << 22, 20
    w = rpc.rpc_sync("worker3", optim_remote.make_param, args=("ov_w", (n,), 7))
    b = rpc.rpc_sync("worker3", optim_remote.make_param, args=("ov_b", (n // 4,), 8))
    start = {name: rpc.rpc_sync("worker3", optim_remote.param_value, args=(name,)) for name in ("ov_w", "ov_b")}
    futs = [
        rpc.rpc_async("worker1", step_ones_on_trainer, args=(torch.optim.SGD, {}, ["ov_w", "ov_b"], [w, b], steps)),
        rpc.rpc_async("worker2", step_ones_on_trainer, args=(torch.optim.SGD, {}, ["ov_w"], [w], steps)),
    ]
    assert [f.wait() for f in futs] == [steps, steps]
    w_end = rpc.rpc_sync("worker3", optim_remote.param_value, args=("ov_w",))
    b_end = rpc.rpc_sync("worker3", optim_remote.param_value, args=("ov_b",))
    expected_w = start["ov_w"].clone()
    expected_b = start["ov_b"].clone()
    for _ in range(2 * steps):  # the same float64 operations as the steps, in one thread
        expected_w -= 1.0
    for _ in range(steps):
        expected_b -= 1.0
    assert int((w_end != expected_w).sum()) == 0
    assert torch.equal(b_end, expected_b)


@pytest.mark.parametrize("names", [["p1"], ["p1", "p2"]], ids=["one-owner", "two-phase"])
def test_owner_steps_while_its_gil_is_held(cluster, names):
    """A step completes on an owner whose GIL a Python thread holds (one long C call): the
    step runs as TorchScript from the RPC to the update, without the GIL (both phases of a
    step over two owners too)."""
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.NAdam, [rrefs[n] for n in names], lr=0.01)
    for ctx in forward_backward(0):
        rpc.rpc_sync("worker1", optim_remote.start_gil_hog, args=(4,))
        time.sleep(1.0)  # the hog has started and holds worker1's GIL
        opt.step(ctx)
        stepped_at = time.time()
    hog_done_at = rpc.rpc_sync("worker1", optim_remote.wait_for_gil_hog)
    assert stepped_at < hog_done_at


def test_tensor_hyperparameters_and_a_scheduler(cluster):
    """A DistributedOptimizer built with a Tensor lr and Tensor betas (each owner scripts an
    optimizer that takes their values) and driven by StepLR steps as torch.optim.Adam with
    the same Tensors and scheduler; torch's refusal of a Tensor lr with foreach=True reaches
    the caller, naming the owners."""
    kwargs = {"lr": torch.tensor(0.05, dtype=torch.float64),
              "betas": (torch.tensor(0.8, dtype=torch.float64), torch.tensor(0.9, dtype=torch.float64))}
    rrefs = make_remote_params()
    opt = DistributedOptimizer(torch.optim.Adam, list(rrefs.values()), **copy.deepcopy(kwargs))
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(5):
        for ctx in forward_backward(step):
            opt.step(ctx)
        scheduler.step()
    params = local_params()
    reference = torch.optim.Adam(list(params.values()), **copy.deepcopy(kwargs))
    reference_scheduler = torch.optim.lr_scheduler.StepLR(reference, step_size=2, gamma=0.5)
    for step in range(5):
        reference.zero_grad()
        local_loss(params, step).backward()
        reference.step()
        reference_scheduler.step()
    assert opt.param_groups[0]["lr"] == reference.param_groups[0]["lr"].item() == 0.05 * 0.5 ** 2
    for name, value in remote_values().items():
        torch.testing.assert_close(value, params[name].detach(), rtol=1e-10, atol=1e-12, msg=name)
    with pytest.raises(ValueError, match=r"owner 'worker1': ValueError: lr as a Tensor is not supported for "
                                         r"capturable=False and foreach=True"):
        DistributedOptimizer(torch.optim.Adam, list(rrefs.values()), lr=torch.tensor(0.1), foreach=True)


@pytest.mark.timeout(180)
def test_adagrad_state_is_made_once_per_owner_and_optimizer(tmp_path):
    """Four DistributedOptimizer(torch.optim.Adagrad) over a 64 MiB parameter, built at once:
    the owner's resident memory grows by about four copies of the parameter (each optimizer's
    'sum'), not more. (It grew by twelve when each construction also built, and dropped,
    functional_optim's eager Adagrad over the parameter: torch's Adagrad creates its state at
    construction, and the freed copies stayed with the owner's RPC threads.)"""
    import json
    import os
    import subprocess
    import sys

    from tests.support import REPO

    script = os.path.join(REPO, "tests", "support", "adagrad_memory_job.py")
    r = subprocess.run([sys.executable, script], cwd=REPO, capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["built"] == 4 and not m["errors"], m
    growth = m["after"] - m["before"]
    assert growth <= 6 * m["param_bytes"], f"the owner grew by {growth / m['param_bytes']:.1f} parameter copies: {m}"
