"""Param groups and LR schedules, step_param, TorchScript use, the protocol, the registry,
no deprecation warnings from our own scripting."""
import inspect
import warnings

import pytest
import torch

import functional_optim as F
from functional_optim import scripting, state_protocol
from functional_optim.scripting import script_optimizer

from tests.support import optim_configs as C
from tests.support import scripted_optim_fns
from tests.support.optim_helpers import assert_same_params, assert_same_state

DTYPE = torch.float64


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
@pytest.mark.parametrize("name, kwargs", [("SGD", {"lr": 0.1, "momentum": 0.9}), ("Adam", {"lr": 0.05}), ("Adagrad", {"lr": 0.1})])
def test_step_lr_schedule_matches_torch(name, kwargs, scripted):
    """torch.optim.lr_scheduler.StepLR drives torch; its lr values drive ours through
    param_groups (eagerly) or set_hyperparameter (scripted): same parameters after 30 steps."""
    info = C.INFO_BY_NAME[name]
    base = C.make_params(DTYPE)
    torch_params = [torch.nn.Parameter(p.clone()) for p in base]
    our_params = [p.clone() for p in base]
    groups = lambda ps: [{"params": ps[:2]}, {"params": ps[2:], "lr": kwargs["lr"] * 3}]
    reference = info.torch_class(groups(torch_params), **kwargs)
    ours = info.ours(groups(our_params), **kwargs)
    target = script_optimizer(ours) if scripted else ours
    scheduler = torch.optim.lr_scheduler.StepLR(reference, step_size=10, gamma=0.5)
    generator = torch.Generator().manual_seed(2)
    lrs = set()
    for step in range(30):
        for g, group in enumerate(reference.param_groups):
            if scripted:
                target.set_hyperparameter(g, "lr", group["lr"])
            else:
                ours.param_groups[g]["lr"] = group["lr"]
            lrs.add(group["lr"])
        grads = C.make_gradients(step, DTYPE, generator)
        for p, grad in zip(torch_params, grads):
            p.grad = None if grad is None else grad.clone()
        reference.step()
        target.step(grads)
        scheduler.step()
    assert len(lrs) == 6  # the schedule really changed the learning rates
    assert_same_params(torch_params, our_params, DTYPE)
    for g, group in enumerate(reference.param_groups):  # the scheduler has moved on once more
        target.set_hyperparameter(g, "lr", group["lr"])
    # The scheduler's 'initial_lr' lives only in the eager param_groups (not in the protocol).
    assert_same_state(reference.state_dict(), state_protocol.state_dict(target), DTYPE, {"initial_lr"})
    if not scripted:
        for g, group in enumerate(reference.param_groups):
            ours.param_groups[g]["initial_lr"] = group["initial_lr"]
        assert_same_state(reference.state_dict(), ours.state_dict(), DTYPE)


def test_param_groups_look_like_torch():
    params = C.make_params(torch.float32)
    ours = F.Adam([{"params": params[:1], "lr": 0.1}, {"params": params[1:], "betas": (0.8, 0.9)}], amsgrad=True)
    theirs = torch.optim.Adam(
        [{"params": [torch.nn.Parameter(p) for p in params[:1]], "lr": 0.1},
         {"params": [torch.nn.Parameter(p) for p in params[1:]], "betas": (0.8, 0.9)}], amsgrad=True)
    for mine, torch_group in zip(ours.param_groups, theirs.param_groups):
        assert set(mine) >= set(torch_group)
        for key, value in torch_group.items():
            if key != "params":
                assert mine[key] == value, key
    ours.param_groups[1]["betas"] = (0.5, 0.6)
    ours.param_groups[1].update(lr=0.2)
    assert ours.hyperparameters()[1]["beta1"] == 0.5 and ours.hyperparameters()[1]["lr"] == 0.2
    ours.set_hyperparameter(0, "lr", 0.3)
    assert ours.param_groups[0]["lr"] == 0.3
    ours.param_groups[0]["initial_lr"] = 0.1  # extra keys (schedulers add this one) are kept
    assert ours.param_groups[0]["initial_lr"] == 0.1
    assert "Parameter Group 1" in repr(ours)


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_step_param_equals_step(info, scripted):
    config = info.configs[-1]
    base = C.make_params(DTYPE, info=info)
    a = [p.clone() for p in base]
    b = [p.clone() for p in base]
    whole = info.ours(C.build_params_arg(config, a), **config.kwargs)
    single = info.ours(C.build_params_arg(config, b), **config.kwargs)
    if scripted:
        single = script_optimizer(single)
    order = C.flat_order(config)
    generator = torch.Generator().manual_seed(4)
    for step in range(8):
        grads = C.make_gradients(step, DTYPE, generator, info=info)
        whole.step([grads[i] for i in order])
        for i in order:
            single.step_param(b[i], grads[i])
    assert_same_params(a, b, DTYPE)
    assert_same_state(whole.state_dict(), state_protocol.state_dict(single), DTYPE)


@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_created_and_stepped_inside_torchscript(info):
    """(a) A scripted function creates the optimizer and steps it; (a') a scripted function
    steps an optimizer passed in. Both agree with torch.optim."""
    base = C.make_params(DTYPE, info=info)
    generator = torch.Generator().manual_seed(8)
    grads = [C.make_gradients(step, DTYPE, generator, info=info) for step in range(6)]
    torch_params = [torch.nn.Parameter(p.clone()) for p in base]
    reference = info.torch_class(torch_params, lr=0.01)
    for step_grads in grads:
        for p, g in zip(torch_params, step_grads):
            p.grad = None if g is None else g.clone()
        reference.step()

    ours = [p.clone() for p in base]
    state = scripting.script(scripted_optim_fns.TRAIN[info.name])(ours, grads, 0.01)
    assert_same_params(torch_params, ours, DTYPE)
    assert sorted(state) == sorted(reference.state_dict()["state"])

    passed_in = [p.clone() for p in base]
    opt = info.ours(passed_in, lr=0.01)
    scripting.script(scripted_optim_fns.STEP[info.name])(opt, grads)
    assert_same_params(torch_params, passed_in, DTYPE)


def test_functional_forms_run_multi_tensor_and_fused_in_torchscript():
    from functional_optim.adam import adam

    scripted = scripting.script(adam)
    for fused in (False, True):
        p = [torch.ones(3)]
        state = ([torch.zeros(3)], [torch.zeros(3)], [torch.zeros(())])
        scripted(p, [torch.ones(3)], state[0], state[1], [], state[2], not fused, fused,
                 amsgrad=False, beta1=0.9, beta2=0.999, lr=0.1, weight_decay=0.0, eps=1e-8,
                 maximize=False, decoupled_weight_decay=False)
        torch.testing.assert_close(p[0], torch.full((3,), 0.9))
        assert state[2][0].item() == 1.0


def test_protocol_signatures_are_identical():
    classes = [info.ours for info in C.INFOS]
    for method in state_protocol.PROTOCOL_METHODS:
        signatures = {str(inspect.signature(getattr(cls, method))) for cls in classes}
        assert len(signatures) == 1, (method, signatures)
    # ... and so are the compiled schemas (minus `self`).
    schemas = []
    for info in C.INFOS:
        module = script_optimizer(info.ours(C.make_params(torch.float32, info=info)))
        schema = {}
        for method in state_protocol.PROTOCOL_METHODS:
            s = getattr(module, method).schema
            schema[method] = ([str(a.type) for a in s.arguments[1:]], [str(r.type) for r in s.returns])
        schemas.append(schema)
    assert all(s == schemas[0] for s in schemas)
    assert schemas[0]["get_state"][1] == ["Dict[int, Dict[str, Tensor]]"]
    assert schemas[0]["set_group"][0] == ["int", "Dict[str, float]", "Dict[str, Optional[bool]]"]


def test_protocol_on_scripted_module():
    module = script_optimizer(F.RMSprop(C.make_params(torch.float32), momentum=0.5))
    module.set_group(0, {"lr": 0.5, "alpha": 0.9}, {"centered": True})
    assert module.hyperparameters()[0]["lr"] == 0.5 and module.options()[0]["centered"] is True
    module.set_option(0, "foreach", True)
    module.step([torch.ones(s) for s in C.SHAPES])
    assert set(module.get_state()[0]) == {"step", "square_avg", "momentum_buffer", "grad_avg"}
    assert module.param_group_indices() == [[0, 1, 2]]


def test_registry():
    assert F.functional_optimizer_for(torch.optim.Adam) is F.Adam
    assert F.functional_optimizer_for(F.AdamW) is F.AdamW
    # fourteen pairs: torch.optim.SparseAdam among them (issue 22), ASGD, Adafactor and Muon
    # (issue 29), LBFGS (closure-based) not
    assert len(F.registered_optimizers()) == 14
    assert F.functional_optimizer_for(torch.optim.Muon) is F.Muon
    assert F.functional_optimizer_for(torch.optim.SparseAdam) is F.SparseAdam
    with pytest.raises(KeyError, match="no functional optimizer registered for 'LBFGS'"):
        F.functional_optimizer_for(torch.optim.LBFGS)

    class MySGD(torch.optim.SGD):
        pass

    F.register_functional_optimizer(MySGD, F.SGD)
    try:
        assert F.functional_optimizer_for(MySGD) is F.SGD
        with pytest.raises(ValueError, match="already mapped"):
            F.register_functional_optimizer(MySGD, F.Adam)
        with pytest.raises(TypeError, match="lacks the protocol methods"):
            F.register_functional_optimizer(torch.optim.LBFGS, object)
    finally:
        from functional_optim import registry

        registry._REGISTRY.pop(MySGD)


@pytest.mark.torchscript
def test_eager_use_scripts_nothing_and_scripting_keeps_torchs_warning():
    """Building and stepping every optimizer eagerly calls no torch.jit (no warning of it);
    scripting one on request passes torch's own deprecation warning through (TorchScript is
    optional and deprecated upstream: the user who asks for it hears torch's word)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.script(scripted_optim_fns.step_sgd)  # raw torch.jit.script, for comparison
    raw = [str(w.message) for w in caught if "torch.jit" in str(w.message)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizers = []
        for info in C.INFOS:
            opt = info.ours(C.make_params(torch.float32, info=info))
            opt.step([torch.ones(s) for s in C.shapes_of(info)])
            optimizers.append(opt)
    assert [str(w.message) for w in caught if "torch.jit" in str(w.message)] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = script_optimizer(optimizers[0])
        module.step([torch.ones(s) for s in C.SHAPES])
    ours = [str(w.message) for w in caught if "torch.jit" in str(w.message)]
    assert bool(ours) == bool(raw), (ours, raw)
