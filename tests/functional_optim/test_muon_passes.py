"""Muon's element-wise passes (functional_optim/csrc/cpu/fused_muon.cpp): the momentum and
the bfloat16 cast in one pass, the weight decay and the update in another, where
torch.optim's eager Muon runs six ATen ops; their results are torch's bit for bit.

They round as ATen's kernels do on the CPU (lerp's and add's fused multiply-adds in the AVX2
and AVX512 builds, none in DEFAULT), so the comparison runs once per build this CPU runs, in
a process whose ``ATEN_CPU_CAPABILITY`` makes ATen and the library run the same one. Shapes
with vector tails, a tall and a wide matrix (the iteration runs on a tall one's transpose),
several steps, each config of the parity table plus one without Nesterov momentum or weight
decay. A float64 parameter takes ATen's ops one by one (the passes are float32): equal too.
"""
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.functional_optim.test_fused_isa import ORDER, active_isa
from tests.support import REPO

pytestmark = pytest.mark.timeout(600)

# (256 x 200: over ATen's grain, so the passes' parallel loop splits it between the threads)
SHAPES = [(4, 4), (5, 2), (3, 6), (67, 129), (300, 77), (128, 128), (256, 200)]


def compare_with_torch() -> None:
    """Steps functional_optim.Muon and torch.optim.Muon on the same gradients; raises unless
    parameters and momentum buffers are equal bitwise."""
    from tests.support import optim_configs as C

    torch.set_num_threads(2)
    configs = [c.kwargs for c in C.INFO_BY_NAME["Muon"].configs if c.groups is None]
    configs.append({"lr": 0.02, "nesterov": False, "weight_decay": 0.0, "momentum": 0.3})
    for dtype in (torch.float32, torch.float64):
        for kwargs in configs:
            gen = torch.Generator().manual_seed(11)
            start = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
            ours_params = [p.clone() for p in start]
            torch_params = [p.clone().requires_grad_() for p in start]
            ours = C.INFO_BY_NAME["Muon"].ours(ours_params, **kwargs)
            reference = torch.optim.Muon(torch_params, **kwargs)
            for step in range(4):
                grads = [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]
                for p, g in zip(torch_params, grads):
                    p.grad = g.clone()
                reference.step()
                ours.step(grads)
                for k, (a, b) in enumerate(zip(ours_params, torch_params)):
                    assert torch.equal(a, b.detach()), f"{dtype} {kwargs} step {step}: parameter {k} {SHAPES[k]}"
                    buf = ours.state_dict()["state"][k]["momentum_buffer"]
                    assert torch.equal(buf, reference.state[b]["momentum_buffer"]), f"{kwargs} step {step}: buffer {k}"


def _builds_this_cpu_runs():
    best = torch.backends.cpu.get_cpu_capability()
    return ORDER[: ORDER.index(best) + 1] if best in ORDER else [best]


@pytest.mark.parametrize("capability", _builds_this_cpu_runs())
def test_muon_steps_are_torchs_bit_for_bit(capability):
    code = textwrap.dedent(
        """
        from functional_optim import _kernels
        from tests.functional_optim.test_fused_isa import active_isa
        from tests.functional_optim.test_muon_passes import compare_with_torch
        compare_with_torch()
        print(active_isa(_kernels.load()))
        """
    )
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability.lower(),
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-4000:]
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert done.stdout.split()[-1] == capability  # the library ran the build ATen runs


def test_the_passes_replace_atens_ops():
    """The float32 step runs the fused passes (no lerp_, mul_ or add_ of ATen's) where the
    library runs the build for ATen's instruction set (x86-64, every build made); a float64
    one ATen's ops (the passes take float32 only)."""
    from torch.profiler import profile

    from functional_optim import _kernels
    from tests.support import optim_configs as C

    same_isa = active_isa(_kernels.load()) == torch.backends.cpu.get_cpu_capability()
    if platform.machine().lower() not in ("x86_64", "amd64"):
        same_isa = False
    for dtype, fused in ((torch.float32, same_isa), (torch.float64, False)):
        params = [torch.randn(8, 8, dtype=dtype)]
        opt = C.INFO_BY_NAME["Muon"].ours(params, lr=0.02)
        grads = [torch.randn(8, 8, dtype=dtype)]
        opt.step(grads)
        with profile() as prof:
            opt.step(grads)
        names = {e.key for e in prof.key_averages()}
        for op in ("aten::lerp_", "aten::mul_", "aten::add_"):
            assert (op in names) != fused, (dtype, op, sorted(names))
