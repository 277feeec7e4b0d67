"""torch.optim.lr_scheduler driving eager functional_optim optimizers through
functional_optim.as_torch_optimizer: the same learning rates, momenta and parameters as
torch.optim with the same scheduler."""
import pytest
import torch
from torch.optim import lr_scheduler as sched

import functional_optim
from functional_optim import as_torch_optimizer
from tests.optim.test_lr_schedulers import PLATEAU_METRICS, SCHEDULERS, STEPS, scheduler_step


def model_params():
    gen = torch.Generator().manual_seed(0)
    return [torch.rand(3, 4, generator=gen, dtype=torch.float64).requires_grad_(),
            torch.rand(4, generator=gen, dtype=torch.float64).requires_grad_()]


def loss_of(params, step):
    x = torch.linspace(-1.0, 1.0 + step, 4, dtype=torch.float64)
    return ((params[0] @ x).pow(2).sum() + (params[1] * x).pow(2).sum()) / 2


def run(make_optimizer, make_scheduler, functional):
    params = model_params()
    opt = make_optimizer(params)
    scheduler = make_scheduler(opt)
    seen = []
    for step in range(STEPS):
        seen.append({k: v for k, v in opt.param_groups[0].items() if k in ("lr", "betas", "momentum")})
        grads = torch.autograd.grad(loss_of(params, step), params)
        if functional:
            opt.step(list(grads))
        else:
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
        scheduler_step(scheduler, step)
    return [p.detach() for p in params], seen, opt


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_scheduler_drives_functional_optimizer_like_torch_optim(name):
    torch_class, kwargs, make_scheduler = SCHEDULERS[name]
    ours_class = functional_optim.functional_optimizer_for(torch_class)
    expected, expected_seen, _ = run(lambda p: torch_class(p, **kwargs), make_scheduler, functional=False)
    got, seen, opt = run(lambda p: as_torch_optimizer(ours_class(p, **kwargs)), make_scheduler, functional=True)
    assert isinstance(opt, torch.optim.Optimizer)
    assert seen == expected_seen
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    # the values the TorchScript state steps with, not only the dicts
    assert opt.optimizer.hyperparameters()[0]["lr"] == opt.param_groups[0]["lr"]


def test_wrapper_shares_groups_and_state_dict():
    inner = functional_optim.SGD(model_params(), lr=0.1, momentum=0.9)
    opt = as_torch_optimizer(inner)
    assert opt.param_groups is inner.param_groups
    assert opt.defaults["momentum"] == 0.9 and "params" not in opt.defaults
    scheduler = sched.StepLR(opt, step_size=1, gamma=0.5)
    opt.step([torch.ones(3, 4, dtype=torch.float64), None])
    scheduler.step()
    assert inner.hyperparameters()[0]["lr"] == 0.05
    saved = opt.state_dict()["param_groups"][0]
    assert saved["initial_lr"] == 0.1 and saved["lr"] == 0.05
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.param_groups[0]["lr"] = -1.0
    assert inner.hyperparameters()[0]["lr"] == 0.05
    with pytest.raises(TypeError, match="eager functional_optim optimizer"):
        as_torch_optimizer(torch.optim.SGD(model_params(), lr=0.1))
    opt.add_param_group({"params": [], "lr": 0.2})  # the wrapped optimizer's (tests: test_functional_optim_named_params.py)
    assert opt.param_groups[1]["lr"] == 0.2 and len(inner.param_groups) == 2


def test_step_hooks_run():
    opt = as_torch_optimizer(functional_optim.SGD(model_params(), lr=0.1))
    calls = []
    opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", len(args[1]))))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", len(args[1]))))
    opt.step([None, None])
    assert calls == [("pre", 2), ("post", 2)]
