"""The main job: a parameter server on real data, trained by several trainers at once.

The model lives on the server workers (each holds a shard of it, behind an RRef); the trainers
train it at the same time, each on its share of the training set, as in torch's RPC
parameter-server tutorial: a forward pass through the servers by RPC, a distributed backward
pass, and a step of the shared parameters on the servers. Two workloads (``--workload``):

* ``digits`` (the default): an MLP of 2.2M parameters on scikit-learn's handwritten digits,
  its layers split over the servers (``workloads/digits.py``);
* ``movielens``: user, item and hashed feature-cross embedding tables of 17.6M parameters,
  sharded by rows over the servers, on 100,004 real MovieLens ratings; the trainers compute
  the predicted rating from the rows; the gradients of the tables are sparse
  (``workloads/movielens.py``).

With ``--stack plugin`` (the default) the backward pass is the plugin's engine and the step the
plugin's DistributedOptimizer (natively on the servers, without the GIL; ``step_async``, so that
the update overlaps the trainer's next batch, unless ``--sync-step``); with ``--stack torch``
the same job runs on torch's distributed autograd and DistributedOptimizer. Trainer 0 also
coordinates: after every epoch it measures the held-out metric and prints one line.

    python scripts/train.py                          # digits: 4 trainers, 2 servers, on this machine
    python scripts/train.py --workload movielens     # the embedding tables on MovieLens ratings
    python scripts/train.py --stack torch            # torch's distributed autograd and optimizer
    torchrun --nproc-per-node=6 scripts/train.py     # the same job, started by torchrun
    python scripts/train.py --checkpoint-dir ckpt    # saves every epoch; started again, resumes
    python scripts/train.py --profile prof           # where the time goes, per worker (prof/profile.json)
    python scripts/train.py --auth-key-file key      # authenticated RPC (openssl rand -hex 32 > key; docs/security.md)

Workers: trainer0 (rank 0), server0 .. server{S-1} (ranks 1..S), then trainer1 .. trainer{T-1}.
Beside this file: the workloads (``workloads/``), the options (``train_options.py``), starting
and stopping the workers (``train_launch.py``), checkpoints (``train_checkpoint.py``),
profiling (``train_profile.py``) and the metrics file and plot (``train_outputs.py``).
"""
import os
import sys
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, REPO)

import train_checkpoint  # noqa: E402
import train_launch  # noqa: E402
import workloads  # noqa: E402
from train_options import TORCH_NAMES, parse_args  # noqa: E402
from train_outputs import choose_paths, write_outputs  # noqa: E402
from train_profile import TIMERS, Profile, resident_bytes  # noqa: E402

warnings.filterwarnings("ignore", category=DeprecationWarning)  # torch's own TorchScript warnings (--stack torch)


def worker_names(args):
    return ["trainer0"] + [f"server{i}" for i in range(args.servers)] + [f"trainer{i}" for i in range(1, args.trainers)]


# --- the trainers --------------------------------------------------------------------------------

_TRAINER = {}


def make_optimizer(args, params):
    """The DistributedOptimizer of ``--stack`` over ``params`` (RRefs to the servers' parameters)."""
    optimizer_class = getattr(torch.optim, TORCH_NAMES[args.optimizer])
    if args.stack == "plugin":
        import plugin.optim

        return plugin.optim.DistributedOptimizer(optimizer_class, params, lr=args.lr)
    from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

    show = warnings.showwarning  # torch warns for each local optimizer, with simplefilter("always")
    warnings.showwarning = lambda m, category, *a, **k: None if issubclass(category, DeprecationWarning) else show(m, category, *a, **k)
    try:
        return TorchDistributedOptimizer(optimizer_class, params, lr=args.lr)
    finally:
        warnings.showwarning = show


def setup_trainer(trainer_index, shards, forwards, args):
    """Runs on each trainer: keeps the shards (RRefs to the servers' modules), what its forward
    passes call (``forwards``: the workload's ``forward_shards``), its share of the training set and
    its optimizer; returns the size of its share."""
    workload = workloads.get(args.workload)
    train, _ = workload.load_data(args)
    params = [p for rref in shards for p in rpc.rpc_sync(rref.owner(), workloads.shard_parameter_rrefs, args=(rref,))]
    optimizer = make_optimizer(args, params)
    getattr(workload, "setup_trainer", lambda *a: None)(args, shards)
    _TRAINER.update(index=trainer_index, shards=shards, forwards=forwards,
                    data=[t[trainer_index:: args.trainers] for t in train],
                    optimizer=optimizer, args=args, workload=workload)
    return len(_TRAINER["data"][0])


def begin_epoch(epoch):
    """Runs on each trainer: shuffles its share for ``epoch``; returns its number of batches."""
    t, args = _TRAINER, _TRAINER["args"]
    seed = args.seed * 1000 + epoch * 10 + t["index"]
    t["order"] = torch.randperm(len(t["data"][0]), generator=torch.Generator().manual_seed(seed))
    t["stats"] = {"loss_sum": 0.0, "samples": 0, "steps": 0, "seconds": 0.0, "bytes": 0, "gradients": {}}
    batches = (len(t["order"]) + args.batch_size - 1) // args.batch_size
    return min(batches, args.max_batches or batches)


def train_batch(b):
    """Runs on each trainer: forward, backward and step on batch ``b`` of its epoch."""
    import plugin.autograd

    t, args = _TRAINER, _TRAINER["args"]
    clock = time.perf_counter
    start = clock()
    batch = t["order"][b * args.batch_size: (b + 1) * args.batch_size]
    *inputs, target = (d[batch] for d in t["data"])
    with dist_autograd.context() as ctx:
        t1 = clock()
        output, sent = t["workload"].forward(t["forwards"], *inputs, context_id=ctx)
        t2 = clock()
        loss = t["workload"].loss(output, target)
        t3 = clock()
        in_backward = args.stack == "plugin" and args.step == "in-backward"
        if in_backward:  # each server steps as its part of the pass ends: no step message
            t["optimizer"].backward_and_step(ctx, [loss], mode=args.mode)
        elif args.stack == "plugin":
            plugin.autograd.backward(ctx, [loss], mode=args.mode)
        else:
            dist_autograd.backward(ctx, [loss])
        t4 = clock()
        if args.check_gradients:
            workloads.add_gradient_summary(t["stats"]["gradients"], t["shards"], args.stack, ctx)
        if args.stack == "plugin" and args.step == "async":
            # step_async returns once every server holds this step's gradients (phase 1 of
            # the all-or-nothing step); the update itself (phase 2) runs on the servers while
            # this trainer goes on to its next batch. At most one step is in flight per
            # trainer: the previous one must have been applied before this one starts.
            finish_step()
            t["step"] = t["optimizer"].step_async(ctx)
            if args.deterministic:  # the next trainer's turn must see this step applied
                finish_step()
        elif not in_backward:
            t["optimizer"].step(ctx)  # torch's DistributedOptimizer has no asynchronous step
        t5 = clock()
    end = clock()
    stats = t["stats"]
    stats["loss_sum"] += loss.item() * len(batch)
    stats["samples"] += len(batch)
    stats["steps"] += 1
    stats["seconds"] += end - start
    stats["bytes"] += sent
    for name, seconds in (("trainer loss", t3 - t2), ("trainer backward", t4 - t3), ("trainer step", t5 - t4),
                          ("trainer other (batch, context, bookkeeping)", (t1 - start) + (end - t5)),
                          ("trainer batch total", end - start)):
        TIMERS[name] += seconds


def finish_step():
    """Runs on each trainer: waits until its last step (``step_async``) has been applied on
    every server; raises its error, if any."""
    step = _TRAINER.pop("step", None)
    if step is not None:
        start = time.perf_counter()
        step.wait()
        TIMERS["trainer step: of which waiting for the previous update"] += time.perf_counter() - start


def end_epoch():
    """Runs on each trainer: the sums of its epoch (loss, samples, steps, seconds, bytes sent
    and received, gradients seen by the servers), once its last step has been applied."""
    start = time.perf_counter()
    finish_step()
    _TRAINER["stats"]["seconds"] += time.perf_counter() - start
    return _TRAINER["stats"]


def train_epoch(epoch):
    """Runs on each trainer: one pass over its share (at most ``--max-batches``)."""
    for b in range(begin_epoch(epoch)):
        train_batch(b)
    return end_epoch()


def optimizer_rrefs():
    """Runs on each trainer: its local optimizers on the servers (what they checkpoint)."""
    return train_checkpoint.local_optimizer_rrefs(_TRAINER["optimizer"])


def _on(name, fn, *args):
    """``fn(*args)`` on worker ``name`` (here when it is trainer0, this process)."""
    return fn(*args) if name == "trainer0" else rpc.rpc_sync(name, fn, args=args)


# --- the coordinator (trainer0) ----------------------------------------------------------------


def coordinate(args):
    names = worker_names(args)
    servers = [n for n in names if n.startswith("server")]
    trainers = [n for n in names if n.startswith("trainer")]
    workload = workloads.get(args.workload)
    checkpoint = train_checkpoint.load(args)
    baseline_rss = {server: rpc.rpc_sync(server, resident_bytes) for server in servers}  # before the tables
    shards = [rpc.remote(server, cls, args=ctor_args)
              for server, (cls, ctor_args) in zip(servers, workload.shard_specs(args))]
    forwards = getattr(workload, "forward_shards", lambda args, shards: shards)(args, shards)
    train, held_out = workload.load_data(args)
    setups = [rpc.rpc_async(name, setup_trainer, args=(k, shards, forwards, args))
              for k, name in enumerate(trainers) if k > 0]
    setup_trainer(0, shards, forwards, args)
    train_size = len(_TRAINER["data"][0]) + sum(f.wait() for f in setups)
    local_optimizers = [_on(name, optimizer_rrefs) for name in trainers] if args.stack == "plugin" else None
    if checkpoint is not None:
        train_checkpoint.restore(checkpoint, shards, local_optimizers)
    print(f"{workload.describe(args, train_size, len(held_out[0]))}; batch {args.batch_size}; "
          f"{args.optimizer} lr={args.lr:g}; stack={args.stack}" + (f" ({args.mode} mode)" if args.stack == "plugin" else ""),
          flush=True)
    history = list(checkpoint["history"]) if checkpoint is not None else []
    if checkpoint is not None:
        print(f"resumed from {checkpoint['path']} after epoch {len(history)}", flush=True)
    first_epoch, job_start = len(history), time.perf_counter()
    profile = Profile(args, names) if args.profile else None
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
        samples, steps = sum(r["samples"] for r in results), sum(r["steps"] for r in results)
        if measured:
            if epoch == args.epochs - 1:
                profile.stop_perf()
            profile.add(epoch, before, profile.snapshot(), seconds, samples)
        measures = workload.evaluate(forwards, train, held_out)
        history.append({"epoch": epoch + 1, "loss": sum(r["loss_sum"] for r in results) / samples, **measures,
                        "samples": samples, "samples_per_s": samples / seconds, "seconds": seconds,
                        "bytes_per_step": sum(r["bytes"] for r in results) / steps})
        if args.check_gradients:
            history[-1]["gradients"] = workloads.gradient_totals([r["gradients"] for r in results], steps)
        print(f"epoch {epoch + 1:>2}/{args.epochs}  loss {history[-1]['loss']:.4f}  {workload.epoch_summary(measures)}  "
              f"samples/s {samples / seconds:,.0f}  ({seconds:.1f} s)", flush=True)
        if args.checkpoint_dir and ((epoch + 1) % args.checkpoint_every == 0 or epoch + 1 == args.epochs):
            train_checkpoint.save(args, shards, local_optimizers, history)
    if not history:
        raise SystemExit("train.py: no epoch to report")
    total = time.perf_counter() - job_start
    ran = history[first_epoch:] or history[-1:]
    train_seconds = sum(e["seconds"] for e in ran)
    metrics = {
        "workload": args.workload,
        **{k: v for k, v in history[-1].items()
           if k not in ("epoch", "loss", "samples", "samples_per_s", "seconds", "gradients")},
        "parameters": workload.parameters(args),
        "samples_per_s": sum(e["samples"] for e in ran) / train_seconds,
        "training_seconds": train_seconds,
        "wall_seconds": total,
        "resumed_after_epoch": first_epoch if checkpoint is not None else None,
        "config": {k: v for k, v in vars(args).items() if k != "port"},
        "train_samples": train_size,
        "held_out_samples": len(held_out[0]),
        "epochs": history,
    }
    if args.workload == "digits":
        metrics["layers"] = workload.layer_sizes(args)
    metrics["servers_memory"] = train_checkpoint.servers_memory(shards, local_optimizers, baseline_rss)
    written = write_outputs(metrics, args, workload.PLOT)
    if profile is not None:
        profile.write()
        print(f"profile: {os.path.join(args.profile, 'profile.json')}", flush=True)
    print(f"{workload.final_summary(metrics)}; {metrics['samples_per_s']:,.0f} samples/s; {total:.1f} s; "
          f"wrote {', '.join(written)}", flush=True)
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


def main(argv=None):
    args = parse_args(argv, description=__doc__)
    choose_paths(args)
    if "RANK" in os.environ:  # started by torchrun: each process is one worker
        world = int(os.environ["WORLD_SIZE"])
        if world < args.servers + 2:
            raise SystemExit(f"torchrun started {world} processes; the job needs at least {args.servers + 2} "
                             f"({args.servers} servers, 2 trainers)")
        args.trainers = world - args.servers
    return train_launch.start(args, worker_names(args), coordinate)


if __name__ == "__main__":
    sys.exit(main())
