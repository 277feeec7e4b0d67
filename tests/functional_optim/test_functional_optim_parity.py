"""Parity with torch.optim, driven by the table in optim_configs.py.

For every optimizer, every config and every implementation path (single-tensor, multi-tensor,
fused where torch has a kernel), 50 steps on float32 and float64 must give torch.optim's
parameters and state element by element, eagerly and as TorchScript. Every run skips some
parameters on some steps (None gradients).
"""
import pytest
import torch

from tests.support import optim_configs as C
from tests.support.optim_helpers import assert_same_params, run_parity

DTYPES = [torch.float32, torch.float64]

CASES = [
    pytest.param(info, config, impl, dtype, id=f"{info.name}-{config.name}-{impl}-{str(dtype)[6:]}")
    for info in C.INFOS
    for config in info.configs
    for impl in info.impls
    for dtype in DTYPES
]

SPARSE_CASES = [
    pytest.param(info, config, impl, dtype, id=f"{info.name}-{config.name}-{impl}-{str(dtype)[6:]}")
    for info in C.INFOS
    for config in info.sparse_configs
    for impl in info.impls
    if impl != "fused"
    for dtype in DTYPES
]


@pytest.mark.parametrize("info, config, impl, dtype", CASES)
def test_parity(info, config, impl, dtype):
    run_parity(info, config, impl, dtype)


@pytest.mark.parametrize("info, config, impl, dtype", SPARSE_CASES)
def test_parity_sparse_gradients(info, config, impl, dtype):
    run_parity(info, config, impl, dtype, sparse=True)


@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_default_implementation_matches_torch(info):
    """With foreach=None/fused=None torch picks the single-tensor path on CPU; we pick the
    fused kernel for floating-point CPU parameters, with the same results (to rounding), and
    torch's choice for steps with sparse gradients and for what no fused kernel takes."""
    run_parity(info, info.configs[0], None, torch.float64, steps=5)
    opt = info.ours(C.make_params(torch.float32, info=info))
    assert opt._s.impl == ["fused"] and opt._s.sparse_impl == ["single"]
    if C.takes(info, "foreach"):  # (Muon has no foreach)
        assert info.ours(C.make_params(torch.float32, info=info), foreach=False)._s.impl == ["single"]
    assert info.ours(C.make_params(torch.float32, info=info), fused=False)._s.impl == ["single"]


@pytest.mark.parametrize("info", [C.INFO_BY_NAME["Adam"], C.INFO_BY_NAME["Rprop"]], ids=str)
def test_parity_check_can_fail(info):
    """The comparison is not a tautology: a slightly different lr is caught."""
    config = info.configs[0]
    lr = config.kwargs.get("lr", info.ours.__init__.__defaults__[0])
    with pytest.raises(AssertionError):
        run_parity(info, config, "single", torch.float64, steps=3, our_overrides={"lr": lr * (1 + 1e-6)})


def test_fused_sgd_buffers_started_at_different_steps():
    """torch's fused SGD assumes all momentum buffers start together; ours also handles a
    parameter whose first gradient comes later (compared with the single-tensor path)."""
    import functional_optim as F
    from functional_optim.scripting import script_optimizer

    base = C.make_params(torch.float64)
    runs = []
    for impl in ["single", "fused"]:
        params = [p.clone() for p in base]
        opt = F.SGD(params, lr=0.1, momentum=0.9, **C.IMPL_FLAGS[impl])
        scripted_params = [p.clone() for p in base]
        scripted = script_optimizer(F.SGD(scripted_params, lr=0.1, momentum=0.9, **C.IMPL_FLAGS[impl]))
        gen = torch.Generator().manual_seed(3)
        for step in range(6):
            grads = C.make_gradients(step, torch.float64, gen)
            opt.step(grads)
            scripted.step(grads)
        assert_same_params(params, scripted_params, torch.float64)
        runs.append(params)
    assert_same_params(runs[0], runs[1], torch.float64)
