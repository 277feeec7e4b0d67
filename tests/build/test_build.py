"""The two op libraries (plugin's and functional_optim's) build two ways (setup.py, CMake) and
fail to load with a clear error."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from tests.support import REPO


# Loads the libraries named by GILFREE_RPC_LIBRARY and GILFREE_OPTIM_LIBRARY (or the
# package's own) through `import plugin`, steps a fused kernel, prints the two paths, and runs
# one local backward pass through the engine (a one-worker RPC group).
SMOKE = textwrap.dedent(
    """
    import os, socket, torch
    import torch.distributed.rpc as rpc
    import torch.distributed.autograd as dist_autograd
    import functional_optim, plugin
    from functional_optim import _kernels
    from plugin import _library
    p = torch.zeros(3, requires_grad=True)
    functional_optim.RAdam([p], fused=True).step([torch.ones(3)])  # gilfree_optim.radam_
    assert torch.allclose(p.detach(), torch.full((3,), -1e-3)), p  # RAdam's first step: -lr * m_hat
    print(_kernels.load())
    print(_library.load_library())
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
    optim, ops, grads = out.stdout.splitlines()
    assert os.path.dirname(optim) == os.path.join(REPO, "functional_optim")
    assert os.path.dirname(ops) == os.path.join(REPO, "plugin")
    assert grads == "[2.0, 4.0]"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # a full second build of the library: minutes on 2 cores
def test_cmake_builds_the_same_library(tmp_path):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is needed (scripts/setup_env.sh installs it)"
    build = tmp_path / "build"
    configure = subprocess.run(
        # The portable fused kernels only: the AVX2/AVX512 builds of the kernels would triple
        # the kernels' compile time, and tests/functional_optim/test_fused_isa.py checks them (setup.py's
        # build). The translation units are build_units.py's, as setup.py's.
        [cmake, "-S", REPO, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DGILFREE_KERNEL_ISAS=DEFAULT",
         f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}", f"-DPython3_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300,
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build_run = subprocess.run(
        [cmake, "--build", str(build), "-j", str(os.cpu_count() or 2)], capture_output=True, text=True, timeout=900
    )
    assert build_run.returncode == 0, build_run.stdout[-4000:] + build_run.stderr[-4000:]
    ops, optim = build / "libgilfree_ops.so", build / "libgilfree_optim.so"
    assert ops.exists() and optim.exists()
    out = run_python(SMOKE, {"GILFREE_RPC_LIBRARY": str(ops), "GILFREE_OPTIM_LIBRARY": str(optim)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(optim), str(ops), "[2.0, 4.0]"]


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


def test_failed_load_of_the_kernels_names_the_file(tmp_path):
    """functional_optim imports without its op library; fused=True then raises at construction,
    and a step of any implementation raises (every step checks its gradients with the library's
    op), naming the file it tried: no silent fallback."""
    broken = tmp_path / "_C.so"
    broken.write_bytes(b"not a shared library")
    code = textwrap.dedent(
        """
        import torch, functional_optim
        for make in (lambda p: functional_optim.RAdam([p], fused=True), lambda p: functional_optim.Adam([p], foreach=False)):
            try:
                make(torch.zeros(2, requires_grad=True)).step([torch.ones(2)])
            except ImportError as e:
                print(e)
        """
    )
    out = run_python(code, {"GILFREE_OPTIM_LIBRARY": str(broken)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line in lines:
        assert line.startswith("functional_optim: failed to load the op library " + str(broken)), out.stdout
        assert f"running torch {torch.__version__}" in line


@pytest.mark.parametrize("torchscript", ["available", "removed"])
def test_importing_and_stepping_call_no_torchscript(torchscript):
    """Importing every package and stepping a native local optimizer and a functional
    optimizer compiles no TorchScript: no torch.jit deprecation warning (torch 2.13 warns with
    DeprecationWarning, 2.14 with FutureWarning; both are errors here), and with torch.jit's
    entry points raising (the TorchScript-removed mode) the same code runs."""
    code = textwrap.dedent(
        """
        import torch, functional_optim, plugin, plugin.autograd, plugin.optim, plugin.rpc
        p = torch.zeros(2, requires_grad=True)
        local = plugin.optim.NativeLocalOptimizer(functional_optim.NAdam, [p])
        local.step_gradients([torch.ones(2)])
        functional_optim.Adam([torch.zeros(2, requires_grad=True)]).step([torch.ones(2)])
        print("ok", bool(p.detach().ne(0).all()))
        """
    )
    env = dict(os.environ)
    if torchscript == "removed":
        site = os.path.join(REPO, "tests", "support", "no_torchscript")
        env.update(GILFREE_TORCHSCRIPT_REMOVED="1", PYTHONPATH=os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")])))
    out = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-W", "error::FutureWarning", "-c", code],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok True"


def test_every_source_is_in_exactly_one_translation_unit():
    """build_units.py's table (setup.py's and CMake's units) claims every .cpp of both libraries
    once: a file no unit names would be left out of the library, its ops missing at run time."""
    import glob

    import build_units

    claimed = []
    for library in build_units.LIBRARIES:
        for _, sources in build_units.sources_of(library):
            claimed += [os.path.relpath(s, REPO) for s in sources]
    on_disk = sorted(
        os.path.relpath(p, REPO)
        for folder in ("plugin/csrc", "functional_optim/csrc")
        for p in glob.glob(os.path.join(REPO, folder, "**", "*.cpp"), recursive=True)
    )
    assert sorted(claimed) == on_disk
    assert len(claimed) == len(set(claimed))


def test_a_source_no_unit_claims_fails_the_build(tmp_path):
    import build_units

    for library, (folder, _) in build_units.LIBRARIES.items():
        shutil.copytree(os.path.join(REPO, folder), tmp_path / folder, dirs_exist_ok=True)
    (tmp_path / "plugin/csrc/newroom").mkdir()
    (tmp_path / "plugin/csrc/newroom/lookup.cpp").write_text("int x;\n")
    with pytest.raises(ValueError, match=r"plugin/csrc/newroom/lookup.cpp belongs to no unit of plugin"):
        build_units.sources_of("plugin", root=str(tmp_path))
    # a unit that matches nothing is an error too (a table out of date)
    for source in (tmp_path / "plugin/csrc/nn").glob("*.cpp"):
        source.unlink()
    with pytest.raises(ValueError, match=r"unit plugin/nn matches no source"):
        build_units.sources_of("plugin", root=str(tmp_path))


def test_unit_sources_include_each_member_once_and_are_rewritten_only_when_changed(tmp_path):
    import build_units

    paths = build_units.write_units("plugin", str(tmp_path))
    units = dict(build_units.sources_of("plugin"))
    engine = tmp_path / "plugin_engine.cpp"
    assert str(engine) in paths
    included = [line.split('"')[1] for line in engine.read_text().splitlines() if line.startswith("#include")]
    assert included == units["engine"]
    stamp = engine.stat().st_mtime_ns
    build_units.write_units("plugin", str(tmp_path))
    assert engine.stat().st_mtime_ns == stamp  # unchanged: ninja and make rebuild nothing


def test_kernel_instruction_sets_always_hold_default_and_native_is_what_the_library_picks_here():
    import platform

    import build_units

    assert build_units.kernel_isas("DEFAULT") == ["DEFAULT"]
    assert build_units.kernel_isas("avx2") == ["DEFAULT", "AVX2"]
    with pytest.raises(ValueError, match=r"GILFREE_KERNEL_ISAS: unknown instruction set\(s\) \['SSE9'\]"):
        build_units.kernel_isas("DEFAULT,SSE9")
    native = build_units.kernel_isas("native")
    assert native[0] == "DEFAULT" and len(native) <= 2
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert build_units.kernel_isas("all") == ["DEFAULT", "AVX2", "AVX512"]
        here = torch.backends.cpu.get_cpu_capability()
        if here.startswith(("AVX2", "AVX512")):
            assert native[1] == here[:6].rstrip("_")


def test_sanitizer_flags_name_both_runtimes_and_refuse_an_unknown_one():
    import build_units

    assert build_units.sanitizer_flags("") == ([], [])
    compile_flags, link_flags = build_units.sanitizer_flags("undefined,address")
    assert compile_flags[0] == "-fsanitize=address,undefined" and link_flags == ["-fsanitize=address,undefined"]
    assert "-fno-sanitize-recover=all" in compile_flags and "-fno-sanitize=vptr" in compile_flags
    with pytest.raises(ValueError, match=r"GILFREE_SANITIZE: unknown sanitizer\(s\) \['thread'\]"):
        build_units.sanitizer_flags("address,thread")
