"""Tensor hyperparameters (``lr=torch.tensor(0.01)``, ``betas`` of Tensors) in functional_optim,
compared with torch.optim: the same results over several steps (eager and scripted), an
in-place change between steps taking effect as in torch, torch's checks with torch's error types
and messages, and the Tensors kept in ``param_groups`` and ``state_dict`` as torch keeps them."""
import copy

import pytest
import torch

import functional_optim as F
from functional_optim import state_protocol
from functional_optim.scripting import script_optimizer
from tests.support import optim_configs as C
from tests.support.optim_helpers import assert_same_params, assert_same_state, run_parity

WITH_BETAS = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam")
# torch.optim refuses a Tensor lr or betas with foreach=True in these (capturable=False)
NO_TENSOR_FOREACH = ("Adam", "AdamW")


def default_of(info, name):
    """The default of constructor argument ``name`` of our class (the same as torch's)."""
    import inspect

    return inspect.signature(info.ours.__init__).parameters[name].default


def tensorized(info, config, dtype, betas=True):
    """``config`` with ``lr`` (and ``betas``) as 0-dim Tensors of ``dtype`` (given values or
    the defaults), in the constructor's arguments and in each group's overrides."""
    kwargs = dict(config.kwargs)
    kwargs["lr"] = torch.tensor(kwargs.get("lr", default_of(info, "lr")), dtype=dtype)
    if betas and info.name in WITH_BETAS:
        b = kwargs.get("betas", default_of(info, "betas"))
        kwargs["betas"] = (torch.tensor(b[0], dtype=dtype), torch.tensor(b[1], dtype=dtype))
    groups = None
    if config.groups is not None:
        groups = []
        for indices, overrides in config.groups:
            overrides = dict(overrides)
            if "lr" in overrides:
                overrides["lr"] = torch.tensor(overrides["lr"], dtype=dtype)
            if "betas" in overrides and betas:
                overrides["betas"] = tuple(torch.tensor(b, dtype=dtype) for b in overrides["betas"])
            groups.append((indices, overrides))
    return C.Config(config.name + "_tensor", kwargs, groups)


def parity_cases():
    for info in C.INFOS:
        impls = [None] + [i for i in info.impls if not (i == "foreach" and info.name in NO_TENSOR_FOREACH)]
        for config in (info.configs[0], info.configs[-1]):  # the defaults and the param groups
            for impl in impls:
                for dtype in (torch.float32, torch.float64):
                    # torch 2.13's multi-tensor Adamax, NAdam and RAdam fail on Tensor betas (an
                    # internal error, not a check); their Tensor lr is compared there
                    betas = not (impl == "foreach" and info.name in WITH_BETAS)
                    yield pytest.param(
                        info, config, impl, dtype, betas,
                        id=f"{info.name}-{config.name}-{impl}-{str(dtype)[6:]}{'' if betas else '-lr_only'}",
                    )


@pytest.mark.parametrize("info, config, impl, dtype, betas", list(parity_cases()))
def test_parity_with_tensor_hyperparameters(info, config, impl, dtype, betas):
    """20 steps of torch.optim and of ours (eager and scripted) with the same Tensor lr (and
    betas): parameters and state agree element by element (Tensors of the parameters' dtype).

    With float64 Tensor betas the float64 tolerance is 10x the table's: torch raises a Tensor
    beta to the step's power with ATen's pow (within 1 ulp; e.g. ``0.99 ** k`` differs from
    Python's in the last bit for one k below 200), which NAdam's 1 / (1 - prod mu) amplifies
    to 3e-10 relative after 20 steps; ours takes Python's float pow of the Tensor's value."""
    tol = {"rtol": 1e-9, "atol": 1e-11} if dtype == torch.float64 and betas and info.name in WITH_BETAS else None
    if info.name == "ASGD" and impl == "foreach" and dtype == torch.float64:
        # torch's multi-tensor ASGD computes the next eta (float32 state) from the step counts
        # in the Tensor lr's dtype (float64 here), ours in float32, as both do for a float lr:
        # eta differs by up to one float32 ulp, the parameters by about 1e-8 relative
        tol = {"rtol": 1e-7, "atol": 1e-9}
    run_parity(info, tensorized(info, config, dtype, betas), impl, dtype, steps=20, tol=tol)


def test_tensor_parity_can_fail():
    """The comparison above is not a tautology: a Tensor lr 1e-6 larger on our side is caught."""
    info = C.INFO_BY_NAME["Adam"]
    config = tensorized(info, info.configs[0], torch.float64)
    with pytest.raises(AssertionError):
        run_parity(info, config, "single", torch.float64, steps=3,
                   our_overrides={"lr": torch.tensor(1e-3 * (1 + 1e-6), dtype=torch.float64)})


@pytest.mark.parametrize("impl", [None, "single", "fused"])
@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_tensor_changed_in_place_takes_effect_like_torch(info, impl):
    """The same lr Tensor drives torch.optim, our eager optimizer and a scripted copy of ours;
    it is changed in place between steps (as LR schedulers and users do): the three agree."""
    if impl not in (None, "single") and impl not in info.impls:
        pytest.skip("no fused kernel in torch")
    dtype = torch.float64
    lr = torch.tensor(default_of(info, "lr"), dtype=dtype)
    flags = {} if impl is None else C.impl_flags(info, impl)
    torch_flags = {} if impl is None else C.impl_flags(info, impl, for_torch=True)
    base = C.make_params(dtype, info=info)
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    eager = [p.clone() for p in base]
    scripted_params = [p.clone() for p in base]
    reference = info.torch_class(theirs, lr=lr, **torch_flags)
    ours = info.ours(eager, lr=lr, **flags)
    scripted = script_optimizer(info.ours(scripted_params, lr=lr, **flags))
    gen = torch.Generator().manual_seed(5)
    for step in range(8):
        # in place, before each step (Rprop reads lr only when a parameter's state starts)
        lr.mul_(0.5 if step % 2 else 3.0)
        grads = C.make_gradients(step, dtype, gen, late_start=False, info=info)
        for p, g in zip(theirs, grads):
            p.grad = None if g is None else g.clone()
        reference.step()
        ours.step(grads)
        scripted.step(grads)
    assert_same_params(theirs, eager, dtype)
    assert_same_params(theirs, scripted_params, dtype)
    assert ours.hyperparameters()[0]["lr"] == lr.item() == scripted.hyperparameters()[0]["lr"]
    # ... and the change is what made the difference: a float lr gives other parameters
    fixed = [p.clone() for p in base]
    plain = info.ours(fixed, lr=default_of(info, "lr"), **flags)
    gen = torch.Generator().manual_seed(5)
    for step in range(8):
        plain.step(C.make_gradients(step, dtype, gen, late_start=False, info=info))
    with pytest.raises(AssertionError):
        assert_same_params(theirs, fixed, dtype)


def test_lr_scheduler_fills_a_tensor_lr_in_place_like_torch():
    """torch's schedulers write a Tensor lr with fill_ (the Tensor in param_groups stays the
    same object): through as_torch_optimizer, ours follows, with torch's learning rates."""
    dtype = torch.float64
    base = C.make_params(dtype)
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    eager = [p.clone() for p in base]
    reference = torch.optim.Adam(theirs, lr=torch.tensor(0.05, dtype=dtype))
    ours = F.as_torch_optimizer(F.Adam(eager, lr=torch.tensor(0.05, dtype=dtype)))
    lr_ours = ours.param_groups[0]["lr"]
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3) for o in (reference, ours)]
    gen = torch.Generator().manual_seed(2)
    for step in range(7):
        grads = C.make_gradients(step, dtype, gen, late_start=False)
        for p, g in zip(theirs, grads):
            p.grad = None if g is None else g.clone()
        reference.step()
        ours.step(grads)
        for s in schedulers:
            s.step()
        assert torch.equal(ours.param_groups[0]["lr"], reference.param_groups[0]["lr"])
    assert ours.param_groups[0]["lr"] is lr_ours and isinstance(lr_ours, torch.Tensor)
    assert_same_params(theirs, eager, dtype)


# ----------------------------------------------------------------------------- torch's checks

def _p():
    return [torch.zeros(3, requires_grad=True)]


T = torch.tensor
ERRORS = [
    # (classes, kwargs, error, message): each raised by torch.optim and by ours, same type and text
    # ("{lr}": the class's message for a negative lr, OptimInfo.lr_message)
    (C.INFO_BY_NAME.keys(), {"lr": T([0.1, 0.2])}, ValueError, "Tensor lr must be 1-element"),
    (C.INFO_BY_NAME.keys(), {"lr": T(-0.01)}, ValueError, "{lr}-0.009999999776482582"),
    (C.INFO_BY_NAME.keys(), {"lr": T(-0.5, dtype=torch.float64)}, ValueError, "{lr}-0.5"),
    (("Adam", "AdamW"), {"lr": T(0.1), "foreach": True}, ValueError,
     "lr as a Tensor is not supported for capturable=False and foreach=True"),
    (("Adam", "AdamW"), {"lr": T([0.1, 0.2]), "foreach": True}, ValueError,
     "lr as a Tensor is not supported for capturable=False and foreach=True"),
    (("Adam", "AdamW"), {"betas": (T(0.9), T(0.99)), "foreach": True}, ValueError,
     "betas[0] as a Tensor is not supported for capturable=False and foreach=True"),
    (("Adam", "AdamW"), {"betas": (T(0.9), 0.99)}, ValueError, "betas must be either both floats or both Tensors"),
    (("Adam", "AdamW"), {"betas": (0.9, T(0.99))}, ValueError, "betas must be either both floats or both Tensors"),
    (("Adam", "AdamW"), {"betas": (0, 0.99)}, ValueError, "betas must be either both floats or both Tensors"),
    (WITH_BETAS, {"betas": (T(1.0), T(0.99))}, ValueError, "Invalid beta parameter at index 0: 1.0"),
    (WITH_BETAS, {"betas": (T(0.9), T(-0.5))}, ValueError, "Invalid beta parameter at index 1: -0.5"),
    (WITH_BETAS, {"betas": (T([0.9, 0.8]), T(0.99))}, RuntimeError,
     "Boolean value of Tensor with more than one value is ambiguous"),
    (("SGD",), {"lr": 0.1, "weight_decay": T(-0.5)}, ValueError, "Invalid weight_decay value: -0.5"),
]
ERROR_CASES = [
    pytest.param(C.INFO_BY_NAME[name], kwargs, error, message.replace("{lr}", C.INFO_BY_NAME[name].lr_message),
                 id=f"{name}-{i}")
    for i, (names, kwargs, error, message) in enumerate(ERRORS)
    for name in names
]


@pytest.mark.parametrize("side", ["torch", "ours"])
@pytest.mark.parametrize("info, kwargs, error, message", ERROR_CASES)
def test_constructor_errors_are_torchs(side, info, kwargs, error, message):
    cls = info.torch_class if side == "torch" else info.ours
    with pytest.raises(error) as raised:
        cls(_p(), **kwargs)
    assert type(raised.value) is error and str(raised.value) == message


ACCEPTED = [
    (C.INFO_BY_NAME.keys(), {"lr": T(0.01)}),
    (C.INFO_BY_NAME.keys(), {"lr": T([0.01])}),  # 1-element, 1-dim
    (C.INFO_BY_NAME.keys(), {"lr": T(1)}),  # an integer Tensor
    ([n for n in C.INFO_BY_NAME if n not in NO_TENSOR_FOREACH and C.takes(C.INFO_BY_NAME[n], "foreach")],
     {"lr": T(0.01), "foreach": True}),
    (("SGD", "Adam", "AdamW", "Adagrad"), {"lr": T(0.01), "fused": True}),
    (("Adam", "AdamW"), {"betas": (T(0.9), T(0.99)), "fused": True}),
    (WITH_BETAS, {"betas": (T(0.8), T(0.9))}),
    (("Adamax", "NAdam", "RAdam"), {"betas": (T(0.8), 0.9)}),  # no both-or-neither rule there
    (("SGD",), {"lr": 0.1, "weight_decay": T(0.1), "momentum": 0.9}),
]
ACCEPTED_CASES = [
    pytest.param(C.INFO_BY_NAME[name], kwargs, id=f"{name}-{i}")
    for i, (names, kwargs) in enumerate(ACCEPTED)
    for name in names
]


@pytest.mark.parametrize("info, kwargs", ACCEPTED_CASES)
def test_what_torch_accepts_we_accept_with_its_results(info, kwargs):
    """Two steps of torch.optim and ours with the same Tensor arguments give the same
    parameters, and param_groups hold the same values (the Tensors themselves). The Tensors
    here are float32 (torch's default dtype), and so are the parameters: with a float32 Tensor
    hyperparameter, torch computes a step's scalars (lr / bias correction...) in float32 where
    ours computes them in double from the Tensor's value, which differs from torch's float64
    parameters by more than the float64 tolerance (about 1e-9 relative), not in float32."""
    base = C.make_params(torch.float32, info=info)
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    ours_params = [p.clone() for p in base]
    reference = info.torch_class(theirs, **kwargs)
    ours = info.ours(ours_params, **kwargs)
    for key, value in kwargs.items():
        got = ours.param_groups[0][key]
        if isinstance(value, torch.Tensor):
            assert got is value
        elif isinstance(value, tuple):
            assert all(g is v or g == v for g, v in zip(got, value))
    for step in range(2):
        grads = [torch.full_like(p, 0.5 + step) for p in base]
        for p, g in zip(theirs, grads):
            p.grad = g.clone()
        reference.step()
        ours.step(grads)
    assert_same_params(theirs, ours_params, torch.float32)


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_group_tensor_lr_with_foreach(name):
    """A param group's Tensor lr with foreach=True: torch raises at step (RuntimeError), ours
    raises the same at construction or assignment, before anything changes."""
    info = C.INFO_BY_NAME[name]
    message = "lr as a Tensor is not supported for capturable=False and foreach=True"
    p = _p()
    reference = info.torch_class([{"params": p, "lr": T(0.1)}], foreach=True)
    p[0].grad = torch.ones(3)
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        reference.step()
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        info.ours([{"params": _p(), "lr": T(0.1)}], foreach=True)
    ours = info.ours(_p(), foreach=True)
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        ours.param_groups[0]["lr"] = T(0.1)
    assert ours.param_groups[0]["lr"] == 1e-3
    # a Tensor lr bound first, foreach=True asked afterwards: refused too
    ours = info.ours(_p(), lr=T(0.1))
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        ours.param_groups[0]["foreach"] = True
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        ours.set_option(0, "foreach", True)
    assert ours.param_groups[0]["foreach"] is None
    # a param group's Tensor betas with foreach=True: torch's ValueError names beta1
    with pytest.raises(ValueError, match="^beta1 as a Tensor is not supported for capturable=False and foreach=True$"):
        info.ours([{"params": _p(), "betas": (T(0.9), T(0.99))}], foreach=True)


# ----------------------------------------------------------------------------- param_groups, state_dict

def test_param_groups_hold_the_tensors_and_numbers_replace_them():
    lr = T(0.01)
    betas = (T(0.9), T(0.99))
    opt = F.Adam(_p(), lr=lr, betas=betas)
    reference = torch.optim.Adam(_p(), lr=lr, betas=betas)
    group = opt.param_groups[0]
    assert group["lr"] is lr and group["betas"][0] is betas[0] and group["betas"][1] is betas[1]
    assert reference.param_groups[0]["lr"] is lr
    assert opt.state_dict()["param_groups"][0]["lr"] is lr  # as torch: the group's Tensor
    assert reference.state_dict()["param_groups"][0]["lr"] is lr
    # a number assigned replaces the Tensor (the Tensor no longer drives the optimizer)
    group["lr"] = 0.5
    lr.fill_(0.25)
    assert group["lr"] == 0.5 and opt.hyperparameters()[0]["lr"] == 0.5
    # and a Tensor assigned is followed
    new = T(0.125)
    group["lr"] = new
    assert group["lr"] is new and opt.hyperparameters()[0]["lr"] == 0.125
    new.fill_(0.0625)
    assert opt.hyperparameters()[0]["lr"] == 0.0625
    # a number set through the protocol unbinds it too
    opt.set_hyperparameter(0, "lr", 0.5)
    new.fill_(1.0)
    assert group["lr"] == 0.5 and opt.hyperparameters()[0]["lr"] == 0.5
    # an invalid Tensor assigned: torch's message, nothing changes
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
        group["lr"] = T([1.0, 2.0])
    with pytest.raises(ValueError, match="^Invalid beta parameter at index 0: 1.0$"):
        group["betas"] = (T(1.0), T(0.5))
    assert group["lr"] == 0.5 and group["betas"][0] is betas[0]


def test_groups_share_the_constructors_tensor_as_in_torch():
    lr = T(0.01)
    groups = lambda: [{"params": _p()}, {"params": _p(), "lr": T(0.5)}, {"params": _p(), "lr": 0.2}]
    ours = F.SGD(groups(), lr=lr)
    theirs = torch.optim.SGD(groups(), lr=lr)
    for o in (ours, theirs):
        assert o.param_groups[0]["lr"] is lr
        assert isinstance(o.param_groups[1]["lr"], torch.Tensor) and o.param_groups[1]["lr"].item() == 0.5
        assert o.param_groups[2]["lr"] == 0.2
    lr.fill_(0.03)
    assert ours.hyperparameters()[0]["lr"] == pytest.approx(0.03) and ours.hyperparameters()[2]["lr"] == 0.2


@pytest.mark.parametrize("source", ["torch", "ours"])
def test_state_dicts_with_tensor_lr_load_across(source):
    """A state dict holding a Tensor lr and Tensor betas, saved by torch.optim or by ours,
    loads into the other (and into ours) as torch loads it: the Tensors are copies, followed."""
    dtype = torch.float64
    base = C.make_params(dtype)
    params = [torch.nn.Parameter(p.clone()) for p in base]
    kwargs = {"lr": T(0.02, dtype=dtype), "betas": (T(0.8, dtype=dtype), T(0.9, dtype=dtype))}
    if source == "torch":
        saver = torch.optim.Adam(params, **kwargs)
        for p in params:
            p.grad = torch.ones_like(p)
        saver.step()
    else:
        saver = F.Adam(params, **kwargs)
        saver.step([torch.ones_like(p) for p in params])
    saved = saver.state_dict()
    assert saved["param_groups"][0]["lr"] is kwargs["lr"]

    ours = F.Adam([p.clone() for p in base], lr=0.5)
    theirs = torch.optim.Adam([torch.nn.Parameter(p.clone()) for p in base], lr=0.5)
    ours.load_state_dict(saved)
    theirs.load_state_dict(saved)
    for o in (ours, theirs):
        lr = o.param_groups[0]["lr"]
        assert isinstance(lr, torch.Tensor) and lr is not kwargs["lr"] and lr.item() == 0.02
        assert all(isinstance(b, torch.Tensor) for b in o.param_groups[0]["betas"])
    assert_same_state(theirs.state_dict(), ours.state_dict(), dtype)
    ours.param_groups[0]["lr"].fill_(0.04)  # the loaded copy drives ours
    assert ours.hyperparameters()[0]["lr"] == 0.04
    kwargs["lr"].fill_(1.0)  # the saved one does not
    assert ours.hyperparameters()[0]["lr"] == 0.04
    # ours, saved, into torch.optim
    back = torch.optim.Adam([torch.nn.Parameter(p.clone()) for p in base], lr=0.5)
    back.load_state_dict(ours.state_dict())
    assert back.param_groups[0]["lr"].item() == 0.04


def test_loaded_tensor_lr_with_foreach_is_refused_like_torch():
    """torch.optim.Adam loads a state dict whose group has a Tensor lr and foreach=True, and
    refuses it at the next step; ours refuses it when loading, changing nothing."""
    message = "^lr as a Tensor is not supported for capturable=False and foreach=True$"
    saved = torch.optim.Adam(_p(), lr=T(0.1)).state_dict()
    saved["param_groups"][0]["foreach"] = True
    theirs = torch.optim.Adam(_p())
    theirs.load_state_dict(saved)
    theirs.param_groups[0]["params"][0].grad = torch.ones(3)
    with pytest.raises(RuntimeError, match=message):
        theirs.step()
    ours = F.Adam(_p())
    with pytest.raises(RuntimeError, match=message):
        ours.load_state_dict(saved)
    assert ours.param_groups[0]["lr"] == 1e-3 and ours.param_groups[0]["foreach"] is None


def test_failed_load_keeps_the_tensors():
    lr = T(0.01)
    opt = F.Adam(_p(), lr=lr)
    bad = copy.deepcopy(opt.state_dict())
    bad["param_groups"][0]["eps"] = -1.0
    with pytest.raises(ValueError, match="Invalid epsilon value"):
        opt.load_state_dict(bad)
    assert opt.param_groups[0]["lr"] is lr
    lr.fill_(0.5)
    assert opt.hyperparameters()[0]["lr"] == 0.5


# ----------------------------------------------------------------------------- TorchScript

def test_scripted_copy_follows_the_tensor_and_protocol_numbers_unbind_it():
    lr = T(0.01)
    opt = F.RMSprop(_p(), lr=lr)
    module = script_optimizer(opt)
    lr.fill_(0.02)
    assert module.hyperparameters()[0]["lr"] == pytest.approx(0.02)
    module.set_hyperparameter(0, "lr", 0.5)  # the scripted copy now holds a number
    lr.fill_(0.03)
    assert module.hyperparameters()[0]["lr"] == 0.5
    assert opt.hyperparameters()[0]["lr"] == pytest.approx(0.03)  # the eager one still follows
    assert state_protocol.state_dict(module)["param_groups"][0]["lr"] == 0.5
    # a torch.optim state dict holding a Tensor lr loads into the scripted module as its value
    reference = torch.optim.RMSprop(_p(), lr=T(0.25))
    state_protocol.load_state_dict(module, reference.state_dict())
    assert module.hyperparameters()[0]["lr"] == 0.25
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
        state_protocol.load_state_dict(module, {"state": {}, "param_groups": [{"lr": T([0.1, 0.2]), "params": [0]}]})
    assert module.hyperparameters()[0]["lr"] == 0.25


def test_script_local_optimizer_with_tensor_hyperparameters():
    """plugin's ScriptLocalOptimizer (what DistributedOptimizer builds on each owner) scripts an
    optimizer built with a Tensor lr and betas; it steps as torch.optim with those values."""
    from plugin.optim import ScriptLocalOptimizer

    dtype = torch.float64
    base = C.make_params(dtype)
    params = [p.clone() for p in base]
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    kwargs = {"lr": T(0.01, dtype=dtype), "betas": (T(0.8, dtype=dtype), T(0.9, dtype=dtype))}
    module = ScriptLocalOptimizer.create(torch.optim.AdamW, params, **kwargs)
    reference = torch.optim.AdamW(theirs, **kwargs)
    for step in range(3):
        grads = [torch.full_like(p, 0.1 * (step + 1)) for p in base]
        for p, g in zip(theirs, grads):
            p.grad = g.clone()
        reference.step()
        module.step_gradients(grads)
    assert_same_params(theirs, params, dtype)
