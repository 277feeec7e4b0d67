#!/usr/bin/env python3
"""Benchmark functional_optim against torch.optim and torch's private functional optimizers.

For each optimizer and each workload it times one ``step``:

* ``torch-single`` / ``torch-foreach`` / ``torch-fused``: ``torch.optim`` with ``foreach=False``,
  ``foreach=True``, ``fused=True`` (gradients set on ``.grad`` once, outside the timing);
* ``torch-functional``: ``torch.distributed.optim._Functional<Name>`` (eager; warns on
  construction), where torch has one;
* ``ours-eager-<path>`` and ``ours-script-<path>``: this package's class called from Python,
  eagerly and as a scripted :class:`functional_optim.scripting.OptimizerModule`, for each of its
  paths (single, foreach, fused where torch has a kernel).

Workloads: (A) one float32 tensor of 16M elements; (B) 400 float32 tensors of 4,096 elements
(``--quick`` shrinks both and the repeat counts, for a smoke run).

The variants of one optimizer and workload are timed round-robin (a few steps of each in turn,
many rounds), so that slow drifts of the machine affect them alike; the fused variants (torch's
and ours, which the targets compare) form their own round-robin, apart from the unfused ones
whose large temporaries disturb the memory system, and are built and timed twice, in opposite
orders, because where a tensor lands in memory changes its speed. Each
variant's result is the median of its per-step times, with the 25th/75th percentiles as the
spread. The effective bandwidth of a step is the minimum traffic of the update (e.g. Adam reads
param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq: 7 x 4 bytes per element)
divided by its median time, printed beside the machine's bandwidth measured with a large
in-place ``add_`` (reads two tensors, writes one).

Each optimizer is timed in a fresh process (``--same-process`` times all in this one): what
memory a 64 MB tensor gets depends on what the process allocated before.

Fused implementation (``--kernels``, written to ``results/bench_optim_kernels.json``): for
each optimizer, with 1 and 2 intra-op threads, the op our fused implementation runs, the group
step ``torch.ops.gilfree_optim.group_step`` called directly (``ours-kernel``: torch's fused kernels
in pieces for SGD, Adam, AdamW and Adagrad, this package's kernels for the others), torch's fused step where
torch has one, torch's fused Adam on workload B (the per-byte anchor) and, when ``deepspeed`` is
installed, ``DeepSpeedCPUAdam`` for Adam/AdamW; each row gives the median step against the
bandwidth floor (bytes the step must move / in-place ``add_`` bandwidth measured with the same
thread count, both printed). On workload A both fused kernels sit at that floor, so the
difference between them is a few percent, about the size of the machine's drift over a run; the
variants are therefore interleaved step by step: each round runs one step of every variant, in
one order on even rounds and in the reverse order on odd rounds (ABBA..., so neither kernel is
always the one that runs after the other), and each ratio between two variants (ours / torch
fused, ours / DeepSpeed, ours / torch's fused Adam per byte) is the median over rounds of the
ratio of their two steps in that round, not the ratio of two medians taken at different times.
The variants are built twice, in opposite orders (as above: where a tensor lands in memory
changes its speed), and the rounds of both are pooled: 2 x 30 rounds per workload and thread
count (2 x 2 with ``--quick``). The per-variant medians and quartiles are still
reported, and the ratio of the medians too (``<ratio>_of_medians``), as a check.

The kernels run the build for the best instruction set of this CPU (AVX512, AVX2 or DEFAULT; the
report names it); ``ATEN_CPU_CAPABILITY=default`` (or ``avx2``) runs a lower one, as for ATen.

``--kernels --thread-clock`` times the 1-thread rows with the calling thread's CPU time
(``time.thread_time``) instead of the wall clock: with one intra-op thread every variant runs on
the calling thread, and on a machine shared with other jobs this leaves out the time the thread
waits for a core (the bandwidth the others use still counts). The 2-thread rows stay on the wall
clock (CPU time would leave out the second thread). The report records the clock.

Sparse gradients (issue 22, ``--sparse``; also part of the default run): an embedding-style
table of 1M x 64 float32 (``--quick``: 64K x 64) whose gradient touches 1,000 distinct rows (a
sparse COO gradient, rows in random order), stepped by SparseAdam, Adagrad and SGD (no momentum):
``torch`` (``torch.optim`` with the gradient on ``.grad``), ``ours-kernel`` (the fused op
``torch.ops.gilfree_optim.sparse_<name>_`` called directly) and ``ours-eager`` (the
``functional_optim`` class's ``step``), interleaved step by step (ABBA rounds, as ``--kernels``).
Each row gives the median step and its bandwidth floor: the bytes the step must read and write
for the touched rows (parameter and state rows read and written, gradient values read, int64
indices read) divided by the memory bandwidth of a copy (``dst.copy_(src)`` of 64M float32,
reading and writing: 2 x 4 bytes per element, with the same thread count); ``ours/floor`` is
the target (issue 22: at most 2x), ``ours/torch`` the median of per-round ratios. The time of
``index_select`` + ``index_copy_`` of the same rows of a table of the same size (``rows-copy``:
gathering and scattering them once, no arithmetic) is printed beside it as a second reference.
With ``--sparse`` only this case runs and its report is written to the ``sparse`` entry of
``--out`` (default results/bench_optim.json; its other entries are kept).

Adafactor and Muon (issue 29, ``--group-steps``, written to ``results/bench_optim_group_steps.json``):
not element-wise (Adafactor's factored second moments, Muon's Newton-Schulz matrix products), so
no bandwidth floor; instead, with 1 and 2 intra-op threads, our class's default step (the op
library's group step, ``torch.ops.gilfree_optim.group_step``, called from Python) against
``torch.optim``'s own default step on copies of the same tensors (workload L: a few large
tensors, S: many small ones; see :data:`GROUP_STEPS`), interleaved step by step (ABBA rounds,
built twice in opposite orders, as ``--kernels``); ``ours/torch`` is the median over rounds of the
ratio of the two steps of a round (target: at most 1.0). The load averages at the start and the
end of the run are recorded beside the numbers.

ASGD (element-wise) is in the tables above: its kernel moves 5 words per element (param, grad,
ax read; param, ax written), run with ``t0=0`` so that the average runs (mu < 1) from the second
step on.

Compiled (issue 31, ``--compiled``, written to ``results/bench_optim_compiled.json``): every
optimizer but SparseAdam, our step under ``torch.compile(..., fullgraph=True)`` (the op library's
group step, one op in the graph) against ``torch.compile`` of ``torch.optim``'s step (torch's
own recipe: its default implementation traced and fused by Inductor) on copies of the same
tensors (workload C: one tensor of 4M elements; M: 50 of 16,384; for Adafactor and Muon one
1024 x 1024 matrix and 50 of 128 x 128), both compiled before the
timing, with 2 intra-op threads (Inductor compiles its kernels for a thread count, and each
compilation of torch's step takes tens of seconds on 2 cores), ABBA rounds as ``--group-steps``; ``ours/torch`` is the
median of per-round ratios (target: at most 1.0).

Usage: ``python scripts/bench_optim.py [--kernels [--thread-clock]] [--sparse] [--group-steps] [--compiled] [--quick] [--out PATH] [--only Adam,SGD]``
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

# Large tensors on 2 MB-aligned, huge-page-backed memory (c10's CPU allocator reads this
# variable at its first allocation). Without it, where a 64 MB tensor lands decides
# whether it gets transparent huge pages, which moves a step's time by up to 1.5x, for
# torch's tensors and ours alike; with it, placement no longer decides the comparison.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import functional_optim as F  # noqa: E402
from functional_optim.scripting import script_optimizer  # noqa: E402

# name -> (torch class, our class, constructor kwargs, has fused kernel, bytes moved per element / 4)
OPTIMIZERS: Dict[str, Tuple[type, type, Dict[str, Any], bool, int]] = {
    "SGD": (torch.optim.SGD, F.SGD, {"lr": 1e-3, "momentum": 0.9}, True, 5),
    "Adam": (torch.optim.Adam, F.Adam, {"lr": 1e-3}, True, 7),
    "AdamW": (torch.optim.AdamW, F.AdamW, {"lr": 1e-3}, True, 7),
    "Adagrad": (torch.optim.Adagrad, F.Adagrad, {"lr": 1e-3}, True, 5),
    "RMSprop": (torch.optim.RMSprop, F.RMSprop, {"lr": 1e-3}, False, 5),
    "Adamax": (torch.optim.Adamax, F.Adamax, {"lr": 1e-3}, False, 7),
    "Adadelta": (torch.optim.Adadelta, F.Adadelta, {"lr": 1e-3}, False, 7),
    "Rprop": (torch.optim.Rprop, F.Rprop, {"lr": 1e-3}, False, 7),
    "NAdam": (torch.optim.NAdam, F.NAdam, {"lr": 1e-3}, False, 7),
    "RAdam": (torch.optim.RAdam, F.RAdam, {"lr": 1e-3}, False, 7),
    # t0=0: the average runs from the second step on (mu < 1), so ax is read and written
    "ASGD": (torch.optim.ASGD, F.ASGD, {"lr": 1e-3, "t0": 0.0}, False, 5),
}

# Not element-wise, so without a bandwidth floor (``--group-steps``): our class's default step (the
# op library's group step, csrc/steps/<name>.cpp) against torch.optim's own default step on the
# same tensors. name -> (torch class, our class, constructor kwargs, workloads: L a few large
# tensors, S many small ones)
GROUP_STEPS: Dict[str, Tuple[type, type, Dict[str, Any], Dict[str, List[Tuple[int, ...]]]]] = {
    "Adafactor": (torch.optim.Adafactor, F.Adafactor, {"lr": 1e-2, "weight_decay": 0.01}, {
        "L": [(2048, 2048), (2048, 2048), (2048,), (2048,)],
        "S": [(64, 64)] * 100 + [(64,)] * 100,
    }),
    "Muon": (torch.optim.Muon, F.Muon, {"lr": 0.02}, {
        "L": [(512, 512), (512, 512), (512, 1536)],
        "S": [(64, 64)] * 50,
    }),
}


# Every optimizer but SparseAdam (torch.compile traces no sparse tensor), compiled
# (``--compiled``): name -> (torch class, our class, constructor kwargs).
COMPILED: Dict[str, Tuple[type, type, Dict[str, Any]]] = {
    **{name: row[:3] for name, row in OPTIMIZERS.items()},
    **{name: row[:3] for name, row in GROUP_STEPS.items()},
}


def _functional_class(name: str) -> Optional[type]:
    import torch.distributed.optim as dist_optim

    return getattr(dist_optim, f"_Functional{name}", None)


# The clock of the timings: the wall clock, or (--kernels --thread-clock, 1-thread rows) the calling
# thread's CPU time.
CLOCK: Callable[[], float] = time.perf_counter


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """The median time of ``fn()`` over ``repeats`` calls, after 2 untimed ones."""
    times = []
    for _ in range(repeats + 2):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return statistics.median(times[2:])


def measure_bandwidth(numel: int, repeats: int) -> float:
    """GB/s of ``a.add_(b)`` on float32 tensors of ``numel`` elements (3 x 4 bytes per element)."""
    a = torch.ones(numel)
    b = torch.ones(numel)
    return 3 * 4 * numel / _median_seconds(lambda: a.add_(b), repeats) / 1e9


def build_variants(name: str, shapes: List[Tuple[int, ...]], fused_phase: bool) -> Dict[str, Callable[[], None]]:
    """One zero-argument step function per variant, each on its own copy of the tensors.

    ``fused_phase`` selects the fused variants (torch's and ours), else all the others; the two
    sets are timed separately so that the large temporaries of the unfused paths do not disturb
    the comparison the (A)/(B) targets rest on.
    """
    torch_class, ours, kwargs, has_fused, _ = OPTIMIZERS[name]
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) * 1e-2 for s in shapes]
    if fused_phase:
        paths = ["fused"] if has_fused else []
    else:
        paths = ["single", "foreach"]
    flags = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    variants: Dict[str, Callable[[], None]] = {}
    for path in paths:
        params = [torch.nn.Parameter(p.clone()) for p in base]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt = torch_class(params, **kwargs, **flags[path])
        variants[f"torch-{path}"] = opt.step
    functional = _functional_class(name) if not fused_phase else None
    if functional is not None:
        params = [p.clone() for p in base]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "TorchScript support for functional optimizers is deprecated"
            fopt = functional(params, **kwargs)
        variants["torch-functional"] = lambda fopt=fopt, grads=list(grads): fopt.step(grads)
    grads_opt: List[Optional[torch.Tensor]] = list(grads)
    for path in paths:
        params = [p.clone() for p in base]
        eager = ours(params, **kwargs, **flags[path])
        variants[f"ours-eager-{path}"] = lambda o=eager: o.step(grads_opt)
        params = [p.clone() for p in base]
        module = script_optimizer(ours(params, **kwargs, **flags[path]))
        variants[f"ours-script-{path}"] = lambda m=module: m.step(grads_opt)
    return variants


# --- The fused implementation's op (torch.ops.gilfree_optim.group_step): one op call per step ----

def kernel_step(name: str, params: List[torch.Tensor], grads: List[torch.Tensor]) -> Callable[[], None]:
    """A step of the op the fused implementation runs, called directly: the group step of
    optimizer ``name`` (``gilfree_optim::group_step``, ``functional_optim/csrc/steps``), which
    calls torch's fused kernels for SGD, Adam, AdamW and Adagrad and this package's for the
    others, with the hyperparameters of OPTIMIZERS.

    State is made by the op library's ``new_state``, as torch.optim makes it (zeros; Rprop's
    step sizes = lr; NAdam's mu_product = 1), so the op moves the same bytes as torch's step.
    """
    from functional_optim import configuration, ops

    optimizer = OPTIMIZERS[name][1](params, **OPTIMIZERS[name][2])  # its values (its own state stays empty)
    plan, op_name = configuration.step_plans(optimizer)[0], configuration.optimizer_name(optimizer)
    state = ops.new_state(op_name, params, grads, plan.names, plan.values)
    first = [True]

    def step() -> None:
        ops.group_step(op_name, params, grads, state, [first[0]] * len(params), plan.names, plan.values, [], [])
        first[0] = False
    return step


def print_kernel_targets(kernels: Dict[str, Any]) -> None:
    """The issue-12 targets, per thread count: (A) ours <= 1.3x the floor, ours <= 1.0x torch's
    fused step (SGD/Adam/AdamW/Adagrad) and DeepSpeed's CPU Adam; (B) ours <= 0.7x torch's fused
    Adam per byte moved, and <= 1.0x DeepSpeed's."""
    print("\n== fused-kernel targets: A ours/floor <= 1.3, A/B ours/torch-fused <= 1.0, "
          "B ours/torch-fused-Adam per byte <= 0.7, A/B ours/deepspeed <= 1.0 ==")
    for name, per_threads in kernels.items():
        for threads, rows in per_threads.items():
            a, b = rows["A"], rows["B"]
            parts = [f"A floor {a['ours/floor']:.2f}x (torch fused {a['torch-fused/floor']:.2f}x)"
                     if "torch-fused/floor" in a else f"A floor {a['ours/floor']:.2f}x"]
            for key in ("ours/torch-fused", "ours/deepspeed"):
                for w, row in (("A", a), ("B", b)):
                    if key in row:
                        parts.append(f"{w} {key} {row[key]:.2f}x")
            if "ours/torch-fused-Adam_per_byte" in b:
                parts.append(f"B per byte vs torch fused Adam {b['ours/torch-fused-Adam_per_byte']:.2f}x")
            print(f"{name} [{threads} thread(s)]: " + ", ".join(parts))


def deepspeed_adam() -> Tuple[Optional[type], str]:
    """DeepSpeed's CPU Adam class, or None and the reason it is not measured."""
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # builds its C++ op with ninja at first use
    except Exception as e:  # noqa: BLE001 - any failure means: no DeepSpeed row
        return None, f"deepspeed not importable: {type(e).__name__}: {e}"
    return DeepSpeedCPUAdam, ""


def build_kernel_variants(name: str, shapes: List[Tuple[int, ...]], anchor_adam: bool) -> Dict[str, Callable[[], None]]:
    """ours-kernel (our fused op), torch-fused (torch.optim fused=True) and, for Adam/AdamW,
    deepspeed-cpu-adam; ``anchor_adam`` adds torch's fused Adam (the per-byte anchor)."""
    torch_class, _, kwargs, has_fused, _ = OPTIMIZERS[name]
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) * 1e-2 for s in shapes]
    variants: Dict[str, Callable[[], None]] = {}
    variants["ours-kernel"] = kernel_step(name, [p.clone() for p in base], grads)
    if has_fused:
        params = [torch.nn.Parameter(p.clone()) for p in base]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        variants["torch-fused"] = torch_class(params, **kwargs, fused=True).step
    if anchor_adam and name != "Adam":
        params = [torch.nn.Parameter(p.clone()) for p in base]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        variants["torch-fused-Adam"] = torch.optim.Adam(params, lr=1e-3, fused=True).step
    if name in ("Adam", "AdamW"):
        ds, _ = deepspeed_adam()
        if ds is not None:
            params = [torch.nn.Parameter(p.clone()) for p in base]
            for p, g in zip(params, grads):
                p.grad = g.clone()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                opt = ds(params, lr=1e-3, adamw_mode=(name == "AdamW"),
                         weight_decay=0.01 if name == "AdamW" else 0.0)
            variants["deepspeed-cpu-adam"] = opt.step
    return variants


def kernel_rows(
    name: str, workloads: Dict[str, List[Tuple[int, ...]]], quick: bool, thread_clock: bool = False
) -> Dict[str, Any]:
    """Fused-kernel rows of one optimizer for 1 and 2 intra-op threads.

    For each thread count: the in-place ``add_`` bandwidth (measured with that many threads),
    then per workload the median step of each variant, its bandwidth floor ratio (median /
    (bytes it must move / add_ bandwidth)) and the ratios the targets use.
    """
    words = OPTIMIZERS[name][4]
    # One step of each variant per round (interleaved; the ratios are medians of per-round ratios).
    rounds, warmup = (2, 1) if quick else (30, 3)
    bw_numel = 1 << 16 if quick else 64 * 1024 * 1024
    out: Dict[str, Any] = {}
    global CLOCK
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            CLOCK = time.thread_time if thread_clock and threads == 1 else time.perf_counter
            bandwidth = measure_bandwidth(bw_numel, 5 if quick else 10)
            per_threads: Dict[str, Any] = {"bandwidth_inplace_add_GBps": bandwidth}
            for workload, shapes in workloads.items():
                numel = sum(int(torch.Size(s).numel()) for s in shapes)
                samples: Dict[str, List[float]] = {}
                for reverse in (False, True):
                    variants = build_kernel_variants(name, shapes, anchor_adam=(workload == "B"))
                    if reverse:
                        variants = dict(reversed(list(variants.items())))
                    for key, values in time_variants(variants, rounds, 1, warmup, raw=True, alternate=True).items():
                        samples.setdefault(key, []).extend(values)
                    del variants
                timed = summarize(samples)
                floor_ms = words * 4 * numel / (bandwidth * 1e9) * 1e3
                row: Dict[str, Any] = {"bytes": words * 4 * numel, "floor_ms": floor_ms, "variants": timed}
                ours = samples["ours-kernel"]
                row["ours/floor"] = timed["ours-kernel"]["median_ms"] / floor_ms
                anchors = {"ours/torch-fused": ("torch-fused", 1.0), "ours/deepspeed": ("deepspeed-cpu-adam", 1.0)}
                # Per byte moved: ours / (torch fused Adam, which moves 7 words per element).
                adam = "torch-fused" if name == "Adam" else "torch-fused-Adam"
                anchors["ours/torch-fused-Adam_per_byte"] = (adam, 7 / words)
                if "torch-fused" in timed:
                    row["torch-fused/floor"] = timed["torch-fused"]["median_ms"] / floor_ms
                for key, (other, scale) in anchors.items():
                    if other in samples:
                        row[key] = statistics.median(o / t for o, t in zip(ours, samples[other])) * scale
                        row[key + "_of_medians"] = (
                            timed["ours-kernel"]["median_ms"] / timed[other]["median_ms"] * scale)
                per_threads[workload] = row
                print(f"  [{threads} thread(s)] {name} {workload}: add_ {bandwidth:.1f} GB/s, floor {floor_ms:.3f} ms; "
                      + ", ".join(f"{k} {v['median_ms']:.3f} ms" for k, v in timed.items())
                      + "; " + ", ".join(f"{k} {v:.2f}x" for k, v in row.items() if "/" in k))
            out[str(threads)] = per_threads
    finally:
        torch.set_num_threads(saved)
        CLOCK = time.perf_counter
    return out


# --- Sparse gradients (issue 22): only the rows present ---------------------------------------

# name -> (torch class, our class, kwargs, our op, words read or written per touched element:
# parameter and state rows read and written, the gradient's values read)
SPARSE_OPTIMIZERS: Dict[str, Tuple[type, type, Dict[str, Any], str, int]] = {
    "SparseAdam": (torch.optim.SparseAdam, F.SparseAdam, {"lr": 1e-3}, "sparse_adam_", 7),
    "Adagrad": (torch.optim.Adagrad, F.Adagrad, {"lr": 1e-3}, "sparse_adagrad_", 5),
    "SGD": (torch.optim.SGD, F.SGD, {"lr": 1e-3}, "sparse_sgd_", 3),
}


def measure_copy_bandwidth(numel: int, repeats: int) -> float:
    """GB/s of ``dst.copy_(src)`` on float32 tensors of ``numel`` elements (2 x 4 bytes per element)."""
    src = torch.ones(numel)
    dst = torch.empty(numel)
    return 2 * 4 * numel / _median_seconds(lambda: dst.copy_(src), repeats) / 1e9


def sparse_variants(name: str, rows: int, cols: int, touched: int) -> Dict[str, Callable[[], None]]:
    """torch / ours-kernel / ours-eager steps of optimizer ``name`` on their own ``rows`` x ``cols``
    tables, all with one sparse gradient of ``touched`` distinct rows; and ``rows-copy``."""
    torch_class, ours, kwargs, op_name, _ = SPARSE_OPTIMIZERS[name]
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(rows, cols, generator=gen)
    index = torch.randperm(rows, generator=gen)[:touched]
    grad = torch.sparse_coo_tensor(index.unsqueeze(0), torch.randn(touched, cols, generator=gen) * 1e-2, (rows, cols))
    variants: Dict[str, Callable[[], None]] = {}
    p = torch.nn.Parameter(base.clone())
    p.grad = grad.clone()
    variants["torch"] = torch_class([p], **kwargs).step
    q = base.clone()
    op = getattr(torch.ops.gilfree_optim, op_name)
    lr = kwargs["lr"]
    if name == "SparseAdam":
        m, v, step = torch.zeros_like(q), torch.zeros_like(q), torch.zeros(())
        variants["ours-kernel"] = lambda: op([q], [grad], [m], [v], [step], lr=lr, beta1=0.9, beta2=0.999, eps=1e-8,
                                             maximize=False)
    elif name == "Adagrad":
        sums, step = torch.zeros_like(q), torch.zeros(())
        variants["ours-kernel"] = lambda: op([q], [grad], [sums], [step], lr=lr, lr_decay=0.0, eps=1e-10,
                                             maximize=False)
    else:
        variants["ours-kernel"] = lambda: op([q], [grad], lr=lr, maximize=False)
    r = base.clone()
    eager = ours([r], **kwargs)
    variants["ours-eager"] = lambda: eager.step([grad])
    table = base.clone()
    variants["rows-copy"] = lambda: table.index_copy_(0, index, table.index_select(0, index))
    return variants


def sparse_rows(quick: bool, names: Optional[List[str]] = None) -> Dict[str, Any]:
    """The sparse case for 1 and 2 intra-op threads: per optimizer, the median step of each
    variant, the bandwidth floor of the touched rows and the ratios (see the module docstring)."""
    rows, cols, touched = (1 << 16, 64, 100) if quick else (1 << 20, 64, 1000)
    rounds, warmup = (4, 2) if quick else (200, 20)
    bw_numel = 1 << 20 if quick else 64 * 1024 * 1024
    out: Dict[str, Any] = {"rows": rows, "cols": cols, "touched_rows": touched, "dtype": "float32", "threads": {}}
    saved = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            bandwidth = measure_copy_bandwidth(bw_numel, 5 if quick else 10)
            per_threads: Dict[str, Any] = {"bandwidth_copy_GBps": bandwidth}
            for name in names or list(SPARSE_OPTIMIZERS):
                words = SPARSE_OPTIMIZERS[name][4]
                nbytes = words * 4 * touched * cols + 8 * touched
                floor_ms = nbytes / (bandwidth * 1e9) * 1e3
                variants = sparse_variants(name, rows, cols, touched)
                samples = time_variants(variants, rounds, 1, warmup, raw=True, alternate=True)
                del variants
                timed = summarize(samples)
                row: Dict[str, Any] = {"bytes": nbytes, "floor_ms": floor_ms, "variants": timed}
                row["ours/floor"] = timed["ours-kernel"]["median_ms"] / floor_ms
                row["ours-eager/floor"] = timed["ours-eager"]["median_ms"] / floor_ms
                row["torch/floor"] = timed["torch"]["median_ms"] / floor_ms
                row["rows-copy/floor"] = timed["rows-copy"]["median_ms"] / floor_ms
                row["ours/torch"] = statistics.median(o / t for o, t in zip(samples["ours-kernel"], samples["torch"]))
                row["ours-eager/torch"] = statistics.median(
                    o / t for o, t in zip(samples["ours-eager"], samples["torch"]))
                per_threads[name] = row
                print(f"  [{threads} thread(s)] {name}: copy {bandwidth:.1f} GB/s, {nbytes / 1e6:.2f} MB -> floor "
                      f"{floor_ms:.4f} ms; " + ", ".join(f"{k} {v['median_ms']:.4f} ms" for k, v in timed.items())
                      + "; " + ", ".join(f"{k} {v:.2f}x" for k, v in row.items() if "/" in k))
            out["threads"][str(threads)] = per_threads
    finally:
        torch.set_num_threads(saved)
    return out


def print_sparse_targets(sparse: Dict[str, Any]) -> None:
    print(f"\n== sparse ({sparse['rows']:,} x {sparse['cols']} float32, {sparse['touched_rows']:,} rows touched): "
          "target ours/floor <= 2.0 ==")
    for threads, per in sparse["threads"].items():
        for name, row in per.items():
            if isinstance(row, dict):
                print(f"{name} [{threads} thread(s)]: ours {row['ours/floor']:.2f}x floor "
                      f"(eager step {row['ours-eager/floor']:.2f}x, torch {row['torch/floor']:.2f}x, "
                      f"rows-copy {row['rows-copy/floor']:.2f}x); ours/torch {row['ours/torch']:.3f}x")


def main_sparse(args: argparse.Namespace) -> Dict[str, Any]:
    """``--sparse``: the sparse case alone, merged into ``--out`` under ``sparse``."""
    print(f"torch {torch.__version__}; our kernels' build: {active_isa()}")
    print("\n== sparse gradients: torch.optim vs our fused sparse kernels, 1 and 2 threads ==")
    sparse = sparse_rows(args.quick)
    sparse["quick"] = args.quick
    print_sparse_targets(sparse)
    report: Dict[str, Any] = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            report = json.load(f)
    report["sparse"] = sparse
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nwrote {args.out} (its 'sparse' entry)")
    return report


# --- Adafactor and Muon (issue 29, ``--group-steps``): not element-wise, against torch's own step ----

def group_step_variants(name: str, shapes: List[Tuple[int, ...]]) -> Dict[str, Callable[[], None]]:
    """``torch``: torch.optim's step with its defaults (single-tensor for both: Adafactor takes
    its multi-tensor path only when asked, Muon has none), the gradients set on ``.grad`` once;
    ``ours``: our class's step with its defaults (the op library's group step, called from
    Python); each on its own copy of the same tensors."""
    reference, ours, grads = paired_optimizers(name, shapes, GROUP_STEPS[name][:3])
    assert ours._s.impl == ["fused"], ours._s.impl
    return {"torch": reference.step, "ours": lambda: ours.step(grads)}


def paired_optimizers(
    name: str, shapes: List[Tuple[int, ...]], row: Tuple[type, type, Dict[str, Any]],
) -> Tuple[Any, Any, List[Optional[torch.Tensor]]]:
    """torch.optim's optimizer (``row[0]``, gradients set on ``.grad`` once) and ours (``row[1]``)
    with the kwargs ``row[2]``, each on its own copy of the same seeded tensors of ``shapes``,
    and the gradients to pass to ours."""
    torch_class, ours_class, kwargs = row
    gen = torch.Generator().manual_seed(0)
    base = [torch.randn(s, generator=gen) for s in shapes]
    grads = [torch.randn(s, generator=gen) * 1e-2 for s in shapes]
    params = [torch.nn.Parameter(p.clone()) for p in base]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    return torch_class(params, **kwargs), ours_class([p.clone() for p in base], **kwargs), list(grads)


def group_step_rows(quick: bool, names: List[str], thread_clock: bool = False) -> Dict[str, Any]:
    """:func:`paired_rows` of :func:`group_step_variants` on :data:`GROUP_STEPS`' workloads."""
    workloads = {name: GROUP_STEPS[name][3] for name in names}
    return paired_rows(quick, workloads, group_step_variants, {"L": 8, "S": 30}, thread_clock)


def paired_rows(
    quick: bool, workloads: Dict[str, Dict[str, List[Tuple[int, ...]]]],
    build: Callable[[str, List[Tuple[int, ...]]], Dict[str, Callable[[], None]]],
    rounds_of: Dict[str, int], thread_clock: bool = False, thread_counts: Tuple[int, ...] = (1, 2),
) -> Dict[str, Any]:
    """Two variants, ``torch`` and ``ours`` (``build(name, shapes)``), per optimizer, 1 and 2
    intra-op threads and workload (``workloads[name]``: workload -> shapes, ``rounds_of``:
    workload -> rounds), for each of ``thread_counts`` intra-op threads: the median step of each
    variant and ``ours/torch``, the median over
    rounds of the ratio of the two steps of a round (ABBA rounds, both variants built twice in
    opposite orders, samples pooled, as ``--kernels``; with ``thread_clock`` the 1-thread rows
    on the calling thread's CPU time, as ``--kernels``)."""
    global CLOCK
    out: Dict[str, Any] = {}
    saved = torch.get_num_threads()
    try:
        for name, per_workload in workloads.items():
            per_name: Dict[str, Any] = {}
            for threads in thread_counts:
                torch.set_num_threads(threads)
                CLOCK = time.thread_time if thread_clock and threads == 1 else time.perf_counter
                per_threads: Dict[str, Any] = {}
                for workload, shapes in per_workload.items():
                    if quick:
                        shapes = [tuple(min(d, 16) for d in s) for s in shapes[:4]]
                    rounds, warmup = (2, 1) if quick else (rounds_of[workload], 2)
                    samples: Dict[str, List[float]] = {}
                    for reverse in (False, True):
                        variants = build(name, shapes)
                        if reverse:
                            variants = dict(reversed(list(variants.items())))
                        for key, values in time_variants(variants, rounds, 1, warmup, raw=True, alternate=True).items():
                            samples.setdefault(key, []).extend(values)
                        del variants
                    timed = summarize(samples)
                    row: Dict[str, Any] = {
                        "tensors": len(shapes), "numel": sum(int(torch.Size(s).numel()) for s in shapes),
                        "variants": timed,
                        "ours/torch": statistics.median(o / t for o, t in zip(samples["ours"], samples["torch"])),
                        "ours/torch_of_medians": timed["ours"]["median_ms"] / timed["torch"]["median_ms"],
                    }
                    per_threads[workload] = row
                    print(f"  [{threads} thread(s)] {name} {workload} ({len(shapes)} tensors, {row['numel']:,} elements): "
                          + ", ".join(f"{k} {v['median_ms']:.3f} ms [{v['p25_ms']:.3f}-{v['p75_ms']:.3f}]"
                                      for k, v in timed.items())
                          + f"; ours/torch {row['ours/torch']:.3f}x")
                per_name[str(threads)] = per_threads
            out[name] = per_name
    finally:
        torch.set_num_threads(saved)
        CLOCK = time.perf_counter
    return out


def main_group_steps(args: argparse.Namespace) -> Dict[str, Any]:
    """``--group-steps``: Adafactor and Muon against torch.optim's step (one process), written to
    ``--out`` (default results/bench_optim_group_steps.json); the load averages at the start and
    the end are recorded (the machine may be shared)."""
    names = [n for n in GROUP_STEPS if not args.only or n in args.only.split(",")]
    return paired_report(
        args, "Adafactor and Muon: our default step (the op library's group step) vs torch.optim's step",
        "group_steps", {name: GROUP_STEPS[name][3] for name in names}, {name: GROUP_STEPS[name][2] for name in names},
        lambda: group_step_rows(args.quick, names, args.thread_clock))


def paired_report(
    args: argparse.Namespace, title: str, key: str, workloads: Dict[str, Dict[str, List[Tuple[int, ...]]]],
    kwargs: Dict[str, Dict[str, Any]], measure: Callable[[], Dict[str, Any]],
    extra: Optional[Callable[[], Dict[str, Any]]] = None,
) -> Dict[str, Any]:
    """Runs ``measure`` (:func:`paired_rows`' rows) between two readings of the load average,
    prints the ``ours/torch`` ratios against the target (<= 1.0) and writes the report (its rows
    under ``key``, with ``workloads`` and ``kwargs`` per optimizer, and what ``extra`` returns,
    measured after them) to ``args.out``."""
    from bench_results import run_meta, write_results  # scripts/ is on sys.path when this script runs

    load_start = os.getloadavg()
    print(f"torch {torch.__version__}; load average {load_start[0]:.2f}")
    print(f"\n== {title} ==")
    rows = measure()
    more = extra() if extra is not None else {}
    load_end = os.getloadavg()
    print("\n== target: ours/torch <= 1.0 (median of per-round ratios) ==")
    for name, per_name in rows.items():
        print(f"{name}: " + ", ".join(f"{w} [{t} thread(s)] {row['ours/torch']:.3f}x"
                                      for t, per_threads in per_name.items() for w, row in per_threads.items()))
    report = {
        "meta": run_meta(quick=args.quick, load_average_start=list(load_start), load_average_end=list(load_end)),
        "clock": "1 thread: thread CPU time; 2 threads: wall clock" if args.thread_clock else "wall clock",
        "machine": platform.machine(),
        "workloads": {name: {w: [list(s) for s in shapes] for w, shapes in per_name.items()}
                      for name, per_name in workloads.items()},
        "kwargs": kwargs,
        key: rows,
        **more,
    }
    write_results(args.out, report)
    return report


# --- under torch.compile (issue 31, ``--compiled``): both steps compiled, on the same tensors ------

# The compiled comparison's workloads: C, one tensor of 4M float32 elements; M, 50 of 16,384
# (torch.compile's time grows with the number of tensors; each variant is built twice per
# workload, the second compilation mostly from Inductor's cache).
COMPILED_WORKLOADS: Dict[str, List[Tuple[int, ...]]] = {"C": [(4 * 1024 * 1024,)], "M": [(16384,)] * 50}
# Adafactor and Muon (matrices; Muon takes nothing else): C, one 1024 x 1024 matrix; M, 50 of 128 x 128.
COMPILED_MATRIX_WORKLOADS: Dict[str, List[Tuple[int, ...]]] = {"C": [(1024, 1024)], "M": [(128, 128)] * 50}


def compiled_workloads(name: str) -> Dict[str, List[Tuple[int, ...]]]:
    return COMPILED_MATRIX_WORKLOADS if name in GROUP_STEPS else COMPILED_WORKLOADS


def compiled_once(step: Callable[..., Any], *args: Any, fullgraph: bool = False) -> Callable[..., Any]:
    """``torch.compile(step)``, compiled by running it once with ``args`` (so that a timing sees
    compiled steps only)."""
    compiled = torch.compile(step, fullgraph=fullgraph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.compile's notes about the profiler hooks of torch.optim
        compiled(*args)
    return compiled


def compiled_variants(name: str, shapes: List[Tuple[int, ...]]) -> Dict[str, Callable[[], None]]:
    """``torch``: ``torch.compile(torch.optim.<name>(...).step)`` (torch's recipe for compiling an
    optimizer: torch.optim's default implementation, traced; gradients set on ``.grad`` once);
    ``ours``: ``torch.compile(functional_optim.<name>(...).step, fullgraph=True)`` (our default
    step, the op library's group step, kept as one op). Both compiled and run once here, so
    the timing sees compiled steps only; each on its own copy of the same tensors."""
    reference, ours, grads_opt = paired_optimizers(name, shapes, COMPILED[name])
    torch_step = compiled_once(reference.step)
    ours_step = compiled_once(ours.step, grads_opt, fullgraph=True)
    return {"torch": torch_step, "ours": lambda: ours_step(grads_opt)}


def compiled_noise_variants(name: str, shapes: List[Tuple[int, ...]]) -> Dict[str, Callable[[], None]]:
    """torch.optim's compiled step against itself: ``torch`` and ``ours`` are two copies of
    :func:`compiled_variants`' ``torch`` (built in the same order), so their ratio is what this
    harness shows for two equal steps (its spread on this machine)."""
    first, _, _ = paired_optimizers(name, shapes, COMPILED[name])
    second, _, _ = paired_optimizers(name, shapes, COMPILED[name])
    return {"torch": compiled_once(first.step), "ours": compiled_once(second.step)}


def main_compiled(args: argparse.Namespace) -> Dict[str, Any]:
    """``--compiled``: every optimizer's compiled step against torch.optim's compiled step (one
    process), written to ``--out`` (default results/bench_optim_compiled.json), with the load
    averages at the start and the end."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    names = [n for n in COMPILED if not args.only or n in args.only.split(",")]
    workloads = {n: compiled_workloads(n) for n in names}
    return paired_report(
        args, "compiled: torch.compile(ours.step, fullgraph=True) vs torch.compile(torch.optim step)", "compiled",
        workloads, {name: COMPILED[name][2] for name in names},
        lambda: paired_rows(args.quick, workloads, compiled_variants, {"C": 10, "M": 30}, args.thread_clock,
                            thread_counts=(2,)),
        # The spread: workload C (one tensor: memory-bound for the element-wise optimizers, both
        # steps at the machine's bandwidth; Muon's, bfloat16 products), torch's compiled step
        # against itself.
        lambda: {"compiled_noise": paired_rows(
            args.quick, {n: {"C": workloads[n]["C"]} for n in names if n != "Adafactor"},
            compiled_noise_variants, {"C": 10}, args.thread_clock, thread_counts=(2,))})


def summarize(times: Dict[str, List[float]]) -> Dict[str, Dict[str, float]]:
    out = {}
    for key, values in times.items():
        q = statistics.quantiles(values, n=4)
        out[key] = {
            "median_ms": statistics.median(values) * 1e3,
            "p25_ms": q[0] * 1e3,
            "p75_ms": q[2] * 1e3,
            "min_ms": min(values) * 1e3,
            "n": len(values),
        }
    return out


def time_variants(
    variants: Dict[str, Callable[[], None]], rounds: int, per_round: int, warmup: int, raw: bool = False,
    alternate: bool = False,
) -> Any:
    """Per-step times of each variant, round-robin; summarized unless ``raw``. ``alternate``: odd
    rounds visit the variants in the reverse order (with ``per_round=1``, sample i of every
    variant comes from round i, so per-round ratios pair them)."""
    times: Dict[str, List[float]] = {k: [] for k in variants}
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    for r in range(rounds):
        order = list(variants.items())
        if alternate and r % 2:
            order.reverse()
        for key, fn in order:
            for _ in range(per_round):
                start = CLOCK()
                fn()
                times[key].append(CLOCK() - start)
    return times if raw else summarize(times)


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (smoke run)")
    parser.add_argument("--kernels", action="store_true",
                        help="time the fused ops against the bandwidth floor (issue 12) instead of the classes")
    parser.add_argument("--out", default=None,
                        help="JSON output path (default results/bench_optim.json, with --kernels "
                             "results/bench_optim_kernels.json)")
    parser.add_argument("--thread-clock", action="store_true",
                        help="with --kernels or --group-steps: time the 1-thread rows with the thread's CPU time "
                             "(loaded machines)")
    parser.add_argument("--sparse", action="store_true",
                        help="only the sparse-gradient case (issue 22), merged into --out under 'sparse'")
    parser.add_argument("--group-steps", action="store_true",
                        help="only Adafactor and Muon against torch.optim's step (issue 29), written to --out "
                             "(default results/bench_optim_group_steps.json)")
    parser.add_argument("--compiled", action="store_true",
                        help="only the compiled steps: ours against torch.optim's, both under torch.compile "
                             "(issue 31), written to --out (default results/bench_optim_compiled.json)")
    parser.add_argument("--only", default="", help="comma-separated optimizer names (default: all)")
    parser.add_argument("--same-process", action="store_true",
                        help="time every optimizer in this process (default: each in a fresh one)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = os.path.join("results", "bench_optim_kernels.json" if args.kernels else
                                "bench_optim_group_steps.json" if args.group_steps else
                                "bench_optim_compiled.json" if args.compiled else "bench_optim.json")
    if args.sparse:
        return main_sparse(args)
    if args.group_steps:
        return main_group_steps(args)
    if args.compiled:
        return main_compiled(args)
    names = [n for n in OPTIMIZERS if not args.only or n in args.only.split(",")]
    if len(names) > 1 and not args.same_process:
        return run_isolated(names, args)

    if args.quick:
        workloads = {"A": [(1 << 14,)], "B": [(256,)] * 8}
        rounds, per_round, warmup, bw_numel = 2, 2, 1, 1 << 16
    else:
        workloads = {"A": [(16 * 1024 * 1024,)], "B": [(4096,)] * 400}
        rounds, per_round, warmup, bw_numel = 6, 3, 3, 64 * 1024 * 1024

    if args.kernels:
        return main_kernels(names, workloads, args)

    bandwidth = measure_bandwidth(bw_numel, 5 if args.quick else 20)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"in-place add bandwidth {bandwidth:.1f} GB/s")
    results: List[Dict[str, Any]] = []
    ratios: Dict[str, Dict[str, Dict[str, float]]] = {}
    for workload, shapes in workloads.items():
        numel = sum(int(torch.Size(s).numel()) for s in shapes)
        print(f"\n== workload {workload}: {len(shapes)} tensor(s), {numel:,} float32 elements ==")
        for name in names:
            words = OPTIMIZERS[name][4]
            timed = {}
            # Fused phase: the tensors created first can be markedly faster or slower than
            # those created later (page placement; seen both ways, up to 1.5x), so the fused
            # variants are built and timed twice, in one order and in the reverse order, and
            # their samples pooled.
            fused_samples: Dict[str, List[float]] = {}
            for reverse in (False, True):
                variants = build_variants(name, shapes, True)
                if reverse:
                    variants = dict(reversed(list(variants.items())))
                for key, values in time_variants(variants, rounds * 2, per_round, warmup, raw=True).items():
                    fused_samples.setdefault(key, []).extend(values)
                del variants
            timed.update(summarize(fused_samples))
            variants = build_variants(name, shapes, False)
            timed.update(time_variants(variants, rounds, per_round, warmup))
            del variants
            for variant, t in timed.items():
                gbps = words * 4 * numel / (t["median_ms"] / 1e3) / 1e9
                results.append({"optimizer": name, "workload": workload, "variant": variant, **t, "GBps": gbps})
            r = ratios.setdefault(workload, {}).setdefault(name, {})
            best_torch = "torch-fused" if "torch-fused" in timed else "torch-single"
            for variant in timed:
                if variant.startswith("ours-"):
                    path = variant.rsplit("-", 1)[1]
                    r[f"{variant}/torch-{path}"] = timed[variant]["median_ms"] / timed[f"torch-{path}"]["median_ms"]
                    r[f"{variant}/{best_torch}"] = timed[variant]["median_ms"] / timed[best_torch]["median_ms"]
                    if "torch-functional" in timed:
                        r[f"{variant}/torch-functional"] = timed[variant]["median_ms"] / timed["torch-functional"]["median_ms"]
            line = ", ".join(
                f"{v} {t['median_ms']:.3f} ms [{t['p25_ms']:.3f}-{t['p75_ms']:.3f}] "
                f"{words * 4 * numel / (t['median_ms'] / 1e3) / 1e9:.1f} GB/s"
                for v, t in timed.items()
            )
            print(f"{name}: {line}")
            interesting = {k: v for k, v in r.items() if k.endswith(best_torch) or k.endswith("torch-functional")}
            print("   ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in interesting.items()))

    targets = {}
    for name in ["SGD", "Adam", "Adagrad"]:
        if name in names:
            a = ratios["A"][name]
            b = ratios["B"][name]
            targets[name] = {
                "A_ours-eager-fused/torch-fused": a["ours-eager-fused/torch-fused"],
                "A_ours-script-fused/torch-fused": a["ours-script-fused/torch-fused"],
                "A_target": 1.05,
                "B_ours-script-fused/torch-fused": b["ours-script-fused/torch-fused"],
                "B_target": 1.0,
            }
    print("\n== targets: (A) ours/torch fused <= 1.05; (B) ours scripted / torch fused eager <= 1.0 ==")
    for name, t in targets.items():
        print(f"{name}: A eager {t['A_ours-eager-fused/torch-fused']:.3f}x, A script "
              f"{t['A_ours-script-fused/torch-fused']:.3f}x, B script {t['B_ours-script-fused/torch-fused']:.3f}x")

    report = {
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "quick": args.quick,
        "bandwidth_inplace_add_GBps": bandwidth,
        "workloads": {k: {"tensors": len(v), "numel_each": int(torch.Size(v[0]).numel())} for k, v in workloads.items()},
        "timing": {"rounds": rounds, "rounds_fused_phase": rounds * 2 * 2, "steps_per_round": per_round, "warmup": warmup},
        "results": results,
        "ratios": ratios,
        "targets": targets,
    }
    if not args.only:  # every optimizer in this process: the sparse case too
        print("\n== sparse gradients ==")
        report["sparse"] = sparse_rows(args.quick)
        print_sparse_targets(report["sparse"])
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nwrote {args.out}")
    return report


def active_isa() -> str:
    """The instruction-set build our fused kernels run (functional_optim/csrc/fused_optim.h)."""
    import ctypes

    from functional_optim import _kernels

    try:
        fn = ctypes.CDLL(_kernels.load()).gilfree_optim_active_isa
    except AttributeError:  # a library built before the per-instruction-set builds
        return "single portable build"
    fn.restype = ctypes.c_char_p
    return fn().decode()


def main_kernels(names: List[str], workloads: Dict[str, List[Tuple[int, ...]]], args: argparse.Namespace) -> Dict[str, Any]:
    """``--kernels``: the fused-op rows of every optimizer in ``names`` (one process)."""
    isa = active_isa()
    print(f"torch {torch.__version__}; our kernels' build: {isa} (ATen: {torch.backends.cpu.get_cpu_capability()})")
    print("\n== fused kernels (ours: torch.ops.gilfree_optim) vs the bandwidth floor, 1 and 2 threads ==")
    kernels = {name: kernel_rows(name, workloads, args.quick, args.thread_clock) for name in names}
    ds_class, ds_reason = deepspeed_adam()
    if ds_class is None:
        print(f"no DeepSpeed row: {ds_reason}")
    print_kernel_targets(kernels)
    report = {
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "quick": args.quick,
        "isa": isa,
        "clock": "1 thread: thread CPU time; 2 threads: wall clock" if args.thread_clock else "wall clock",
        "workloads": {k: {"tensors": len(v), "numel_each": int(torch.Size(v[0]).numel())} for k, v in workloads.items()},
        "kernels": kernels,
        "deepspeed": ds_reason or "measured",
    }
    from bench_results import write_results  # scripts/ is on sys.path when this script runs

    write_results(args.out, report)
    return report


def run_isolated(names: List[str], args: argparse.Namespace) -> Dict[str, Any]:
    """Times each optimizer in a fresh process and merges the reports.

    After a few optimizers have allocated and freed hundreds of megabytes, the memory a new
    64 MB tensor gets (huge pages or not) depends on what ran before, which swung later
    optimizers' workload-A ratios by up to 2x in one long process. A fresh process per
    optimizer gives every one the same start.
    """
    import subprocess
    import tempfile

    merged: Optional[Dict[str, Any]] = None
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out = os.path.join(tmp, name + ".json")
            cmd = [sys.executable, os.path.abspath(__file__), "--only", name, "--out", out]
            if args.quick:
                cmd.append("--quick")
            if args.kernels:
                cmd.append("--kernels")
            if args.thread_clock:
                cmd.append("--thread-clock")
            subprocess.run(cmd, check=True)
            with open(out) as f:
                report = json.load(f)
            if merged is None:
                merged = report
            elif args.kernels:
                merged["kernels"].update(report["kernels"])
            else:
                merged["results"] += report["results"]
                for workload, per_name in report["ratios"].items():
                    merged["ratios"].setdefault(workload, {}).update(per_name)
                merged["targets"].update(report["targets"])
        if not args.kernels and not args.only:  # the sparse case, in a fresh process too
            out = os.path.join(tmp, "sparse.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--sparse", "--out", out] + (["--quick"] if args.quick else [])
            subprocess.run(cmd, check=True)
            with open(out) as f:
                sparse = json.load(f)["sparse"]
    assert merged is not None
    merged["isolated"] = True
    if not args.kernels and not args.only:
        merged["sparse"] = sparse
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(merged, f, indent=1)
    if args.kernels:
        print_kernel_targets(merged["kernels"])
        print(f"\nwrote {args.out}")
        return merged
    print("\n== targets: (A) ours/torch fused <= 1.05; (B) ours scripted / torch fused eager <= 1.0 ==")
    for name, t in merged["targets"].items():
        print(f"{name}: A eager {t['A_ours-eager-fused/torch-fused']:.3f}x, A script "
              f"{t['A_ours-script-fused/torch-fused']:.3f}x, B script {t['B_ours-script-fused/torch-fused']:.3f}x")
    if "sparse" in merged:
        print_sparse_targets(merged["sparse"])
    print(f"\nwrote {args.out}")
    return merged


if __name__ == "__main__":
    main()
