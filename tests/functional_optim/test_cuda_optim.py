"""functional_optim on CUDA parameters (marked ``cuda``; skipped without a CUDA device).

On CUDA the default implementation is the op library's group step where it takes CUDA (SGD,
Adam, AdamW, Adagrad, Adafactor, Muon: torch's fused kernels or ATen ops) and otherwise, as in
torch.optim, the multi-tensor one. For every optimizer of the config table
(``tests/support/optim_configs.py``), its first config and its param-group config:

- 50 steps, eagerly and as TorchScript, against torch.optim's step on the same CUDA tensors
  (its fused one where ours calls its fused kernel, else its default): parameters and state
  within the dtype's tolerance, the state on the devices torch keeps it on;
- four steps under ``torch.compile(fullgraph=True)`` against the eager step (bitwise for the
  group step, to float32's tolerance where Inductor fuses the multi-tensor one);
- and torch's default state (its 'step' on the CPU) loaded into ours, then stepped.
"""
import pytest
import torch

from tests.support import optim_configs as C
from tests.support.optim_helpers import run_compiled_against_eager, run_parity

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.timeout(600)]

CASES = [pytest.param(info, config, id=f"{info.name}-{config.name}") for info in C.INFOS
         for config in info.configs[:1] + [c for c in info.configs if c.groups]]


# torch.optim's implementation that matches our default on CUDA: its fused kernel where ours
# calls it (SGD, Adam, AdamW); else its default, the multi-tensor step.
TORCH_IMPL = {"SGD": {"fused": True}, "Adam": {"fused": True}, "AdamW": {"fused": True}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("info, config", CASES)
def test_default_step_on_cuda_matches_torch(info, config, dtype):
    # Adagrad: ours runs torch's fused kernel (torch._fused_adagrad_, which torch.optim refuses
    # on CUDA), whose step counter lives on the device, torch's multi-tensor one's on the CPU
    # (torch's fused SGD refuses a momentum buffer that starts late: no late start for it)
    run_parity(info, config, None, dtype, device="cuda", torch_overrides=TORCH_IMPL.get(info.name),
               step_device=info.name != "Adagrad", late_start=info.fused_late_start)


@pytest.mark.parametrize("info, config", CASES)
def test_compiled_step_on_cuda_equals_eager(info, config):
    run_compiled_against_eager(info, config, device="cuda", tol=C.compiled_tolerances(info))


@pytest.mark.parametrize("name", ["Adagrad", "Adam"])
def test_torchs_default_state_loads_and_steps_on_cuda(name):
    """torch.optim's default step on CUDA (multi-tensor) keeps 'step' on the CPU; loaded into
    ours, whose default there is the group step (torch's fused kernels), each counter moves to
    its parameter's device as float32, as torch moves it for ``fused=True``, and the next steps
    agree with torch's."""
    import functional_optim

    gen = torch.Generator().manual_seed(5)
    start = [torch.randn(4, 3, generator=gen).cuda(), torch.randn(5, generator=gen).cuda()]
    torch_params = [p.clone().requires_grad_() for p in start]
    reference = getattr(torch.optim, name)(torch_params)
    for p in torch_params:
        p.grad = torch.randn(p.shape, generator=gen).cuda()
    reference.step()
    ours_params = [p.detach().clone() for p in torch_params]
    ours = getattr(functional_optim, name)(ours_params)
    ours.load_state_dict(reference.state_dict())
    for state in ours.state_dict()["state"].values():
        assert (state["step"].device.type, state["step"].dtype) == ("cuda", torch.float32)
    for _ in range(2):
        grads = [torch.randn(p.shape, generator=gen).cuda() for p in torch_params]
        for p, g in zip(torch_params, grads):
            p.grad = g.clone()
        reference.step()
        ours.step(grads)
    for a, b in zip(ours_params, torch_params):
        torch.testing.assert_close(a, b.detach(), **C.tolerances(torch.float32))
