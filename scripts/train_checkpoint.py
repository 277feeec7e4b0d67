"""Checkpoints of the main job (``scripts/train.py --checkpoint-dir DIR``), sharded, in
``torch.distributed.checkpoint`` (DCP) format.

Each server saves its own shard of the model and its part of every trainer's optimizer state
(the local optimizers that live on it: Adagrad's sums, Adam's moments, ...; the state of the
sparse optimizers is dense, one row per table row) with ``dcp.save`` into its own folder;
nothing goes through trainer 0. A checkpoint after epoch N is the folder ``DIR/epoch-N``:

    DIR/latest                   the name of the last complete checkpoint ("epoch-N")
    DIR/epoch-N/job.json         the job's settings, the epochs done and their history
    DIR/epoch-N/server<i>/       server i's DCP checkpoint: .metadata and its .distcp file
        model.<name>             its module's state_dict
        optimizer.trainer<k>.*   trainer k's local optimizer on server i (state_dict)

Atomic: the servers write into ``DIR/epoch-N.tmp-<pid>``, which is renamed to ``epoch-N`` once
every server has written (DCP syncs its files), and then ``latest`` is replaced (written to a
temporary file, renamed). A crash at any point leaves the previous checkpoint complete and
named by ``latest``. A job started again with the same folder resumes after the last saved
epoch, and refuses a checkpoint saved by another job.

DCP without a process group: the servers are RPC workers, not members of a
``torch.distributed`` process group, so each saves and loads alone, with ``no_dist=True``
(torch 2.13: a single-process save; DCP warns that it assumes one, which is silenced here).
DCP cannot store sparse tensors (``NotImplementedError: Cannot access storage of
SparseTensorImpl``); nothing saved here is sparse.
"""
import json
import os
import shutil
import warnings

import torch.distributed.rpc as rpc

# what a checkpoint must agree on with the job that resumes from it (and the workload's JOB_KEYS)
JOB_KEYS = ("workload", "trainers", "servers", "batch_size", "lr", "optimizer", "stack", "seed")
LATEST = "latest"


def _job_keys(args):
    import workloads

    return JOB_KEYS + workloads.get(args.workload).JOB_KEYS


def local_optimizer_rrefs(optimizer):
    """Runs on a trainer: ``{server name: RRef}`` of its DistributedOptimizer's local optimizer
    on each server (``NativeLocalOptimizer`` or ``PythonLocalOptimizer``; both have ``state_dict``
    and ``load_state_dict``). The plugin has no public accessor for them yet: this reads
    ``DistributedOptimizer._owners``, here only."""
    return {name: owner.rref for name, owner in optimizer._owners.items()}


def _dcp():
    import torch.distributed.checkpoint as dcp

    return dcp


def save_on_server(shard_rref, optimizer_rrefs, path):
    """Runs on a server: saves its shard and its local optimizers (``{trainer: RRef}``) with DCP."""
    state = {"model": shard_rref.local_value().state_dict(),
             "optimizer": {k: r.local_value().state_dict() for k, r in optimizer_rrefs.items()}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "torch.distributed is disabled ... single process"
        _dcp().save(state, checkpoint_id=path, no_dist=True)


def load_on_server(shard_rref, optimizer_rrefs, path):
    """Runs on a server: loads its shard and its local optimizers from its DCP checkpoint."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    import torch

    metadata = FileSystemReader(path).read_metadata()
    flat = {fqn: torch.empty(m.size, dtype=m.properties.dtype) if isinstance(m, TensorStorageMetadata) else None
            for fqn, m in metadata.state_dict_metadata.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _dcp().load(flat, checkpoint_id=path, no_dist=True)
    state = _unflatten(flat, metadata.planner_data)
    shard_rref.local_value().load_state_dict(state["model"])
    for k, r in optimizer_rrefs.items():
        saved = state["optimizer"][k]
        # DCP keeps dict keys as strings: torch.optim's state is keyed by parameter index
        r.local_value().load_state_dict({"state": {int(i): s for i, s in saved.get("state", {}).items()},
                                         "param_groups": saved["param_groups"]})


def _unflatten(flat, paths):
    """DCP's flat ``{fqn: value}`` back to nested dicts and lists, along the saved key paths."""
    root = {}
    for fqn, value in flat.items():
        node = root
        path = paths[fqn]
        for key, child in zip(path[:-1], path[1:]):
            node = node.setdefault(key, {})
        node[path[-1]] = value

    def lists(node):
        if not isinstance(node, dict):
            return node
        if node and all(isinstance(k, int) for k in node):
            return [lists(node[i]) for i in range(len(node))]
        return {k: lists(v) for k, v in node.items()}

    return lists(root)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(args, shards, optimizer_rrefs, history):
    """Writes checkpoint ``epoch-<len(history)>``: every server its shard and its local
    optimizers (``optimizer_rrefs``: per trainer, ``{server: RRef}``), at once; then the job."""
    name = f"epoch-{len(history)}"
    final = os.path.join(args.checkpoint_dir, name)
    tmp = f"{final}.tmp-{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    futs = []
    for i, rref in enumerate(shards):
        server = rref.owner().name
        mine = {f"trainer{k}": rrefs[server] for k, rrefs in enumerate(optimizer_rrefs)}
        futs.append(rpc.rpc_async(server, save_on_server, args=(rref, mine, os.path.join(tmp, f"server{i}"))))
    for f in futs:
        f.wait()
    with open(os.path.join(tmp, "job.json"), "w") as f:
        json.dump({"format": 2, "job": {k: getattr(args, k) for k in _job_keys(args)},
                   "epochs_done": len(history), "history": history}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(final):  # left by a job that stopped after the rename, before `latest`
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(args.checkpoint_dir)
    pointer = os.path.join(args.checkpoint_dir, LATEST)
    with open(f"{pointer}.tmp-{os.getpid()}", "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f"{pointer}.tmp-{os.getpid()}", pointer)
    _fsync_dir(args.checkpoint_dir)
    for entry in os.listdir(args.checkpoint_dir):  # older checkpoints, and leftovers of crashed saves
        if entry.startswith("epoch-") and entry != name:
            shutil.rmtree(os.path.join(args.checkpoint_dir, entry), ignore_errors=True)


def load(args):
    """The last checkpoint in ``--checkpoint-dir`` (``{"path", "epochs_done", "history"}``) or
    None; raises SystemExit when it belongs to another job (a different model, data split,
    optimizer, ...)."""
    if not args.checkpoint_dir or not os.path.exists(os.path.join(args.checkpoint_dir, LATEST)):
        return None
    with open(os.path.join(args.checkpoint_dir, LATEST)) as f:
        path = os.path.join(args.checkpoint_dir, f.read().strip())
    with open(os.path.join(path, "job.json")) as f:
        state = json.load(f)
    differ = {k: (state["job"].get(k), getattr(args, k)) for k in _job_keys(args) if state["job"].get(k) != getattr(args, k)}
    if differ:
        what = ", ".join(f"--{k.replace('_', '-')} {a!r} there, {b!r} here" for k, (a, b) in differ.items())
        raise SystemExit(f"train.py: {path} was saved by another job ({what}); use another --checkpoint-dir")
    return dict(state, path=path)


def restore(checkpoint, shards, optimizer_rrefs):
    """Every server loads its shard and its local optimizers from ``checkpoint`` (see :func:`load`)."""
    futs = []
    for i, rref in enumerate(shards):
        server = rref.owner().name
        mine = {f"trainer{k}": rrefs[server] for k, rrefs in enumerate(optimizer_rrefs)}
        path = os.path.join(checkpoint["path"], f"server{i}")
        futs.append(rpc.rpc_async(server, load_on_server, args=(rref, mine, path)))
    for f in futs:
        f.wait()


def memory_on_server(shard_rref, optimizer_rrefs):
    """Runs on a server: its resident memory (RSS, bytes; measured first), and the bytes of its
    shard's parameters and of its local optimizers' state tensors."""
    from train_profile import resident_bytes

    rss = resident_bytes()
    params = sum(p.numel() * p.element_size() for p in shard_rref.local_value().parameters())
    state = 0
    for r in optimizer_rrefs.values():
        for entry in r.local_value().state_dict()["state"].values():
            state += sum(t.numel() * t.element_size() for t in entry.values() if hasattr(t, "numel"))
    return {"rss_bytes": rss, "parameter_bytes": params, "optimizer_state_bytes": state}


def servers_memory(shards, optimizer_rrefs, baseline_rss):
    """``{server: memory_on_server(...)}`` with ``baseline_rss_bytes``, the server's RSS before
    its shard was built (``baseline_rss``: Python, torch and the RPC agent); the optimizer state
    is counted on the plugin stack only (``optimizer_rrefs`` None: torch's local optimizers are
    out of reach, counted as 0)."""
    out = {}
    for rref in shards:
        server = rref.owner().name
        mine = {f"trainer{k}": rrefs[server] for k, rrefs in enumerate(optimizer_rrefs or [])}
        out[server] = dict(rpc.rpc_sync(server, memory_on_server, args=(rref, mine)),
                           baseline_rss_bytes=baseline_rss[server])
    return out
