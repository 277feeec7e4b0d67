"""The main job on both stacks: the plugin's engine and DistributedOptimizer against torch's.

Runs ``scripts/train.py`` (the default job unless options are passed through after ``--``)
with ``--stack plugin`` and ``--stack torch`` in turns, each run a fresh process tree, for
several pairs; the order within a pair alternates (plugin first, then torch first, ...), so
that a drift in the machine's load falls on both stacks alike. Reported per run: the job's
whole-run training throughput (``samples_per_s`` of its metrics: training samples over the
seconds of the training epochs, held-out evaluation and set-up excluded) and its final
held-out accuracy; per pair: the ratio plugin / torch; overall: the median ratio.
Target (issue 14): plugin / torch >= 1.3x on the default job.

``--workload movielens`` (issue 22) runs ``train.py --workload movielens`` instead (the embedding
tables, sparse gradients; torch's stack with its DistributedOptimizer over the same
``--optimizer``, Adagrad by default, or sparse_adam; each stack with its defaults: the plugin's
native lookups and step inside the backward pass, in fast mode, against torch's Python RPC
lookups, backward pass and step; ``-- --lookups python`` gives the plugin torch's forward
pass), and also reports each stack's server
memory: the servers' resident memory (RSS, read from /proc at the end of the job), whole and
grown since before the tables were built, against the bytes of the tables plus the optimizer
state (counted on the plugin run: the same model and optimizer on both stacks). Targets:
plugin / torch >= 1.5x samples/s; the servers' RSS growth <= 1.5x the tables' and optimizer
state's bytes.

``--auth`` (issues 21, 30) alternates the plugin's stack with an authentication key
(``train.py --auth-key-file``, a fresh random key: the authenticating transport, every message
encrypted and authenticated with AES-256-GCM) against the same stack without one, on the
chosen workload. Target: with a key at most
5 % slower (keyed / unkeyed samples/s >= 0.95, the median over pairs).

Writes JSON (default results/bench_mainjob.json), which docs/benchmarks.md quotes; the digits
job's run is the file's top level, a movielens run goes under its ``"movielens"`` key, an
``--auth`` run under ``"auth"`` (``"auth_movielens"`` for that workload).

    python scripts/bench_mainjob.py [--workload W] [--auth] [--pairs N] [--out PATH] [--note TEXT] [-- extra train.py options]
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
TARGET_MOVIELENS = 1.5
TARGET_AUTH = 0.95  # keyed / unkeyed samples/s: at most 5 % slower
MEMORY_TARGET = 1.5


def run(stack, extra, workdir, tag, workload="digits"):
    """One run of train.py in a fresh process tree; ``stack`` is "plugin", "torch" or
    "plugin+key" (the plugin's stack with ``--auth-key-file``)."""
    metrics = os.path.join(workdir, f"{tag}.json")
    key = ["--auth-key-file", os.path.join(workdir, "auth.key")] if stack == "plugin+key" else []
    cmd = [sys.executable, os.path.join(REPO, "scripts", "train.py"), "--stack", stack.split("+")[0], *key,
           "--metrics-out", metrics, "--plot-out", os.path.join(workdir, f"{tag}.png"), "--workload", workload, *extra]
    start = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {r.returncode}:\n{r.stdout}\n{r.stderr}")
    with open(metrics) as f:
        m = json.load(f)
    if workload == "movielens":
        return {
            "stack": stack,
            "samples_per_s": m["samples_per_s"],
            "rmse": m["rmse"],
            "baseline_rmse": m["baseline_rmse"],
            "training_seconds": m["training_seconds"],
            "process_seconds": wall,
            "bytes_per_step": m["bytes_per_step"],
            "epoch_samples_per_s": [e["samples_per_s"] for e in m["epochs"]],
            "servers_memory": m["servers_memory"],
            "job": {k: m["config"][k] for k in ("trainers", "servers", "dim", "cross_buckets", "epochs", "batch_size",
                                                "optimizer", "lr", "mode", "step", "lookups")},
            "parameters": m["parameters"],
        }
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
    p.add_argument("--workload", choices=["digits", "movielens"], default="digits",
                   help="the job of scripts/train.py to run (default digits)")
    p.add_argument("--auth", action="store_true",
                   help="compare the plugin's stack with an authentication key against it without one "
                        "(instead of against torch's stack)")
    p.add_argument("--pairs", type=int, default=3, help="runs per stack, in alternating order (default 3)")
    p.add_argument("--out", default=os.path.join(REPO, "results", "bench_mainjob.json"),
                   help="where to write the JSON (default results/bench_mainjob.json)")
    p.add_argument("--key", default=None,
                   help="the entry of --out to write a movielens or --auth run under (default \"movielens\", "
                        "\"auth\" or \"auth_movielens\"; e.g. movielens_torch214 for a run on another torch)")
    p.add_argument("--note", default="", help="a sentence on the conditions of the run (load, machine), stored in the JSON")
    args = p.parse_args(argv)
    if args.pairs < 1:
        p.error("--pairs must be >= 1")

    load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    runs, ratios = [], []
    a, b = ("plugin+key", "plugin") if args.auth else ("plugin", "torch")
    with tempfile.TemporaryDirectory() as workdir:
        with open(os.open(os.path.join(workdir, "auth.key"), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(32).hex())
        for pair in range(args.pairs):
            order = (a, b) if pair % 2 == 0 else (b, a)
            result = {}
            for stack in order:
                r = run(stack, extra, workdir, f"{pair}-{stack}", args.workload)
                r["pair"] = pair
                runs.append(r)
                result[stack] = r
                measure = (f"RMSE {r['rmse']:.4f}" if args.workload == "movielens" else f"accuracy {r['accuracy']:.4f}")
                print(f"pair {pair + 1}/{args.pairs}  {stack:<10}  {r['samples_per_s']:8,.0f} samples/s  "
                      f"{measure}  training {r['training_seconds']:.1f} s  "
                      f"(process {r['process_seconds']:.1f} s)", flush=True)
            ratios.append(result[a]["samples_per_s"] / result[b]["samples_per_s"])
            print(f"pair {pair + 1}/{args.pairs}  {a}/{b} {ratios[-1]:.3f}x", flush=True)

    median = statistics.median(ratios)
    if args.auth:
        return _write_auth(args, extra, runs, ratios, median, load_start)
    if args.workload == "movielens":
        return _write_movielens(args, extra, runs, ratios, median, load_start)
    data = {"meta": _meta(args, extra, runs, load_start), "runs": runs, "ratios": ratios, "median_ratio": median,
            "target": TARGET}
    # the digits run is the file's top level; the other runs' keys stay
    existing = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            existing = json.load(f)
    data.update({k: v for k, v in existing.items() if k not in data})  # the other runs' entries
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2)
    print(f"median plugin/torch samples/s over {args.pairs} pairs: {median:.3f}x (target >= {TARGET}x); "
          f"pairs: {', '.join(f'{r:.3f}' for r in ratios)}; wrote {args.out}")
    return 0


def _meta(args, extra, runs, load_start):
    return {
        "torch": __import__("torch").__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "pairs": args.pairs,
        "train_options": extra,
        "workload": args.workload,
        "job": next(r["job"] for r in runs if r["stack"].startswith("plugin")),  # the plugin's options
        "parameters": runs[0]["parameters"],
        "note": args.note,
        "load_average": {"start": load_start, "end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
    }


def _merge(out, key, data):
    """Writes ``data`` under ``key`` of the JSON file ``out``, keeping its other entries."""
    existing = {}
    if os.path.exists(out):
        with open(out) as f:
            existing = json.load(f)
    existing[key] = data
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(existing, f, indent=2)


def _write_auth(args, extra, runs, ratios, median, load_start):
    key = args.key or ("auth" if args.workload == "digits" else f"auth_{args.workload}")
    data = {"meta": _meta(args, extra, runs, load_start), "runs": runs, "ratios": ratios, "median_ratio": median,
            "target": TARGET_AUTH}
    _merge(args.out, key, data)
    print(f"{args.workload}: median keyed/unkeyed samples/s over {args.pairs} pairs: {median:.3f}x (target >= "
          f"{TARGET_AUTH}x); pairs: {', '.join(f'{r:.3f}' for r in ratios)}; wrote {args.out} (key \"{key}\")")
    return 0


def _memory(runs):
    """Per stack, the median over runs: the servers' RSS at the end, and its growth since before
    the tables were built (RSS at the end minus the baseline: what the job's data takes beyond
    a Python process with torch and an RPC agent), each over the tables' plus optimizer
    state's bytes (the state counted on the plugin runs: the same model and optimizers on
    both stacks). The target is judged on the growth."""
    plugin = [r for r in runs if r["stack"] == "plugin"]
    model = sum(m["parameter_bytes"] + m["optimizer_state_bytes"] for m in plugin[0]["servers_memory"].values())
    out = {"model_and_state_bytes": model}
    for stack in ("plugin", "torch"):
        mine = [r for r in runs if r["stack"] == stack]
        rss = statistics.median(sum(m["rss_bytes"] for m in r["servers_memory"].values()) for r in mine)
        growth = statistics.median(sum(m["rss_bytes"] - m["baseline_rss_bytes"] for m in r["servers_memory"].values())
                                   for r in mine)
        out[stack] = {"servers_rss_bytes": rss, "ratio_total": rss / model, "servers_rss_growth_bytes": growth,
                      "ratio": growth / model}
    return out


def _write_movielens(args, extra, runs, ratios, median, load_start):
    memory = _memory(runs)
    data = {"meta": _meta(args, extra, runs, load_start), "runs": runs, "ratios": ratios, "median_ratio": median,
            "target": TARGET_MOVIELENS, "memory": memory, "memory_target": MEMORY_TARGET}
    _merge(args.out, args.key or "movielens", data)
    print(f"movielens: median plugin/torch samples/s over {args.pairs} pairs: {median:.3f}x (target >= "
          f"{TARGET_MOVIELENS}x); pairs: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"servers' RSS growth / (tables + optimizer state, {memory['model_and_state_bytes'] / 2**20:,.0f} MiB): "
          f"plugin {memory['plugin']['ratio']:.2f}x, torch {memory['torch']['ratio']:.2f}x (target <= {MEMORY_TARGET}x); "
          f"whole RSS: plugin {memory['plugin']['ratio_total']:.2f}x, torch {memory['torch']['ratio_total']:.2f}x; "
          f"wrote {args.out} (key \"{args.key or 'movielens'}\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
