"""DistributedOptimizer with a functional class the user registered (``HeavyBallFunctional``,
tests/support/user_functional.py): each owner steps it as TorchScript
(plugin.optim.ScriptLocalOptimizer), or in Python where torch no longer compiles TorchScript
(the second CI pass). Its steps, ``state_dict``, ``load_state_dict`` and ``param_groups`` (an LR
scheduler, ``set_hyperparameter``) against torch.optim's ``HeavyBall`` in one process."""
import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

from plugin.optim import DistributedOptimizer
from tests.optim.test_python_local_optimizer import (
    KWARGS, OWNERS, assert_loaded_state_continues, local_run, make_params, train, values,
)
from tests.support import optim_remote, user_functional
from tests.support.user_functional import HeavyBallRegistered

pytestmark = pytest.mark.filterwarnings("ignore::plugin.optim.PythonStepWarning")

NAMES = ["py1", "py2", "py3"]


def expected_kind():
    """TorchScript, unless this run makes torch.jit's entry points raise (then Python)."""
    return "python" if getattr(torch.jit.script, "torchscript_removed", False) else "torchscript"


def step_lr(opt):
    return torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


@pytest.fixture
def registered(cluster):
    """The pair registered on this process and every worker, as a user registers it, for one test."""
    workers = sorted({owner for owner, _, _ in OWNERS.values()})
    user_functional.register()
    for worker in workers:
        rpc.rpc_sync(worker, user_functional.register)
    yield
    user_functional.unregister()
    for worker in workers:
        rpc.rpc_sync(worker, user_functional.unregister)


def test_registered_functional_class_steps_with_its_state_and_values(registered):
    params = list(make_params(NAMES, "ts_").values())
    opt = DistributedOptimizer(HeavyBallRegistered, params, **KWARGS)
    assert set(opt.local_optimizer_kinds.values()) == {expected_kind()}, opt.local_optimizer_kinds
    scheduler = step_lr(opt)
    train(opt, NAMES, "ts_", 3, "plugin", on_step=scheduler.step)
    expected, reference = local_run(NAMES, 3, step_lr)
    got = values(NAMES, "ts_")
    for n in NAMES:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-12, atol=1e-14, msg=n)
    assert opt.param_groups[0]["lr"] == reference.param_groups[0]["lr"] == 0.025

    saved = opt.state_dict()
    group = saved["param_groups"][0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.025, KWARGS["momentum"], KWARGS["weight_decay"])
    for i, entry in reference.state_dict()["state"].items():
        torch.testing.assert_close(saved["state"][i]["buf"], entry["buf"], rtol=1e-12, atol=1e-14)

    # loaded into a fresh optimizer (other hyperparameters), the next steps are the same
    fresh = assert_loaded_state_continues(
        opt, saved, lambda: DistributedOptimizer(HeavyBallRegistered, params, lr=1.0, momentum=0.1), NAMES, "ts_"
    )
    assert fresh.param_groups[0]["lr"] == 0.025 and fresh.param_groups[0]["momentum"] == KWARGS["momentum"]

    fresh.set_hyperparameter(0, "momentum", 0.5)
    assert fresh.state_dict()["param_groups"][0]["momentum"] == 0.5
    with pytest.raises(ValueError, match=r"failed on owner 'worker1': ValueError: HeavyBall\w* has no hyperparameter 'beta1'"):
        fresh.set_hyperparameter(0, "beta1", 0.5)
    if expected_kind() == "torchscript":  # the functional class validates; torch.optim's writes are not validated
        with pytest.raises(ValueError, match=r"failed on owner 'worker1': ValueError: Invalid learning rate: -1"):
            fresh.set_hyperparameter(0, "lr", -1.0)
        assert fresh.state_dict()["param_groups"][0]["lr"] == 0.025


def test_registered_functional_class_steps_with_step_async_and_backward_and_step(registered):
    """The other two ways to step: step_async (waited on after the context's block) for steps
    0 and 1, backward_and_step (the pass, then step, for a local optimizer that is not native)
    for step 2: torch.optim's HeavyBall's parameters after 3 steps."""
    names = ["py1", "py2"]
    params = list(make_params(names, "tsa_").values())
    opt = DistributedOptimizer(HeavyBallRegistered, params, **KWARGS)
    assert set(opt.local_optimizer_kinds.values()) == {expected_kind()}
    train(opt, names, "tsa_", 2, "plugin", step_async=True)
    with dist_autograd.context() as ctx:
        loss = 0
        for n in names:
            owner, shape, _ = OWNERS[n]
            x = torch.full((shape[-1],), 0.5 + 0.1 * 2, dtype=torch.float64)
            loss = loss + (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, "tsa_" + n)) ** 2).sum() / 2
        opt.backward_and_step(ctx, [loss])
    expected, _ = local_run(names, 3)
    got = values(names, "tsa_")
    for n in names:
        torch.testing.assert_close(got[n], expected[n], rtol=1e-12, atol=1e-14, msg=n)
