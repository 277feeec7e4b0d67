"""functional_optim under torch.compile: every optimizer's ``step`` compiles with
``fullgraph=True`` (no graph break) and equals the eager step, bitwise.

The default implementation is the op library's group step (``functional_optim/csrc/steps``),
which torch.compile keeps as one opaque op (its meta kernels give the fake tensors); the
first compiled step creates the state (``new_state``), as the eager one does. Each optimizer of
the config table (``tests/support/optim_configs.py``) with a fused implementation, for its
first config and its default config, three steps from the same start, one parameter skipped
on the second step (``None`` gradient, as in torch when ``.grad`` is None). The single-tensor
and multi-tensor implementations, asked for, compile too (equal to the eager step within
float32's tolerance: Inductor fuses their element-wise ops).
"""
import pytest
import torch
import torch._dynamo

from tests.support import optim_configs as C
from tests.support.optim_helpers import run_compiled_against_eager

pytestmark = pytest.mark.timeout(600)

# SparseAdam takes sparse gradients only: compiled with sparse tensors as inputs, which
# torch.compile does not trace (torch 2.13: "sparse tensors not supported"), so it is left out.
INFOS = [info for info in C.INFOS if info.name != "SparseAdam"]
CASES = [pytest.param(info, config, id=f"{info.name}-{config.name}") for info in INFOS
         for config in info.configs[:2] + [c for c in info.configs if c.groups]]


@pytest.mark.parametrize("info, config", CASES)
def test_compiled_step_equals_eager(info, config):
    run_compiled_against_eager(info, config)  # parameter 2 starts late, parameter 1 skips a step


# torch.optim's other two implementations, each asked for: traced by Dynamo (our Python
# single-tensor and multi-tensor code; on CUDA the multi-tensor one is the default of the
# optimizers whose group step is CPU-only) and fused by Inductor, so equal to the tolerance.
IMPL_CASES = [pytest.param(info, info.configs[0], impl, id=f"{info.name}-{impl}") for info in INFOS
              for impl in ("single", "foreach") if impl in info.impls]


@pytest.mark.parametrize("info, config, impl", IMPL_CASES)
def test_compiled_single_and_foreach_steps_equal_eager(info, config, impl):
    run_compiled_against_eager(info, config, impl=impl, tol=C.compiled_tolerances(info))


def test_compiled_step_comparison_can_fail():
    """The comparison is not a tautology: a compiled step with another lr differs."""
    torch._dynamo.reset()
    a = [p.requires_grad_() for p in C.make_params(torch.float32)]
    b = [p.detach().clone().requires_grad_() for p in a]
    eager, compiled = C.INFO_BY_NAME["Adam"].ours(a, lr=0.01), C.INFO_BY_NAME["Adam"].ours(b, lr=0.01 * (1 + 1e-3))
    step = torch.compile(compiled.step, fullgraph=True)
    grads = C.make_gradients(0, torch.float32, torch.Generator().manual_seed(7), late_start=False)
    eager.step(grads)
    step(grads)
    assert not all(torch.equal(x, y) for x, y in zip(a, b))
