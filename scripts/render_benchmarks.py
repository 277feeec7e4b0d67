#!/usr/bin/env python3
"""Writes the tables of docs/benchmarks.md from the result files in results/.

    python scripts/render_benchmarks.py           # rewrite the generated parts of the page
    python scripts/render_benchmarks.py --check   # exit 1 when the page does not match the files

Each result file has a part of the page between ``<!-- BEGIN <name> -->`` and
``<!-- END <name> -->`` (``bench_optim``, ``bench_optim_kernels``, ``bench_backward``, ``bench_gil``,
``bench_mainjob``, ``profile_mainjob``, ``bench_remote_forward``; ``<file>.<key>`` for an entry of a file, such as
``bench_mainjob.movielens``); the text around
the markers is written by hand. A file that does not exist yet renders as a note saying so, and
a file without a dedicated renderer below renders as a generic listing of its numbers, so the
page always quotes exactly what is committed. ``tests/docs/test_benchmarks_page.py`` fails when the
page and the files disagree. The targets come from the issues that asked for each benchmark;
whether a measured number meets its target is computed here, not written by hand.
"""
import argparse
import json
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "benchmarks.md")
RESULTS = os.path.join(REPO, "results")


def _table(header: List[str], rows: List[List[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(value: Optional[float]) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _verdict(value: float, target: float, below: bool = True) -> str:
    met = value <= target if below else value >= target
    return "met" if met else "**missed**"


# --- results/bench_optim.json (scripts/bench_optim.py) -----------------------------------------

OPTIM_VARIANTS = [
    "torch-single", "torch-foreach", "torch-fused", "torch-functional",
    "ours-eager-single", "ours-script-single", "ours-eager-foreach", "ours-script-foreach",
    "ours-eager-fused", "ours-script-fused",
]


def render_bench_optim(data: Dict[str, Any]) -> str:
    dense = _render_bench_optim_dense(data) if "results" in data else ""
    if "sparse" not in data:
        return dense
    return (dense + "\n\n" if dense else "") + _render_bench_optim_sparse(data["sparse"])


def _render_bench_optim_sparse(sparse: Dict[str, Any]) -> str:
    """The sparse case (issue 22; ``scripts/bench_optim.py --sparse``)."""
    out = [
        f"Sparse gradients (issue 22): a {sparse['rows']:,} x {sparse['cols']} {sparse['dtype']} table whose "
        f"gradient touches {sparse['touched_rows']:,} distinct rows (a sparse COO gradient)"
        + (" (a `--quick` smoke run: sizes and repeats are too small to mean anything)" if sparse.get("quick") else "")
        + ". `torch`: `torch.optim` with the gradient on `.grad`; `ours`: the fused op "
        "`torch.ops.gilfree_optim.sparse_<name>_`; `ours eager`: the `functional_optim` class's `step`. "
        "Floor: the bytes the step must read and write for the touched rows (parameter and state rows read "
        "and written, gradient values and int64 indices read) divided by the bandwidth of a large "
        "`copy_` with the same thread count; `rows-copy`: `index_select` + `index_copy_` of the same rows. "
        "The touched rows (under 2 MB) stay in the CPU's caches from one timed step to the next while the "
        "floor's bandwidth is a large copy's through memory, so a step can take less than its floor (SGD's, "
        "which adds the rows without coalescing them first, as torch, does). Target: ours at most 2x the floor.",
        "",
    ]
    rows = []
    for threads, per in sparse["threads"].items():
        for name, row in per.items():
            if not isinstance(row, dict):
                continue
            v = row["variants"]
            rows.append([
                name, threads, f"{per['bandwidth_copy_GBps']:.1f}", f"{row['floor_ms']:.4f}",
                _ms(v["torch"]["median_ms"]), _ms(v["ours-kernel"]["median_ms"]), _ms(v["ours-eager"]["median_ms"]),
                _ms(v["rows-copy"]["median_ms"]),
                f"{row['ours/floor']:.2f}x, {_verdict(row['ours/floor'], 2.0)}", f"{row['ours/torch']:.3f}x",
            ])
    out.append(_table(
        ["optimizer", "threads", "copy GB/s", "floor ms", "`torch` ms", "`ours` ms", "`ours eager` ms",
         "`rows-copy` ms", "ours / floor (<= 2x)", "ours / torch"],
        rows,
    ))
    return "\n".join(out)


def _render_bench_optim_dense(data: Dict[str, Any]) -> str:
    out = []
    w = data["workloads"]
    t = data["timing"]
    out.append(
        f"Measured with torch {data['torch_version']}, Python {data['python']}, {data['machine']}, "
        f"{data['threads']} threads; in-place `add_` bandwidth {data['bandwidth_inplace_add_GBps']:.1f} GB/s"
        + (" (a `--quick` smoke run: sizes and repeats are too small to mean anything)" if data.get("quick") else "")
        + ". Workload A: "
        f"{w['A']['tensors']} float32 tensor of {w['A']['numel_each']:,} elements; workload B: "
        f"{w['B']['tensors']} tensors of {w['B']['numel_each']:,} elements. Medians of per-step times: "
        f"{t['rounds']} rounds of {t['steps_per_round']} steps per variant ({t['rounds_fused_phase']} rounds "
        "for the fused variants, built twice in opposite orders), after "
        f"{t['warmup']} warm-up steps."
    )
    out.append("")
    out.append("Targets (issue 2): (A) our fused SGD, Adam and Adagrad step within 1.05x of torch's fused step, "
               "eager and scripted; (B) our scripted fused step no slower than torch's fused eager step.")
    out.append("")
    rows = []
    for name, r in data["targets"].items():
        a_eager = r["A_ours-eager-fused/torch-fused"]
        a_script = r["A_ours-script-fused/torch-fused"]
        b_script = r["B_ours-script-fused/torch-fused"]
        rows.append([
            name,
            f"{a_eager:.3f}x, {_verdict(a_eager, r['A_target'])}",
            f"{a_script:.3f}x, {_verdict(a_script, r['A_target'])}",
            f"<= {r['A_target']:.2f}x",
            f"{b_script:.3f}x, {_verdict(b_script, r['B_target'])}",
            f"<= {r['B_target']:.2f}x",
        ])
    out.append(_table(
        ["optimizer", "(A) ours eager fused / torch fused", "(A) ours scripted fused / torch fused", "target",
         "(B) ours scripted fused / torch fused", "target"],
        rows,
    ))
    medians: Dict[str, Dict[str, Dict[str, float]]] = {}
    order: List[str] = []
    for entry in data["results"]:
        if entry["optimizer"] not in order:
            order.append(entry["optimizer"])
        medians.setdefault(entry["workload"], {}).setdefault(entry["optimizer"], {})[entry["variant"]] = entry["median_ms"]
    for workload in sorted(medians):
        out.append("")
        out.append(f"Median milliseconds per step, workload {workload} (`torch-functional`: torch's private "
                   "`_Functional*` optimizer, run eagerly; `ours-eager`/`ours-script`: our class called eagerly / "
                   "as a scripted `OptimizerModule`):")
        out.append("")
        present = [v for v in OPTIM_VARIANTS if any(v in m for m in medians[workload].values())]
        rows = [[name] + [_ms(medians[workload][name].get(v)) for v in present] for name in order
                if name in medians[workload]]
        out.append(_table(["optimizer"] + [f"`{v}`" for v in present], rows))
    return "\n".join(out)


# --- results/bench_optim_kernels.json (scripts/bench_optim.py --kernels) -----------------------

def render_bench_optim_kernels(data: Dict[str, Any]) -> str:
    """Issue 12: our fused ops (`torch.ops.gilfree_optim`) against the bandwidth floor."""
    w = data["workloads"]
    out = [
        f"Measured with torch {data['torch_version']}, Python {data['python']}, {data['machine']}; our kernels "
        f"ran their {data['isa']} build"
        + (" (a `--quick` smoke run: sizes and repeats are too small to mean anything)" if data.get("quick") else "")
        + f". Workload A: {w['A']['tensors']} float32 tensor of {w['A']['numel_each']:,} elements; workload B: "
        f"{w['B']['tensors']} tensors of {w['B']['numel_each']:,} elements.",
        "",
        "Our group step `torch.ops.gilfree_optim.group_step` called directly (torch's fused kernels for SGD, "
        "Adam, AdamW and Adagrad, this package's for the others), against the "
        "bandwidth floor (bytes the step must move / in-place `add_` bandwidth measured with the same thread "
        f"count) and torch's fused step; DeepSpeed: {data.get('deepspeed', 'not measured')}. Targets: (A) ours "
        "<= 1.3x the floor and <= 1.0x torch's fused step and DeepSpeed's CPU Adam; (B) ours <= 0.7x torch's "
        "fused Adam per byte moved.",
        "",
    ]
    def ratio(row: Dict[str, Any], key: str, target: Optional[float] = None) -> str:
        if key not in row:
            return "–"
        return f"{row[key]:.2f}x" + (f", {_verdict(row[key], target)}" if target is not None else "")

    rows = []
    for name, per_threads in data["kernels"].items():
        for threads, r in per_threads.items():
            a, b = r["A"], r["B"]
            rows.append([
                name, threads, f"{r['bandwidth_inplace_add_GBps']:.1f}",
                _ms(a["variants"]["ours-kernel"]["median_ms"]), ratio(a, "ours/floor", 1.3),
                ratio(a, "torch-fused/floor"), ratio(a, "ours/torch-fused", 1.0), ratio(a, "ours/deepspeed", 1.0),
                _ms(b["variants"]["ours-kernel"]["median_ms"]), ratio(b, "ours/torch-fused"),
                ratio(b, "ours/torch-fused-Adam_per_byte", 0.7), ratio(b, "ours/deepspeed", 1.0),
            ])
    out.append(_table(
        ["optimizer", "threads", "add_ GB/s", "(A) ours ms", "(A) ours / floor", "(A) torch fused / floor",
         "(A) ours / torch fused", "(A) ours / DeepSpeed", "(B) ours ms", "(B) ours / torch fused",
         "(B) ours / torch fused Adam per byte", "(B) ours / DeepSpeed"],
        rows,
    ))
    return "\n".join(out)


# --- results/bench_optim_group_steps.json and bench_optim_compiled.json (scripts/bench_optim.py
# --group-steps, --compiled): ours against torch, paired per round ----------------------------------

def _render_paired(data: Dict[str, Any], key: str, what: str) -> str:
    """A table of `ours/torch` per optimizer, thread count and workload (target <= 1.0)."""
    meta = data["meta"]
    loads = f"load average {meta['load_average_start'][0]:.2f} at the start, {meta['load_average_end'][0]:.2f} at the end"
    out = [
        f"Measured with torch {meta['torch']}, Python {meta['python']}, {data['machine']}, {meta['cpus']} CPUs; "
        f"{loads}; clock: {data.get('clock', 'wall clock')}"
        + (" (a `--quick` smoke run: sizes and repeats are too small to mean anything)" if meta.get("quick") else "")
        + f". {what} `ours/torch` is the median over rounds of the ratio of the two steps of a round "
        "(target: <= 1.0x).",
        "",
    ]
    rows = []
    for name, per_threads in data[key].items():
        for threads, per_workload in per_threads.items():
            for workload, row in per_workload.items():
                v = row["variants"]
                rows.append([
                    name, threads, f"{workload} ({row['tensors']} x, {row['numel']:,} elements)",
                    _ms(v["torch"]["median_ms"]), _ms(v["ours"]["median_ms"]),
                    f"{row['ours/torch']:.2f}x, {_verdict(row['ours/torch'], 1.0)}",
                ])
    out.append(_table(["optimizer", "threads", "workload", "torch ms", "ours ms", "ours / torch"], rows))
    return "\n".join(out)


def render_bench_optim_group_steps(data: Dict[str, Any]) -> str:
    """Issue 29: Adafactor's and Muon's default step against torch.optim's."""
    return _render_paired(data, "group_steps", "Our class's default step (the op library's group step, called "
                          "from Python) against torch.optim's default step, on copies of the same tensors.")


def render_bench_optim_compiled(data: Dict[str, Any]) -> str:
    """Issue 31: our step under torch.compile against torch.optim's step under torch.compile, and
    the harness's spread (torch's compiled step against itself), where measured."""
    text = _render_paired(data, "compiled", "`torch.compile(ours.step, fullgraph=True)` against "
                          "`torch.compile(torch.optim.<name>(...).step)`, both compiled before the timing, on copies "
                          "of the same tensors.")
    noise = data.get("compiled_noise")
    if not noise:
        return text
    rows = [[name, f"{workload} ({row['tensors']} x, {row['numel']:,} elements)", f"{row['ours/torch']:.2f}x"]
            for name, per_threads in noise.items() for per_workload in per_threads.values()
            for workload, row in per_workload.items()]
    return "\n".join([
        text, "",
        "The same harness, the same run, torch's compiled step against a second copy of itself (2 threads): "
        "the ratio it shows for two equal steps.", "",
        _table(["optimizer", "workload", "torch / torch"], rows),
    ])


# --- results/bench_backward.json (scripts/bench_backward.py) -----------------------------------

GRAPHS = {
    "round_trips": "(i) latency-bound: 2 workers, 10 round trips of 1,000-element tensors",
    "mlp": "(ii) compute-bound: 3 workers, a 3-shard MLP, 1M-parameter layers, batch 256",
}


def render_bench_backward(data: Dict[str, Any]) -> str:
    out = []
    meta = data.get("meta", {})
    repeats = meta.get("repeats")
    out.append(
        f"Measured with torch {meta.get('torch', '?')}, Python {meta.get('python', '?')}, {meta.get('cpus', '?')} CPUs; "
        f"{meta.get('iters', '?')} timed iterations per engine"
        + (f", {repeats} runs in fresh processes per graph (ratios: the median of each run's ratio)" if repeats else
           ", one run per graph")
        + (" (a `--quick` smoke run)" if meta.get("quick") else "")
        + ". Only the backward call is timed; the engines take turns within each iteration."
    )
    out.append("")
    rows = []
    for graph, label in GRAPHS.items():
        if graph not in data:
            continue
        r = data[graph]
        q = r["ratios"]
        rows.append([label] + [_ms(r[e]["median_ms"]) for e in ("torch", "fast", "smart")]
                    + [f"{q[k]:.3f}" for k in ("fast/torch", "smart/torch", "smart/fast")])
    out.append(_table(["graph", "torch ms", "fast ms", "smart ms", "fast/torch", "smart/torch", "smart/fast"], rows))
    for graph in GRAPHS:
        runs = data.get(graph, {}).get("ratio_runs")
        if runs:
            out.append("")
            out.append(f"Per-run ratios, {graph}: " + "; ".join(
                f"{name} " + ", ".join(f"{v:.3f}" for v in values) for name, values in runs.items()))
    out.append("")
    rows = []
    for graph in GRAPHS:
        if graph in data:
            v = data[graph]["ratios"]["fast/torch"]
            rows.append(["issue 3", f"fast/torch on {graph}", "<= 1.0", f"{v:.3f}", _verdict(v, 1.0)])
    for graph in GRAPHS:
        if graph in data:
            v = data[graph]["ratios"]["smart/fast"]
            rows.append(["issue 6", f"smart/fast on {graph}", "<= 1.2", f"{v:.3f}", _verdict(v, 1.2)])
    a = data.get("auth_round_trips")
    if a:
        rows.append(["issue 21", f"round trips (i), smart engine: with a key ({a['key']['median_ms']:.3f} ms) / "
                     f"without ({a['uv']['median_ms']:.3f} ms), median of {len(a['ratio_runs'])} runs' ratios",
                     "<= 1.10", f"{a['ratio']:.3f}", _verdict(a["ratio"], 1.10)])
    u = data.get("unused_rpc")
    if u:
        s = u["smart"]["median_ms"]
        rows.append(["issue 6", "unused RPC (design note's example): smart mode", "< 1 s",
                     f"{s:.2f} ms (median of {u['smart']['n']})", _verdict(s, 1000.0)])
        rows.append(["issue 6", "the same on torch's engine", "waits for its RPC timeout",
                     f"{u['torch_s']:.2f} s with a {u['torch_rpc_timeout_s']:g} s RPC timeout "
                     f"(default {u['torch_default_rpc_timeout_s']:g} s): {u['torch_outcome']}", "as expected"
                     if u["torch_s"] >= 0.9 * u["torch_rpc_timeout_s"] else "**did not wait**"])
    out.append(_table(["from", "target", "bound", "measured", "verdict"], rows))
    return "\n".join(out)


# --- generic: any other result file -----------------------------------------------------------


def _leaves(value: Any, path: str, out: List[List[str]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list) and value and all(isinstance(v, (dict, list)) for v in value):
        for i, item in enumerate(value):
            _leaves(item, f"{path}[{i}]", out)
    elif isinstance(value, float):
        out.append([f"`{path}`", f"{value:.4g}"])
    else:
        out.append([f"`{path}`", f"`{json.dumps(value)}`"])


def render_generic(data: Any) -> str:
    rows: List[List[str]] = []
    _leaves(data, "", rows)
    return "Every value of the file (no dedicated table for it yet):\n\n" + _table(["key", "value"], rows)


GIL_TARGETS = (
    "Targets (issue 4): with a pure-Python thread spinning on the server and T = 8 trainers, our "
    "DistributedOptimizer's steps/s at least 1.0x torch's with Adam and at least 2x torch's with NAdam (its Python "
    "path); a local step(context_id) over 400 parameters of 4,096 elements slows down at most 1.2x when the "
    "spinning thread runs. Issue 19: with a thread on the owner holding its GIL, ours at least 0.95 of ours idle."
)


GIL_ENGINES = [
    ("plugin-adam", "plugin, Adam"),
    ("torch-adam", "torch, Adam"),
    ("plugin-nadam", "plugin, NAdam"),
    ("torch-nadam", "torch, NAdam (Python path)"),
]


def _torch_adam_path(version: str) -> str:
    """Which path torch's DistributedOptimizer takes for Adam (as scripts/bench_gil.py)."""
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        return "?"
    return "Python" if (major, minor) >= (2, 14) else "TorchScript"


def render_bench_gil(data: Any) -> str:
    meta = data.get("meta", {})
    out = [GIL_TARGETS, ""]
    path = _torch_adam_path(str(meta.get("torch", "?")))
    out.append(
        f"Measured with torch {meta.get('torch', '?')}, Python {meta.get('python', '?')}, {meta.get('cpus', '?')} CPUs"
        + (" (a `--quick` smoke run)" if meta.get("quick") else "")
        + f". Parameter server: {meta.get('num_params', '?')} parameters of {meta.get('param_size', 0):,} elements, "
        f"every trainer stepping the same context for {meta.get('seconds', '?')} s per configuration; "
        f"server steps per second, all trainers together. torch's DistributedOptimizer with Adam takes its {path} "
        "path with this torch."
    )
    if "server" in data:
        for spinner, label in (("", "without"), ("+spinner", "with")):
            out.append("")
            out.append(f"Server steps/s {label} the spinning thread on the server:")
            out.append("")
            rows = [[t] + [f"{r[e + spinner]:.0f}" for e, _ in GIL_ENGINES] for t, r in data["server"].items()]
            out.append(_table(["trainers"] + [name for _, name in GIL_ENGINES], rows))
        out.append("")
        rows = []
        for t, r in data["server_ratios"].items():
            rows.append([t] + [f"{r[k]:.2f}x" for k in (
                "adam: plugin/torch", "adam: plugin/torch+spinner", "nadam: plugin/torch", "nadam: plugin/torch+spinner")])
        out.append(_table(["trainers", "Adam: plugin / torch", "same, with spinner", "NAdam: plugin / torch Python",
                           "same, with spinner"], rows))
    local = data.get("local_step", {})
    if local:
        out.append("")
        rows = []
        for engine, cases in local.items():
            for case, r in cases.items():
                rows.append([engine, f"from {'Python, once per step' if case == 'python' else 'a TorchScript loop'}",
                             f"{r['alone_ms']:.2f}", f"{r['spinner_ms']:.2f}", f"{r['slowdown']:.2f}x"])
        out.append("A local step(context_id): the plugin's native local optimizer and torch's scripted one, 400 x 4,096 "
                   "Adam, one process, milliseconds per step:")
        out.append("")
        out.append(_table(["local optimizer", "called", "alone", "with spinner", "slowdown"], rows))
    out.append("")
    rows = []
    ratios8 = data.get("server_ratios", {}).get("8")
    if ratios8:
        v = ratios8["adam: plugin/torch+spinner"]
        rows.append([f"Adam, T = 8, spinner: plugin / torch ({path} path)", ">= 1.0x", f"{v:.2f}x",
                     _verdict(v, 1.0, below=False)])
        v = ratios8["nadam: plugin/torch+spinner"]
        rows.append(["NAdam, T = 8, spinner: plugin / torch Python path", ">= 2x", f"{v:.2f}x",
                     _verdict(v, 2.0, below=False)])
    for case, label in (("torchscript", "called from TorchScript"), ("python", "called from Python")):
        if case in local.get("plugin", {}):
            v = local["plugin"][case]["slowdown"]
            rows.append([f"local step slowdown with the spinner, {label}", "<= 1.2x", f"{v:.2f}x", _verdict(v, 1.2)])
    for key, r in data.get("owner_gil", {}).items():
        v = r["plugin-adam: gil/idle"]
        rows.append([f"owner's GIL held: plugin held / idle ({key})", ">= 0.95", f"{v:.2f}",
                     _verdict(v, 0.95, below=False)])
    out.append(_table(["target", "bound", "measured", "verdict"], rows))
    if "owner_gil" in data:
        out.append("")
        out.append(render_owner_gil(data["owner_gil"], meta))
    if "two_phase" in data:
        out.append("")
        out.append(render_two_phase(data["two_phase"], meta))
    return "\n".join(out)


def render_owner_gil(data: Any, meta: Dict[str, Any]) -> str:
    """A thread holding the owner's GIL (part 4 of bench_gil), one row per torch version and mode."""
    out = [
        "A thread on the owner holding its GIL (issue 19): one trainer, one server holding a 2048 x 2048 Linear "
        "layer, Adam; steps/s with the server idle and with a thread there calling `usleep` through "
        "`ctypes.PyDLL` in a loop (the GIL held throughout each call); "
        f"{meta.get('owner_gil_seconds', '?')} s per run, medians of {meta.get('owner_gil_repeats', '?')} alternating "
        "rounds. torch's DistributedOptimizer is not run where TorchScript is removed (torch 2.13's scripts at import).",
        "",
    ]
    rows = []
    for key, r in data.items():
        theirs = ([f"{r['torch-adam']:.0f}", f"{r['torch-adam+gil']:.0f}", f"{r['torch-adam: gil/idle']:.2f}",
                   r.get("torch_path", "?")] if "torch-adam" in r else ["-", "-", "-", "not run"])
        rows.append([key, f"{r['plugin-adam']:.0f}", f"{r['plugin-adam+gil']:.0f}", f"{r['plugin-adam: gil/idle']:.2f}"]
                    + theirs)
    out.append(_table(["torch, mode", "plugin idle", "plugin, GIL held", "plugin held / idle", "torch idle",
                       "torch, GIL held", "torch held / idle", "torch's path"], rows))
    return "\n".join(out)


TWO_PHASE_TARGET = ("Target (issues 10 and 19): a step the backward pass could not check takes two phases "
                    "(prepare on every owner, then commit); its cost against the checked step, which sends the "
                    "same step to every owner at once, is measured here.")


def render_two_phase(data: Any, meta: Dict[str, Any]) -> str:
    """The two-phase step against the checked step (part 3 of bench_gil)."""
    out = [TWO_PHASE_TARGET, ""]
    out.append(
        f"{meta.get('num_params', '?')} parameters of {meta.get('param_size', 0):,} elements split over "
        f"{meta.get('two_phase_servers', '?')} servers, every trainer stepping the same context after one backward "
        f"pass of the plugin's engine, no spinning thread, {meta.get('two_phase_seconds', '?')} s per run. The "
        "default step (checked: the backward pass checked every owner's gradients, so the step goes to every "
        "owner at once, one round trip) against the same optimizer made to take its two phases (prepare on every "
        "owner, then commit: two round trips; what a step takes after torch's backward pass, with a Python local "
        f"optimizer, and in step_async). They alternate, {meta.get('repeats', '?')} rounds, in one process group. "
        "Steps/s are medians; the cost is 1 minus the median of the ratios to the checked step of the same round."
    )
    out.append("")
    rows = []
    for t, by_optimizer in data.items():
        for name, r in by_optimizer.items():
            rows.append([t, name, f"{r['checked']:.0f}", f"{r['two_phase']:.0f}", f"{100 * r['cost']:.1f} %"])
    out.append(_table(["trainers", "optimizer", "checked step, steps/s", "two phases, steps/s", "cost"], rows))
    return "\n".join(out)


# --- results/bench_mainjob.json (scripts/bench_mainjob.py) -------------------------------------

MAINJOB_TARGET = ("Target (issue 14): on the default job of `scripts/train.py`, the plugin's stack at least 1.3x "
                  "torch's stack in whole-run training throughput (samples/s), the median over alternated pairs.")


def _loads(values: Optional[List[float]]) -> str:
    return "–" if not values else ", ".join(f"{x:.1f}" for x in values)


def _loaded(meta: Dict[str, Any]) -> str:
    """A warning for a verdict taken while the machine had more runnable work than cores, judged
    by the load at the start (the load at the end counts the job's own six processes)."""
    loads = meta.get("load_average") or {}
    peak = (loads.get("start") or [0])[0]
    cpus = meta.get("cpus") or 0
    return f" (under load {peak:.0f} on {cpus} CPUs: rerun on a quiet machine)" if cpus and peak > cpus else ""


def _conditions(meta: Dict[str, Any]) -> str:
    """The run's note (a sentence) and the load averages at its start and end, as text."""
    note = (meta.get("note") or "").strip()
    return ((f" {note[0].upper()}{note[1:]}" + ("" if note.endswith(".") else ".") if note else "")
            + (f" Load average (1, 5, 15 min) at the start: {_loads(meta['load_average']['start'])}; at the end: "
               f"{_loads(meta['load_average']['end'])}." if meta.get("load_average") else ""))


def render_bench_mainjob(data: Any) -> str:
    meta = data["meta"]
    job = meta["job"]
    out = [MAINJOB_TARGET, ""]
    out.append(
        f"Measured with torch {meta['torch']}, Python {meta['python']}, {meta['cpus']} CPUs; "
        f"{meta['pairs']} pairs of runs in fresh processes, the order alternating within pairs. Job: "
        f"{job['trainers']} trainers, {job['servers']} servers, an MLP of {meta['parameters']:,} parameters "
        f"(hidden width {job['hidden']}), batch {job['batch_size']}, {job['optimizer']} lr={job['lr']:g}, "
        f"{job['epochs']} epochs"
        + (f"; `scripts/train.py` options {' '.join(meta['train_options'])}" if meta["train_options"] else "")
        + ". Throughput: training samples over the seconds of the training epochs (set-up and held-out "
        "evaluation excluded)."
        + _conditions(meta)
    )
    out.append("")
    rows = []
    for r in data["runs"]:
        rows.append([str(r["pair"] + 1), r["stack"], f"{r['samples_per_s']:.0f}", f"{r['training_seconds']:.1f}",
                     f"{r['accuracy']:.4f}"])
    out.append(_table(["pair", "stack", "samples/s", "training s", "held-out accuracy"], rows))
    out.append("")
    out.append("Ratios plugin / torch per pair: " + ", ".join(f"{x:.3f}" for x in data["ratios"]))
    out.append("")
    v = data["median_ratio"]
    out.append(_table(["target (issue 14)", "bound", "measured", "verdict"],
                      [["plugin / torch samples/s, default job (median of pairs)", f">= {data['target']}x",
                        f"{v:.2f}x", _verdict(v, data["target"], below=False) + _loaded(meta)]]))
    return "\n".join(out)


MOVIELENS_TARGET = ("Targets (issue 22): on `scripts/train.py --workload movielens`, the plugin's stack at least 1.5x "
                    "torch's stack in samples/s (the median over alternated pairs); the servers' resident memory at "
                    "most 1.5x the bytes of the tables plus the optimizer state, judged on its growth from before the "
                    "tables were built to the end of the job (a server's Python, torch and RPC agent take about "
                    "260 MiB before any table; the whole RSS is shown beside it).")
AUTH_TARGET = ("Target (issue 21): the main job with an authentication key (`--auth-key-file`) at most 5 % slower "
               "than without one: keyed / unkeyed samples/s at least 0.95, the median over alternated pairs.")


def render_bench_mainjob_movielens(data: Any) -> str:
    meta, job, mem = data["meta"], data["meta"]["job"], data["memory"]
    out = [MOVIELENS_TARGET, ""]
    out.append(
        f"Measured with torch {meta['torch']}, Python {meta['python']}, {meta['cpus']} CPUs; {meta['pairs']} pairs of "
        f"runs in fresh processes, the order alternating within pairs. Job: {job['trainers']} trainers, "
        f"{job['servers']} servers, embedding tables of {meta['parameters']:,} parameters (width {job['dim']}, "
        f"{job['cross_buckets']:,} hashed cross rows), batch {job['batch_size']}, {job['optimizer']} lr={job['lr']:g}, "
        f"{job['epochs']} epochs"
        + (f"; `scripts/train.py` options {' '.join(meta['train_options'])}" if meta["train_options"] else "")
        + (f"; the plugin's stack with {job['lookups']} lookups, step {job['step']}, {job['mode']} mode"
           if "lookups" in job else "")
        + ". Throughput: training samples over the seconds of the training epochs." + _conditions(meta)
    )
    out.append("")
    rows = [[str(r["pair"] + 1), r["stack"], f"{r['samples_per_s']:.0f}", f"{r['training_seconds']:.1f}",
             f"{r['rmse']:.4f}", f"{r['baseline_rmse']:.4f}",
             f"{sum(m['rss_bytes'] for m in r['servers_memory'].values()) / 2**20:,.0f}"] for r in data["runs"]]
    out.append(_table(["pair", "stack", "samples/s", "training s", "held-out RMSE", "item-mean RMSE",
                       "servers' RSS MiB"], rows))
    out.append("")
    out.append("Ratios plugin / torch per pair: " + ", ".join(f"{x:.3f}" for x in data["ratios"]))
    out.append("")
    v = data["median_ratio"]
    model = mem["model_and_state_bytes"]
    rows = [["plugin / torch samples/s (median of pairs)", f">= {data['target']}x", f"{v:.2f}x",
             _verdict(v, data["target"], below=False) + _loaded(meta)]]
    for stack in ("plugin", "torch"):
        m = mem[stack]
        rows.append([f"{stack}: servers' RSS growth since before the tables / (tables + optimizer state, "
                     f"{model / 2**20:,.0f} MiB)", f"<= {data['memory_target']}x",
                     f"{m['ratio']:.2f}x ({m['servers_rss_growth_bytes'] / 2**20:,.0f} MiB; whole RSS "
                     f"{m['servers_rss_bytes'] / 2**20:,.0f} MiB, {m['ratio_total']:.2f}x)",
                     _verdict(m["ratio"], data["memory_target"])])
    out.append(_table(["target (issue 22)", "bound", "measured", "verdict"], rows))
    return "\n".join(out)


def render_bench_mainjob_auth(data: Any) -> str:
    meta, job = data["meta"], data["meta"]["job"]
    out = [AUTH_TARGET, ""]
    out.append(
        f"Measured with torch {meta['torch']}, Python {meta['python']}, {meta['cpus']} CPUs; {meta['pairs']} pairs of "
        f"runs of `scripts/train.py --workload {meta.get('workload', 'digits')}` on the plugin's stack, in fresh "
        f"processes, with a fresh 32-byte key (`plugin+key`: the authenticating transport, every frame encrypted and authenticated, AES-256-GCM) "
        f"and without one (`plugin`: TensorPipe's uv transport), the order alternating within pairs; "
        f"{job['trainers']} trainers, {job['servers']} servers, {meta['parameters']:,} parameters, "
        f"{job['optimizer']}, {job['epochs']} epochs"
        + (f"; options {' '.join(meta['train_options'])}" if meta["train_options"] else "") + "." + _conditions(meta)
    )
    out.append("")
    rows = [[str(r["pair"] + 1), r["stack"], f"{r['samples_per_s']:.0f}", f"{r['training_seconds']:.1f}"]
            for r in data["runs"]]
    out.append(_table(["pair", "run", "samples/s", "training s"], rows))
    out.append("")
    out.append("Ratios keyed / unkeyed per pair: " + ", ".join(f"{x:.3f}" for x in data["ratios"]))
    out.append("")
    v = data["median_ratio"]
    out.append(_table(["target (issue 21)", "bound", "measured", "verdict"],
                      [["keyed / unkeyed samples/s (median of pairs)", f">= {data['target']}x", f"{v:.3f}x",
                        _verdict(v, data["target"], below=False) + _loaded(meta)]]))
    return "\n".join(out)


# --- results/profile_mainjob.json (scripts/profile_mainjob.py) ---------------------------------

PROFILE_INTRO = ("Where the time goes in the main job (issue 14): per stack and worker role, seconds per training "
                 "epoch, measured over the epochs after the first.")


def _s(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.3f}"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return "–" if not a or not b else f"{a / b:.2f}"


def render_profile_mainjob(data: Any) -> str:
    meta, stacks = data["meta"], data["stacks"]
    job = meta["job"]
    names = [n for n in ("plugin", "torch") if n in stacks]
    out = [PROFILE_INTRO, ""]
    out.append(
        f"Measured with torch {meta['torch']}, Python {meta['python']}, {meta['cpus']} CPUs, by "
        f"`{meta['command'].strip()}`: {job['trainers']} trainers, {job['servers']} servers, hidden width "
        f"{job['hidden']}, batch {job['batch_size']}, {job['optimizer']} lr={job['lr']:g}, {meta['epochs']} epochs "
        f"per run, the first not measured." + _conditions(meta)
    )
    out.append("")
    out.append("Wall-clock seconds per epoch, from timers in `scripts/train.py --profile` (trainers: the mean "
               "over trainers of each phase of their steps; servers: the mean over servers of the time inside "
               "the forward function, several trainers' calls at once):")
    out.append("")
    keys: List[Any] = []
    for n in names:
        for role in ("trainer", "server"):
            for k in stacks[n]["wall"].get(role, {}):
                if (role, k) not in keys:
                    keys.append((role, k))
    for role, k in list(keys):  # "<phase>: of which ..." right after its phase
        parent = (role, k.split(": of which")[0])
        if ": of which" in k and parent in keys:
            keys.remove((role, k))
            keys.insert(keys.index(parent) + 1, (role, k))
    rows = [["epoch (training)"] + [_s(stacks[n]["epoch_seconds"]) for n in names]
            + [_ratio(*(stacks[n]["epoch_seconds"] for n in names)) if len(names) == 2 else "–"]]
    for role, k in keys:
        values = [stacks[n]["wall"].get(role, {}).get(k) for n in names]
        label = k if k.startswith(role) else f"{role}: {k}"
        rows.append([label] + [_s(v) for v in values] + [_ratio(*values) if len(values) == 2 else "–"])
    rows.append(["samples/s"] + [f"{stacks[n]['samples_per_s']:.0f}" for n in names] + ["–"])
    out.append(_table(["phase", *names, "plugin / torch"], rows))
    out.append("")
    out.append("CPU seconds per epoch, all workers of a role together, per thread kind (from /proc; "
               "`pt_thread_pool`: torch's RPC threads, which run every request's handler; `TP_UV_loop`, "
               "`TP_CMA_loop`: TensorPipe's event loops; `main`: the Python main thread):")
    out.append("")
    threads: List[str] = []
    for n in names:
        for role in ("trainer", "server"):
            for t in stacks[n]["cpu"].get(role, {}).get("by_thread", {}):
                if t not in threads:
                    threads.append(t)
    cols = [(n, role) for n in names for role in ("trainer", "server")]
    rows = []
    for t in threads:
        rows.append([t] + [_s(stacks[n]["cpu"].get(role, {}).get("by_thread", {}).get(t)) for n, role in cols])
    rows.append(["all threads"] + [_s(stacks[n]["cpu"].get(role, {}).get("total")) for n, role in cols])
    out.append(_table(["thread kind", *[f"{n}: {role}s" for n, role in cols]], rows))
    if all("perf" in stacks[n] for n in names):
        out.append("")
        out.append(
            f"The same CPU seconds split by what the code was doing: `perf record --call-graph dwarf` at "
            f"{meta['perf_hz']} Hz on every worker (a second run per stack), each sample's native call stack "
            "sorted by markers (`scripts/profile_mainjob.py`, `WORK_RULES`), and each worker's CPU seconds "
            "shared out in the proportions of its samples. perf cannot unwind MKL's kernels, so the matrix "
            "products of the forward and backward passes share one row; the forward function's own time is "
            "in the first table. Samples: " + "; ".join(
                f"{n} {sum(stacks[n]['perf']['samples'].values()):,} ({stacks[n]['perf']['samples_per_s_under_perf']:.0f}"
                f" samples/s under perf)" for n in names) + ".")
        out.append("")
        for title, key in (("work", "work"), ("kind of code", "kind")):
            cats: List[str] = []
            for n in names:
                for role in ("trainer", "server"):
                    for c, _ in sorted(stacks[n]["perf"][key].get(role, {}).items(), key=lambda kv: -kv[1]):
                        if c not in cats:
                            cats.append(c)
            rows = [[c] + [_s(stacks[n]["perf"][key].get(role, {}).get(c)) for n, role in cols] for c in cats]
            out.append(_table([title, *[f"{n}: {role}s" for n, role in cols]], rows))
            out.append("")
        out.pop()
    return "\n".join(out)



# --- results/bench_remote_forward.json (scripts/bench_remote_forward.py) -------------------------

REMOTE_FORWARD_TARGET = ("Target (issues 43 and 48): the native forward (`plugin.nn.RemoteModule`: with example inputs, "
                         "exported lazily at the first call, and lazily with non-tensor arguments) with a thread on the "
                         "owner holding its GIL keeps at least 0.9x its rate with the owner idle.")
REMOTE_FORWARD_KINDS = {"native": "RemoteModule (native)", "lazy": "RemoteModule (native, lazy export)",
                        "mixed": "RemoteModule (native, lazy, non-tensor args)", "python": "pickled Python forward",
                        "torch": "torch's RemoteModule (TorchScript)"}
REMOTE_FORWARD_NATIVE = ("native", "lazy", "mixed")


def render_bench_remote_forward(data: Any) -> str:
    """Forwards/s and latency of the three forwards, idle and busy, and the training iteration."""
    meta = data.get("meta", {})
    out = [REMOTE_FORWARD_TARGET, "",
           f"torch {meta.get('torch', '?')}, {meta.get('cpus', '?')} CPUs; {meta.get('seconds', '?')} s per "
           f"configuration, medians of {meta.get('repeats', '?')} alternating rounds; busy: a thread on the owner "
           "holding its GIL (`usleep` through `ctypes.PyDLL`). Forwards outside any autograd context; the "
           "iteration is a forward in a distributed autograd context, the backward pass and an Adam step "
           "(the plugin's engine and DistributedOptimizer for the native and Python forwards, torch's for torch's "
           "RemoteModule)."
           + (" torch's RemoteModule was not run (TorchScript removed)." if meta.get("torchscript_removed") else ""),
           ""]
    rows = []
    for r in data["forward"]:
        ratio = r.get("busy_over_idle")
        verdict = (f"{ratio:.2f} ({_verdict(ratio, 0.9, below=False)})"
                   if ratio is not None and r["forward"] in REMOTE_FORWARD_NATIVE
                   else f"{ratio:.2f}" if ratio is not None else "")
        rows.append([r["model"], str(r["trainers"]), REMOTE_FORWARD_KINDS.get(r["forward"], r["forward"]), r["owner"],
                     f"{r['per_s']:.0f}", _ms(r.get("p50_ms")), _ms(r.get("p99_ms")), verdict,
                     f"{r['over_python']:.2f}x" if r.get("over_python") else ""])
    out.append(_table(["model", "trainers", "forward", "owner", "forwards/s", "p50 ms", "p99 ms", "busy / idle",
                       "vs Python"], rows))
    out += ["", "The training iteration:", ""]
    rows = []
    for r in data["iteration"]:
        ratio = r.get("busy_over_idle")
        rows.append([r["model"], str(r["trainers"]), REMOTE_FORWARD_KINDS.get(r["forward"], r["forward"]), r["owner"],
                     f"{r['per_s']:.0f}", f"{ratio:.2f}" if ratio is not None else "",
                     f"{r['over_python']:.2f}x" if r.get("over_python") else ""])
    out.append(_table(["model", "trainers", "forward", "owner", "iterations/s", "busy / idle", "vs Python"], rows))
    if data.get("exports"):
        out += ["", "Export latency of the lazily exported modules (ms, on the caller: the first forward, which "
                "exports on the owner and runs; a re-export: the first forward in eval mode, a new call key):", ""]
        out.append(_table(["model", "forward", "first call ms", "re-export ms", "native"],
                          [[r["model"], REMOTE_FORWARD_KINDS.get(r["forward"], r["forward"]), f"{r['first_call_ms']:.0f}",
                            f"{r['reexport_ms']:.0f}", str(r["native"])] for r in data["exports"]]))
    return "\n".join(out)


SECTIONS: Dict[str, Callable[[Any], str]] = {
    "bench_optim": render_bench_optim,
    "bench_optim_kernels": render_bench_optim_kernels,
    "bench_optim_group_steps": render_bench_optim_group_steps,
    "bench_optim_compiled": render_bench_optim_compiled,
    "bench_backward": render_bench_backward,
    "bench_gil": render_bench_gil,
    "bench_mainjob": render_bench_mainjob,
    "bench_mainjob.movielens": render_bench_mainjob_movielens,
    "bench_mainjob.movielens_torch214": render_bench_mainjob_movielens,
    "bench_mainjob.movielens_python_lookups": render_bench_mainjob_movielens,
    "bench_mainjob.auth": render_bench_mainjob_auth,
    "profile_mainjob": render_profile_mainjob,
    "bench_remote_forward": render_bench_remote_forward,
}
# The command that writes a result file, where it is not scripts/<name>.py.
SCRIPTS = {"bench_optim_kernels": "scripts/bench_optim.py --kernels",
           "bench_optim_group_steps": "scripts/bench_optim.py --group-steps",
           "bench_optim_compiled": "scripts/bench_optim.py --compiled",
           "bench_mainjob.movielens": "scripts/bench_mainjob.py --workload movielens",
           "bench_mainjob.movielens_torch214": "scripts/bench_mainjob.py --workload movielens --key movielens_torch214",
           "bench_mainjob.movielens_python_lookups": ("scripts/bench_mainjob.py --workload movielens --key "
                                                      "movielens_python_lookups -- --lookups python"),
           "bench_mainjob.auth": "scripts/bench_mainjob.py --auth"}
MISSING = {
    "bench_gil": GIL_TARGETS + "\n\n",
    "bench_mainjob": MAINJOB_TARGET + "\n\n",
    "bench_mainjob.movielens": MOVIELENS_TARGET + "\n\n",
    "bench_mainjob.auth": AUTH_TARGET + "\n\n",
    "profile_mainjob": PROFILE_INTRO + "\n\n",
    "bench_remote_forward": REMOTE_FORWARD_TARGET + "\n\n",
}


def render_section(name: str, results_dir: str) -> str:
    """The part of the page for ``name``: ``<file>`` renders results/<file>.json, ``<file>.<key>``
    the entry ``key`` of that file (a second run of the same script, written beside the first)."""
    file, _, key = name.partition(".")
    path = os.path.join(results_dir, file + ".json")
    script = SCRIPTS.get(name, f"scripts/{file}.py")
    source = f"*Source: `results/{file}.json`" + (f", key `{key}`" if key else "") + f", written by `{script}`.*\n\n"
    data = None
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        if key:
            data = data.get(key)
    if data is None:
        where = f"`results/{file}.json`" + (f" has no `{key}` entry" if key else " is not in the repository")
        return (MISSING.get(name, "") + f"{where} yet: run `python {script}` and commit the file, then "
                f"`python scripts/render_benchmarks.py`.")
    return source + SECTIONS.get(name, render_generic)(data)


def render_page(page: str, results_dir: str = RESULTS) -> str:
    """``page`` with every marked section replaced by what the result files say."""
    def replace(match: "re.Match[str]") -> str:
        name = match.group(1)
        return f"<!-- BEGIN {name} -->\n{render_section(name, results_dir)}\n<!-- END {name} -->"

    rendered, _ = re.subn(r"<!-- BEGIN ([\w.]+) -->\n.*?<!-- END \1 -->", replace, page, flags=re.S)
    missing = [n for n in SECTIONS if f"<!-- BEGIN {n} -->" not in page]
    if missing:
        raise ValueError(f"docs/benchmarks.md lacks the markers of {missing}")
    return rendered


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date; change nothing")
    args = parser.parse_args(argv)
    with open(PAGE) as f:
        page = f.read()
    rendered = render_page(page)
    if args.check:
        if rendered != page:
            print("docs/benchmarks.md does not match results/*.json: run python scripts/render_benchmarks.py")
            return 1
        return 0
    if rendered != page:
        with open(PAGE, "w") as f:
            f.write(rendered)
        print("rewrote docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
