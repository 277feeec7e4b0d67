"""What the benchmarks under ``scripts/`` write: the ``meta`` entry of a results file and the
file itself (``results/*.json``, which ``scripts/render_benchmarks.py`` turns into
``docs/benchmarks.md``). Imported by the benchmark scripts (their folder is on ``sys.path``
when they run)."""
import json
import os
import sys

import torch


def run_meta(**settings):
    """The ``meta`` entry of a results file: torch's version, the CPU count, the run's settings
    (``iters=...``, ``quick=...``, in the order given) and Python's version."""
    return {"torch": torch.__version__, "cpus": os.cpu_count(), **settings, "python": sys.version.split()[0]}


def split_at_dashes(argv=None):
    """A command line ``[options] [-- train.py options]`` (``sys.argv[1:]`` when ``argv`` is
    None) split into the script's own arguments and those it passes on to ``scripts/train.py``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    return argv[: argv.index("--")], argv[argv.index("--") + 1:]


def write_results(path, results):
    """Writes ``results`` to ``path`` as indented JSON (making its folder) and prints where."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"wrote {path}")
