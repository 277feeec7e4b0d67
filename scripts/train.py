"""The main job: a parameter server on real data (scikit-learn's handwritten digits).

An MLP of 2.2M parameters ([64, 1024, 1024, 1024, 10]) lives on the server workers (each
holds consecutive layers, behind an RRef); many trainers train it at the same time, each on
its share of the training set, as in torch's RPC parameter-server tutorials: forward through
the servers by RPC, a distributed backward pass, and a step of the shared parameters on the
servers. With ``--stack plugin`` (the default) the backward pass is the plugin's engine and
the step the plugin's DistributedOptimizer (natively on the servers, without the GIL, with
torch's fused Adam kernel; ``step_async``, so that the update overlaps the trainer's next
batch, unless ``--sync-step``); with ``--stack torch`` the same job runs on torch's distributed
autograd and DistributedOptimizer. Trainer 0 also coordinates: after every epoch it measures
accuracy on held-out digits and prints one line.

    python scripts/train.py                          # 4 trainers, 2 servers, on this machine
    python scripts/train.py --stack torch            # torch's distributed autograd and optimizer
    torchrun --nproc-per-node=6 scripts/train.py     # the same job, started by torchrun
    torchrun --nnodes=2 --node-rank=I --nproc-per-node=3 --master-addr=HOST0 --master-port=29500 scripts/train.py
    python scripts/train.py --checkpoint-dir ckpt    # saves every epoch; started again, resumes
    python scripts/train.py --profile prof           # where the time goes, per worker (prof/profile.json)

Workers: trainer0 (rank 0), server0 .. server{S-1} (ranks 1..S), then trainer1 .. trainer{T-1}.
Data: 1,797 scanned 8x8 digits (sklearn.datasets.load_digits, bundled with scikit-learn),
80 % for training, 20 % held out (stratified, seeded).

Stopping: SIGINT or SIGTERM to this script (when it starts the workers itself) ends every
worker within a few seconds, prints one line and exits with status 128 + the signal number;
a worker that dies ends the others and the script exits with status 1.
"""
import argparse
import collections
import json
import os
import signal
import sys
import threading
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch's own TorchScript warnings (--stack torch)

OPTIMIZERS = ["adam", "adamw", "sgd", "adagrad", "rmsprop", "adamax", "adadelta", "rprop", "nadam", "radam"]
_TORCH_NAMES = {
    "adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "adagrad": "Adagrad", "rmsprop": "RMSprop", "adamax": "Adamax",
    "adadelta": "Adadelta", "rprop": "Rprop", "nadam": "NAdam", "radam": "RAdam",
}
# Every process uses TensorPipe's uv (TCP) transport: the default transports include shared
# memory, whose reactor thread busy-polls a CPU core in every process even when idle; with
# more worker processes than cores that polling, not the job, would take the CPU. uv also
# is what connects workers on different hosts.
TRANSPORTS = ["uv"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainers", type=int, default=4, help="trainers training at the same time (>= 2; default 4)")
    p.add_argument("--servers", type=int, default=2, help="workers holding the model's layers (2..4; default 2)")
    p.add_argument("--hidden", type=int, default=1024,
                   help="width of the three hidden layers (default 1024: 2.2M parameters)")
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set (default 20)")
    p.add_argument("--batch-size", type=int, default=16, help="samples per step and trainer (default 16)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: 3e-4 for adam, adamw, nadam, radam; 1e-3 for adamax; 1e-4 for rmsprop; "
                        "1e-2 for adagrad; 0.05 for sgd; 1.0 for adadelta; 1e-4 for rprop)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="optimizer (default adam)")
    p.add_argument("--stack", choices=["plugin", "torch"], default="plugin",
                   help="plugin: this project's engine and optimizer (default); torch: torch's own")
    p.add_argument("--mode", choices=["smart", "fast"], default="smart", help="backward mode of the plugin (default smart)")
    p.add_argument("--sync-step", action="store_true",
                   help="plugin stack: wait for each step to be applied (DistributedOptimizer.step) instead of "
                        "overlapping the update with the next batch (step_async, the default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data split, the weights and the shuffles")
    p.add_argument("--metrics-out", default=os.path.join("results", "train", "metrics.json"),
                   help="where to write the metrics as JSON (default results/train/metrics.json)")
    p.add_argument("--plot-out", default=os.path.join("results", "train", "loss.png"),
                   help="loss-curve PNG, written when matplotlib is installed (default results/train/loss.png)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port when this script starts the workers (0: any free one)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save the model shards and the optimizers' state here (atomically) every "
                        "--checkpoint-every epochs and after the last; a job started again with the same "
                        "folder resumes from its checkpoint (plugin stack only)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (default 1)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="measure where the time goes on every worker over the epochs after the first and write "
                        "DIR/profile.json: each trainer's seconds per phase (forward RPCs, loss, backward, step), "
                        "each server's seconds in the forward pass, and every worker's CPU seconds per thread "
                        "kind; with --perf-hz, also record every worker with perf (DIR/perf.data)")
    p.add_argument("--perf-hz", type=int, default=0,
                   help="with --profile: sampling rate of `perf record --call-graph dwarf` over the measured "
                        "epochs (0: no perf; default 0). scripts/profile_mainjob.py reads the samples")
    p.add_argument("--deterministic", action="store_true",
                   help="trainers take turns, one batch each, instead of training at the same time: "
                        "slower, but a run (and a resumed run) gives the same parameters every time")
    args = p.parse_args(argv)
    if args.trainers < 2 or args.servers < 2:
        p.error("the job needs at least 2 trainers and 2 servers")
    if args.servers > len(layer_sizes(args)) - 1:
        p.error(f"the model has {len(layer_sizes(args)) - 1} layers: use at most that many servers")
    if args.hidden < 1 or args.epochs < 1 or args.batch_size < 1:
        p.error("--hidden, --epochs and --batch-size must be positive")
    if args.perf_hz and not args.profile:
        p.error("--perf-hz needs --profile DIR")
    if args.profile and args.epochs < 2:
        p.error("--profile measures the epochs after the first: use --epochs >= 2")
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be >= 1")
    if args.checkpoint_dir and args.stack != "plugin":
        p.error("--checkpoint-dir needs --stack plugin: torch's DistributedOptimizer cannot save its state")
    if args.lr is None:
        args.lr = DEFAULT_LR[args.optimizer]
    return args


DEFAULT_LR = {"adam": 3e-4, "adamw": 3e-4, "adamax": 1e-3, "nadam": 3e-4, "radam": 3e-4, "rmsprop": 1e-4,
              "adagrad": 1e-2, "sgd": 0.05, "adadelta": 1.0, "rprop": 1e-4}


def layer_sizes(args):
    return [64, args.hidden, args.hidden, args.hidden, 10]


def worker_names(args):
    return ["trainer0"] + [f"server{i}" for i in range(args.servers)] + [f"trainer{i}" for i in range(1, args.trainers)]


# --- the model, split over the servers ---------------------------------------------------


class Shard(torch.nn.Module):
    """Consecutive linear layers of the MLP (ReLU between layers, none after the last)."""

    def __init__(self, sizes, last, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.last = last

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            # Other trainers step these parameters (in place) between this trainer's forward
            # and backward passes. The forward pass uses a snapshot of them, so that the
            # backward pass computes the gradient at the weights the forward pass saw (as in
            # asynchronous SGD) instead of failing autograd's in-place check; the snapshot's
            # gradient flows on to the parameter itself.
            x = F.linear(x, layer.weight.clone(), layer.bias.clone())
            if not (self.last and i == len(self.layers) - 1):
                x = torch.relu(x)
        return x


def shard_sizes(args):
    """Layer sizes of each server's shard: the layers split as evenly as possible."""
    sizes = layer_sizes(args)
    n = len(sizes) - 1
    bounds = [round(i * n / args.servers) for i in range(args.servers + 1)]
    return [sizes[bounds[i]: bounds[i + 1] + 1] for i in range(args.servers)]


def shard_forward(shard_rref, x):
    start = time.perf_counter()
    y = shard_rref.local_value()(x)
    seconds = time.perf_counter() - start
    with _TIMERS_LOCK:  # several RPC threads run this at once
        _TIMERS["server forward (in the Python function)"] += seconds
    return y


def shard_predict(shard_rref, x):
    with torch.no_grad():
        return shard_rref.local_value()(x)


def shard_parameter_rrefs(shard_rref):
    return [rpc.RRef(p) for p in shard_rref.local_value().parameters()]


def model_forward(shards, x, predict=False):
    fn = shard_predict if predict else shard_forward
    for rref in shards:
        start = time.perf_counter()
        x = rpc.rpc_sync(rref.owner(), fn, args=(rref, x))
        if not predict:
            _TIMERS[f"forward RPC to {rref.owner().name}"] += time.perf_counter() - start
    return x


# --- data ---------------------------------------------------------------------------------


def load_data(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    train_idx, test_idx = train_test_split(
        list(range(len(y))), test_size=0.2, random_state=seed, stratify=digits.target
    )
    return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])


# --- trainers -------------------------------------------------------------------------------

_TRAINER = {}
# Wall-clock seconds per phase of this worker (reported by --profile).
_TIMERS = collections.defaultdict(float)
_TIMERS_LOCK = threading.Lock()


def setup_trainer(trainer_index, shards, args, optimizer_state=None):
    """Runs on each trainer: keeps the shards, its data share and its optimizer (restored from
    ``optimizer_state`` when resuming)."""
    import plugin.optim

    (x, y), _ = load_data(args.seed)
    params = [p for rref in shards for p in rpc.rpc_sync(rref.owner(), shard_parameter_rrefs, args=(rref,))]
    optimizer_class = getattr(torch.optim, _TORCH_NAMES[args.optimizer])
    if args.stack == "plugin":
        optimizer = plugin.optim.DistributedOptimizer(optimizer_class, params, lr=args.lr)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
    else:
        from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

        with _quiet_torch_deprecation():
            optimizer = TorchDistributedOptimizer(optimizer_class, params, lr=args.lr)
    _TRAINER.update(
        index=trainer_index, shards=shards, x=x[trainer_index:: args.trainers], y=y[trainer_index:: args.trainers],
        optimizer=optimizer, args=args,
    )
    return len(_TRAINER["y"])


class _quiet_torch_deprecation:
    """Drops the DeprecationWarning torch's DistributedOptimizer prints for each local optimizer
    (torch forces it with ``simplefilter("always")``, so a filter cannot drop it)."""

    def __enter__(self):
        self._show = warnings.showwarning

        def show(message, category, *rest, **kw):
            if not issubclass(category, DeprecationWarning):
                self._show(message, category, *rest, **kw)

        warnings.showwarning = show

    def __exit__(self, *exc):
        warnings.showwarning = self._show


def begin_epoch(epoch):
    """Runs on each trainer: shuffles its share for ``epoch``; returns its number of batches."""
    t = _TRAINER
    args = t["args"]
    t["order"] = torch.randperm(len(t["y"]), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch * 10 + t["index"]))
    t["stats"] = [0.0, 0, 0.0]  # loss sum, samples, seconds
    return (len(t["order"]) + args.batch_size - 1) // args.batch_size


def train_batch(b):
    """Runs on each trainer: forward, backward and step on batch ``b`` of its epoch."""
    import plugin.autograd

    t = _TRAINER
    args = t["args"]
    clock = time.perf_counter
    start = clock()
    batch = t["order"][b * args.batch_size: (b + 1) * args.batch_size]
    x, y = t["x"][batch], t["y"][batch]
    with dist_autograd.context() as ctx:
        t1 = clock()
        logits = model_forward(t["shards"], x)
        t2 = clock()
        loss = F.cross_entropy(logits, y)
        t3 = clock()
        if args.stack == "plugin":
            plugin.autograd.backward(ctx, [loss], mode=args.mode)
        else:
            dist_autograd.backward(ctx, [loss])
        t4 = clock()
        if args.stack == "plugin" and not args.sync_step:
            # step_async returns once every server holds this step's gradients (phase 1 of
            # the all-or-nothing step); the update itself (phase 2) runs on the servers while
            # this trainer goes on to its next batch. At most one step is in flight per
            # trainer: the previous one must have been applied before this one starts.
            finish_step()
            t["step"] = t["optimizer"].step_async(ctx)
            if args.deterministic:  # the next trainer's turn must see this step applied
                finish_step()
        else:
            t["optimizer"].step(ctx)  # torch's DistributedOptimizer has no asynchronous step
        t5 = clock()
    t["stats"][0] += loss.item() * len(batch)
    t["stats"][1] += len(batch)
    end = clock()
    t["stats"][2] += end - start
    _TIMERS["trainer loss"] += t3 - t2
    _TIMERS["trainer backward"] += t4 - t3
    _TIMERS["trainer step"] += t5 - t4
    _TIMERS["trainer other (batch, context, bookkeeping)"] += (t1 - start) + (end - t5)
    _TIMERS["trainer batch total"] += end - start


def finish_step():
    """Runs on each trainer: waits until its last step (``step_async``) has been applied
    on every server; raises its error, if any."""
    step = _TRAINER.pop("step", None)
    if step is not None:
        start = time.perf_counter()
        step.wait()
        _TIMERS["trainer step: of which waiting for the previous update"] += time.perf_counter() - start


def end_epoch():
    """Runs on each trainer: (loss sum, samples, seconds) of its epoch, once its last step
    has been applied."""
    start = time.perf_counter()
    finish_step()
    _TRAINER["stats"][2] += time.perf_counter() - start
    return tuple(_TRAINER["stats"])


def train_epoch(epoch):
    """Runs on each trainer: one pass over its share; returns (loss sum, samples, seconds)."""
    for b in range(begin_epoch(epoch)):
        train_batch(b)
    return end_epoch()


def optimizer_state():
    """Runs on each trainer: its DistributedOptimizer's state (every owner's part)."""
    return _TRAINER["optimizer"].state_dict()


def _on(name, fn, *args):
    """``fn(*args)`` on worker ``name`` (here when it is trainer0, this process)."""
    if name == "trainer0":
        return fn(*args)
    return rpc.rpc_sync(name, fn, args=args)


# --- profiling (--profile) ---------------------------------------------------------------------


def _thread_cpu_seconds():
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


def profile_snapshot():
    """Runs on each worker: its pid, its phase timers and its CPU seconds so far."""
    times = os.times()
    return {"pid": os.getpid(), "timers": dict(_TIMERS), "cpu_by_thread": _thread_cpu_seconds(),
            "process_cpu": times.user + times.system}


class _Profile:
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


# --- checkpoints ------------------------------------------------------------------------------

CHECKPOINT = "checkpoint.pt"
# what a checkpoint must agree on with the job that resumes from it
_JOB_KEYS = ("trainers", "servers", "hidden", "batch_size", "lr", "optimizer", "stack", "seed")


def shard_state(shard_rref):
    return {k: v.clone() for k, v in shard_rref.local_value().state_dict().items()}


def shard_load(shard_rref, state):
    shard_rref.local_value().load_state_dict(state)


def save_checkpoint(args, shards, trainers, history):
    """Writes every server's shard and every trainer's optimizer state to
    ``<checkpoint-dir>/checkpoint.pt``, atomically: into a temporary file in the same folder,
    flushed to disk, then renamed over the previous checkpoint. A crash at any point leaves
    either the previous checkpoint or the new one, never a partial file under that name."""
    state = {
        "format": 1,
        "job": {k: getattr(args, k) for k in _JOB_KEYS},
        "epochs_done": len(history),
        "history": history,
        "shards": [rpc.rpc_sync(r.owner(), shard_state, args=(r,)) for r in shards],
        "optimizers": [_on(name, optimizer_state) for name in trainers],
    }
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = os.path.join(args.checkpoint_dir, CHECKPOINT)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(args.checkpoint_dir, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


def load_checkpoint(args):
    """The checkpoint in ``--checkpoint-dir``, or None; raises SystemExit when it belongs to
    another job (a different model, data split, optimizer, ...)."""
    if not args.checkpoint_dir:
        return None
    path = os.path.join(args.checkpoint_dir, CHECKPOINT)
    if not os.path.exists(path):
        return None
    state = torch.load(path, weights_only=False)
    differ = {k: (state["job"].get(k), getattr(args, k)) for k in _JOB_KEYS if state["job"].get(k) != getattr(args, k)}
    if differ:
        what = ", ".join(f"--{k.replace('_', '-')} {a!r} there, {b!r} here" for k, (a, b) in differ.items())
        raise SystemExit(f"train.py: {path} was saved by another job ({what}); use another --checkpoint-dir")
    return state


# --- the coordinator (trainer0) ----------------------------------------------------------------


def coordinate(args):
    names = worker_names(args)
    servers = [n for n in names if n.startswith("server")]
    trainers = [n for n in names if n.startswith("trainer")]
    checkpoint = load_checkpoint(args)
    sizes = shard_sizes(args)
    shards = [
        rpc.remote(server, Shard, args=(sizes[i], i == len(servers) - 1, args.seed * 100 + i))
        for i, server in enumerate(servers)
    ]
    if checkpoint is not None:
        for rref, state in zip(shards, checkpoint["shards"]):
            rpc.rpc_sync(rref.owner(), shard_load, args=(rref, state))
    _, (x_test, y_test) = load_data(args.seed)
    optimizer_states = checkpoint["optimizers"] if checkpoint is not None else [None] * len(trainers)
    setups = [rpc.rpc_async(name, setup_trainer, args=(k, shards, args, optimizer_states[k]))
              for k, name in enumerate(trainers) if k > 0]
    setup_trainer(0, shards, args, optimizer_states[0])
    train_size = _TRAINER["y"].shape[0] + sum(f.wait() for f in setups)
    n_params = sum(a * b + b for a, b in zip(layer_sizes(args)[:-1], layer_sizes(args)[1:]))
    print(
        f"digits: {train_size} training / {len(y_test)} held-out samples; {len(trainers)} trainers, "
        f"{len(servers)} servers; layers {layer_sizes(args)} ({n_params:,} parameters); batch {args.batch_size}; "
        f"{args.optimizer} lr={args.lr:g}; stack={args.stack}" + (f" ({args.mode} mode)" if args.stack == "plugin" else ""),
        flush=True,
    )
    history = list(checkpoint["history"]) if checkpoint is not None else []
    if checkpoint is not None:
        print(f"resumed from {os.path.join(args.checkpoint_dir, CHECKPOINT)} after epoch {len(history)}", flush=True)
    first_epoch, job_start = len(history), time.perf_counter()
    profile = _Profile(args, names) if args.profile else None
    for epoch in range(first_epoch, args.epochs):
        measured = profile is not None and epoch > first_epoch  # the first epoch warms up
        if measured:
            before = profile.snapshot()
            profile.start_perf([before[n]["pid"] for n in names])
        start = time.perf_counter()
        if args.deterministic:
            results = _deterministic_epoch(trainers, epoch)
        else:
            futs = [rpc.rpc_async(name, train_epoch, args=(epoch,)) for name in trainers[1:]]
            results = [train_epoch(epoch)] + [f.wait() for f in futs]
        seconds = time.perf_counter() - start
        if measured:
            if epoch == args.epochs - 1:
                profile.stop_perf()
            profile.add(epoch, before, profile.snapshot(), seconds, sum(r[1] for r in results))
        loss = sum(r[0] for r in results) / sum(r[1] for r in results)
        logits = model_forward(shards, x_test, predict=True)
        accuracy = (logits.argmax(dim=1) == y_test).float().mean().item()
        samples = sum(r[1] for r in results)
        history.append({"epoch": epoch + 1, "loss": loss, "accuracy": accuracy, "samples": samples,
                        "samples_per_s": samples / seconds, "seconds": seconds})
        print(
            f"epoch {epoch + 1:>2}/{args.epochs}  loss {loss:.4f}  held-out accuracy {accuracy:.4f}  "
            f"samples/s {samples / seconds:,.0f}  ({seconds:.1f} s)",
            flush=True,
        )
        if args.checkpoint_dir and ((epoch + 1) % args.checkpoint_every == 0 or epoch + 1 == args.epochs):
            save_checkpoint(args, shards, trainers, history)
    total = time.perf_counter() - job_start
    ran = history[first_epoch:] or history[-1:]
    train_seconds = sum(e["seconds"] for e in ran)
    if not history:
        raise SystemExit("train.py: no epoch to report")
    metrics = {
        "accuracy": history[-1]["accuracy"],
        "samples_per_s": sum(e["samples"] for e in ran) / train_seconds,
        "training_seconds": train_seconds,
        "wall_seconds": total,
        "resumed_after_epoch": first_epoch if checkpoint is not None else None,
        "config": {k: v for k, v in vars(args).items() if k != "port"},
        "layers": layer_sizes(args),
        "parameters": n_params,
        "train_samples": train_size,
        "held_out_samples": len(y_test),
        "epochs": history,
    }
    write_outputs(metrics, args)
    if profile is not None:
        profile.write()
        print(f"profile: {os.path.join(args.profile, 'profile.json')}", flush=True)
    print(
        f"final held-out accuracy {metrics['accuracy']:.4f}; {metrics['samples_per_s']:,.0f} samples/s; "
        f"{total:.1f} s; metrics: {args.metrics_out}",
        flush=True,
    )
    return metrics


def _deterministic_epoch(trainers, epoch):
    """One epoch with the trainers taking turns, one batch each, in rank order: the same run
    gives the same parameters every time (what a resumed run is compared with)."""
    batches = [_on(name, begin_epoch, epoch) for name in trainers]
    for b in range(max(batches)):
        for name, n in zip(trainers, batches):
            if b < n:
                _on(name, train_batch, b)
    return [_on(name, end_epoch) for name in trainers]


def write_outputs(metrics, args):
    os.makedirs(os.path.dirname(os.path.abspath(args.metrics_out)), exist_ok=True)
    with open(args.metrics_out, "w") as f:
        json.dump(metrics, f, indent=2)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    epochs = [e["epoch"] for e in metrics["epochs"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(epochs, [e["loss"] for e in metrics["epochs"]], marker="o", label="training loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy")
    ax2 = ax.twinx()
    ax2.plot(epochs, [e["accuracy"] for e in metrics["epochs"]], color="tab:green", marker="s", label="held-out accuracy")
    ax2.set_ylabel("held-out accuracy")
    cfg = metrics["config"]
    ax.set_title(f"digits, {cfg['trainers']} trainers, {cfg['servers']} servers, {cfg['stack']} stack")
    fig.legend(loc="center right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot_out)), exist_ok=True)
    fig.savefig(args.plot_out, dpi=100)
    plt.close(fig)


# --- processes --------------------------------------------------------------------------------


def run_worker(rank, args, port=None, master_addr=None):
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: every thread's stack
    torch.set_num_threads(1)
    import plugin.rpc

    plugin.rpc.init_rpc(
        rank=rank,
        world_size=len(worker_names(args)),
        master_addr=master_addr,
        master_port=port,
        worker_names=worker_names(args),
        num_worker_threads=8,
        rpc_timeout=120,
        transports=TRANSPORTS,
    )
    try:
        if rank == 0:
            coordinate(args)
    finally:
        # Bounded: returns after a worker died, naming it (a plain rpc.shutdown() would wait forever).
        unreachable = plugin.rpc.shutdown()
    if unreachable:
        raise SystemExit(f"train.py: {worker_names(args)[rank]}: shutdown could not wait for {', '.join(unreachable)}")


def _spawned_worker(rank, args, port, parent_pid):
    """Entry point of a worker process started by :func:`launch`."""
    # Ctrl-C reaches the whole process group: the launching process alone handles it and
    # ends the workers (it started this process with SIGINT blocked, so that a Ctrl-C while
    # Python starts up is not a KeyboardInterrupt here). And a worker ends when the
    # launching process dies, however it dies.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent(parent_pid)
    run_worker(rank, args, port, "localhost")


def _die_with_parent(parent_pid):
    """Asks Linux to SIGKILL this process when its parent dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the launcher's signal handler still ends the workers
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class _Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def launch(args, port):
    """Starts every worker on this machine and waits for them.

    Returns the exit status: 0 when every worker ended well; 1 when one failed (the others
    are ended); 128 + signal number after SIGINT or SIGTERM (every worker ended).
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = []

    def on_signal(signum, frame):
        raise _Stop(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The workers inherit a blocked SIGINT (see _spawned_worker); a SIGINT that arrives
        # meanwhile waits here until the unblock, then stops the job as usual.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for rank in range(len(worker_names(args))):
                p = ctx.Process(target=_spawned_worker, args=(rank, args, port, os.getpid()),
                                name=worker_names(args)[rank])
                p.start()
                procs.append(p)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        while True:
            codes = [p.exitcode for p in procs]
            failed = [(p.name, c) for p, c in zip(procs, codes) if c not in (None, 0)]
            if failed:
                _end(procs)
                name, code = failed[0]
                print(f"train.py: worker {name} exited with status {code}; ended the other workers", file=sys.stderr,
                      flush=True)
                return 1
            if all(c == 0 for c in codes):
                return 0
            procs[0].join(0.2)
    except _Stop as stop:
        for s in old:  # a second signal must not interrupt the clean-up
            signal.signal(s, signal.SIG_IGN)
        n = _end(procs)
        name = signal.Signals(stop.signum).name
        print(f"train.py: stopped by {name}; ended {n} worker processes", file=sys.stderr, flush=True)
        return 128 + stop.signum
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _end(procs):
    """Ends every live worker; returns how many were alive.

    Every worker is frozen (SIGSTOP) before any is killed (SIGKILL): a worker that saw a
    peer die first would report the broken connection (TensorPipe logs one warning per
    peer) although the job is being stopped on purpose. A frozen process runs no more code,
    so none of them sees the others go. The workers hold nothing that needs a clean exit:
    checkpoints are written to a temporary file and renamed, and TensorPipe's uv transport
    leaves no shared memory behind.
    """
    alive = [p for p in procs if p.exitcode is None]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for p in alive:
            try:
                os.kill(p.pid, sig)
            except OSError:  # it has just exited
                pass
    for p in alive:
        p.join(5.0)
    return len(alive)


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ:  # started by torchrun: this process is one worker
        world = int(os.environ["WORLD_SIZE"])
        if world < args.servers + 2:
            raise SystemExit(f"torchrun started {world} processes; the job needs at least {args.servers + 2} "
                             f"({args.servers} servers, 2 trainers)")
        args.trainers = world - args.servers
        run_worker(int(os.environ["RANK"]), args)
        return 0
    from socket import socket

    port = args.port
    if not port:
        with socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
    return launch(args, port)


if __name__ == "__main__":
    sys.exit(main())
