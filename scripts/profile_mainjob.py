"""Where the time goes in the main job, on each stack and each worker role.

Runs ``scripts/train.py --profile`` (the default job unless options are passed after ``--``)
for ``--stack plugin`` and ``--stack torch``, twice each, in fresh processes:

1. with timers only: each trainer's wall-clock seconds per phase of its steps (the forward
   RPC to each server, the loss, the backward pass, the optimizer step, the rest), each
   server's seconds inside the forward function, and every worker's CPU seconds per thread
   kind (from /proc: ``pt_thread_pool`` = torch's RPC threads, ``TP_UV_loop`` = TensorPipe's
   TCP loop, ``main`` = the Python main thread);
2. with ``perf record --call-graph dwarf`` on every worker (``--perf-hz``, default 99): each
   CPU sample's native call stack is sorted into the work it belongs to (optimizer step,
   backward pass, forward pass, RPC transport, ...) and the kind of code it ran (compute
   kernels, Python interpreter, GIL hand-over, pickling, memory, thread wake-ups, ...).
   A worker's CPU seconds (from run 1's /proc counts, per epoch) are split in the
   proportions of its samples (perf slows the job; its proportions are what is used).

Both measure the epochs after the first (the first warms up). Writes JSON (default
results/profile_mainjob.json), which docs/benchmarks.md quotes. Needs Linux, and perf for
part 2 (``--no-perf`` skips it).

    python scripts/profile_mainjob.py [--epochs N] [--perf-hz HZ] [--no-perf] [--out PATH] [-- train.py options]
"""
import argparse
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile

from bench_results import split_at_dashes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a CPU sample's call stack was doing, by markers anywhere in its native stack; the
# first rule that matches wins. (Python frames appear as the interpreter's C functions: the
# only Python function a server runs during training is the forward pass; a trainer's
# Python is its training loop and the RPC calls it makes.)
WORK_RULES = [
    ("optimizer step", re.compile(
        r"fused_adam|_fused_adam|prepared_steps|ParkedStep|parkStep|takeStep|gradientsFor|gradients_for|StepLock|"
        r"step_lock|optimizer", re.I)),
    ("backward pass", re.compile(
        r"gilfree_rpc::|autograd::Engine|DistEngine|Backward|distributed::autograd|AccumulateGrad|"
        r"evaluate_function|autograd::Node|call_function")),
    ("optimizer step", re.compile(r"torch::jit::")),  # the scripted local steps of both stacks
    ("Python code (servers: the forward function; trainers: the loop, RPC calls)",
     re.compile(r"_PyEval_EvalFrame|processPythonCall|PythonRpcHandler")),
    ("RPC transport (TensorPipe)", re.compile(r"tensorpipe|uv__|uv_run|TensorPipeAgent")),
    # perf cannot unwind through MKL's kernels (no unwind tables): their samples stop at the
    # kernel, so the matrix products of the forward and backward passes are counted together
    ("matrix products (MKL; forward or backward)", re.compile(r"mkl_")),
]
# What kind of code a sample ran: the first rule that matches, looking from the innermost
# frame outwards (at most KIND_DEPTH frames).
KIND_RULES = [
    ("GIL hand-over", re.compile(r"take_gil|drop_gil|PyEval_RestoreThread|PyEval_SaveThread|PyGILState|"
                                 r"gil_scoped_acquire|gil_scoped_release")),
    ("pickling / (de)serialization", re.compile(r"[Pp]ickle|[Ss]erializ|wireDeserialize|toMessage|fromMessage")),
    ("compute kernels", re.compile(r"at::native|at::vec|mkl|gemm|dnnl|cpublas|Vectorized|sleef|fused_adam|"
                                   r"_kernel|libgomp|openblas")),
    ("memory (malloc, free, page faults)", re.compile(
        r"malloc|[^a-z]free|_int_free|madvise|mmap|munmap|page_fault|clear_page|memcpy|memset|memmove|"
        r"alloc_pages|folio|CPUAllocator|DefaultCPUAllocator")),
    ("thread wake-ups and sleeps", re.compile(r"futex|schedule|pthread_cond|try_to_wake_up|finish_task_switch|"
                                              r"sched_yield|nanosleep")),
    ("sockets and polling (kernel)", re.compile(r"tcp_|sock_|sendmsg|recvmsg|epoll|writev|readv|__sys_|skb|"
                                                r"inet_|ip_|netif|loopback")),
    ("Python interpreter", re.compile(r"libpython|_PyEval|PyObject|_Py|PyType|PyFrame")),
    ("torch dispatch and tensor bookkeeping", re.compile(r"c10::|at::|torch::")),
]
KIND_DEPTH = 12


def classify(frames):
    """(work, kind) of one sample; ``frames`` innermost first, each 'symbol (dso)'."""
    text = "\n".join(frames)
    work = next((name for name, rule in WORK_RULES if rule.search(text)), "other (kernel-only stacks: scheduler, page faults, ...)")
    kind = "other"
    for frame in frames[:KIND_DEPTH]:
        hit = next((name for name, rule in KIND_RULES if rule.search(frame)), None)
        if hit is not None:
            kind = hit
            break
    return work, kind


def read_samples(perf_data):
    """Yields (pid, thread name, frames) per sample of ``perf script``."""
    out = subprocess.run(["perf", "script", "--no-inline", "-i", perf_data, "-F", "comm,pid,tid,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split("\n\n"):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        head = lines[0].split()
        pid = int(head[-1].split("/")[0])
        frames = []
        for line in lines[1:]:
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else parts[0])
        yield pid, " ".join(head[:-1]), frames


def run_train(stack, extra, folder, epochs, perf_hz):
    cmd = [sys.executable, os.path.join(REPO, "scripts", "train.py"), "--stack", stack, "--epochs", str(epochs),
           "--profile", folder, "--metrics-out", os.path.join(folder, "metrics.json"),
           "--plot-out", os.path.join(folder, "loss.png"), *extra]
    if perf_hz:
        cmd += ["--perf-hz", str(perf_hz)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {r.returncode}:\n{r.stdout}\n{r.stderr}")
    with open(os.path.join(folder, "profile.json")) as f:
        return json.load(f)


def per_epoch(value, n):
    return value / n


def summarize_timers(profile):
    """Seconds per epoch: each trainer phase (mean over trainers), the servers' forward
    function (mean over servers), CPU per thread kind (summed over the role's workers)."""
    n = len(profile["epochs"])
    roles = collections.defaultdict(list)
    for w in profile["workers"].values():
        roles[w["role"]].append(w)
    out = {"epochs_measured": n, "epoch_seconds": profile["training_seconds"] / n,
           "samples_per_s": profile["samples_per_s"], "wall": {}, "cpu": {}}
    for role, workers in roles.items():
        timers = collections.defaultdict(float)
        for w in workers:
            for k, v in w["timers"].items():
                timers[k] += v / len(workers) / n
        out["wall"][role] = dict(timers)
        cpu = collections.defaultdict(float)
        for w in workers:
            for k, v in w["cpu_by_thread"].items():
                if v:
                    cpu[k] += v / n
        out["cpu"][role] = {"total": sum(w["process_cpu"] for w in workers) / n, "by_thread": dict(cpu),
                            "workers": len(workers)}
    return out


def summarize_perf(profile, folder, cpu_per_epoch):
    """CPU seconds per epoch per role, split by work and by kind in the proportions of the
    samples; also the sample counts."""
    role_of = {w["pid"]: (name, w["role"]) for name, w in profile["workers"].items()}
    counts = {name: collections.Counter() for name in profile["workers"]}
    for pid, _thread, frames in read_samples(os.path.join(folder, "perf.data")):
        if pid in role_of:
            counts[role_of[pid][0]][classify(frames)] += 1
    work = collections.defaultdict(lambda: collections.defaultdict(float))
    kind = collections.defaultdict(lambda: collections.defaultdict(float))
    both = collections.defaultdict(lambda: collections.defaultdict(float))
    samples = collections.Counter()
    for name, c in counts.items():
        role = profile["workers"][name]["role"]
        total = sum(c.values())
        samples[role] += total
        if not total:
            continue
        seconds = cpu_per_epoch[name]
        for (w, k), m in c.items():
            work[role][w] += seconds * m / total
            kind[role][k] += seconds * m / total
            both[role][f"{w} / {k}"] += seconds * m / total
    return {"samples": dict(samples), "work": {r: dict(v) for r, v in work.items()},
            "kind": {r: dict(v) for r, v in kind.items()},
            "work_and_kind": {r: dict(sorted(v.items(), key=lambda kv: -kv[1])) for r, v in both.items()}}


def main(argv=None):
    argv, extra = split_at_dashes(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=8, help="epochs per run; the first is not measured (default 8)")
    p.add_argument("--perf-hz", type=int, default=99, help="perf's sampling rate per thread (default 99)")
    p.add_argument("--no-perf", action="store_true", help="timers and /proc CPU counts only")
    p.add_argument("--out", default=os.path.join(REPO, "results", "profile_mainjob.json"),
                   help="where to write the JSON (default results/profile_mainjob.json)")
    p.add_argument("--note", default="", help="a sentence on the conditions of the run, stored in the JSON")
    args = p.parse_args(argv)
    if args.epochs < 2:
        p.error("--epochs must be >= 2")
    use_perf = not args.no_perf
    if use_perf and shutil.which("perf") is None:
        p.error("perf is not installed: install it (linux-tools) or pass --no-perf")

    load_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    stacks = {}
    with tempfile.TemporaryDirectory() as tmp:
        for stack in ("plugin", "torch"):
            folder = os.path.join(tmp, f"{stack}-timers")
            timed = run_train(stack, extra, folder, args.epochs, 0)
            entry = summarize_timers(timed)
            print(f"{stack}: {entry['samples_per_s']:,.0f} samples/s over {entry['epochs_measured']} epochs "
                  f"(timers run)", flush=True)
            if use_perf:
                folder = os.path.join(tmp, f"{stack}-perf")
                sampled = run_train(stack, extra, folder, args.epochs, args.perf_hz)
                n = len(timed["epochs"])
                cpu = {name: w["process_cpu"] / n for name, w in timed["workers"].items()}
                entry["perf"] = summarize_perf(sampled, folder, cpu)
                entry["perf"]["samples_per_s_under_perf"] = sampled["samples_per_s"]
                print(f"{stack}: {sum(entry['perf']['samples'].values())} perf samples "
                      f"({sampled['samples_per_s']:,.0f} samples/s under perf)", flush=True)
            stacks[stack] = entry
    job = {k: timed["config"][k] for k in ("trainers", "servers", "hidden", "batch_size", "optimizer", "lr", "mode")}
    data = {
        "meta": {"torch": __import__("torch").__version__, "python": platform.python_version(),
                 "cpus": os.cpu_count(), "epochs": args.epochs, "perf_hz": args.perf_hz if use_perf else None,
                 "train_options": extra, "job": job, "note": args.note,
                 "load_average": {"start": load_start,
                                  "end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
                 "command": "python scripts/profile_mainjob.py " + " ".join(sys.argv[1:] if argv is None else argv)},
        "stacks": stacks,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
