"""state_dict()/load_state_dict() in torch.optim's exact format, both ways, for every optimizer
(and through the state protocol of a scripted OptimizerModule)."""
import copy

import pytest
import torch

import functional_optim as F
from functional_optim import state_protocol
from functional_optim.scripting import script_optimizer

from tests.support import optim_configs as C
from tests.support.optim_helpers import assert_same_params, assert_same_state

DTYPE = torch.float64


def _pair(info, config, impl):
    """A torch optimizer and ours on separate copies of the same parameters."""
    base = C.make_params(DTYPE, info=info)
    torch_params = [torch.nn.Parameter(p.clone()) for p in base]
    our_params = [p.clone() for p in base]
    kwargs = {**config.kwargs, **C.impl_flags(info, impl)}
    reference = info.torch_class(
        C.build_params_arg(config, torch_params), **config.kwargs, **C.impl_flags(info, impl, for_torch=True))
    ours = info.ours(C.build_params_arg(config, our_params), **kwargs)
    return reference, torch_params, ours, our_params


def _steps(reference, torch_params, ours, config, start, stop, seed, step_torch=True, step_ours=True, info=None):
    generator = torch.Generator().manual_seed(seed)
    order = C.flat_order(config)
    for step in range(start, stop):
        grads = C.make_gradients(step, DTYPE, generator, late_start=False, info=info)
        if step_torch:
            for p, g in zip(torch_params, grads):
                p.grad = None if g is None else g.clone()
            reference.step()
        if step_ours:
            ours.step([grads[i] for i in order])


def _richest_config(info):
    return info.configs[-1]  # the multi-group config: different hyperparameters per group


CASES = [
    pytest.param(info, impl, id=f"{info.name}-{impl}") for info in C.INFOS for impl in info.impls
]


def _check_state_transfer(info, impl, from_torch):
    """Step one side (torch's optimizer when ``from_torch``, else ours) 7 times while the other
    does not step; copy its parameters and then its state dict into the other; step both and
    compare."""
    config = _richest_config(info)
    reference, torch_params, ours, our_params = _pair(info, config, impl)
    _steps(reference, torch_params, ours, config, 0, 7, seed=5, step_torch=from_torch, step_ours=not from_torch,
           info=info)
    source, target = (reference, ours) if from_torch else (ours, reference)
    with torch.no_grad():
        for mine, theirs in zip(our_params, torch_params):
            if from_torch:
                mine.copy_(theirs)
            else:
                theirs.copy_(mine)
    saved = copy.deepcopy(source.state_dict())
    target.load_state_dict(copy.deepcopy(saved))
    # torch casts while loading (e.g. NAdam's 'mu_product' takes the parameter's dtype), so
    # both sides load the same dict before they are compared.
    source.load_state_dict(saved)
    assert_same_state(reference.state_dict(), ours.state_dict(), DTYPE)
    _steps(reference, torch_params, ours, config, 7, 15, seed=6, info=info)
    assert_same_params(torch_params, our_params, DTYPE)
    assert_same_state(reference.state_dict(), ours.state_dict(), DTYPE)


@pytest.mark.parametrize("info, impl", CASES)
def test_torch_state_loads_into_ours(info, impl):
    _check_state_transfer(info, impl, from_torch=True)


@pytest.mark.parametrize("info, impl", CASES)
def test_our_state_loads_into_torch(info, impl):
    _check_state_transfer(info, impl, from_torch=False)


@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_state_dict_through_scripted_module(info):
    """The protocol functions work on a ScriptModule that forwards the protocol methods."""
    config = _richest_config(info)
    reference, torch_params, ours, our_params = _pair(info, config, "single")
    module = script_optimizer(ours)
    _steps(reference, torch_params, module, config, 0, 6, seed=5, info=info)
    assert_same_state(reference.state_dict(), state_protocol.state_dict(module), DTYPE)
    # Round trip through torch: load torch's state into a fresh scripted optimizer.
    fresh_params = [p.detach().clone() for p in torch_params]
    fresh = script_optimizer(info.ours(C.build_params_arg(config, fresh_params), **config.kwargs))
    saved = copy.deepcopy(reference.state_dict())
    state_protocol.load_state_dict(fresh, copy.deepcopy(saved))
    reference.load_state_dict(saved)
    _steps(reference, torch_params, fresh, config, 6, 12, seed=7, info=info)
    assert_same_params(torch_params, fresh_params, DTYPE)
    assert_same_state(reference.state_dict(), state_protocol.state_dict(fresh), DTYPE)


def test_adam_step_is_float32_scalar_and_keys_match_torch():
    p = [torch.randn(4, 5)]
    ours = F.Adam(p, amsgrad=True)
    ours.step([torch.randn(4, 5)])
    state = ours.state_dict()["state"][0]
    assert list(state) == ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    assert state["step"].dtype == torch.float32 and state["step"].dim() == 0
    assert state["exp_avg"].shape == (4, 5)
    group = ours.state_dict()["param_groups"][0]
    assert group["betas"] == (0.9, 0.999) and group["params"] == [0]
    fused = F.Adam([torch.randn(3)], fused=True)
    fused.step([torch.randn(3)])
    assert fused.get_state()[0]["step"].dtype == torch.float32


def test_load_state_dict_rejects_mismatch_and_changes_nothing():
    params = [torch.randn(3), torch.randn(2)]
    ours = F.Adam(params, lr=0.1)
    ours.step([torch.randn(3), torch.randn(2)])
    before = copy.deepcopy(ours.state_dict())
    other = F.Adam([torch.randn(3)]).state_dict()
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        ours.load_state_dict(other)
    bad = copy.deepcopy(before)
    bad["param_groups"][0]["lr"] = 0.5
    bad["state"][1]["exp_avg"] = torch.zeros(7)
    with pytest.raises(ValueError, match=r"state\[1\]\['exp_avg'\] has shape \[7\]"):
        ours.load_state_dict(bad)
    bad = copy.deepcopy(before)
    bad["param_groups"][0]["eps"] = -1.0
    with pytest.raises(ValueError, match="Invalid epsilon value"):
        ours.load_state_dict(bad)
    assert_same_state(before, ours.state_dict(), torch.float32)
    assert ours.param_groups[0]["lr"] == 0.1


@pytest.mark.parametrize("key", ["exp_avg", "exp_avg_sq"])
def test_a_state_tensor_of_another_shape_is_refused_even_0_dim(key):
    """A 0-dim tensor for a state the optimizer keeps per element would let the group step (torch's
    fused kernel) read and write past it: refused, as any other shape that does not fit, by the
    load every kind of local optimizer and functional_optim share."""
    param = torch.zeros(4, 5)
    optimizer = F.Adam([param], lr=0.01)
    state = {"step": torch.tensor(1.0), "exp_avg": torch.zeros(4, 5), "exp_avg_sq": torch.zeros(4, 5)}
    state[key] = torch.tensor(0.0)
    with pytest.raises(ValueError, match=rf"state\[0\]\['{key}'\] has shape \[\] but this optimizer keeps it with shape \[4, 5\]"):
        optimizer.load_state_dict({"state": {0: state}, "param_groups": optimizer.state_dict()["param_groups"]})
    assert optimizer.state_dict()["state"] == {}
