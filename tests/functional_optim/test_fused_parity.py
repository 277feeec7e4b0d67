"""``fused=True`` of every functional_optim class against torch.optim's single-tensor step.

For every optimizer and every configuration of the table (``tests/support/optim_configs.py``:
param groups, skipped parameters, late starts), 50 steps of ours with ``fused=True`` and of
``torch.optim.<Class>(foreach=False)`` from the same start must agree element by element:
parameters half-way and at the end, and the whole state at the end (float64: rtol 1e-10;
float32: rtol 1e-5, atol 1e-6), eagerly and as TorchScript. ``fused=True`` runs the op library's
group step (``functional_optim/csrc/steps``): torch's fused kernels for SGD, Adam, AdamW and
Adagrad, this package's for the others (this package's kernels for those four are checked
against torch in ``test_fused_kernels.py``).
"""
import pytest
import torch

import functional_optim
from functional_optim import _kernels
from tests.support import optim_configs as C
from tests.support.optim_helpers import run_parity

pytestmark = pytest.mark.timeout(600)

DTYPES = [torch.float32, torch.float64]
CASES = [
    pytest.param(info, config, dtype, id=f"{info.name}-{config.name}-{str(dtype)[6:]}")
    for info in C.INFOS
    for config in info.configs
    for dtype in DTYPES
]


@pytest.fixture(scope="module", autouse=True)
def _library():
    if not _kernels.available():
        pytest.fail(f"the op library with the fused kernels did not load: {_kernels.default_error()}")


@pytest.mark.parametrize("info, config, dtype", CASES)
def test_fused_matches_torch_single_tensor(info, config, dtype):
    run_parity(info, config, None, dtype, our_overrides={"fused": True},
               torch_overrides=C.impl_flags(info, "single", for_torch=True))


def test_parity_check_can_fail():
    """The comparison is not a tautology: a slightly different lr on the fused side is caught."""
    info = C.INFO_BY_NAME["RAdam"]
    with pytest.raises(AssertionError):
        run_parity(
            info, info.configs[0], None, torch.float64, steps=5, our_overrides={"fused": True, "lr": 0.01 * (1 + 1e-6)}
        )


@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_fused_errors_are_torchs(info):
    """torch's rules for fused=True: not with foreach, not with differentiable, floating point only,
    sparse gradients rejected at step (before any change)."""
    params = C.make_params(torch.float32, info=info)
    if C.takes(info, "foreach"):
        with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together."):
            info.ours(params, fused=True, foreach=True)
    if C.takes(info, "differentiable"):
        with pytest.raises(RuntimeError, match="`fused` does not support `differentiable`"):
            info.ours(params, fused=True, differentiable=True)
    int_shape = C.shapes_of(info)[0]
    with pytest.raises(RuntimeError, match="`fused=True` requires all the params to be floating point"):
        info.ours([torch.zeros(int_shape, dtype=torch.int64)], fused=True)
    opt = info.ours(params, fused=True)
    before = [p.clone() for p in params]
    sparse = [torch.ones(s) for s in C.shapes_of(info)]
    sparse[0] = sparse[0].to_sparse()
    with pytest.raises(RuntimeError):
        opt.step(sparse)
    assert all(torch.equal(p, b) for p, b in zip(params, before))


@pytest.mark.parametrize("info", [i for i in C.INFOS if i.sparse_configs], ids=str)
def test_default_keeps_the_sparse_path(info):
    """A group that runs fused by default steps sparse gradients with torch's choice, as before."""
    run_parity(info, info.sparse_configs[0], None, torch.float64, sparse=True, steps=10)


# Sizes that make the group step cut its CPU parameters into runs (csrc/group_step.cpp:
# inPieces): small ones (under 128K elements, 64K+ in all) spread over the intra-op threads, a
# large one stepped apart, float64 ones in a part of their own.
_PIECE_SHAPES = [(40_000,), (300, 100), (200_000,), (7,), (25_000,), (16_384,), (5, 5)]

# The four optimizers whose group steps run torch's fused kernels, with options that reach
# their branches (momentum and nesterov, amsgrad, decoupled and L2 weight decay, lr decay).
_TORCH_KERNEL_CASES = pytest.mark.parametrize(
    "name, kwargs",
    [
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
        ("SGD", {"lr": 0.1}),
        ("Adam", {"lr": 0.01, "amsgrad": True}),
        ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
        ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01}),
    ],
    ids=lambda x: x if isinstance(x, str) else "-".join(f"{k}={v}" for k, v in x.items()),
)


@pytest.mark.parametrize("threads", [1, 2, 3])
@_TORCH_KERNEL_CASES
def test_default_step_in_pieces_equals_torch_fused_bit_for_bit(threads, name, kwargs):
    """The default step of the four optimizers that run torch's fused kernels, on parameters
    that the group step splits across threads, equals torch.optim's fused step (the same
    kernels, one call per device and dtype) to the bit; a parameter without a gradient at the
    first step starts later (not with SGD's momentum: torch's fused SGD raises a TypeError on a
    mix of new and old buffers, which our group step passes in two calls)."""
    gen = torch.Generator().manual_seed(3)
    shapes = _PIECE_SHAPES
    dtypes = [torch.float32] * (len(shapes) - 2) + [torch.float64] * 2
    ours_params = [torch.randn(s, generator=gen).to(d) for s, d in zip(shapes, dtypes)]
    torch_params = [p.clone().requires_grad_() for p in ours_params]
    ours = getattr(functional_optim, name)(ours_params, **kwargs)
    reference = getattr(torch.optim, name)(torch_params, fused=True, **kwargs)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(4):
            grads = [torch.randn(s, generator=gen).to(d) for s, d in zip(shapes, dtypes)]
            if step == 0 and not kwargs.get("momentum"):
                grads[4] = None
            for p, g in zip(torch_params, grads):
                p.grad = None if g is None else g.clone()
            reference.step()
            ours.step(grads)
            for k, (a, b) in enumerate(zip(ours_params, torch_params)):
                assert torch.equal(a, b.detach()), f"{name} step {step}: parameter {k} ({shapes[k]}) differs"
    finally:
        torch.set_num_threads(previous)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@_TORCH_KERNEL_CASES
def test_default_step_on_cuda_equals_torch(name, kwargs):
    """On CUDA parameters the group step calls torch's fused kernel once per device and dtype,
    its step counters counted on the device: equal to torch.optim's ``fused=True`` step to the
    bit (Adagrad, whose ``fused=True`` torch.optim refuses on CUDA: equal to its foreach step
    to rounding)."""
    gen = torch.Generator().manual_seed(3)
    shapes = _PIECE_SHAPES[:5]
    ours_params = [torch.randn(s, generator=gen).cuda() for s in shapes]
    torch_params = [p.clone().requires_grad_() for p in ours_params]
    ours = getattr(functional_optim, name)(ours_params, **kwargs)
    impl = {"fused": True} if name != "Adagrad" else {"foreach": True}
    reference = getattr(torch.optim, name)(torch_params, **impl, **kwargs)
    for _ in range(4):
        grads = [torch.randn(s, generator=gen).cuda() for s in shapes]
        for p, g in zip(torch_params, grads):
            p.grad = g.clone()
        reference.step()
        ours.step(grads)
    for k, (a, b) in enumerate(zip(ours_params, torch_params)):
        if name == "Adagrad":
            torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(a, b.detach()), f"{name}: parameter {k} ({shapes[k]}) differs"
    for state in ours.state_dict()["state"].values():
        if "step" in state:
            assert float(state["step"]) == 4.0 and state["step"].device.type == "cuda"


def test_adagrads_constructor_makes_the_state_its_group_step_takes():
    """torch makes Adagrad's state in its constructor; ours does, for the default (fused)
    implementation, as the op library's group step makes state (``new_state``): its 'step' as
    torch.optim's ``fused=True`` one, float32 on the parameter's device, also with float64 as
    the default dtype (torch's single-tensor step then makes a float64 one, on the CPU); every
    'sum' from the constructor's initial_accumulator_value, also in a group given its own (as
    torch). On CUDA a CPU step made the fused kernel refuse the step
    (tests/functional_optim/test_cuda_optim.py)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        params = [torch.randn(3), torch.randn(2, 2)]

        def groups(ps):
            return [{"params": [ps[0]]}, {"params": [ps[1]], "initial_accumulator_value": 0.7}]

        ours = functional_optim.Adagrad(groups([p.clone() for p in params]), initial_accumulator_value=0.5)
        theirs = torch.optim.Adagrad(groups([p.clone() for p in params]), initial_accumulator_value=0.5, fused=True)
        assert ours._s.impl == ["fused", "fused"]
        for i in range(2):
            for key in ("step", "sum"):
                got, want = ours.state_dict()["state"][i][key], theirs.state_dict()["state"][i][key]
                assert (got.dtype, got.device) == (want.dtype, want.device), (i, key)
                assert torch.equal(got, want), (i, key)
        assert ours.state_dict()["state"][0]["step"].dtype == torch.float32
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("flags", [{}, {"foreach": False}, {"foreach": True}, {"fused": True}], ids=str)
def test_adagrad_starts_a_later_groups_sums_from_the_constructors_value(flags):
    """torch's Adagrad makes the state of a group added after construction at its first step,
    each 'sum' from its defaults' initial_accumulator_value whatever the group says: ours too,
    in every implementation (the op values carry the constructor's value, which new_state
    reads: GroupedState.constructor_values); the default (fused) implementation's sums came from
    the group's value before."""
    gen = torch.Generator().manual_seed(0)
    first, later = torch.randn(3, generator=gen), torch.randn(2, 2, generator=gen)
    grad = torch.randn(2, 2, generator=gen)
    ours = functional_optim.Adagrad([first.clone()], initial_accumulator_value=0.5, **flags)
    theirs = torch.optim.Adagrad([first.clone()], initial_accumulator_value=0.5, **flags)
    added = [later.clone(), later.clone()]
    ours.add_param_group({"params": [added[0]], "initial_accumulator_value": 0.7})
    theirs.add_param_group({"params": [added[1]], "initial_accumulator_value": 0.7})
    ours.step([None, grad])
    added[1].grad = grad
    theirs.step()
    got, want = ours.state_dict()["state"][1], theirs.state_dict()["state"][1]
    torch.testing.assert_close(got["sum"], want["sum"])
    torch.testing.assert_close(got["sum"], torch.full((2, 2), 0.5) + grad * grad)
    torch.testing.assert_close(added[0], added[1])

