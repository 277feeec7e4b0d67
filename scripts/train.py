"""Model-parallel training over RPC on real data: scikit-learn's handwritten digits.

An MLP's layers live on server workers (RRefs to remote modules); several trainers train at
the same time, each on its share of the training set: forward through the shards by RPC,
backward with the plugin's distributed engine, step with the plugin's DistributedOptimizer
(every step runs as TorchScript on the servers, without the GIL). Trainer 0 also coordinates:
after every epoch it measures accuracy on held-out digits and prints one line.

    python scripts/train.py                         # every worker on this machine (loopback)
    torchrun --nproc-per-node=4 scripts/train.py    # the same job, started by torchrun
    python scripts/train.py --stack torch           # torch's distributed autograd and optimizer

Workers: trainer0 (rank 0), server0 .. server{S-1} (ranks 1..S), then trainer1 .. trainer{T-1}.
Data: 1,797 scanned 8x8 digits (sklearn.datasets.load_digits, bundled with scikit-learn),
80 % for training, 20 % held out (stratified, seeded).
"""
import argparse
import json
import os
import sys
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch's own TorchScript warnings (--stack torch)

LAYER_SIZES = [64, 128, 64, 10]
OPTIMIZERS = ["adam", "adamw", "sgd", "adagrad", "rmsprop", "adamax", "adadelta", "rprop", "nadam", "radam"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainers", type=int, default=2, help="trainers training at the same time (>= 2; default 2)")
    p.add_argument("--servers", type=int, default=2, help="workers holding the model's layers (>= 2; default 2)")
    p.add_argument("--epochs", type=int, default=12, help="passes over the training set (default 12)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per step and trainer (default 32)")
    p.add_argument("--lr", type=float, default=3e-3, help="learning rate (default 3e-3)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="optimizer (default adam)")
    p.add_argument("--stack", choices=["plugin", "torch"], default="plugin",
                   help="plugin: this project's engine and optimizer (default); torch: torch's own")
    p.add_argument("--mode", choices=["smart", "fast"], default="smart", help="backward mode of the plugin (default smart)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data split, the weights and the shuffles")
    p.add_argument("--metrics-out", default=os.path.join("results", "train", "metrics.json"),
                   help="where to write the metrics as JSON (default results/train/metrics.json)")
    p.add_argument("--plot-out", default=os.path.join("results", "train", "loss.png"),
                   help="loss-curve PNG, written when matplotlib is installed (default results/train/loss.png)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port when this script starts the workers (0: any free one)")
    args = p.parse_args(argv)
    if args.trainers < 2 or args.servers < 2:
        p.error("the job needs at least 2 trainers and 2 servers")
    if args.servers > len(LAYER_SIZES) - 1:
        p.error(f"the model has {len(LAYER_SIZES) - 1} layers: use at most that many servers")
    return args


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


def shard_sizes(servers):
    """Layer sizes of each server's shard: the layers split as evenly as possible."""
    n = len(LAYER_SIZES) - 1
    bounds = [round(i * n / servers) for i in range(servers + 1)]
    return [LAYER_SIZES[bounds[i]: bounds[i + 1] + 1] for i in range(servers)]


def shard_forward(shard_rref, x):
    return shard_rref.local_value()(x)


def shard_predict(shard_rref, x):
    with torch.no_grad():
        return shard_rref.local_value()(x)


def shard_parameter_rrefs(shard_rref):
    return [rpc.RRef(p) for p in shard_rref.local_value().parameters()]


def model_forward(shards, x, predict=False):
    fn = shard_predict if predict else shard_forward
    for rref in shards:
        x = rpc.rpc_sync(rref.owner(), fn, args=(rref, x))
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


def setup_trainer(trainer_index, shards, args):
    """Runs on each trainer: keeps the shards, its data share and its optimizer."""
    import plugin.optim

    (x, y), _ = load_data(args.seed)
    params = [p for rref in shards for p in rpc.rpc_sync(rref.owner(), shard_parameter_rrefs, args=(rref,))]
    if args.stack == "plugin":
        import functional_optim

        cls = functional_optim.functional_optimizer_for(getattr(torch.optim, _TORCH_NAMES[args.optimizer]))
        optimizer = plugin.optim.DistributedOptimizer(cls, params, lr=args.lr)
    else:
        from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

        optimizer = TorchDistributedOptimizer(getattr(torch.optim, _TORCH_NAMES[args.optimizer]), params, lr=args.lr)
    _TRAINER.update(
        index=trainer_index, shards=shards, x=x[trainer_index:: args.trainers], y=y[trainer_index:: args.trainers],
        optimizer=optimizer, args=args,
    )
    return len(_TRAINER["y"])


_TORCH_NAMES = {
    "adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "adagrad": "Adagrad", "rmsprop": "RMSprop", "adamax": "Adamax",
    "adadelta": "Adadelta", "rprop": "Rprop", "nadam": "NAdam", "radam": "RAdam",
}


def train_epoch(epoch):
    """Runs on each trainer: one pass over its share; returns (loss sum, samples, seconds)."""
    import plugin.autograd

    t = _TRAINER
    args = t["args"]
    order = torch.randperm(len(t["y"]), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch * 10 + t["index"]))
    loss_sum, seen, start = 0.0, 0, time.perf_counter()
    for first in range(0, len(order), args.batch_size):
        batch = order[first: first + args.batch_size]
        x, y = t["x"][batch], t["y"][batch]
        with dist_autograd.context() as ctx:
            loss = F.cross_entropy(model_forward(t["shards"], x), y)
            if args.stack == "plugin":
                plugin.autograd.backward(ctx, [loss], mode=args.mode)
            else:
                dist_autograd.backward(ctx, [loss])
            t["optimizer"].step(ctx)
        loss_sum += loss.item() * len(batch)
        seen += len(batch)
    return loss_sum, seen, time.perf_counter() - start


# --- the coordinator (trainer0) ----------------------------------------------------------------


def coordinate(args):
    names = worker_names(args)
    servers = [n for n in names if n.startswith("server")]
    trainers = [n for n in names if n.startswith("trainer")]
    sizes = shard_sizes(args.servers)
    shards = [
        rpc.remote(server, Shard, args=(sizes[i], i == len(servers) - 1, args.seed * 100 + i))
        for i, server in enumerate(servers)
    ]
    _, (x_test, y_test) = load_data(args.seed)
    setups = [rpc.rpc_async(name, setup_trainer, args=(k, shards, args)) for k, name in enumerate(trainers) if k > 0]
    setup_trainer(0, shards, args)
    train_size = _TRAINER["y"].shape[0] + sum(f.wait() for f in setups)
    print(
        f"digits: {train_size} training / {len(y_test)} held-out samples; {len(trainers)} trainers, "
        f"{len(servers)} servers; layers {LAYER_SIZES}; {args.optimizer} lr={args.lr}; stack={args.stack}"
        + (f" ({args.mode} mode)" if args.stack == "plugin" else ""),
        flush=True,
    )
    history, job_start = [], time.perf_counter()
    for epoch in range(args.epochs):
        start = time.perf_counter()
        futs = [rpc.rpc_async(name, train_epoch, args=(epoch,)) for name in trainers[1:]]
        results = [train_epoch(epoch)] + [f.wait() for f in futs]
        seconds = time.perf_counter() - start
        loss = sum(r[0] for r in results) / sum(r[1] for r in results)
        logits = model_forward(shards, x_test, predict=True)
        accuracy = (logits.argmax(dim=1) == y_test).float().mean().item()
        samples_per_s = sum(r[1] for r in results) / seconds
        history.append({"epoch": epoch + 1, "loss": loss, "accuracy": accuracy, "samples_per_s": samples_per_s,
                        "seconds": seconds})
        print(
            f"epoch {epoch + 1:>2}/{args.epochs}  loss {loss:.4f}  held-out accuracy {accuracy:.4f}  "
            f"samples/s {samples_per_s:,.0f}",
            flush=True,
        )
    total = time.perf_counter() - job_start
    metrics = {
        "config": {k: v for k, v in vars(args).items() if k != "port"},
        "layers": LAYER_SIZES,
        "train_samples": train_size,
        "held_out_samples": len(y_test),
        "epochs": history,
        "final_accuracy": history[-1]["accuracy"],
        "training_seconds": total,
    }
    write_outputs(metrics, args)
    print(f"final held-out accuracy {metrics['final_accuracy']:.4f} after {total:.1f} s; metrics: {args.metrics_out}")
    return metrics


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
    ax.set_title(f"digits, {metrics['config']['stack']} stack")
    fig.legend(loc="center right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot_out)), exist_ok=True)
    fig.savefig(args.plot_out, dpi=100)
    plt.close(fig)


# --- processes --------------------------------------------------------------------------------


def run_worker(rank, args, port=None):
    torch.set_num_threads(1)
    import plugin.rpc

    plugin.rpc.init_rpc(
        rank=rank,
        world_size=len(worker_names(args)),
        master_port=port,
        worker_names=worker_names(args),
        num_worker_threads=8,
        rpc_timeout=120,
    )
    try:
        if rank == 0:
            coordinate(args)
    finally:
        rpc.shutdown()


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ:  # started by torchrun: this process is one worker
        world = int(os.environ["WORLD_SIZE"])
        if world < 4:
            raise SystemExit(f"torchrun started {world} processes; the job needs at least 4 (2 servers, 2 trainers)")
        args.trainers = world - args.servers
        run_worker(int(os.environ["RANK"]), args)
        return
    from socket import socket

    port = args.port
    if not port:
        with socket() as s:
            s.bind(("localhost", 0))
            port = s.getsockname()[1]
    mp.spawn(run_worker, args=(args, port), nprocs=len(worker_names(args)), join=True)


if __name__ == "__main__":
    main()
