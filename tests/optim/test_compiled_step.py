"""functional_optim under torch.compile: every optimizer's ``step`` compiles with
``fullgraph=True`` (no graph break) and equals the eager step, bitwise.

The default implementation is the op library's group step (``functional_optim/csrc/steps``),
which torch.compile keeps as one opaque op (its meta kernels give the fake tensors); the
first compiled step creates the state (``new_state``), as the eager one does. Each optimizer of
the config table (``tests/support/optim_configs.py``) with a fused implementation, for its
first config and its default config, three steps from the same start, one parameter skipped
on the second step (``None`` gradient, as in torch when ``.grad`` is None).
"""
import copy

import pytest
import torch
import torch._dynamo

from tests.support import optim_configs as C

pytestmark = pytest.mark.timeout(600)

# SparseAdam takes sparse gradients only: compiled with sparse tensors as inputs, which
# torch.compile does not trace (torch 2.13: "sparse tensors not supported"), so it is left out.
INFOS = [info for info in C.INFOS if info.name != "SparseAdam"]
CASES = [pytest.param(info, config, id=f"{info.name}-{config.name}") for info in INFOS
         for config in info.configs[:2] + [c for c in info.configs if c.groups]]


def _build(info, config, params):
    return info.ours(C.build_params_arg(config, params), **copy.deepcopy(config.kwargs))


@pytest.mark.parametrize("info, config", CASES)
def test_compiled_step_equals_eager(info, config):
    torch._dynamo.reset()
    eager_params = [p.requires_grad_() for p in C.make_params(torch.float32, info=info)]
    compiled_params = [p.detach().clone().requires_grad_() for p in eager_params]
    eager, compiled = _build(info, config, eager_params), _build(info, config, compiled_params)
    assert all(impl == "fused" for impl in compiled._s.impl), compiled._s.impl  # the default path
    step = torch.compile(compiled.step, fullgraph=True)
    gen = torch.Generator().manual_seed(7)
    for k in range(4):  # parameter 2 starts late, parameter 1 skips a step: C.gradient_schedule
        grads = C.make_gradients(k, torch.float32, gen, info=info)
        grads = [grads[i] for i in C.flat_order(config)]
        eager.step(grads)
        step(grads)
    for got, want in zip(compiled_params, eager_params):
        assert torch.equal(got, want)
    theirs, mine = eager.state_dict()["state"], compiled.state_dict()["state"]
    assert theirs.keys() == mine.keys()
    for i in theirs:
        assert list(theirs[i]) == list(mine[i])
        for key in theirs[i]:
            assert torch.equal(torch.as_tensor(mine[i][key]), torch.as_tensor(theirs[i][key])), (i, key)


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
