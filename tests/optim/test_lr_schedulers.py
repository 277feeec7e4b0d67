"""torch.optim.lr_scheduler driving plugin.optim.DistributedOptimizer: the same learning rates
(and momenta) reach every owner as torch.optim gets with the same scheduler, and the parameters
end equal."""
import warnings

import pytest
import torch

from plugin.optim._param_groups import functional_values
import torch.distributed.rpc as rpc
from torch.optim import lr_scheduler as sched

import functional_optim
from plugin.optim import DistributedOptimizer
from tests.optim.test_distributed_optimizer import (
    forward_backward, local_loss, local_params, make_remote_params, remote_values,
)
from tests.support import optim_remote

STEPS = 8
PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.97, 0.8, 0.85, 0.9, 0.99]

SCHEDULERS = {
    "StepLR": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, lambda o: sched.StepLR(o, step_size=2, gamma=0.5)),
    "MultiStepLR": (torch.optim.Adam, {"lr": 0.05}, lambda o: sched.MultiStepLR(o, milestones=[2, 5], gamma=0.3)),
    "CosineAnnealingLR": (torch.optim.Adam, {"lr": 0.05}, lambda o: sched.CosineAnnealingLR(o, T_max=5, eta_min=0.001)),
    "OneCycleLR-betas": (torch.optim.Adam, {"lr": 0.05}, lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=STEPS)),
    "OneCycleLR-momentum": (
        torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}, lambda o: sched.OneCycleLR(o, max_lr=0.1, total_steps=STEPS)
    ),
    "CyclicLR": (
        torch.optim.SGD, {"lr": 0.05, "momentum": 0.9},
        lambda o: sched.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, base_momentum=0.8, max_momentum=0.95),
    ),
    "LambdaLR": (torch.optim.RMSprop, {"lr": 0.01}, lambda o: sched.LambdaLR(o, lambda epoch: 0.8**epoch + 0.1 * epoch)),
    "SequentialLR": (
        torch.optim.NAdam,
        {"lr": 0.02},
        lambda o: sched.SequentialLR(
            o, [sched.LinearLR(o, start_factor=0.25, total_iters=3), sched.ExponentialLR(o, gamma=0.7)], milestones=[3]
        ),
    ),
    "ReduceLROnPlateau": (
        torch.optim.Adagrad, {"lr": 0.1}, lambda o: sched.ReduceLROnPlateau(o, factor=0.5, patience=0, threshold=0.01)
    ),
}


def scheduler_step(scheduler, step):
    if isinstance(scheduler, sched.ReduceLROnPlateau):
        scheduler.step(PLATEAU_METRICS[step])
    else:
        scheduler.step()


def owners_hyperparameters(opt):
    """The numeric hyperparameters (functional names) each owner's native local optimizer
    steps with now, read on the owner by its RPC function."""
    out = {}
    for name, owner in opt._owners.items():
        assert owner.kind == "native", (name, owner.kind)
        hparams, _ = functional_values(owner.hyperparameters().wait())
        out[name] = hparams
    return out


def torch_hyperparameters(group):
    """torch's group in the functional names the owners report."""
    h = {"lr": group["lr"]}
    if "betas" in group:
        h["beta1"], h["beta2"] = group["betas"]
    if "momentum" in group:
        h["momentum"] = group["momentum"]
    return h


def local_run(torch_class, kwargs, make_scheduler):
    params = local_params()
    opt = torch_class(list(params.values()), **kwargs)
    scheduler = make_scheduler(opt)
    used = []  # the hyperparameters each step ran with
    for step in range(STEPS):
        used.append(torch_hyperparameters(opt.param_groups[0]))
        opt.zero_grad()
        local_loss(params, step).backward()
        opt.step()
        scheduler_step(scheduler, step)
    return {n: p.detach() for n, p in params.items()}, used, scheduler


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_drives_distributed_optimizer_like_torch_optim(cluster, name):
    torch_class, kwargs, make_scheduler = SCHEDULERS[name]
    expected_params, expected_used, torch_scheduler = local_run(torch_class, kwargs, make_scheduler)

    opt = DistributedOptimizer(torch_class, list(make_remote_params().values()), **kwargs)
    assert isinstance(opt, torch.optim.Optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "lr_scheduler.step() before optimizer.step()"
        scheduler = make_scheduler(opt)
        for step in range(STEPS):
            on_owners = owners_hyperparameters(opt)
            for owner, hyper in on_owners.items():
                for key, value in expected_used[step].items():
                    assert hyper[key] == pytest.approx(value, rel=1e-12, abs=0), (step, owner, key)
            for ctx in forward_backward(step):
                opt.step(ctx)
            scheduler_step(scheduler, step)
    assert scheduler.get_last_lr() == pytest.approx(torch_scheduler.get_last_lr(), rel=1e-12)
    got = remote_values()
    for param in expected_params:
        torch.testing.assert_close(got[param], expected_params[param], rtol=1e-10, atol=1e-12, msg=param)


def test_param_groups_writes_reach_owners_and_state_dict(cluster):
    opt = DistributedOptimizer(torch.optim.Adam, list(make_remote_params().values()), lr=0.05)
    group = opt.param_groups[0]
    assert group["lr"] == 0.05 and group["betas"] == (0.9, 0.999)
    assert [r.owner().name for r in group["params"]] == ["worker1", "worker2", "worker2"]
    assert opt.defaults["betas"] == (0.9, 0.999) and "params" not in opt.defaults
    group["lr"] = 0.01
    group["betas"] = (0.8, 0.99)
    group["initial_lr"] = 0.05
    for hyper in owners_hyperparameters(opt).values():
        assert (hyper["lr"], hyper["beta1"], hyper["beta2"]) == (0.01, 0.8, 0.99)
    saved = opt.state_dict()["param_groups"][0]
    assert (saved["lr"], saved["betas"], saved["initial_lr"]) == (0.01, (0.8, 0.99), 0.05)
    # set_hyperparameter is seen by param_groups too; the scheduler's key stays
    opt.set_hyperparameter(0, "lr", 0.02)
    assert opt.param_groups[0]["lr"] == 0.02 and opt.param_groups[0]["initial_lr"] == 0.05
    # one param group: another index is refused before anything is sent, the value unchanged
    for group_index in (1, -1):
        with pytest.raises(ValueError, match=rf"^parameter group {group_index} does not exist \(the optimizer has 1 groups\)$"):
            opt.set_hyperparameter(group_index, "lr", 0.5)
    assert all(hyper["lr"] == 0.02 for hyper in owners_hyperparameters(opt).values())
    # torch's step hooks run around step(context_id)
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", args[1])))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", args[1])))
    for ctx in forward_backward(0):
        opt.step(ctx)
    assert calls == [("pre", ctx), ("post", ctx)]


def test_param_groups_errors(cluster):
    opt = DistributedOptimizer(torch.optim.SGD, list(make_remote_params().values()), lr=0.1)
    group = opt.param_groups[0]
    with pytest.raises(ValueError, match=r"^DistributedOptimizer: setting 'lr': Invalid learning rate: -1\.0 \(checked "
                                         r"before anything was sent; no owner changed\)$"):
        group["lr"] = -1.0
    with pytest.raises(TypeError, match="'lr'"):
        group["lr"] = "fast"
    with pytest.raises(ValueError, match="cannot be replaced"):
        group["params"] = []
    with pytest.raises(ValueError, match="cannot be removed"):
        del group["lr"]
    assert group["lr"] == 0.1
    assert all(h["lr"] == 0.1 for h in owners_hyperparameters(opt).values())
    with pytest.raises(NotImplementedError, match="one parameter group"):
        opt.add_param_group({"params": []})
    with pytest.raises(AttributeError, match="state_dict"):
        opt.state


def resume_recipe(make_optimizer, step):
    """Train 2 steps with StepLR, save both state dicts, rebuild optimizer and scheduler
    (last_epoch=1) from them, train one more step; returns the lr after it and the saved
    optimizer state dict."""
    opt = make_optimizer(0.1)
    scheduler = sched.StepLR(opt, step_size=1, gamma=0.5)
    for k in range(2):
        step(opt, k)
        scheduler.step()
    saved_opt, saved_sched = opt.state_dict(), scheduler.state_dict()
    fresh = make_optimizer(0.7)
    fresh.load_state_dict(saved_opt)
    resumed = sched.StepLR(fresh, step_size=1, gamma=0.5, last_epoch=1)
    resumed.load_state_dict(saved_sched)
    step(fresh, 2)
    resumed.step()
    return fresh, saved_opt


def test_scheduler_resumes_from_a_saved_state_dict(cluster):
    """torch's resume recipe: the optimizer's state_dict carries 'initial_lr', which a scheduler
    made with last_epoch >= 0 needs; the lrs follow torch.optim's through the resume."""
    rrefs = list(make_remote_params().values())

    def dist_step(opt, k):
        for ctx in forward_backward(k):
            opt.step(ctx)

    local = [torch.zeros(2, requires_grad=True)]

    def local_step(opt, k):
        local[0].grad = torch.ones(2)
        opt.step()

    fresh, saved = resume_recipe(lambda lr: DistributedOptimizer(torch.optim.SGD, rrefs, lr=lr), dist_step)
    torch_fresh, torch_saved = resume_recipe(lambda lr: torch.optim.SGD(local, lr=lr), local_step)
    assert saved["param_groups"][0]["initial_lr"] == torch_saved["param_groups"][0]["initial_lr"] == 0.1
    assert saved["param_groups"][0]["lr"] == torch_saved["param_groups"][0]["lr"]
    expected = torch_fresh.param_groups[0]["lr"]
    assert fresh.param_groups[0]["lr"] == expected
    assert all(h["lr"] == expected for h in owners_hyperparameters(fresh).values())


def test_state_dict_after_load_and_set_hyperparameter(cluster):
    """After load_state_dict, the owners' values win over the loaded dict's in state_dict()
    and param_groups; the loaded dict's other keys ('initial_lr') stay."""
    rrefs = list(make_remote_params().values())
    opt = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.1)
    sched.StepLR(opt, step_size=1, gamma=0.5)
    saved = opt.state_dict()
    fresh = DistributedOptimizer(torch.optim.SGD, rrefs, lr=0.7)
    fresh.load_state_dict(saved)
    fresh.set_hyperparameter(0, "lr", 0.01)
    group = fresh.state_dict()["param_groups"][0]
    assert (group["lr"], group["initial_lr"]) == (0.01, 0.1)
    assert (fresh.param_groups[0]["lr"], fresh.param_groups[0]["initial_lr"]) == (0.01, 0.1)
