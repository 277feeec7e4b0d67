"""Shared helpers for the functional_optim tests: run torch and ours side by side, compare."""
from typing import Any, Dict, List, Optional

import torch

from functional_optim import state_protocol
from functional_optim.scripting import script_optimizer

from tests.support import optim_configs as C


def torch_state(opt: torch.optim.Optimizer) -> Dict[str, Any]:
    return opt.state_dict()


def assert_same_state(
    expected: Dict[str, Any], actual: Dict[str, Any], dtype: torch.dtype, ignore_group_keys=(),
    tol: Optional[Dict[str, float]] = None, step_device: bool = True,
) -> None:
    """Compare two torch-format state dicts: same indices, keys, dtypes, shapes, devices (not
    'step''s without ``step_device``); values within the dtype's tolerance (or ``tol``; 'step'
    exactly); same param groups (every key torch has)."""
    tol = tol or C.tolerances(dtype)
    assert sorted(expected["state"]) == sorted(actual["state"]), "state indices differ"
    for index, entry in expected["state"].items():
        ours = actual["state"][index]
        assert sorted(entry) == sorted(ours), f"state[{index}] keys: torch {sorted(entry)}, ours {sorted(ours)}"
        for key, value in entry.items():
            got = ours[key]
            assert got.dtype == value.dtype, f"state[{index}][{key!r}] dtype {got.dtype} != {value.dtype}"
            assert got.shape == value.shape, f"state[{index}][{key!r}] shape {got.shape} != {value.shape}"
            if key != "step" or step_device:
                assert got.device == value.device, f"state[{index}][{key!r}] on {got.device}, torch's on {value.device}"
            if key == "step":
                assert torch.equal(got.cpu(), value.cpu()), f"state[{index}]['step'] {got} != {value}"
            else:
                torch.testing.assert_close(got, value, **tol, msg=lambda m: f"state[{index}][{key!r}]: {m}")
    assert len(expected["param_groups"]) == len(actual["param_groups"])
    for g, (theirs, ours) in enumerate(zip(expected["param_groups"], actual["param_groups"])):
        for key, value in theirs.items():
            if key in ignore_group_keys:
                continue
            assert key in ours, f"param_groups[{g}] lacks {key!r}"
            assert ours[key] == value, f"param_groups[{g}][{key!r}]: torch {value!r}, ours {ours[key]!r}"


def assert_same_params(
    expected: List[torch.Tensor], actual: List[torch.Tensor], dtype: torch.dtype, tol: Optional[Dict[str, float]] = None
) -> None:
    tol = tol or C.tolerances(dtype)
    for i, (e, a) in enumerate(zip(expected, actual)):
        torch.testing.assert_close(a.detach(), e.detach(), **tol, msg=lambda m: f"param {i}: {m}")


def run_parity(
    info: C.OptimInfo,
    config: C.Config,
    impl: Optional[str],
    dtype: torch.dtype,
    sparse: bool = False,
    steps: int = C.STEPS,
    our_overrides: Optional[Dict[str, Any]] = None,
    torch_overrides: Optional[Dict[str, Any]] = None,
    scripted_too: bool = True,
    tol: Optional[Dict[str, float]] = None,
    late_start: Optional[bool] = None,
    device: str = "cpu",
    step_device: bool = True,
) -> None:
    """Step torch.optim, our eager optimizer and our scripted one on the same gradients and
    compare parameters and full state at the end (and parameters half-way).

    ``our_overrides`` / ``torch_overrides`` are extra constructor arguments of one side only;
    ``scripted_too=False`` leaves out the scripted optimizer; ``tol`` replaces the dtype's
    tolerances; ``late_start`` (default: the info's choice for the implementation) whether one
    parameter's first gradient comes late (:func:`C.gradient_schedule`); ``device``: where
    the parameters and gradients live; ``step_device`` False: the 'step' counters may live on
    another device than torch's."""
    base = [p.to(device) for p in C.make_params(dtype, info=info)]
    torch_params = [torch.nn.Parameter(p.clone()) for p in base]
    eager_params = [p.clone() for p in base]
    script_params = [p.clone() for p in base]
    kwargs = dict(config.kwargs)
    torch_kwargs = dict(config.kwargs)
    if impl is not None:
        kwargs.update(C.impl_flags(info, impl))
        torch_kwargs.update(C.impl_flags(info, impl, for_torch=True))
    ours_kwargs = {**kwargs, **(our_overrides or {})}
    reference = info.torch_class(C.build_params_arg(config, torch_params), **{**torch_kwargs, **(torch_overrides or {})})
    eager = info.ours(C.build_params_arg(config, eager_params), **ours_kwargs)
    if scripted_too:
        scripted = script_optimizer(info.ours(C.build_params_arg(config, script_params), **ours_kwargs))
    else:  # the eager optimizer again, on its own copy
        scripted = info.ours(C.build_params_arg(config, script_params), **ours_kwargs)
    order = C.flat_order(config)
    if late_start is None:
        late_start = info.fused_late_start or impl != "fused"
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        grads = C.make_gradients(step, dtype, generator, sparse, late_start, info=info)
        grads = [None if g is None else g.to(device) for g in grads]
        for p, g in zip(torch_params, grads):
            p.grad = None if g is None else g.clone()  # torch may write into .grad
        reference.step()
        flat = [grads[i] for i in order]
        eager.step(flat)
        scripted.step(flat)
        if step == steps // 2:
            assert_same_params(torch_params, eager_params, dtype, tol)
            assert_same_params(torch_params, script_params, dtype, tol)
    assert_same_params(torch_params, eager_params, dtype, tol)
    assert_same_params(torch_params, script_params, dtype, tol)
    expected = reference.state_dict()
    # the implementation flags differ on purpose when one side is given its own
    ignore = ("foreach", "fused") if torch_overrides or our_overrides else ()
    for ours in (eager, scripted):
        assert_same_state(
            expected, state_protocol.state_dict(ours), dtype, ignore_group_keys=ignore, tol=tol, step_device=step_device
        )


def run_compiled_against_eager(
    info: C.OptimInfo, config: C.Config, late_start: bool = True, impl: Optional[str] = None, device: str = "cpu",
    tol: Optional[Dict[str, float]] = None,
) -> Any:
    """Four steps of our optimizer (``config``) eagerly and under ``torch.compile(fullgraph=True)``
    from the same start, on the same gradients (``late_start``: as :func:`C.gradient_schedule`;
    parameter 1 skips a step either way), on ``device``. ``impl`` None: the default
    implementation, the op library's group step where it takes the device (asserted on the
    CPU), whose parameters and state must be equal bitwise; ``impl`` "single" or "foreach"
    (and the default where it is one of them): traced by Dynamo and fused by Inductor, equal to
    float32's tolerance (or ``tol``). Returns the compiled side's optimizer."""
    import copy

    import torch._dynamo

    torch._dynamo.reset()
    flags = C.impl_flags(info, impl) if impl is not None else {}
    eager_params = [p.to(device).requires_grad_() for p in C.make_params(torch.float32, info=info)]
    compiled_params = [p.detach().clone().requires_grad_() for p in eager_params]
    eager = info.ours(C.build_params_arg(config, eager_params), **copy.deepcopy(config.kwargs), **flags)
    compiled = info.ours(C.build_params_arg(config, compiled_params), **copy.deepcopy(config.kwargs), **flags)
    if impl is None and device == "cpu":
        assert all(i == "fused" for i in compiled._s.impl), compiled._s.impl  # the default path
    exact = all(i == "fused" for i in compiled._s.impl)

    def same(got: torch.Tensor, want: torch.Tensor, what: Any) -> None:
        if exact:
            assert torch.equal(got, want), what
        else:
            torch.testing.assert_close(got, want, **(tol or C.tolerances(torch.float32)), msg=lambda m: f"{what}: {m}")

    step = torch.compile(compiled.step, fullgraph=True)
    gen = torch.Generator().manual_seed(7)
    for k in range(4):
        grads = C.make_gradients(k, torch.float32, gen, late_start=late_start, info=info)
        grads = [None if grads[i] is None else grads[i].to(device) for i in C.flat_order(config)]
        eager.step(grads)
        step(grads)
    for k, (got, want) in enumerate(zip(compiled_params, eager_params)):
        same(got.detach(), want.detach(), f"parameter {k}")
    theirs, mine = eager.state_dict()["state"], compiled.state_dict()["state"]
    assert theirs.keys() == mine.keys()
    for i in theirs:
        assert list(theirs[i]) == list(mine[i])
        for key in theirs[i]:
            same(torch.as_tensor(mine[i][key]), torch.as_tensor(theirs[i][key]), (i, key))
    return compiled
