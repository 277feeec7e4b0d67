"""The main job on both stacks: the plugin's engine and DistributedOptimizer against torch's.

Runs ``scripts/train.py`` (the default job unless options are passed through after ``--``)
with ``--stack plugin`` and ``--stack torch`` in turns, each run a fresh process tree, for
several pairs; the order within a pair alternates (plugin first, then torch first, ...), so
that a drift in the machine's load falls on both stacks alike. Reported per run: the job's
whole-run training throughput (``samples_per_s`` of its metrics: training samples over the
seconds of the training epochs, held-out evaluation and set-up excluded) and its final
held-out accuracy; per pair: the ratio plugin / torch; overall: the median ratio.
Target (issue 14): plugin / torch >= 1.3x on the default job.

Writes JSON (default results/bench_mainjob.json), which docs/benchmarks.md quotes.

    python scripts/bench_mainjob.py [--pairs N] [--out PATH] [--note TEXT] [-- extra train.py options]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from bench_results import split_at_dashes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 1.3


def run(stack, extra, workdir, tag):
    metrics = os.path.join(workdir, f"{tag}.json")
    cmd = [sys.executable, os.path.join(REPO, "scripts", "train.py"), "--stack", stack, "--metrics-out", metrics,
           "--plot-out", os.path.join(workdir, f"{tag}.png"), *extra]
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {r.returncode}:\n{r.stdout}\n{r.stderr}")
    with open(metrics) as f:
        m = json.load(f)
    return {
        "stack": stack,
        "samples_per_s": m["samples_per_s"],
        "accuracy": m["accuracy"],
        "training_seconds": m["training_seconds"],
        "process_seconds": wall,
        "epoch_samples_per_s": [e["samples_per_s"] for e in m["epochs"]],
        "job": {k: m["config"][k] for k in ("trainers", "servers", "hidden", "epochs", "batch_size", "optimizer", "lr", "mode")},
        "parameters": m["parameters"],
    }


def main(argv=None):
    argv, extra = split_at_dashes(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=3, help="runs per stack, in alternating order (default 3)")
    p.add_argument("--out", default=os.path.join(REPO, "results", "bench_mainjob.json"),
                   help="where to write the JSON (default results/bench_mainjob.json)")
    p.add_argument("--note", default="", help="a sentence on the conditions of the run (load, machine), stored in the JSON")
    args = p.parse_args(argv)
    if args.pairs < 1:
        p.error("--pairs must be >= 1")

    load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    runs, ratios = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for pair in range(args.pairs):
            order = ("plugin", "torch") if pair % 2 == 0 else ("torch", "plugin")
            result = {}
            for stack in order:
                r = run(stack, extra, workdir, f"{pair}-{stack}")
                r["pair"] = pair
                runs.append(r)
                result[stack] = r
                print(f"pair {pair + 1}/{args.pairs}  {stack:<6}  {r['samples_per_s']:8,.0f} samples/s  "
                      f"accuracy {r['accuracy']:.4f}  training {r['training_seconds']:.1f} s  "
                      f"(process {r['process_seconds']:.1f} s)", flush=True)
            ratios.append(result["plugin"]["samples_per_s"] / result["torch"]["samples_per_s"])
            print(f"pair {pair + 1}/{args.pairs}  plugin/torch {ratios[-1]:.3f}x", flush=True)

    median = statistics.median(ratios)
    data = {
        "meta": {
            "torch": __import__("torch").__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "pairs": args.pairs,
            "train_options": extra,
            "job": runs[0]["job"],
            "parameters": runs[0]["parameters"],
            "note": args.note,
            "load_average": {"start": load_start,
                             "end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        },
        "runs": runs,
        "ratios": ratios,
        "median_ratio": median,
        "target": TARGET,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2)
    print(f"median plugin/torch samples/s over {args.pairs} pairs: {median:.3f}x (target >= {TARGET}x); "
          f"pairs: {', '.join(f'{r:.3f}' for r in ratios)}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
