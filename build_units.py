"""The translation units of the two op libraries: one table, read by setup.py and by CMakeLists.txt.

Each compiler run parses torch's headers first (ATen, c10, the autograd and RPC headers: most of
a source's compile time), so the sources of a room are compiled as one translation unit (a
"unity" source that ``#include``s them), not one by one. A unit is a list of glob patterns
relative to its library's folder; every ``.cpp`` file under the folder belongs to the first unit
whose patterns match it, and a file no unit claims fails the build (``sources_of``), so a new
source is never left out silently (tests/build/test_build.py checks the table too).

Units are listed in build order, the longest compile first (measured on 2 cores with g++ 12,
docs/build.md), so that the two cores stay busy to the end.

Within a unit the sources share one scope: their file-local names (anonymous namespaces,
``static`` functions) must differ. The authenticating transport's ``auth/auth_transport.cpp``
compiles alone: it defines a macro before its includes (auth/tensorpipe_abi.h).

Used three ways::

    import build_units; build_units.write_units(...)       # setup.py
    python build_units.py cmake OUT_DIR [ISAS]              # CMakeLists.txt (execute_process)
    python build_units.py list                              # every unit and its sources
"""
import fnmatch
import glob
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# library -> (folder, [(unit name, [patterns])]); the instruction-set kernels
# (functional_optim/csrc/cpu/) are the "kernels" library, compiled once per instruction set
# (setup.py's ISA_FLAGS) and linked into functional_optim's.
LIBRARIES = {
    "plugin": ("plugin/csrc", [
        ("engine", ["engine/*.cpp"]),
        ("rpc", ["rpc/*.cpp"]),
        ("optim", ["optim/*.cpp"]),
        ("nn", ["nn/*.cpp"]),
        ("ops", ["*.cpp", "embedding/*.cpp"]),
        ("auth", ["auth/*.cpp"]),  # no torch header: the shortest compile
    ]),
    "functional_optim": ("functional_optim/csrc", [
        ("steps", ["steps/*.cpp"]),
        ("group_step", ["*.cpp"]),
    ]),
    "kernels": ("functional_optim/csrc/cpu", [
        ("kernels_a", ["fused_sparse.cpp", "fused_adafactor.cpp", "fused_muon.cpp", "fused_asgd.cpp", "fused_adadelta.cpp"]),
        ("kernels_b", ["*.cpp"]),
    ]),
}

# Sources that compile alone, each its own unit (named after the file), before the library's
# units in build order.
ALONE = {
    "plugin": ["auth/auth_transport.cpp"],
}


# The fused kernels' flags in every build: -O3 vectorizes the loops; without math errno std::sqrt
# is an inline square root; without FMA contraction every build rounds alike (tests compare them).
# (-Wno-unknown-pragmas: ATen's vector headers carry `#pragma unroll`, which GCC does not know.)
KERNEL_FLAGS = ["-O3", "-fno-math-errno", "-ffp-contract=off", "-Wno-unknown-pragmas"]
# Instruction set -> compiler flags (names as ATen's CPU_CAPABILITY values; ATen's AVX2
# half-precision conversions need F16C, which AVX512F implies).
ISA_FLAGS = {
    "DEFAULT": [],
    "AVX2": ["-mavx2", "-mfma", "-mf16c"],
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
}


def kernel_isas(wanted=None):
    """The instruction sets the fused kernels are built for, from ``wanted`` (default: the
    environment's GILFREE_KERNEL_ISAS, else ``all``):

    * ``all``: DEFAULT, and AVX2 and AVX512 on x86-64 (a library for any CPU);
    * ``native``: DEFAULT and the one this CPU runs (``torch.backends.cpu.get_cpu_capability()``),
      the build the library picks here anyway (a quicker build: the main job's);
    * a comma-separated list of names (``DEFAULT``: the portable kernels only, CI's second torch).

    DEFAULT is always built. The library runs the best build linked in that is not above the
    CPU's (functional_optim/csrc/fused_optim.h): with fewer builds it runs the same kernels on
    this CPU, portable ones on another. Raises ValueError for a name it does not know.
    """
    if wanted is None:
        wanted = os.environ.get("GILFREE_KERNEL_ISAS", "")
    wanted = wanted.strip() or "all"
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    if wanted == "all":
        return ["DEFAULT"] + (["AVX2", "AVX512"] if x86 else [])
    if wanted == "native":
        import torch

        here = torch.backends.cpu.get_cpu_capability()  # e.g. "AVX512", "AVX2", "DEFAULT"
        best = "AVX512" if here.startswith("AVX512") else "AVX2" if here.startswith("AVX2") else None
        return ["DEFAULT"] + ([best] if best and x86 else [])
    names = [n.strip().upper() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in ISA_FLAGS]
    if unknown:
        raise ValueError(
            f"GILFREE_KERNEL_ISAS: unknown instruction set(s) {unknown}: expected all, native or "
            f"a comma-separated list of {list(ISA_FLAGS)}"
        )
    return ["DEFAULT"] + [n for n in ISA_FLAGS if n != "DEFAULT" and n in names]


SANITIZERS = ("address", "undefined")


def sanitizer_flags(wanted=None):
    """(compile flags, link flags) of the sanitizers named by ``wanted`` (default: the
    environment's GILFREE_SANITIZE; ``address``, ``undefined`` or both, comma-separated), for
    both op libraries; ([], []) when none. ASan and UBSan as GCC and Clang spell them:
    every UBSan report is an error (-fno-sanitize-recover: the process aborts, so a test fails),
    frame pointers kept and line tables (-g1) for the reports' stacks; each unit keeps its own
    optimisation level (the kernels' -O3: the code tested is the code shipped).
    The runtime must be the process's first library: scripts/with_sanitizers.sh preloads it.
    Raises ValueError for a name it does not know.
    """
    if wanted is None:
        wanted = os.environ.get("GILFREE_SANITIZE", "")
    names = [n.strip().lower() for n in wanted.split(",") if n.strip()]
    unknown = [n for n in names if n not in SANITIZERS]
    if unknown:
        raise ValueError(f"GILFREE_SANITIZE: unknown sanitizer(s) {unknown}: expected a comma-separated list of {list(SANITIZERS)}")
    if not names:
        return [], []
    sanitize = "-fsanitize=" + ",".join(n for n in SANITIZERS if n in names)
    compile_flags = [sanitize, "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g1"]
    if "undefined" in names:
        # UBSan's vptr check reads the type_info of every polymorphic class it sees; torch's
        # libraries do not export theirs (c10::DynamicType's, ...): the library would not load
        compile_flags.append("-fno-sanitize=vptr")
    return compile_flags, [sanitize]


def sources_of(library, root=HERE):
    """[(unit name, [absolute source paths])] of ``library``, in build order.

    Raises ValueError naming the file when a ``.cpp`` under the library's folder matches no unit,
    or naming the unit when a unit matches no file.
    """
    folder, units = LIBRARIES[library]
    base = os.path.join(root, folder)
    # the kernels' folder is its own library; functional_optim's units stop at its top and steps/
    nested = [f for lib, (f, _) in LIBRARIES.items() if lib != library and f.startswith(folder + "/")]
    files = sorted(
        os.path.relpath(path, base).replace(os.sep, "/")
        for path in glob.glob(os.path.join(base, "**", "*.cpp"), recursive=True)
    )
    files = [f for f in files if not any((folder + "/" + f).startswith(n + "/") for n in nested)]
    claimed = {}
    result = []
    for alone in ALONE.get(library, []):
        if alone not in files:
            raise ValueError(f"build_units.py: {folder}/{alone} (listed to compile alone) does not exist")
        claimed[alone] = alone
        result.append((os.path.splitext(os.path.basename(alone))[0], [os.path.join(base, alone)]))
    for name, patterns in units:
        members = []
        for pattern in patterns:
            for f in files:
                # a pattern without a folder matches files of the library's top folder only
                if f not in claimed and fnmatch.fnmatchcase(f, pattern) and f.count("/") == pattern.count("/"):
                    claimed[f] = name
                    members.append(os.path.join(base, f))
        if not members:
            raise ValueError(f"build_units.py: unit {library}/{name} matches no source under {folder}")
        result.append((name, members))
    left = [f for f in files if f not in claimed]
    if left:
        raise ValueError(f"build_units.py: {', '.join(folder + '/' + f for f in left)} belongs to no unit of {library}")
    return result


def unit_text(library, name, sources):
    lines = [f"// Generated by build_units.py: unit {library}/{name}, one translation unit of {len(sources)} sources."]
    lines += [f'#include "{path}"' for path in sources]
    return "\n".join(lines) + "\n"


def write_units(library, out_dir, root=HERE):
    """Writes ``out_dir/<library>_<unit>.cpp`` for each unit of ``library`` and returns their paths
    in build order. A unit of one source is that source itself; a file whose text is unchanged is
    left alone (its timestamp too, so ninja and make rebuild only what changed)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, sources in sources_of(library, root):
        if len(sources) == 1:
            paths.append(sources[0])
            continue
        path = os.path.join(out_dir, f"{library}_{name}.cpp")
        text = unit_text(library, name, sources)
        try:
            with open(path) as f:
                same = f.read() == text
        except OSError:
            same = False
        if not same:
            with open(path, "w") as f:
                f.write(text)
        paths.append(path)
    return paths


def main(argv):
    if len(argv) in (3, 4) and argv[1] == "cmake":
        # NAME=item|item|... lines (CMakeLists.txt makes them lists): each library's units, the
        # kernels' instruction sets (argv[3], else GILFREE_KERNEL_ISAS), their flags, the kernel flags
        for library in LIBRARIES:
            print(f"{library}=" + "|".join(write_units(library, argv[2])))
        isas = kernel_isas(argv[3] if len(argv) == 4 else None)
        print("isas=" + "|".join(isas))
        for isa in isas:
            print(f"flags_{isa}=" + "|".join(ISA_FLAGS[isa]))
        print("kernel_flags=" + "|".join(KERNEL_FLAGS))
        compile_flags, link_flags = sanitizer_flags()
        print("sanitize_compile=" + "|".join(compile_flags))
        print("sanitize_link=" + "|".join(link_flags))
        return 0
    if len(argv) == 2 and argv[1] == "list":
        for library in LIBRARIES:
            for name, sources in sources_of(library):
                print(f"{library}/{name}: " + " ".join(os.path.relpath(s, HERE) for s in sources))
        return 0
    print("usage: python build_units.py cmake OUT_DIR [ISAS] | list", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
