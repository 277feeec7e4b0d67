"""Checkpoints of the main job (``scripts/train.py --checkpoint-dir DIR``).

Every server's shard and every trainer's optimizer state go to ``DIR/checkpoint.pt``,
atomically: into a temporary file in the same folder, flushed to disk, then renamed over the
previous checkpoint. A crash at any point leaves either the previous checkpoint or the new
one, never a partial file under that name. A job started again with the same folder resumes
after the last saved epoch, and refuses a checkpoint saved by another job.
"""
import os

import torch
import torch.distributed.rpc as rpc

CHECKPOINT = "checkpoint.pt"
# what a checkpoint must agree on with the job that resumes from it (and the workload's JOB_KEYS)
JOB_KEYS = ("workload", "trainers", "servers", "batch_size", "lr", "optimizer", "stack", "seed")


def _job_keys(args):
    import workloads

    return JOB_KEYS + workloads.get(args.workload).JOB_KEYS


def shard_state(shard_rref):
    return {k: v.clone() for k, v in shard_rref.local_value().state_dict().items()}


def shard_load(shard_rref, state):
    shard_rref.local_value().load_state_dict(state)


def save(args, shards, optimizer_states, history):
    """Writes the shards (fetched from the servers) and ``optimizer_states`` (one per trainer)."""
    state = {
        "format": 1,
        "job": {k: getattr(args, k) for k in _job_keys(args)},
        "epochs_done": len(history),
        "history": history,
        "shards": [rpc.rpc_sync(r.owner(), shard_state, args=(r,)) for r in shards],
        "optimizers": optimizer_states,
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


def load(args):
    """The checkpoint in ``--checkpoint-dir``, or None; raises SystemExit when it belongs to
    another job (a different model, data split, optimizer, ...)."""
    if not args.checkpoint_dir:
        return None
    path = os.path.join(args.checkpoint_dir, CHECKPOINT)
    if not os.path.exists(path):
        return None
    state = torch.load(path, weights_only=False)
    differ = {k: (state["job"].get(k), getattr(args, k)) for k in _job_keys(args) if state["job"].get(k) != getattr(args, k)}
    if differ:
        what = ", ".join(f"--{k.replace('_', '-')} {a!r} there, {b!r} here" for k, (a, b) in differ.items())
        raise SystemExit(f"train.py: {path} was saved by another job ({what}); use another --checkpoint-dir")
    return state


def restore_shards(shards, state):
    for rref, shard in zip(shards, state["shards"]):
        rpc.rpc_sync(rref.owner(), shard_load, args=(rref, shard))


def where(args):
    return os.path.join(args.checkpoint_dir, CHECKPOINT)
