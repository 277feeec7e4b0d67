"""Property-based parity with torch.optim (hypothesis): parameter lists, layouts, dtypes and
hyperparameters drawn, not picked.

Every functional optimizer, on every implementation it has (single-tensor, multi-tensor, the
default: the op library's group step, packed or not), over parameter lists drawn from 0-d,
1-d, empty, (n, 1), 3-d and 4-d shapes, laid out contiguous, transposed, channels_last, with
gaps (a strided view) or at a storage offset, each with a gradient of a layout of its own;
float32, float64 and bfloat16; each optimizer's flag configurations from the table
(tests/support/optim_configs.py: weight decay, maximize, amsgrad, nesterov, centered...), with
``lr`` a number or a Tensor (of the parameters' dtype, or float32: then within the differences
docs/functional_optimizers.md lists). The reference is torch.optim's implementation of the same name (its
single-tensor one for the default and the fused) on contiguous copies of the same parameters; parameters and state must agree within the dtype's
tolerance after a few steps. Sparse gradients (SGD, Adagrad, SparseAdam) are drawn the same
way over their shapes, sparse dimensions, coalescing and dtypes, and the native owner's path
(plugin.optim.NativeLocalOptimizer) over a smaller draw.

Bounded for CI: a fixed number of examples per test (derandomized: the same draws on every
run), no deadline; each test takes a few seconds.
"""
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import functional_optim as F
from tests.support import optim_configs as C

SETTINGS = settings(
    max_examples=30, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
STEPS = 3
DTYPES = [torch.float32, torch.float64, torch.bfloat16]
SHAPES: List[Tuple[int, ...]] = [(), (5,), (0, 4), (0,), (4, 1), (2, 3, 2), (3, 2, 2, 2), (3, 4)]
LAYOUTS = ["contiguous", "transposed", "channels_last", "gaps", "offset"]


def tolerance(dtype: torch.dtype) -> Dict[str, float]:
    """Within rounding of torch's single-tensor path: the default path runs fused kernels (in
    float32 for bfloat16, rounded once), the reference rounds each op."""
    if dtype == torch.bfloat16:
        return {"rtol": 3e-2, "atol": 3e-2}
    return C.tolerances(dtype)


def layouts_for(shape: Tuple[int, ...]) -> List[str]:
    """The layouts a tensor of ``shape`` can take that differ from the contiguous one."""
    out = ["contiguous", "offset"]
    if len(shape) >= 2 and shape[0] > 1 and shape[1] > 1:
        out.append("transposed")
    if len(shape) == 4:
        out.append("channels_last")
    if len(shape) >= 1 and shape[-1] > 1:
        out.append("gaps")
    return out


def laid_out(values: torch.Tensor, layout: str) -> torch.Tensor:
    """A tensor equal to ``values`` (a leaf, not requiring grad) laid out as ``layout``."""
    if layout == "contiguous":
        return values.clone()
    if layout == "transposed":
        return values.transpose(0, 1).contiguous().transpose(0, 1)
    if layout == "channels_last":
        return values.contiguous(memory_format=torch.channels_last)
    if layout == "gaps":  # every other element of a wider buffer
        buffer = torch.zeros(*values.shape[:-1], 2 * values.shape[-1], dtype=values.dtype)
        view = buffer[..., ::2]
        view.copy_(values)
        return view
    assert layout == "offset"  # a view 3 elements into a larger buffer
    buffer = torch.zeros(values.numel() + 3, dtype=values.dtype)
    view = buffer[3:].view(values.shape)
    view.copy_(values)
    return view


@st.composite
def param_lists(draw, shapes: List[Tuple[int, ...]], max_size: int = 4):
    """(shape, parameter layout, gradient layout) per parameter."""
    n = draw(st.integers(1, max_size))
    out = []
    for _ in range(n):
        shape = draw(st.sampled_from(shapes))
        options = layouts_for(shape)
        out.append((shape, draw(st.sampled_from(options)), draw(st.sampled_from(options))))
    return out


def make_values(specs, dtype: torch.dtype, seed: int) -> List[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5).to(dtype) for s, _, _ in specs]


def make_grads(specs, dtype: torch.dtype, gen: torch.Generator, skip: Optional[int]) -> List[Optional[torch.Tensor]]:
    grads: List[Optional[torch.Tensor]] = []
    for k, (shape, _, grad_layout) in enumerate(specs):
        g = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        grads.append(None if k == skip else laid_out(g, grad_layout))
    return grads


def compare(torch_params, our_params, reference, ours_state: Dict[str, Any], dtype, tol=None) -> None:
    tol = tol or tolerance(dtype)
    for k, (want, got) in enumerate(zip(torch_params, our_params)):
        torch.testing.assert_close(got.detach().float(), want.detach().float(), **tol, msg=lambda m: f"param {k}: {m}")
    expected = reference.state_dict()["state"]
    assert sorted(expected) == sorted(ours_state["state"])
    for index, entry in expected.items():
        for key, value in entry.items():
            got = torch.as_tensor(ours_state["state"][index][key])
            value = torch.as_tensor(value)
            assert got.shape == value.shape, (index, key)
            torch.testing.assert_close(got.float(), value.float(), **tol, msg=lambda m: f"state[{index}][{key!r}]: {m}")


def dense_infos():
    return [info for info in C.INFOS]


def lr_of(info: C.OptimInfo, config: C.Config) -> float:
    import inspect

    return config.kwargs.get("lr", inspect.signature(info.ours.__init__).parameters["lr"].default)


def takes_tensor_lr(info: C.OptimInfo, impl: Optional[str]) -> bool:
    """torch.optim refuses a Tensor lr with foreach=True in Adam and AdamW (capturable=False)."""
    return not (impl == "foreach" and info.name in ("Adam", "AdamW"))


@pytest.mark.parametrize("info", dense_infos(), ids=str)
@SETTINGS
@given(data=st.data())
def test_dense_steps_match_torch(info, data):
    """Draw the implementation, dtype, parameters (shapes, layouts, gradients' layouts), a flag
    configuration, a float or Tensor lr, and a parameter whose first gradient comes a step late
    (its state made later: the group step then takes its state tensors one by one, not packed)."""
    impl = data.draw(st.sampled_from([None, *info.impls]), label="impl")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shapes = [s for s in SHAPES if len(s) == 2 and 0 not in s] if info.name == "Muon" else SHAPES
    specs = data.draw(param_lists(shapes), label="params")
    config = data.draw(st.sampled_from([c for c in info.configs if c.groups is None]), label="config")
    tensor_lr = data.draw(st.booleans(), label="tensor_lr") and takes_tensor_lr(info, impl)
    late = data.draw(st.sampled_from([None, *range(len(specs))]), label="late")
    if info.name == "Adafactor":
        # torch's Adafactor divides by an empty parameter's numel (ZeroDivisionError); ours
        # leaves it as it is (tested below)
        specs = [s for s in specs if 0 not in s[0]] or [((5,), "contiguous", "contiguous")]
    values = make_values(specs, dtype, seed=len(specs))
    kwargs = dict(config.kwargs)
    lr_dtype = data.draw(st.sampled_from([dtype, torch.float32]), label="lr_dtype") if tensor_lr else None
    if lr_dtype == torch.bfloat16:
        lr_dtype = torch.float32
    if tensor_lr:
        kwargs["lr"] = torch.tensor(lr_of(info, config), dtype=lr_dtype)
    torch_params = [torch.nn.Parameter(v.clone()) for v in values]
    our_params = [laid_out(v, layout) for v, (_, layout, _) in zip(values, specs)]
    # torch's implementation of the same name (its single-tensor one for the default and fused)
    torch_impl = impl if impl in ("single", "foreach") else "single"
    reference = info.torch_class(torch_params, **kwargs, **C.impl_flags(info, torch_impl, for_torch=True))
    ours = info.ours(our_params, **kwargs, **({} if impl is None else C.impl_flags(info, impl)))
    gen = torch.Generator().manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(STEPS):
            grads = make_grads(specs, dtype, gen, late if step == 0 else None)
            for p, g in zip(torch_params, grads):
                p.grad = None if g is None else g.contiguous()
            reference.step()
            ours.step(grads)
    tol = None
    if tensor_lr and lr_dtype == torch.float32 and dtype == torch.float64:
        # a float32 Tensor lr for float64 parameters: torch computes some of a step's scalars in
        # float32, ours in double (docs/functional_optimizers.md lists each optimizer's
        # difference, at most 7e-7 relative)
        tol = {"rtol": 2e-6, "atol": 1e-9}
    elif info.name == "ASGD" and impl == "foreach" and tensor_lr and dtype == torch.float64:
        # torch's multi-tensor ASGD computes eta (float32 state) in the Tensor lr's dtype,
        # ours in float32 (docs/functional_optimizers.md): one float32 ulp of eta, 1e-7 of the
        # parameters
        tol = {"rtol": 1e-6, "atol": 1e-9}
    compare(torch_params, our_params, reference, F.state_dict(ours), dtype, tol)


@pytest.mark.parametrize("info", [i for i in C.INFOS if i.name != "Muon"], ids=str)
def test_empty_parameters_alone_are_taken(info):
    """A group of only empty parameters (the draws above put them beside others): every
    implementation steps it as torch.optim does (state, step counts). torch's Adafactor divides
    by an empty parameter's numel (ZeroDivisionError): our single-tensor and multi-tensor paths,
    its code, raise the same; our default path steps it (nothing to change)."""
    for impl in [None, *info.impls]:
        torch_params = [torch.nn.Parameter(torch.zeros(0, 4)), torch.nn.Parameter(torch.zeros(0))]
        params = [torch.zeros(0, 4), torch.zeros(0)]
        ours = info.ours(params, **({} if impl is None else C.impl_flags(info, impl)))
        if info.name == "Adafactor":
            if impl is not None:
                with pytest.raises(ZeroDivisionError):
                    ours.step([torch.zeros(0, 4), torch.zeros(0)])
            else:
                ours.step([torch.zeros(0, 4), torch.zeros(0)])
                assert [p.shape for p in params] == [(0, 4), (0,)]
            continue
        torch_impl = impl if impl in ("single", "foreach") else "single"
        reference = info.torch_class(torch_params, **C.impl_flags(info, torch_impl, for_torch=True))
        for _ in range(2):
            for p in torch_params:
                p.grad = torch.zeros(p.shape)
            reference.step()
            ours.step([torch.zeros(0, 4), torch.zeros(0)])
        compare(torch_params, params, reference, F.state_dict(ours), torch.float32)


SPARSE = {
    "SGD": (torch.optim.SGD, F.SGD, [{"lr": 0.05}, {"lr": 0.05, "maximize": True}, {"lr": 0.05, "momentum": 0.9}]),
    "Adagrad": (torch.optim.Adagrad, F.Adagrad,
                [{"lr": 0.05}, {"lr": 0.05, "lr_decay": 0.01, "maximize": True, "initial_accumulator_value": 0.1}]),
    "SparseAdam": (torch.optim.SparseAdam, F.SparseAdam,
                   [{"lr": 0.01}, {"lr": 0.01, "maximize": True, "betas": (0.8, 0.99)}]),
}
SPARSE_SHAPES = [(5,), (6, 3), (0, 4), (3, 2, 2), (1,)]


def sparse_of(dense: torch.Tensor, sparse_dim: int, coalesced: bool, gen: torch.Generator) -> torch.Tensor:
    """About half of ``dense``'s rows (leading ``sparse_dim`` dims) as a sparse COO tensor;
    uncoalesced: its entries split in two, one of them repeated."""
    mask = torch.rand(dense.shape[:sparse_dim], generator=gen) < 0.5
    kept = dense * mask.reshape(*mask.shape, *[1] * (dense.dim() - sparse_dim)).to(dense.dtype)
    s = kept.to_sparse(sparse_dim)
    if coalesced or s._nnz() == 0:
        return s
    values = s._values()
    half = values / 2
    return torch.sparse_coo_tensor(
        torch.cat([s._indices(), s._indices()], 1), torch.cat([half, values - half]), s.shape
    )


@pytest.mark.parametrize("name", list(SPARSE), ids=str)
@SETTINGS
@given(data=st.data())
def test_sparse_steps_match_torch(name, data):
    """Sparse gradients: shapes, sparse dimensions, coalesced or not, parameters contiguous or
    views at a storage offset (torch's own dense += sparse kernel writes outside the storage
    there: the reference steps contiguous copies), float or Tensor lr, default and single-tensor
    implementation."""
    torch_class, cls, configs = SPARSE[name]
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    shapes = data.draw(st.lists(st.sampled_from(SPARSE_SHAPES), min_size=1, max_size=3), label="shapes")
    layouts = [data.draw(st.sampled_from(["contiguous", "offset"]), label="layout") for _ in shapes]
    sparse_dims = [data.draw(st.integers(1, len(s)), label="sparse_dim") for s in shapes]
    coalesced = data.draw(st.booleans(), label="coalesced")
    kwargs = dict(data.draw(st.sampled_from(configs), label="config"))
    if name == "SparseAdam" and data.draw(st.booleans(), label="tensor_lr"):
        kwargs["lr"] = torch.tensor(kwargs["lr"], dtype=data.draw(st.sampled_from([torch.float32, torch.float64])))
    flags = {} if name == "SparseAdam" else data.draw(st.sampled_from([{}, {"foreach": False}]), label="impl")
    gen = torch.Generator().manual_seed(5)
    values = [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5).to(dtype) for s in shapes]
    torch_params = [torch.nn.Parameter(v.clone()) for v in values]
    our_params = [laid_out(v, layout) for v, layout in zip(values, layouts)]
    reference = torch_class(torch_params, **kwargs)
    ours = cls(our_params, **kwargs, **flags)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(STEPS):
            grads = [sparse_of(torch.randn(s, generator=gen, dtype=dtype), d, coalesced, gen)
                     for s, d in zip(shapes, sparse_dims)]
            for p, g in zip(torch_params, grads):
                p.grad = g.clone()
            reference.step()
            ours.step([g.clone() for g in grads])
    compare(torch_params, our_params, reference, F.state_dict(ours), dtype)


def test_sparse_adam_tensor_lr_one_dimensional_parameter_is_torchs():
    """The case of issue 47 (a Tensor lr, a 1-D parameter among others: the packed state's
    views at an offset of their buffer), ten steps: torch's parameters to the bit."""
    torch.manual_seed(0)
    ps = [torch.randn(s, dtype=torch.float64) for s in [(5, 4), (5,), (3, 3)]]
    ref_p = [torch.nn.Parameter(p.clone()) for p in ps]
    our_p = [p.clone() for p in ps]
    ref = torch.optim.SparseAdam(ref_p, lr=torch.tensor(0.001))
    ours = F.SparseAdam(our_p, lr=torch.tensor(0.001))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(10):
            gs = [(g * (torch.rand(g.shape[0]) < 0.5).to(g.dtype).reshape(-1, *[1] * (g.dim() - 1))).to_sparse()
                  for g in (torch.randn(p.shape, dtype=p.dtype) for p in ps)]
            for p, g in zip(ref_p, gs):
                p.grad = g.clone()
            ref.step()
            ours.step([g.clone() for g in gs])
    for a, b in zip(ref_p, our_p):
        assert torch.equal(a.detach(), b)


# --- the native owner's path -------------------------------------------------------------

NATIVE = [F.SGD, F.Adam, F.AdamW, F.Adagrad, F.RMSprop, F.Adamax, F.Adadelta, F.Rprop, F.NAdam, F.RAdam]


def draw_native_case(data):
    """(optimizer class, its OptimInfo, dtype, parameter specs, keyword arguments) for the native
    owner's path: one of NATIVE, float32 or float64, up to 3 drawn parameters, one of the table's
    one-group configurations, ``lr`` a number or a Tensor of the parameters' dtype (also
    tests/optim/test_property_parity_distributed.py)."""
    cls = data.draw(st.sampled_from(NATIVE), label="optimizer")
    info = C.INFO_BY_NAME[cls.__name__]
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]), label="dtype")
    specs = data.draw(param_lists(SHAPES, max_size=3), label="params")
    config = data.draw(st.sampled_from([c for c in info.configs if c.groups is None]), label="config")
    kwargs = dict(config.kwargs)
    if data.draw(st.booleans(), label="tensor_lr"):
        kwargs["lr"] = torch.tensor(lr_of(info, config), dtype=dtype)
    return cls, info, dtype, specs, kwargs


def torch_reference(info: C.OptimInfo, values: List[torch.Tensor], kwargs: Dict[str, Any]):
    """torch.optim's optimizer of a drawn native case (:func:`draw_native_case`): Parameters
    holding copies of ``values``, and the class of ``info`` over them with ``kwargs`` and its
    single-tensor implementation (the reference of both the native owner's tests)."""
    torch_params = [torch.nn.Parameter(v.clone()) for v in values]
    return torch_params, info.torch_class(torch_params, **kwargs, **C.impl_flags(info, "single", for_torch=True))


@SETTINGS
@given(data=st.data())
def test_native_local_optimizer_matches_torch(data):
    """plugin.optim.NativeLocalOptimizer (the native owner's step, C++) over drawn parameters, layouts
    and gradients' layouts: torch.optim's results within the dtype's tolerance."""
    from plugin.optim import NativeLocalOptimizer

    cls, info, dtype, specs, kwargs = draw_native_case(data)
    values = make_values(specs, dtype, seed=3)
    torch_params, reference = torch_reference(info, values, kwargs)
    our_params = [laid_out(v, layout) for v, (_, layout, _) in zip(values, specs)]
    native = NativeLocalOptimizer(cls, our_params, **kwargs)
    gen = torch.Generator().manual_seed(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(STEPS):
            grads = make_grads(specs, dtype, gen, 0 if step == 0 and len(specs) > 1 else None)
            for p, g in zip(torch_params, grads):
                p.grad = None if g is None else g.contiguous()
            reference.step()
            native.step_gradients(grads)
    compare(torch_params, our_params, reference, native.state_dict(), dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("kwargs", [{"lr": 0.05}, {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.1},
                                    {"lr": 0.05, "momentum": 0.9, "nesterov": True, "maximize": True}], ids=str)
def test_sgd_reduced_precision_default_is_torchs_single_tensor_step(dtype, kwargs):
    """torch 2.13's _fused_sgd_ on the CPU leaves the vectorized part of a bfloat16/float16
    tensor unchanged: SGD's default path steps those dtypes with torch's single-tensor code,
    to its bits (64 and 100 elements: whole vectors and a tail)."""
    gen = torch.Generator().manual_seed(0)
    values = [(torch.rand(n, generator=gen, dtype=torch.float64) + 0.5).to(dtype) for n in (64, 100)]
    torch_params = [torch.nn.Parameter(v.clone()) for v in values]
    ours_params = [v.clone() for v in values]
    reference = torch.optim.SGD(torch_params, foreach=False, **kwargs)
    ours = F.SGD(ours_params, **kwargs)
    for _ in range(5):
        grads = [torch.randn(v.shape, generator=gen).to(dtype) for v in values]
        for p, g in zip(torch_params, grads):
            p.grad = g.clone()
        reference.step()
        ours.step(grads)
    for want, got in zip(torch_params, ours_params):
        assert torch.equal(want.detach(), got)
