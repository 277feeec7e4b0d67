"""CUDA tensors across workers under device maps: gradients come back to the device their
tensors came from. Skipped without CUDA."""
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.support.cluster import free_port
from tests.support import REPO

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SUPPORT = os.path.join(REPO, "tests", "support")


def test_cuda_gradients_under_device_map_match_torch():
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(SUPPORT, "cuda_job.py"), "--rank", str(r), "--port", str(port)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    report = json.loads(outs[0][0].strip().splitlines()[-1])
    last = torch.cuda.device_count() - 1
    for engine in ("torch", "fast", "smart"):
        r = report[engine]
        assert r["y_device"] == "cuda:0", engine
        assert r["x_grad_device"] == "cuda:0", engine
        assert r["w_grad_device"] == f"cuda:{last}", engine
        # root = sum((3x)^2): d/dx = 18x, d/dw = 2 w x^2 = 6 x^2
        assert r["x_grad"] == [18.0, 36.0, 54.0, 72.0], engine
        assert r["w_grad_sum"] == 6.0 * (1 + 4 + 9 + 16), engine
    assert report["fast"] == report["torch"] and report["smart"] == report["torch"]


def test_cuda_leaf_gradients_on_one_worker():
    """Local CUDA graph through the engine in a one-worker group."""
    code = (
        "import os, socket, torch, torch.distributed.rpc as rpc, torch.distributed.autograd as da, plugin\n"
        "s = socket.socket(); s.bind(('localhost', 0)); port = s.getsockname()[1]; s.close()\n"
        "os.environ.update(MASTER_ADDR='localhost', MASTER_PORT=str(port))\n"
        "rpc.init_rpc('worker0', rank=0, world_size=1)\n"
        "x = torch.ones(3, device='cuda', requires_grad=True)\n"
        "with da.context() as ctx:\n"
        "    plugin.autograd.backward(ctx, [(x * x * 2).sum()])\n"
        "    g = plugin.autograd.get_gradients(ctx)[x]\n"
        "print(g.device, g.tolist())\n"
        "rpc.shutdown()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "cuda:0 [4.0, 4.0, 4.0]"


@pytest.mark.parametrize("lazy", [False, True], ids=["example_inputs", "lazy"])
@pytest.mark.parametrize("device_map", [False, True])
def test_remote_module_on_a_gpu(device_map, lazy):
    """plugin.nn.RemoteModule("worker1/cuda:0", ...): the program runs on the owner's GPU; without
    a device map the inputs and outputs cross on the CPU, with one the outputs come back on the
    caller's GPU; outputs and gradients equal the CPU eager module's (1e-5, TF32 off). ``lazy``:
    built as torch's RemoteModule (no example inputs), exported at a first forward of a batch of
    1, then the checked forward of a batch of 4 runs the same program."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    flags = (["--device-map"] if device_map else []) + (["--lazy"] if lazy else [])
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(SUPPORT, "nn_cuda_job.py"), "--rank", str(r), "--port", str(port), *flags],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    report = json.loads(outs[0][0].strip().splitlines()[-1])
    assert report["out_device"] == ("cuda:0" if device_map else "cpu"), report
    assert report["grad_device"] == report["out_device"], report
    assert report["param_grad_devices"] == ["cuda:0"], report
    assert report["out_close"] and report["input_grad_close"] and report["param_grads_close"], report
