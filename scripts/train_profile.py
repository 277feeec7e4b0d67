"""Where the time goes in the main job (``scripts/train.py --profile DIR``).

Every worker adds wall-clock seconds per phase to :data:`TIMERS` (the trainers: the forward
RPC to each server, the loss, the backward pass, the step; the servers: the time inside the
forward function); :class:`Profile`, on trainer 0, snapshots every worker's timers and CPU
seconds per thread kind before and after each measured epoch, adds up the differences and
writes ``DIR/profile.json``. With ``--perf-hz`` it also records every worker with
``perf record --call-graph dwarf`` (``DIR/perf.data``; ``scripts/profile_mainjob.py`` reads it).
"""
import collections
import json
import os
import signal
import threading
import time

import torch.distributed.rpc as rpc

# Wall-clock seconds per phase of this worker, by phase name.
TIMERS = collections.defaultdict(float)
TIMERS_LOCK = threading.Lock()  # several RPC threads of a server add at once


def add_time(name, seconds):
    with TIMERS_LOCK:
        TIMERS[name] += seconds


def thread_cpu_seconds():
    """CPU seconds (user + system) of this process's threads so far, summed per thread name
    (Linux: /proc/self/task/*/stat). torch names its RPC threads ``pt_thread_pool`` and
    TensorPipe its event loops ``TP_UV_loop`` (TCP) and ``TP_CMA_loop``; the Python main
    thread is reported as ``main``."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = collections.defaultdict(float)
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # not Linux
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread has just ended
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()  # fields 3.. of proc(5)'s stat
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime (14) + stime (15)
        seconds["main" if int(tid) == os.getpid() else name] += cpu
    return dict(seconds)


def resident_bytes():
    """This process's resident memory (RSS) now, in bytes (Linux: /proc/self/statm); 0 elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def profile_snapshot():
    """Runs on each worker: its pid, its phase timers, its CPU seconds and its RSS so far."""
    times = os.times()
    return {"pid": os.getpid(), "timers": dict(TIMERS), "cpu_by_thread": thread_cpu_seconds(),
            "process_cpu": times.user + times.system, "rss_bytes": resident_bytes()}


class Profile:
    """Adds up, over the epochs it is told about, what every worker spent (``--profile``)."""

    def __init__(self, args, names):
        self.args, self.names = args, names
        self.totals = {n: {"timers": collections.defaultdict(float), "cpu_by_thread": collections.defaultdict(float),
                           "process_cpu": 0.0} for n in names}
        self.pids, self.epochs, self.seconds, self.samples, self.perf = {}, [], 0.0, 0, None
        os.makedirs(args.profile, exist_ok=True)

    def snapshot(self):
        futs = {n: rpc.rpc_async(n, profile_snapshot) for n in self.names if n != "trainer0"}
        snap = {"trainer0": profile_snapshot()}
        snap.update({n: f.wait() for n, f in futs.items()})
        return snap

    def add(self, epoch, before, after, seconds, samples):
        self.epochs.append(epoch + 1)
        self.seconds += seconds
        self.samples += samples
        for n in self.names:
            b, a, total = before[n], after[n], self.totals[n]
            self.pids[n] = a["pid"]
            for key in ("timers", "cpu_by_thread"):
                for k, v in a[key].items():
                    total[key][k] += v - b[key].get(k, 0.0)
            total["process_cpu"] += a["process_cpu"] - b["process_cpu"]

    def start_perf(self, pids):
        """Starts ``perf record`` on every worker (``--perf-hz``); a no-op without it."""
        import shutil
        import subprocess

        if not self.args.perf_hz or self.perf is not None:
            return
        if shutil.which("perf") is None:
            raise SystemExit("train.py: --perf-hz needs the perf tool (linux-tools), which is not installed")
        path = os.path.join(self.args.profile, "perf.data")
        self.perf = subprocess.Popen(
            ["perf", "record", "-q", "-F", str(self.args.perf_hz), "--call-graph", "dwarf,16384", "-o", path,
             "-p", ",".join(str(p) for p in pids)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # perf attaches to every thread before it counts
        if self.perf.poll() is not None:
            raise SystemExit(f"train.py: perf record failed: {self.perf.stderr.read().decode()}")

    def stop_perf(self):
        if self.perf is not None and self.perf.poll() is None:
            self.perf.send_signal(signal.SIGINT)
            self.perf.wait(timeout=120)

    def write(self):
        self.stop_perf()
        out = {
            "workload": self.args.workload,
            "stack": self.args.stack,
            "mode": self.args.mode if self.args.stack == "plugin" else None,
            "config": {k: v for k, v in vars(self.args).items() if k not in ("port", "profile", "perf_hz")},
            "epochs": self.epochs,
            "training_seconds": self.seconds,
            "samples": self.samples,
            "samples_per_s": self.samples / self.seconds,
            "perf": {"data": "perf.data", "hz": self.args.perf_hz} if self.perf is not None else None,
            "workers": {
                n: {"role": "trainer" if n.startswith("trainer") else "server", "pid": self.pids[n],
                    "timers": dict(t["timers"]), "cpu_by_thread": dict(t["cpu_by_thread"]),
                    "process_cpu": t["process_cpu"]}
                for n, t in self.totals.items()
            },
        }
        with open(os.path.join(self.args.profile, "profile.json"), "w") as f:
            json.dump(out, f, indent=2)
