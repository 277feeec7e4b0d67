"""Graphs for smart mode, written once and run two ways.

Each case takes a ``net`` that either runs functions on other workers by RPC
(:class:`RpcNet`) or runs them right here (:class:`LocalNet`). The local run is the
reference: plain autograd in one process computes what a distributed backward pass
should. Leaves are registered by name in ``graphs.LEAVES`` on whichever worker creates
them.
"""
from typing import List

import torch
import torch.distributed.rpc as rpc
from torch import Tensor

from tests.support.graphs import LEAVES, make_leaf


class RpcNet:
    def sync(self, worker, fn, *args):
        return rpc.rpc_sync(worker, fn, args=args)

    def remote(self, worker, fn, *args):
        return rpc.remote(worker, fn, args=args)


class _LocalRRef:
    def __init__(self, value):
        self._value = value

    def to_here(self):
        return self._value


class LocalNet:
    def sync(self, worker, fn, *args):
        return fn(*args)

    def remote(self, worker, fn, *args):
        return _LocalRRef(fn(*args))


# --- functions run on workers ------------------------------------------------------------


def split_three(x: Tensor):
    """Returns three tensors computed from x; callers use only some of them."""
    return torch.sin(x), x * 2, torch.exp(x)


def leaf_times(x: Tensor, name: str, seed: int) -> Tensor:
    w = LEAVES.get(name)
    if w is None:
        w = make_leaf(name, x.shape, seed)
    return x * w


def ping_pong(x: Tensor, hops: List[str], seed: int, net_kind: str) -> Tensor:
    """x -> (local leaf) -> next worker in hops; on every hop an unused side RPC."""
    net = RpcNet() if net_kind == "rpc" else LocalNet()
    w = make_leaf(f"pp_{len(hops)}", x.shape, seed)
    y = torch.tanh(x * w)
    if not hops:
        return y
    # An RPC whose output goes nowhere: only smart mode can finish past it.
    net.sync(hops[0], leaf_times, y, f"unused_{len(hops)}", seed + 100)
    return net.sync(hops[0], ping_pong, y, hops[1:], seed + 1, net_kind)


# --- the cases: each returns (roots, extra) and runs on worker0 ----------------------------


def design_note(net):
    a = make_leaf("a", (3, 3), 1)
    b = make_leaf("b", (3, 3), 2)
    c = make_leaf("c", (3, 3), 3)
    d = net.sync("worker1", torch.add, a, b)
    net.sync("worker1", torch.mul, b, c)  # e: unused
    return [d.sum()]


def several_outputs(net):
    x = make_leaf("x", (4,), 1)
    s, doubled, e = net.sync("worker2", split_three, x)
    return [(s * doubled).sum()]  # e unused


def remote_fetched_unused(net):
    x = make_leaf("x", (3,), 1)
    used = net.remote("worker1", leaf_times, x, "used", 5).to_here()
    net.remote("worker2", leaf_times, x, "unused", 6).to_here()
    return [used.sum()]


def cycles(net):
    x = make_leaf("x", (5,), 1)
    kind = "rpc" if isinstance(net, RpcNet) else "local"
    y = net.sync("worker1", ping_pong, x, ["worker0", "worker1", "worker0"], 10, kind)
    return [y.sum()]


def nested_three_deep(net):
    x = make_leaf("x", (4,), 1)
    kind = "rpc" if isinstance(net, RpcNet) else "local"
    y = net.sync("worker1", ping_pong, x, ["worker2", "worker3"], 20, kind)
    return [y.pow(2).sum()]


SMART_CASES = {
    "design_note_example": design_note,
    "several_outputs_some_unused": several_outputs,
    "remote_to_here_unused": remote_fetched_unused,
    "cycles_between_workers": cycles,
    "nested_three_workers_deep": nested_three_deep,
}


def local_reference(case) -> dict:
    """Gradients of the case computed by plain autograd in this process, by leaf name."""
    LEAVES.clear()
    roots = SMART_CASES[case](LocalNet())
    names = list(LEAVES)
    leaves = [LEAVES[n] for n in names]
    grads = torch.autograd.grad(roots, leaves, allow_unused=True)
    return {n: g for n, g in zip(names, grads) if g is not None}
