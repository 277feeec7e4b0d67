"""Distributed autograd graphs shared by the engine tests.

Each case runs a forward pass across workers inside a distributed autograd context and
returns its roots. Leaves are created from fixed seeds and registered by name in the
worker-local ``LEAVES`` dict, so that a graph built twice (once for torch's engine, once
for ours) has equal leaves, and the gradients of each worker can be collected by name.
"""
import threading
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor

import plugin

# name -> leaf tensor, on each worker
LEAVES: Dict[str, Tensor] = {}


def make_leaf(name: str, shape, seed: int, dtype=torch.float64, requires_grad=True) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    t = torch.rand(shape, generator=gen, dtype=dtype).requires_grad_(requires_grad)
    LEAVES[name] = t
    return t


def leaves_a_b(shape) -> Tuple[Tensor, Tensor]:
    """Leaves "a" (seed 1) and "b" (seed 2) of ``shape``, float64, requiring grad."""
    return make_leaf("a", shape, 1), make_leaf("b", shape, 2)


def clear_leaves() -> None:
    LEAVES.clear()


def collect_gradients(context_id: int, engine: str) -> Dict[str, Tensor]:
    """This worker's gradients in the context, by leaf name (engine: "torch" or "plugin")."""
    if engine == "torch":
        grads = dist_autograd.get_gradients(context_id)
    else:
        grads = plugin.autograd.get_gradients(context_id)
    return {name: grads[t] for name, t in LEAVES.items() if t in grads}


# --- functions run on workers by RPC ---------------------------------------------------


def udf_mul_add(a: Tensor, b: Tensor) -> Tensor:
    return a * b + b


def script_fn(a: Tensor, b: Tensor) -> Tensor:
    return torch.tanh(a) * b


def scripted_plugin_backward(context_id: int, roots: List[Tensor], mode: str) -> None:
    plugin.autograd.backward(context_id, roots, False, mode)


def scripted_torch_backward(context_id: int, roots: List[Tensor]) -> None:
    dist_autograd.backward(context_id, roots)


# TorchScript is optional: the functions above are scripted when a test first asks (the tests
# that do are marked `torchscript`), on the caller and, for an RPC target, on the callee.
_SCRIPTED: Dict[str, Any] = {}


def to_torchscript(name: str):
    """The TorchScript function of this module's function ``name`` (compiled on first use)."""
    if name not in _SCRIPTED:
        _SCRIPTED[name] = torch.jit.script(globals()[name])
    return _SCRIPTED[name]


def compile_scripted(name: str) -> None:
    """Run by RPC on a worker that a scripted function is sent to: compiles it there."""
    to_torchscript(name)


def remote_leaf(name: str, shape, seed: int) -> Tensor:
    return make_leaf(name, shape, seed)


def remote_weight_matmul(x: Tensor, name: str, seed: int) -> Tensor:
    w = LEAVES.get(name)
    if w is None:
        w = make_leaf(name, (x.shape[-1], 3), seed)
    return torch.relu(x @ w)


def nested_chain(x: Tensor, hops: List[str], seed: int) -> Tensor:
    """Scales by a local leaf, then forwards to the next worker in ``hops``."""
    me = rpc.get_worker_info().name
    w = make_leaf(f"chain_{me}_{len(hops)}", x.shape, seed)
    y = torch.sin(x) * w
    if hops:
        return rpc.rpc_sync(hops[0], nested_chain, args=(y, hops[1:], seed + 1))
    return y


def round_trip(x: Tensor, name: str, seed: int) -> Tensor:
    w = LEAVES.get(name)
    if w is None:
        w = make_leaf(name, x.shape, seed)
    return x * w + 0.5 * x


def embedding_lookup(indices: Tensor, name: str, seed: int) -> Tensor:
    emb = LEAVES.get(name)
    if emb is None:
        torch.manual_seed(seed)
        emb = torch.nn.Embedding(10, 4, sparse=True).double()
        LEAVES[name] = emb.weight
    return torch.nn.functional.embedding(indices, LEAVES[name], sparse=True)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * grad


def custom_function_udf(x: Tensor) -> Tensor:
    return Cube.apply(x) * 2


class ScaleBy(torch.autograd.Function):
    """x * w with a hand-written backward: a custom function with two differentiable inputs."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad * w, grad * x


def custom_function_two_inputs_udf(x: Tensor, name: str, seed: int) -> Tensor:
    """A custom function of a tensor that came by RPC and of a local leaf."""
    w = make_leaf(name, x.shape, seed)
    return torch.sin(ScaleBy.apply(x, w))


def mixed_dtype_udf(a: Tensor, b: Tensor) -> Tensor:
    return a.double() * b


# --- the cases -------------------------------------------------------------------------
# Each takes the context id and returns the roots; it runs on worker0 inside the context.


def case_builtin_rpc_sync(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((3, 3))
    c = rpc.rpc_sync("worker1", torch.add, args=(a, b))
    return [(c * a).sum()]


def case_builtin_rpc_async(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((4,))
    fut1 = rpc.rpc_async("worker1", torch.mul, args=(a, b))
    fut2 = rpc.rpc_async("worker2", torch.sub, args=(a, b))
    return [(fut1.wait() * fut2.wait()).sum()]


def case_python_udf(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((2, 5))
    return [rpc.rpc_sync("worker1", udf_mul_add, args=(a, b)).pow(2).sum()]


def case_torchscript_function(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((6,))
    rpc.rpc_sync("worker2", compile_scripted, args=("script_fn",))
    return [rpc.rpc_sync("worker2", to_torchscript("script_fn"), args=(a, b)).sum()]


def case_remote_to_here(ctx: int) -> List[Tensor]:
    rref = rpc.remote("worker1", remote_leaf, args=("r", (3,), 7))
    x = make_leaf("x", (3,), 3)
    return [(rref.to_here() * x).sum()]


def case_nested(ctx: int) -> List[Tensor]:
    x = make_leaf("x", (5,), 4)
    y = rpc.rpc_sync("worker1", nested_chain, args=(x, ["worker2", "worker3"], 10))
    return [y.sum()]


def case_self_rpc(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((3,))
    c = rpc.rpc_sync("worker0", udf_mul_add, args=(a, b))
    return [(c * c).sum()]


def case_round_trips(ctx: int) -> List[Tensor]:
    x = make_leaf("x", (8,), 5)
    for i in range(4):
        x = rpc.rpc_sync("worker1", round_trip, args=(x, f"w{i}", 20 + i))
        x = torch.cos(x)
    return [x.sum()]


def case_same_tensor_twice(ctx: int) -> List[Tensor]:
    a = make_leaf("a", (4,), 1)
    y1 = rpc.rpc_sync("worker1", torch.mul, args=(a, a))
    y2 = rpc.rpc_sync("worker1", torch.add, args=(a, a))
    return [(y1 * y2).sum()]


def case_no_requires_grad(ctx: int) -> List[Tensor]:
    a = make_leaf("a", (4,), 1)
    b = make_leaf("b", (4,), 2, requires_grad=False)
    y = rpc.rpc_sync("worker1", torch.mul, args=(a, b))
    z = rpc.rpc_sync("worker2", torch.add, args=(b, b))  # no send function at all
    return [(y * z).sum()]


def case_several_roots(ctx: int) -> List[Tensor]:
    a, b = leaves_a_b((3,))
    y = rpc.rpc_sync("worker1", torch.mul, args=(a, b))
    z = rpc.rpc_sync("worker2", torch.add, args=(a, b))
    return [y.sum(), (z * z).sum(), (y * z).mean()]


def case_mixed_dtypes(ctx: int) -> List[Tensor]:
    a = make_leaf("a", (4,), 1, dtype=torch.float32)
    b = make_leaf("b", (4,), 2, dtype=torch.float64)
    return [rpc.rpc_sync("worker1", mixed_dtype_udf, args=(a, b)).sum()]


def case_sparse_embedding(ctx: int) -> List[Tensor]:
    indices = torch.tensor([1, 3, 3, 7])
    rows = rpc.rpc_sync("worker1", embedding_lookup, args=(indices, "emb", 11))
    w = make_leaf("w", (4, 4), 3)
    return [(rows * w).sum()]


def case_custom_function(ctx: int) -> List[Tensor]:
    a = make_leaf("a", (5,), 1)
    y = rpc.rpc_sync("worker2", custom_function_udf, args=(a,))
    return [Cube.apply(y).sum()]


def case_custom_function_two_inputs(ctx: int) -> List[Tensor]:
    x = make_leaf("x", (6,), 1)
    y = rpc.rpc_sync("worker1", custom_function_two_inputs_udf, args=(x, "w_custom", 41))
    return [y.sum()]


def case_mlp_shards(ctx: int) -> List[Tensor]:
    x = make_leaf("x", (4, 6), 1)
    h = rpc.rpc_sync("worker1", remote_weight_matmul, args=(x, "w1", 31))
    h = rpc.rpc_sync("worker2", remote_weight_matmul, args=(h, "w2", 32))
    return [h.sum()]


CASES = {
    "builtin_rpc_sync": case_builtin_rpc_sync,
    "builtin_rpc_async": case_builtin_rpc_async,
    "python_udf": case_python_udf,
    "torchscript_function": case_torchscript_function,
    "remote_to_here": case_remote_to_here,
    "nested_three_workers": case_nested,
    "worker_calls_itself": case_self_rpc,
    "several_round_trips": case_round_trips,
    "same_tensor_sent_twice": case_same_tensor_twice,
    "tensors_without_grad": case_no_requires_grad,
    "several_roots": case_several_roots,
    "mixed_dtypes": case_mixed_dtypes,
    "sparse_embedding": case_sparse_embedding,
    "custom_autograd_function": case_custom_function,
    "custom_function_two_inputs": case_custom_function_two_inputs,
    "mlp_shards": case_mlp_shards,
}


def run_case(name: str, engine: str, mode: str = "fast", scripted: bool = False):
    """Builds case ``name`` and runs backward with ``engine``; returns {worker: {leaf: grad}}."""
    workers = [info.name for info in rpc._get_current_rpc_agent().get_worker_infos()]
    for w in workers:
        rpc.rpc_sync(w, clear_leaves)
    with dist_autograd.context() as ctx:
        roots = CASES[name](ctx)
        if engine == "torch":
            (to_torchscript("scripted_torch_backward") if scripted else dist_autograd.backward)(ctx, roots)
        elif scripted:
            to_torchscript("scripted_plugin_backward")(ctx, roots, mode)
        else:
            plugin.autograd.backward(ctx, roots, mode=mode)
        return {w: rpc.rpc_sync(w, collect_gradients, args=(ctx, engine)) for w in sorted(workers)}


# --- hooks, failures and long-running functions -----------------------------------------

HOOK_CALLS: Dict[str, int] = {}


def count_hook(name: str, scale: float):
    def hook(grad):
        HOOK_CALLS[name] = HOOK_CALLS.get(name, 0) + 1
        return grad * scale

    return hook


def hook_calls() -> Dict[str, int]:
    return dict(HOOK_CALLS)


def clear_hook_calls() -> None:
    HOOK_CALLS.clear()


def udf_with_hooks(x: Tensor, seed: int) -> Tensor:
    """On the callee: a hook on an intermediate tensor and on a leaf."""
    w = make_leaf("remote_w", x.shape, seed)
    w.register_hook(count_hook("remote_leaf_hook", 0.5))
    y = x * w
    y.register_hook(count_hook("remote_intermediate_hook", 3.0))
    return torch.sin(y)


FAIL_BACKWARD = {"on": False}


def set_fail_backward(on: bool) -> None:
    FAIL_BACKWARD["on"] = on


def identity_with_backward_action(name: str, doc: str, action) -> type:
    """An ``autograd.Function`` class called ``name`` (its node: ``<name>Backward``): forward is
    a clone of its input; backward calls ``action()`` (which may raise or block), then passes
    the gradient on."""

    def forward(ctx, x):
        return x.clone()

    def backward(ctx, grad):
        action()
        return grad

    return type(name, (torch.autograd.Function,), {
        "__doc__": doc, "forward": staticmethod(forward), "backward": staticmethod(backward),
    })


def _fail_if_asked() -> None:
    if FAIL_BACKWARD["on"]:
        raise ValueError("boom in FailingBackward")


FailingBackward = identity_with_backward_action(
    "FailingBackward", "Identity whose backward raises while FAIL_BACKWARD is on (on the worker running it).",
    _fail_if_asked,
)


def udf_failing_backward(x: Tensor) -> Tensor:
    return FailingBackward.apply(x) * 2


RELEASE_BACKWARD = threading.Event()
BlockingBackward = identity_with_backward_action(
    "BlockingBackward", "Identity whose backward waits until RELEASE_BACKWARD is set (at most 30 s).",
    lambda: RELEASE_BACKWARD.wait(timeout=30),
)


def udf_blocking_backward(x: Tensor) -> Tensor:
    RELEASE_BACKWARD.clear()
    return BlockingBackward.apply(x)


def release_blocked_backward() -> None:
    RELEASE_BACKWARD.set()


def release_context_here(context_id: int) -> None:
    """Drops torch's context on this worker, as if it had never heard of it."""
    dist_autograd._release_context(context_id)


def engine_debug_info() -> Dict[str, int]:
    return plugin.debug_info()


def resident_memory() -> int:
    """This process's resident set in bytes, once glibc has returned the free memory its arenas
    keep (what is left is memory in use, not the allocator's cache)."""
    import ctypes
    import ctypes.util

    import psutil

    ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    return psutil.Process().memory_info().rss


def sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def train_and_hang(first: str, second: str) -> None:
    """A trainer (run on it by RPC) that holds two contexts on `first` and `second`: one
    after a forward pass only (kept open on another thread), one whose backward pass blocks
    in `second` (udf_blocking_backward) until released."""
    def forward_only():
        with dist_autograd.context():
            a = torch.rand(4, requires_grad=True)
            rpc.rpc_sync(first, torch.mul, args=(a, a))
            rpc.rpc_sync(second, torch.add, args=(a, a))
            threading.Event().wait(120)

    threading.Thread(target=forward_only, daemon=True).start()
    with dist_autograd.context() as ctx:
        a = torch.rand(4, requires_grad=True)
        b = rpc.rpc_sync(first, torch.mul, args=(a, a))
        c = rpc.rpc_sync(second, udf_blocking_backward, args=(b,))
        plugin.autograd.backward(ctx, [c.sum()])


class HookError(Exception):
    """An exception type that is not built in (it reaches the caller as a RuntimeError)."""


HOOK_ERRORS = {"value": ValueError, "key": KeyError, "custom": HookError}


def raising_hook(kind: str, text: str):
    def hook(*args):
        raise HOOK_ERRORS[kind](text)

    return hook


def udf_raising_tensor_hook(x: Tensor, kind: str, text: str) -> Tensor:
    """On the callee: a tensor hook that raises on an intermediate tensor."""
    y = x * 2
    y.register_hook(raising_hook(kind, text))
    return torch.sin(y)


def udf_raising_prehook(x: Tensor, kind: str, text: str) -> Tensor:
    """On the callee: a pre-hook (Node.register_prehook) that raises on a backward node."""
    y = x * 3
    y.grad_fn.register_prehook(raising_hook(kind, text))
    return torch.cos(y)
