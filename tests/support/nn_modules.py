"""Modules for the remote-module tests (plugin.nn), importable by every worker, and the
owner-side helpers the tests call by RPC."""
from typing import Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

import plugin.autograd


class MLP(nn.Module):
    """Linear layers with ReLU and a residual addition."""

    def __init__(self, sizes=(6, 16, 16, 4), seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        h = torch.relu(self.layers[0](x))
        h = h + torch.relu(self.layers[1](h))  # residual
        return self.layers[2](h)


class ConvNet(nn.Module):
    """Convolution, BatchNorm (its buffers update in train mode), ReLU, pooling, flatten with a
    dynamic batch (a sym_size node), dropout-free head; no bias before the BatchNorm."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        h = F.avg_pool2d(torch.tanh(self.conv2(h)), 1)
        return self.fc(h.view(h.shape[0], -1))


class TwoTowers(nn.Module):
    """Several inputs (one nested) and outputs: an embedding, LayerNorm, GELU, a BatchNorm1d,
    a registered constant buffer, a no_grad region, and a tuple of outputs."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(4)
        self.dense = nn.Linear(5, 4)
        self.bn = nn.BatchNorm1d(4)
        self.register_buffer("scale", torch.tensor([1.0, 0.5, 2.0, -1.0]))

    def forward(self, ids, pair):
        a, b = pair
        e = self.ln(self.emb(ids).sum(1))
        d = F.gelu(self.bn(self.dense(torch.cat([a, b], dim=1))))
        with torch.no_grad():
            gate = torch.sigmoid(d.mean(1, keepdim=True))
        out = (e + d) * self.scale * gate
        return out, (d.sum(1), e)


class Splits(nn.Module):
    """A list result (split) and integer arithmetic on a dynamic size."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        parts = torch.split(self.fc(x), 2, dim=1)
        n = x.shape[0]
        return torch.cat([parts[0] * 2, parts[2] - parts[1]], dim=1).reshape(n * 2, -1)


class PythonOpModule(nn.Module):
    """Calls an operator whose kernel is written in Python (torch.library.custom_op)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return torch.ops.gilfree_tests.twice(self.fc(x))


class DataDependent(nn.Module):
    """Control flow on a tensor's value: torch.export refuses it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


class Mixed(nn.Module):
    """Non-tensor arguments and results: an int, a float, a str with a default, a keyword-only
    flag, None, a dict of tensors and a list; returns a dict holding a tensor, an int from the
    batch size (a symbolic int), the str, a float and a nested tuple."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(6, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x, times: int, scale: float = 0.5, word: str = "sum", extra=None, *, parts=None,
                flip: bool = False):
        h = self.bn(self.fc(x)) * scale
        for _ in range(times):
            h = torch.tanh(h)
        if extra is not None:
            h = h + extra["bias"] * extra["weights"][0]
        if parts is not None:
            h = h + sum(parts)
        if flip:
            h = -h
        total = h.sum(1) if word == "sum" else h.amax(1)
        return {"out": h, "rows": x.shape[0], "word": word, "scale": scale, "pair": (total, [times, None])}


class Identity3(nn.Module):
    """torch's RemoteModule suite's module: forward(tensor, number, word="default") returns
    (word, number, tensor), the tensor an input."""

    def __init__(self, first_arg=0, first_kwarg=-1):
        super().__init__()
        self.param1 = nn.Parameter(torch.ones(1))

    def forward(self, tensor, number: int, word: str = "default"):
        return word, number, tensor


def first_forwards(remote, seed: int) -> list:
    """On a trainer: the first forward of the pickled module (a key no one called yet), its output."""
    torch.manual_seed(seed)
    return [remote(torch.randn(3, 6), 2, word="max").get("out")]


@torch.library.custom_op("gilfree_tests::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _twice_fake(x):
    return torch.empty_like(x)


def _twice_backward(ctx, grad):
    return grad * 2


_twice.register_autograd(_twice_backward)


# --- owner-side helpers (called by RPC with the module's RRef) ---------------------------------


def state(module_rref) -> Dict[str, torch.Tensor]:
    """Copies of the module's parameters and buffers."""
    return {k: v.detach().clone() for k, v in module_rref.local_value().state_dict().items()}


def load(module_rref, values: Dict[str, torch.Tensor]) -> None:
    """Writes values into the module's parameters and buffers in place (a step's way: the
    version counters move)."""
    with torch.no_grad():
        for k, v in module_rref.local_value().state_dict().items():
            v.copy_(values[k])


def engine_gradients(context_id: int, engine: str) -> Dict[torch.Tensor, torch.Tensor]:
    """The gradients in the context on this worker by the engine that ran the backward pass:
    ``"plugin"``'s (``plugin.autograd.get_gradients``) or ``"torch"``'s (dist_autograd's)."""
    if engine == "plugin":
        return plugin.autograd.get_gradients(context_id)
    assert engine == "torch", engine
    import torch.distributed.autograd as dist_autograd

    return dist_autograd.get_gradients(context_id)


def parameter_gradients(module_rref, context_id: int, engine: str) -> List[torch.Tensor]:
    """The gradient of each parameter in the context on this worker (None where none): the
    plugin's engine's, or torch's dist_autograd's."""
    grads = engine_gradients(context_id, engine)
    return [grads.get(p) for p in module_rref.local_value().parameters()]


def backward_input_gradient(engine: str, context_id: int, loss: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Runs the backward pass of ``context_id`` from ``loss`` by ``engine`` (``"plugin"``:
    ``plugin.autograd.backward``; ``"torch"``: ``dist_autograd.backward``), then reads the input
    ``x``'s gradient from that engine's store (:func:`engine_gradients`)."""
    if engine == "plugin":
        plugin.autograd.backward(context_id, [loss])
    else:
        assert engine == "torch", engine
        import torch.distributed.autograd as dist_autograd

        dist_autograd.backward(context_id, [loss])
    return engine_gradients(context_id, engine)[x]


def has_context(context_id: int) -> bool:
    """Whether this worker knows the distributed autograd context."""
    import torch.distributed.autograd as dist_autograd

    try:
        dist_autograd._retrieve_context(context_id)
        return True
    except RuntimeError:
        return False


# --- trainers (called by RPC on the trainer workers) -------------------------------------------


def iteration(remote, inputs, lr: float, optimizer: str = "Adam", foreach=None) -> float:
    """One whole training iteration of this trainer on the remote module: forward, the plugin's
    backward pass, a DistributedOptimizer step (torch.optim.<optimizer>(lr=lr); foreach=True makes
    the owner step in Python); returns the loss."""
    import torch.distributed.autograd as dist_autograd
    from plugin.optim import DistributedOptimizer

    kwargs = {} if foreach is None else {"foreach": foreach}
    opt = DistributedOptimizer(getattr(torch.optim, optimizer), remote.remote_parameters(), lr=lr, **kwargs)
    with dist_autograd.context() as ctx:
        loss = remote(*inputs).pow(2).mean()
        plugin.autograd.backward(ctx, [loss])
        opt.step(ctx)
    return loss.item()


def train(remote, seed: int, steps: int, lr: float) -> dict:
    """`steps` iterations of this trainer (its own optimizer, its own data); the losses."""
    import torch.distributed.autograd as dist_autograd
    from plugin.optim import DistributedOptimizer

    generator = torch.Generator().manual_seed(seed)
    opt = DistributedOptimizer(torch.optim.Adam, remote.remote_parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 6, generator=generator)
        target = x[:, :4].sum(1, keepdim=True).expand(8, 4)
        with dist_autograd.context() as ctx:
            loss = (remote(x) - target).pow(2).mean()
            plugin.autograd.backward(ctx, [loss])
            opt.step(ctx)
        losses.append(loss.item())
    return {"losses": losses}


class Uniform(nn.Module):
    """y = x @ W.T + b with every weight and bias equal to one value k (set by `write_uniform`):
    a forward that read half of one write and half of another gives rows of mixed values."""

    def __init__(self, n=64):
        super().__init__()
        self.a = nn.Linear(n, n)
        self.b = nn.Linear(n, n)
        with torch.no_grad():
            for p in self.parameters():
                p.fill_(0.0)

    def forward(self, x):
        return self.b(self.a(x))


def write_uniform(module_rref, values: List[float], pause_s: float) -> int:
    """Writes each of `values` into every parameter, holding the parameters' locks (as the
    library's optimizer steps do), pausing between parameters and between two values; returns
    the writes made."""
    import time

    from plugin import ops

    params = list(module_rref.local_value().parameters())
    lock = ops.new_step_lock(params)
    for k in values:
        with ops._holding(lock):
            with torch.no_grad():
                for p in params:
                    p.fill_(k)
                    time.sleep(pause_s)
        time.sleep(4 * pause_s)  # between two steps, as a trainer's iteration leaves
    return len(values)


class Fuzzed(nn.Module):
    """Two inputs tied by their first dimension: features (B x 6, float32) and row ids (B, int64,
    each below 10: an embedding's index)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(6, 4)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x, ids):
        return torch.tanh(self.fc(x)) + self.emb(ids)


def forwards(remote, times: int, seed: int) -> int:
    """`times` forwards of the remote module (outside any context) on random 3 x 8 x 8 images."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(times):
        remote(torch.randn(4, 3, 8, 8, generator=generator))
    return times


class DoubleNorm(nn.Module):
    """One BatchNorm applied twice in a forward: the second update of its statistics takes the
    first update's result (the training IR chains in-place ops on a buffer)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(torch.relu(self.bn(self.conv(x)))).mean((2, 3))


_HOLDER = {}


def hold_gil(seconds: float) -> float:
    """Starts a thread that holds this process's GIL for `seconds` (usleep through ctypes.PyDLL:
    the call keeps the GIL) and returns when the thread will let it go (time.time())."""
    import ctypes
    import threading
    import time

    usleep = ctypes.PyDLL(None).usleep
    until = time.time() + 0.2 + seconds

    def hold():
        time.sleep(0.2)
        while time.time() < until:
            usleep(50_000)

    threading.Thread(target=hold, daemon=True).start()
    return until


def owner_training(module_rref) -> bool:
    """The owner's module's mode."""
    return module_rref.local_value().training
