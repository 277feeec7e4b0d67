"""The main job's workloads (``scripts/train.py --workload NAME``): what the servers hold, what
the trainers compute, the data and the held-out measure. Each module here provides:

* ``shard_specs(args)``: per server, the ``torch.nn.Module`` class it holds and its arguments;
* ``load_data(args)``: ``(train, held_out)``, each a tuple of tensors of one length, the
  target last;
* ``forward(shards, *inputs)``: the trainer's forward pass through the servers (RPC), the
  output and the tensor bytes the call sent and received; optionally ``forward_shards(args,
  shards)``: what that forward calls instead of the shards' RRefs (the digits workload's
  ``plugin.nn.RemoteModule`` of each shard);
* ``loss(output, target)``, ``evaluate(shards, train, held_out)`` (a dict of metrics) and
  ``parameters(args)`` (how many the servers hold);
* ``describe(...)`` and ``epoch_summary(...)``: the lines the job prints.

The helpers below are the parameter-server pattern both workloads use: a shard's module lives
on its server behind an RRef, and a trainer calls it by RPC.
"""
import time

import torch
import torch.distributed.rpc as rpc

from train_profile import TIMERS, add_time


def shard_forward(shard_rref, *inputs):
    """Runs on a server: its module's forward pass (under the caller's autograd context)."""
    start = time.perf_counter()
    y = shard_rref.local_value()(*inputs)
    add_time("server forward (in the Python function)", time.perf_counter() - start)
    return y


def shard_predict(shard_rref, *inputs):
    """Runs on a server: its module's forward pass without autograd (evaluation)."""
    with torch.no_grad():
        return shard_rref.local_value()(*inputs)


def shard_parameter_rrefs(shard_rref):
    """Runs on a server: an RRef to each parameter of its module (what the optimizers take)."""
    return [rpc.RRef(p) for p in shard_rref.local_value().parameters()]


def call_shard(shard, *inputs, predict=False):
    """The trainer's call of a shard's forward on its server: a ``plugin.nn.RemoteModule``'s native
    forward, or a Python RPC to the module behind an RRef. Its seconds go to ``forward RPC to
    <server>``."""
    from plugin.nn import RemoteModule

    start = time.perf_counter()
    if isinstance(shard, RemoteModule):
        owner = shard.on
        if predict:
            with torch.no_grad():
                y = shard(*inputs)
        else:
            y = shard(*inputs)
    else:
        owner = shard.owner().name
        y = rpc.rpc_sync(shard.owner(), shard_predict if predict else shard_forward, args=(shard, *inputs))
    if not predict:
        TIMERS[f"forward RPC to {owner}"] += time.perf_counter() - start
    return y


def call_shards_async(shard_rrefs, inputs_per_shard, predict=False):
    """The trainer's RPCs to several servers at once; returns their outputs, in order, with
    each server's seconds (from the first send to its answer) in ``forward RPC to <server>``."""
    start = time.perf_counter()
    fn = shard_predict if predict else shard_forward
    futs = [rpc.rpc_async(r.owner(), fn, args=(r, *inputs)) for r, inputs in zip(shard_rrefs, inputs_per_shard)]
    return wait_timed(shard_rrefs, futs, start, predict)


def wait_timed(shard_rrefs, futs, start, predict=False):
    """The values of ``futs`` (one call per shard, sent from ``start``, a ``time.perf_counter``
    reading), in order; unless ``predict``, each server's seconds from ``start`` to its answer
    go to ``forward RPC to <server>``."""
    out = []
    for r, f in zip(shard_rrefs, futs):
        out.append(f.wait())
        if not predict:
            TIMERS[f"forward RPC to {r.owner().name}"] += time.perf_counter() - start
    return out


def tensor_bytes(*tensors):
    """Bytes of the tensors' elements (what their values take on the wire, headers left out)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def get(name):
    """The workload module ``name`` (``digits`` or ``movielens``)."""
    import importlib

    return importlib.import_module(f"workloads.{name}")


def gradient_summary(stack, context_id):
    """Runs on a server: for each gradient of autograd context ``context_id`` here, its layout
    (``sparse_coo`` or ``strided``) and the bytes of its values (and of its indices, when
    sparse): what the optimizer steps."""
    if stack == "plugin":
        import plugin.autograd

        grads = plugin.autograd.get_gradients(context_id)
    else:
        import torch.distributed.autograd as dist_autograd

        grads = dist_autograd.get_gradients(context_id)
    out = []
    for g in grads.values():
        if g.layout == torch.sparse_coo:
            out.append(("sparse_coo", tensor_bytes(g._indices(), g._values())))
        else:
            out.append((str(g.layout).replace("torch.", ""), tensor_bytes(g)))
    return out


def add_gradient_summary(totals, shard_rrefs, stack, context_id):
    """The trainer's check (``--check-gradients``): adds every server's :func:`gradient_summary`
    of this step to ``totals`` (``{layout: [gradients, bytes]}``)."""
    futs = [rpc.rpc_async(r.owner(), gradient_summary, args=(stack, context_id)) for r in shard_rrefs]
    for f in futs:
        for layout, nbytes in f.wait():
            entry = totals.setdefault(layout, [0, 0])
            entry[0] += 1
            entry[1] += nbytes


def gradient_totals(per_trainer, steps):
    """The trainers' :func:`add_gradient_summary` totals of an epoch, per layout: gradients and
    bytes per step."""
    out = {}
    for totals in per_trainer:
        for layout, (count, nbytes) in totals.items():
            entry = out.setdefault(layout, {"gradients_per_step": 0.0, "bytes_per_step": 0.0})
            entry["gradients_per_step"] += count / steps
            entry["bytes_per_step"] += nbytes / steps
    return out
