"""The op library builds two ways (setup.py, CMake) and fails to load with a clear error."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from tests.support import REPO


# Loads the library named by GILFREE_RPC_LIBRARY through `import plugin` and runs one
# local backward pass through the engine (a one-worker RPC group).
SMOKE = textwrap.dedent(
    """
    import os, socket, torch
    import torch.distributed.rpc as rpc
    import torch.distributed.autograd as dist_autograd
    import plugin
    print(sorted(str(torch.ops.dist_engine.backward.default._schema).split("(")[:1]))
    with socket.socket() as s:
        s.bind(("localhost", 0)); port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=str(port))
    rpc.init_rpc("worker0", rank=0, world_size=1)
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with dist_autograd.context() as ctx:
        plugin.autograd.backward(ctx, [(x * x).sum()])
        print(plugin.autograd.get_gradients(ctx)[x].tolist())
    rpc.shutdown()
    """
)


def run_python(code, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_setup_py_library_runs_the_engine():
    out = run_python(SMOKE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[2.0, 4.0]"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a full second build of the library: minutes on 2 cores
def test_cmake_builds_the_same_library(tmp_path):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (scripts/setup_env.sh installs it)"
    build = tmp_path / "build"
    configure = subprocess.run(
        # The portable fused kernels only: the AVX2/AVX512 builds of the kernels would triple
        # the compile time, and tests/optim/test_fused_isa.py checks them (setup.py's build).
        [cmake, "-S", REPO, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DGILFREE_DEFAULT_ISA_ONLY=ON",
         f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"],
        capture_output=True, text=True, timeout=300,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build_run = subprocess.run(
        [cmake, "--build", str(build), "-j", str(os.cpu_count() or 2)], capture_output=True, text=True, timeout=900
    )
    assert build_run.returncode == 0, build_run.stdout[-4000:] + build_run.stderr[-4000:]
    library = build / "libgilfree_ops.so"
    assert library.exists()
    out = run_python(SMOKE, {"GILFREE_RPC_LIBRARY": str(library)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[2.0, 4.0]"


def test_failed_load_names_file_and_torch_versions(tmp_path):
    broken = tmp_path / "_C.so"
    broken.write_bytes(b"not a shared library")
    out = run_python("import plugin", {"GILFREE_RPC_LIBRARY": str(broken)})
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: gilfree-rpc: failed to load the op library " + str(broken))
    assert f"running torch {torch.__version__}" in last
    assert "built against torch unknown" in last


def test_failed_load_reports_the_torch_the_file_was_built_for(tmp_path):
    """A real library that cannot load (here: its ELF header wiped) still tells its torch version."""
    library = next(p for p in os.listdir(os.path.join(REPO, "plugin")) if p.startswith("_C") and p.endswith(".so"))
    data = open(os.path.join(REPO, "plugin", library), "rb").read()
    broken = tmp_path / "_C.so"
    broken.write_bytes(bytes(64) + data[64:])
    out = run_python("import plugin", {"GILFREE_RPC_LIBRARY": str(broken)})
    assert out.returncode != 0
    version = torch.__version__.split("+")[0]
    assert f"built against torch {version}, running torch {torch.__version__}" in out.stderr


def test_importing_and_scripting_emit_no_deprecation_warning():
    """The plugin scripts its own functions and local optimizers; torch's TorchScript
    deprecation warnings are filtered around those calls, so users see none."""
    code = textwrap.dedent(
        """
        import torch, plugin, plugin.autograd, plugin.optim, plugin.rpc, functional_optim
        from plugin.optim import ScriptLocalOptimizer
        module = ScriptLocalOptimizer.create(torch.optim.NAdam, [torch.zeros(2, requires_grad=True)])
        module.step_gradients([torch.ones(2)])
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
