"""Each instruction-set build of the fused kernels gives DEFAULT's results, bit for bit.

The kernels under functional_optim/csrc/cpu/ are compiled once per instruction set (DEFAULT, AVX2,
AVX512) and the library runs the best build the CPU supports, or the one ATen's
``ATEN_CPU_CAPABILITY`` names. Every build rounds alike (no FMA contraction; +, -, *, /
and sqrt are exactly rounded), so each build this CPU runs must give the DEFAULT build's
bits: a process per build runs every optimizer configuration of test_fused_kernels.py for
a few steps, in each dtype, on shapes with vector tails and several threads, and the results
are compared with ``torch.equal``.
"""
import ctypes
import os
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.support import REPO

pytestmark = pytest.mark.timeout(600)

ORDER = ["DEFAULT", "AVX2", "AVX512"]
STEPS = 4
SHAPES = [(4, 3), (67,), (), (40_003,), (17, 33)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def active_isa(path: str) -> str:
    """The build the loaded library runs (its C function ``gilfree_optim_active_isa``)."""
    fn = ctypes.CDLL(path).gilfree_optim_active_isa
    fn.restype = ctypes.c_char_p
    return fn().decode()


def run_all(out: str) -> None:
    """Runs every configuration of test_fused_kernels.CASES and saves the tensors to ``out``."""
    from functional_optim import _kernels
    from tests.functional_optim.test_fused_kernels import CASES, _grads, _params, call_op, init_state

    path = _kernels.load()
    torch.set_num_threads(2)
    results = {"isa": active_isa(path)}
    for name, (_, configs) in CASES.items():
        for index, kw in enumerate(configs):
            for dtype in DTYPES:
                params = _params(SHAPES, dtype)
                states = [init_state(name, p, kw) for p in params]
                for step in range(1, STEPS + 1):
                    call_op(name, params, _grads(step, SHAPES, dtype), states, kw, first_step=step == 1)
                results[f"{name}-{index}-{dtype}"] = (params, states)
    torch.save(results, out)


def _run_with(capability: str, out: str) -> dict:
    code = textwrap.dedent(
        f"""
        from tests.functional_optim.test_fused_isa import run_all
        run_all({out!r})
        """
    )
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-4000:]
    return torch.load(out)


def _builds_this_cpu_runs():
    best = torch.backends.cpu.get_cpu_capability()  # what ATen runs here: DEFAULT, AVX2, AVX512 (or another arch's)
    if best not in ORDER:
        return []
    return ORDER[1 : ORDER.index(best) + 1]


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not _builds_this_cpu_runs(),
    reason="the AVX2/AVX512 builds exist on x86-64 CPUs that have AVX2",
)
def test_each_isa_build_matches_default(tmp_path):
    reference = _run_with("default", str(tmp_path / "default.pt"))
    assert reference.pop("isa") == "DEFAULT"
    for isa in _builds_this_cpu_runs():
        got = _run_with(isa.lower(), str(tmp_path / f"{isa}.pt"))
        # The library ran the build asked for (setup.py and CMake build all three on x86-64).
        assert got.pop("isa") == isa
        assert got.keys() == reference.keys()
        for key, (params, states) in reference.items():
            other_params, other_states = got[key]
            for i, (a, b) in enumerate(zip(params, other_params)):
                assert torch.equal(a, b), f"{isa} vs DEFAULT: {key} params[{i}] differ by {(a.double() - b.double()).abs().max()}"
            for i, (sa, sb) in enumerate(zip(states, other_states)):
                for k in sa:
                    assert torch.equal(sa[k], sb[k]), f"{isa} vs DEFAULT: {key} state[{i}][{k!r}] differ"
