"""What the config table does not reach for ASGD, Adafactor and Muon (issue 29): torch's state_dict
format value for value and type for type, the cases where torch itself is particular (Muon's 2-D
rule, Adafactor's eps1 None over a group of several dtypes and its 3-D parameters, ASGD's eta and
mu cast by load_state_dict), bfloat16 and float16 to the bit, LR schedulers, and the group steps'
checks of untrusted state (a bounded Hypothesis fuzz: an error, nothing changed, never a crash).

The table-driven tests (tests/support/optim_configs.py) compare the three with torch.optim on
every implementation path; here the default (op library) path unless said otherwise.
"""
import copy
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import functional_optim as F
from functional_optim import _state
from functional_optim.scripting import script_optimizer
from tests.support.optim_helpers import assert_same_params, assert_same_state

T = torch.tensor


def _pair(torch_class, ours_class, shapes, dtype=torch.float32, seed=0, **kwargs):
    gen = torch.Generator().manual_seed(seed)
    base = [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in shapes]
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    ours = [p.clone() for p in base]
    return torch_class(theirs, **kwargs), theirs, ours_class(ours, **kwargs), ours


def _step_both(reference, theirs, ours, steps, seed=1, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        grads = [(torch.randn(p.shape, generator=gen, dtype=torch.float64) * scale).to(p.dtype) for p in theirs]
        for p, g in zip(theirs, grads):
            p.grad = g.clone()
        reference.step()
        ours.step(grads)


def _same_value_and_type(a, b, where):
    """Equal, and of the same type; a float where torch has an int passes only for the values
    torch types as floats (functional_optim coerces numbers to floats, as for the other
    optimizers: torch.optim.ASGD's default weight_decay is the int 0), not for ints
    (_state.INT_HYPERPARAMETERS: Muon's ns_steps)."""
    name = where.split("'")[1] if "'" in where else ""
    if not (type(a) is int and type(b) is float and name not in _state.INT_HYPERPARAMETERS):
        assert type(a) is type(b), f"{where}: torch {a!r} ({type(a).__name__}), ours {b!r} ({type(b).__name__})"
    if isinstance(a, tuple):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same_value_and_type(x, y, f"{where}[{k}]")
    else:
        assert a == b, f"{where}: torch {a!r}, ours {b!r}"


# ----------------------------------------------------------------------------- state_dict format

FORMAT_CASES = [
    ("ASGD", torch.optim.ASGD, F.ASGD, [(3, 4), (5,)], {"lr": 0.05, "t0": 2.0, "lambd": 1e-3}),
    ("Adafactor", torch.optim.Adafactor, F.Adafactor, [(3, 4), (5,), (2, 3, 4)], {"eps": (None, 1e-2), "d": 2.0}),
    ("Adafactor-eps1", torch.optim.Adafactor, F.Adafactor, [(3, 4)], {"eps": (1e-20, 1e-3), "beta2_decay": -0.5}),
    ("Muon", torch.optim.Muon, F.Muon, [(3, 4), (6, 2)], {"lr": 0.02}),
    ("Muon-options", torch.optim.Muon, F.Muon, [(3, 4)],
     {"ns_coefficients": (3.0, -3.2, 1.2), "ns_steps": 3, "adjust_lr_fn": "match_rms_adamw", "nesterov": False}),
]


@pytest.mark.parametrize("name, torch_class, ours_class, shapes, kwargs", FORMAT_CASES, ids=[c[0] for c in FORMAT_CASES])
def test_state_dict_is_torchs_value_for_value_and_type_for_type(name, torch_class, ours_class, shapes, kwargs):
    """Every group entry torch keeps (tuples with None inside, ints, strings, None) has torch's
    value and Python type in param_groups and state_dict; the state has torch's keys in torch's
    order, dtypes, shapes and devices; each side's state dict loads into the other and the
    next steps agree."""
    reference, theirs, ours, our_params = _pair(torch_class, ours_class, shapes, torch.float64, **kwargs)
    _step_both(reference, theirs, ours, 4)
    # torch casts while loading (ASGD's eta and mu take the parameter's dtype): each side loads
    # its own state dict first, so that both hold what the other will load
    reference.load_state_dict(copy.deepcopy(reference.state_dict()))
    ours.load_state_dict(copy.deepcopy(ours.state_dict()))
    saved_theirs, saved_ours = reference.state_dict(), ours.state_dict()
    for g, (a, b) in enumerate(zip(saved_theirs["param_groups"], saved_ours["param_groups"])):
        assert set(b) - set(a) <= {"fused"}, set(b) - set(a)  # functional_optim's one extra flag
        for key, value in a.items():
            _same_value_and_type(value, b[key], f"param_groups[{g}][{key!r}]")
            _same_value_and_type(value, ours.param_groups[g][key] if key != "params" else value, f"param_groups {key}")
    for i, entry in saved_theirs["state"].items():
        assert list(saved_ours["state"][i]) == list(entry), "keys in torch's order of creation"
    assert_same_state(saved_theirs, saved_ours, torch.float64)
    # both ways, then on together
    fresh_ours = ours_class([p.detach().clone() for p in theirs], **kwargs)
    fresh_theirs = torch_class([torch.nn.Parameter(p.clone()) for p in our_params], **kwargs)
    fresh_ours.load_state_dict(copy.deepcopy(saved_theirs))
    fresh_theirs.load_state_dict(copy.deepcopy(saved_ours))
    assert_same_state(reference.state_dict(), fresh_ours.state_dict(), torch.float64)
    assert_same_state(ours.state_dict(), fresh_theirs.state_dict(), torch.float64, ignore_group_keys=("fused",))
    _step_both(reference, theirs, fresh_ours, 3, seed=2)
    assert_same_params(theirs, fresh_ours._s.params, torch.float64)


def test_format_check_can_fail():
    """The type comparison above is not a tautology: 5.0 is not torch's 5, (None, x) not (nan, x)."""
    with pytest.raises(AssertionError):
        _same_value_and_type(5, 5.0, "param_groups[0]['ns_steps']")
    with pytest.raises(AssertionError):
        _same_value_and_type((None, 1e-3), (math.nan, 1e-3), "param_groups[0]['eps']")
    with pytest.raises(AssertionError):
        _same_value_and_type(None, "original", "param_groups[0]['adjust_lr_fn']")


@pytest.mark.torchscript
def test_typed_values_and_their_torch_form():
    """The protocol (what TorchScript and the plugin see) holds floats; the torch-facing side
    shows torch's forms (_state.torch_value / INT, OPTIONAL, CHOICE_HYPERPARAMETERS)."""
    muon = F.Muon([torch.zeros(2, 3)], adjust_lr_fn="match_rms_adamw", ns_steps=4)
    assert muon.hyperparameters()[0] == {
        "lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "ns_a": 3.4445, "ns_b": -4.775, "ns_c": 2.0315,
        "eps": 1e-7, "ns_steps": 4.0, "adjust_lr_fn": 2.0,
    }
    muon.set_hyperparameter(0, "adjust_lr_fn", 0.0)
    assert muon.param_groups[0]["adjust_lr_fn"] is None
    with pytest.raises(ValueError, match="adjust_lr_fn must be 0"):
        muon.set_hyperparameter(0, "adjust_lr_fn", 3.0)
    ada = F.Adafactor([torch.zeros(3)])
    assert ada.hyperparameters()[0]["eps1"] == -math.inf and ada.param_groups[0]["eps"] == (None, 1e-3)
    assert ada.hyperparameters() == ada.hyperparameters()  # (None is not NaN: equal to itself)
    module = script_optimizer(ada)
    assert module.hyperparameters() == ada.hyperparameters()
    module.set_hyperparameter(0, "eps1", 1e-20)
    assert _state.torch_value("eps1", module.hyperparameters()[0]["eps1"]) == 1e-20


def test_values_torch_keeps_otherwise_are_checked():
    p = [torch.zeros(2, 3)]
    with pytest.raises(TypeError, match="'ns_steps' must be an int, got 2.5"):
        F.Muon([{"params": p, "ns_steps": 2.5}])
    with pytest.raises(ValueError, match=r"^Adjust learning rate function rms is not supported$"):
        F.Muon([{"params": p, "adjust_lr_fn": "rms"}])  # (torch checks only the constructor's)
    with pytest.raises(TypeError, match="'ns_coefficients' must be a tuple of 3 values"):
        F.Muon([{"params": p, "ns_coefficients": (1.0, 2.0)}])
    with pytest.raises(ValueError, match="^Coefficients must be a tuple of exactly 3 values$"):
        F.Muon(p, ns_coefficients=(1.0, 2.0))
    opt = F.Adafactor([torch.zeros(3)])
    with pytest.raises(ValueError, match=r"'eps'\[0\] must be None or a number above -inf"):
        opt.param_groups[0]["eps"] = (-math.inf, 1e-3)
    with pytest.raises(ValueError, match=r"^epsilon1 should be >= 0 but is: -inf$"):
        F.Adafactor([torch.zeros(3)], eps=(-math.inf, 1e-3))
    with pytest.raises(ValueError, match=r"^epsilon1 should be >= 0 but is: nan$"):
        torch.optim.Adafactor([torch.zeros(3)], eps=(math.nan, 1e-3))
    with pytest.raises(ValueError, match=r"^epsilon1 should be >= 0 but is: nan$"):
        F.Adafactor([torch.zeros(3)], eps=(math.nan, 1e-3))
    assert opt.param_groups[0]["eps"] == (None, 1e-3)


def test_constructor_tuple_holding_a_tensor_is_shared_like_torch():
    """A Tensor inside a constructor's tuple (Adafactor's eps2) is followed by the groups that do
    not set their own, as in torch; a group with its own tuple keeps it (the tuple is bound
    whole, under torch's name)."""
    e = T(1e-2, dtype=torch.float64)
    groups = lambda: [{"params": [torch.zeros(3)]}, {"params": [torch.zeros(3)], "eps": (None, 5e-3)}]  # noqa: E731
    ours = F.Adafactor(groups(), eps=(None, e))
    theirs = torch.optim.Adafactor(groups(), eps=(None, e))
    for opt in (ours, theirs):
        assert opt.param_groups[0]["eps"][1] is e and opt.param_groups[1]["eps"] == (None, 5e-3)
    e.fill_(0.02)
    assert [h["eps2"] for h in ours.hyperparameters()] == [0.02, 5e-3]


# ----------------------------------------------------------------------------- Muon

@pytest.mark.parametrize("shape", [(5,), (), (2, 3, 4)])
def test_muon_takes_2d_parameters_only_with_torchs_message(shape):
    for cls in (torch.optim.Muon, F.Muon):
        with pytest.raises(ValueError) as raised:
            cls([torch.nn.Parameter(torch.zeros(3, 3)), torch.nn.Parameter(torch.zeros(shape))])
        assert str(raised.value) == (
            f"Muon only supports 2D parameters whereas we found a parameter with size: {torch.zeros(shape).size()}"
        )


def test_muon_group_added_later_is_refused_at_once():
    """torch checks the constructor's parameters only: a 1-D parameter added later makes its
    step raise after the groups before it have stepped. Ours refuses the group when it is added,
    with the constructor's message, and nothing changes."""
    reference = torch.optim.Muon([torch.nn.Parameter(torch.ones(3, 3))])
    reference.add_param_group({"params": [torch.nn.Parameter(torch.ones(4))]})
    for group in reference.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="^Param gradient must be a 2D matrix$"):
        reference.step()
    assert not torch.equal(reference.param_groups[0]["params"][0], torch.ones(3, 3))  # (torch's half step)
    params = [torch.ones(3, 3), torch.ones(4)]
    ours = F.Muon(params[:1])
    with pytest.raises(ValueError, match=r"^Muon only supports 2D parameters .* size: torch.Size\(\[4\]\)$"):
        ours.add_param_group({"params": params[1:]})
    assert len(ours.param_groups) == 1 and ours.param_group_indices() == [[0]]
    ours.step([torch.ones(3, 3)])
    assert not torch.equal(params[0], torch.ones(3, 3))


def test_muon_group_step_refuses_a_non_2d_gradient_before_any_change():
    """The group step (what the plugin's owners run too) checks every parameter (torch's
    message) before changing anything; the single-tensor reference raises the same message as
    it reaches the parameter, as torch's."""
    from functional_optim.muon import muon

    kwargs = dict(lr=0.1, weight_decay=0.1, momentum=0.9, nesterov=True, ns_coefficients=(3.4445, -4.775, 2.0315),
                  ns_steps=5, eps=1e-7, adjust_lr_fn=None)
    for fused in (True, False):
        params = [torch.ones(3, 3), torch.ones(4)]
        bufs = [torch.zeros(3, 3), torch.zeros(4)]
        with pytest.raises(ValueError, match="Param gradient must be a 2D matrix"):
            muon(params, [torch.ones(3, 3), torch.ones(4)], bufs, None, fused, **kwargs)
        assert torch.equal(params[0], torch.ones(3, 3)) == fused and torch.equal(bufs[0], torch.zeros(3, 3)) == fused


def test_muon_ns_steps_limit_is_checked_at_once():
    """torch raises it at the step (after the momentum buffer has moved); ours at construction."""
    reference = torch.optim.Muon([torch.nn.Parameter(torch.ones(3, 3))], ns_steps=100)
    reference.param_groups[0]["params"][0].grad = torch.ones(3, 3)
    message = "^Number of steps must be less than 100 for computational efficiency$"
    with pytest.raises(ValueError, match=message):
        reference.step()
    with pytest.raises(ValueError, match=message):
        F.Muon([torch.ones(3, 3)], ns_steps=100)
    with pytest.raises(ValueError, match="ns_steps must be a whole number"):
        F.Muon([torch.ones(3, 3)]).set_hyperparameter(0, "ns_steps", 2.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_default_step_is_torchs_to_the_bit(dtype, nesterov):
    """The same ATen ops in the same order, so the same bits (the Newton-Schulz iteration in
    bfloat16; the weight decay through mul_'s Tensor overload, as torch's Python calls it;
    with bfloat16 and nesterov=False torch's iteration scales the buffer itself, and so does ours)."""
    reference, theirs, ours, our_params = _pair(
        torch.optim.Muon, F.Muon, [(8, 8), (12, 5), (5, 12)], dtype, lr=0.05, nesterov=nesterov)
    assert ours._s.impl == ["fused"]
    _step_both(reference, theirs, ours, 5)
    for a, b in zip(theirs, our_params):
        assert torch.equal(a.detach(), b)
    for i, p in enumerate(theirs):
        assert torch.equal(reference.state[p]["momentum_buffer"], ours.get_state()[i]["momentum_buffer"])


# ----------------------------------------------------------------------------- Adafactor

@pytest.mark.parametrize("foreach", [None, False, True])
def test_adafactor_factors_the_last_two_dimensions(foreach):
    """A 3-D parameter (a batch of matrices) keeps one row and one column factor per matrix."""
    reference, theirs, ours, our_params = _pair(
        torch.optim.Adafactor, F.Adafactor, [(2, 3, 4), (3, 1, 5), (6,)], torch.float64, weight_decay=0.1,
        foreach=foreach)
    _step_both(reference, theirs, ours, 6)
    assert ours.get_state()[0]["row_var"].shape == (2, 3, 1) and ours.get_state()[0]["col_var"].shape == (2, 1, 4)
    assert_same_params(theirs, our_params, torch.float64)
    assert_same_state(reference.state_dict(), ours.state_dict(), torch.float64)


@pytest.mark.parametrize("fused", [None, False])
def test_adafactor_eps1_none_over_mixed_dtypes_is_torchs(fused):
    """torch sets eps1 = finfo(dtype).eps from the first parameter of a group's step and keeps
    it for the others (it assigns the loop's variable): a float64 parameter after a bfloat16
    one is stepped with bfloat16's eps. Ours does the same, to the bit (default path)."""
    shapes = [(4, 3), (5,), (3, 3)]
    gen = torch.Generator().manual_seed(0)
    dtypes = [torch.bfloat16, torch.float64, torch.float32]
    base = [torch.randn(s, generator=gen, dtype=torch.float64).to(d) * 1e-2 for s, d in zip(shapes, dtypes)]
    theirs = [torch.nn.Parameter(p.clone()) for p in base]
    ours = [p.clone() for p in base]
    reference = torch.optim.Adafactor(theirs)
    opt = F.Adafactor(ours, fused=fused)
    _step_both(reference, theirs, opt, 4, scale=1e-3)
    for a, b in zip(theirs, ours):
        assert torch.equal(a.detach(), b) if fused is None else torch.allclose(a.detach(), b, rtol=1e-6, atol=0)


ADAFACTOR_SHAPES = [(8, 6), (7,), (), (3, 5, 9), (300, 301), (70_000,)]  # the last two: pieces on threads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kwargs", [{}, {"weight_decay": 0.1, "maximize": True}], ids=["default", "wd_maximize"])
def test_adafactor_default_step_is_torchs_to_the_bit(dtype, kwargs):
    """torch's ops in its order (float32 and float64: the update's element-wise end in one pass
    of the same IEEE operations, cpu/fused_adafactor.cpp), so the same bits."""
    reference, theirs, ours, our_params = _pair(torch.optim.Adafactor, F.Adafactor, ADAFACTOR_SHAPES, dtype, **kwargs)
    _step_both(reference, theirs, ours, 4)
    for i, (a, b) in enumerate(zip(theirs, our_params)):
        assert torch.equal(a.detach(), b), i
    for i, p in enumerate(theirs):
        for key, value in reference.state[p].items():
            assert torch.equal(value, ours.get_state()[i][key]), (i, key)


_ISA_SCRIPT = """
import torch, functional_optim as F
from tests.functional_optim.test_new_optimizers import ADAFACTOR_SHAPES, _pair, _step_both
for dtype in (torch.float32, torch.float64):
    reference, theirs, ours, our_params = _pair(torch.optim.Adafactor, F.Adafactor, ADAFACTOR_SHAPES, dtype, maximize=True)
    _step_both(reference, theirs, ours, 3)
    assert all(torch.equal(a.detach(), b) for a, b in zip(theirs, our_params)), dtype
print(torch.backends.cpu.get_cpu_capability())
"""


def test_adafactor_update_of_each_isa_build_is_torchs():
    """Each instruction-set build of the fused update (DEFAULT, AVX2, AVX512 where this CPU
    runs it; ATEN_CPU_CAPABILITY picks torch's kernels and ours alike) gives torch's bits."""
    import os
    import subprocess
    import sys

    from tests.support import REPO

    order = ["DEFAULT", "AVX2", "AVX512"]
    best = torch.backends.cpu.get_cpu_capability()
    builds = order[: order.index(best) + 1] if best in order else ["DEFAULT"]
    for isa in builds:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=isa.lower(),
                   PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        done = subprocess.run([sys.executable, "-c", _ISA_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == isa


# ----------------------------------------------------------------------------- ASGD

@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_asgd_eta_and_mu_cast_by_load_state_dict(dtype):
    """torch's load_state_dict casts eta and mu to the parameter's dtype (they are not 'step');
    ours does too, and the fused kernel reads and writes them in that dtype as torch does."""
    kwargs = {"lr": 0.05, "t0": 2.0, "lambd": 1e-3}
    reference, theirs, ours, our_params = _pair(torch.optim.ASGD, F.ASGD, [(6, 5), (7,)], dtype, **kwargs)
    _step_both(reference, theirs, ours, 3)
    saved = reference.state_dict()
    reference.load_state_dict(copy.deepcopy(saved))
    ours.load_state_dict(copy.deepcopy(saved))
    with torch.no_grad():
        for a, b in zip(theirs, our_params):
            b.copy_(a)
    state = ours.get_state()[0]
    assert state["eta"].dtype == dtype == reference.state[theirs[0]]["eta"].dtype
    assert state["step"].dtype == torch.float32
    _step_both(reference, theirs, ours, 4, seed=3)
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2 ** -7, "atol": 1e-2}
    assert_same_params(theirs, our_params, dtype, tol)
    for i, p in enumerate(theirs):
        for key in ("eta", "mu"):
            assert torch.equal(reference.state[p][key], ours.get_state()[i][key]), key


# ----------------------------------------------------------------------------- LR schedulers

SCHEDULED = [
    ("ASGD", torch.optim.ASGD, {"lr": 0.05, "t0": 3.0},
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    ("Adafactor", torch.optim.Adafactor, {"lr": 0.02},
     lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.7)),
    ("Muon", torch.optim.Muon, {"lr": 0.05},
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10)),  # momentum cycled too
]


@pytest.mark.parametrize("name, torch_class, kwargs, make_scheduler", SCHEDULED, ids=[s[0] for s in SCHEDULED])
def test_lr_scheduler_drives_ours_like_torch(name, torch_class, kwargs, make_scheduler):
    reference, theirs, ours, our_params = _pair(
        torch_class, F.functional_optimizer_for(torch_class), [(4, 3), (3, 5)], torch.float64, **kwargs)
    wrapped = F.as_torch_optimizer(ours)
    schedulers = [make_scheduler(reference), make_scheduler(wrapped)]
    seen = set()
    for step in range(8):
        _step_both(reference, theirs, wrapped, 1, seed=step)
        for s in schedulers:
            s.step()
        seen.add(round(reference.param_groups[0]["lr"], 12))
        for key in ("lr", "momentum"):
            if key in reference.param_groups[0]:
                assert wrapped.param_groups[0][key] == reference.param_groups[0][key]
                assert ours.hyperparameters()[0][key] == reference.param_groups[0][key]
    assert len(seen) >= 3  # the schedule did change the learning rate
    assert_same_params(theirs, our_params, torch.float64)


# ----------------------------------------------------------------------------- untrusted state

NAMES = {
    "asgd": (["lr", "lambd", "alpha", "t0", "weight_decay", "maximize"], [0.01, 1e-4, 0.75, 1e6, 0.0, 0.0]),
    "adafactor": (["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay", "maximize"],
                  [0.01, -0.8, -math.inf, 1e-3, 1.0, 0.0, 0.0]),
    "muon": (["lr", "weight_decay", "momentum", "ns_a", "ns_b", "ns_c", "eps", "ns_steps", "adjust_lr_fn", "nesterov"],
             [0.02, 0.1, 0.95, 3.4445, -4.775, 2.0315, 1e-7, 5.0, 0.0, 1.0]),
}


@st.composite
def _bad_state(draw):
    """A group_step call whose state a worker could have been sent: each state tensor possibly
    of another shape, dtype or length; possibly a state tensor too few."""
    name = draw(st.sampled_from(sorted(NAMES)))
    shapes = [(4, 3), (5,)] if name != "muon" else [(4, 3), (2, 5)]
    params = [torch.randn(s) for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    names, values = NAMES[name]
    state = list(torch.ops.gilfree_optim.new_state(name, params, grads, names, values))
    k = draw(st.integers(0, len(state) - 1))
    how = draw(st.sampled_from(["shape", "dtype", "drop", "empty", "numel"]))
    if how == "dtype" and state[k].dim() == 0:
        how = "scalar dtype"  # a step count, eta or mu of another floating dtype
    if how in ("dtype", "scalar dtype"):
        state[k] = state[k].to(torch.float16 if state[k].dtype != torch.float16 else torch.float64)
    elif how == "shape":
        state[k] = torch.zeros(tuple(s + 1 for s in state[k].shape) or (2,))
    elif how == "drop":
        del state[k]
    elif how == "empty":
        state[k] = torch.zeros(0)
    else:
        state[k] = torch.zeros(3, 7)
    return name, params, grads, state, names, values, how


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_bad_state())
def test_group_steps_refuse_bad_state_before_any_change(case):
    """Whatever is wrong with the state, the step raises (ValueError or RuntimeError, naming what)
    before changing any parameter, and never crashes; only a one-element counter (step, eta, mu)
    of another floating dtype is taken, as torch's own ops take it (torch's load_state_dict
    casts eta and mu to the parameter's dtype)."""
    name, params, grads, state, names, values, how = case
    before = [p.clone() for p in params]
    try:
        torch.ops.gilfree_optim.group_step(name, params, grads, state, [False] * len(params), names, values, [], [])
    except (ValueError, RuntimeError):
        for p, b in zip(params, before):
            assert torch.equal(p, b), (name, how)
        return
    assert how == "scalar dtype", (name, how)


def test_bad_state_fuzz_can_fail():
    """The property above is not vacuous: well-formed state steps (and changes the parameters)."""
    for name, (names, values) in NAMES.items():
        params = [torch.randn(4, 3)]
        grads = [torch.randn(4, 3)]
        state = torch.ops.gilfree_optim.new_state(name, params, grads, names, values)
        before = params[0].clone()
        torch.ops.gilfree_optim.group_step(name, params, grads, state, [True], names, values, [], [])
        assert not torch.equal(params[0], before), name


# ----------------------------------------------------------------------------- the benchmark runs

def test_bench_group_steps_and_asgd_kernel_quick(tmp_path):
    """``bench_optim.py --group-steps`` (Adafactor and Muon against torch.optim's step) and
    ``--kernels`` for ASGD run at tiny sizes and write their reports (no timing asserted)."""
    import json
    import os
    import subprocess
    import sys

    from tests.support import REPO

    script = os.path.join(REPO, "scripts", "bench_optim.py")
    out = tmp_path / "group.json"
    done = subprocess.run([sys.executable, script, "--group-steps", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())["group_steps"]
    assert set(rows) == {"Adafactor", "Muon"}
    for per_name in rows.values():
        assert set(per_name) == {"1", "2"}
        for per_threads in per_name.values():
            for row in per_threads.values():
                assert set(row["variants"]) == {"torch", "ours"} and row["ours/torch"] > 0
    assert "target: ours/torch <= 1.0" in done.stdout
    out = tmp_path / "kernels.json"
    done = subprocess.run([sys.executable, script, "--kernels", "--quick", "--only", "ASGD", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    row = json.loads(out.read_text())["kernels"]["ASGD"]["1"]["A"]
    assert row["ours/floor"] > 0 and "ours-kernel" in row["variants"]
