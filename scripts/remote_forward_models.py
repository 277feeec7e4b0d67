"""The models of scripts/bench_remote_forward.py, in a module of their own so that every worker
(and torch's RemoteModule, which imports a module's TorchScript interface by name) can import
them: an MLP and a small convolutional net, each written as for local training, with the
digits workload's ``snapshot`` switch for a pickled Python forward (clone every weight on every
call, so that a backward pass after another trainer's step does not fail autograd's in-place
check)."""
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class MLP(nn.Module):
    """[256, 512, 512, 10] with ReLU between the layers (0.4M parameters)."""

    def __init__(self, snapshot: bool = False, sizes: Tuple[int, ...] = (256, 512, 512, 10)):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:])])
        self.snapshot = snapshot

    def forward(self, x: Tensor) -> Tensor:
        n = len(self.layers)
        for i, layer in enumerate(self.layers):
            if self.snapshot:
                x = F.linear(x, layer.weight.clone(), layer.bias.clone())
            else:
                x = layer(x)
            if i < n - 1:
                x = torch.relu(x)
        return x


class ConvNet(nn.Module):
    """Two 3x3 convolutions (3 -> 16 -> 32 channels) with ReLU and 2x2 max pooling on 16x16
    images, then a linear layer to 10 classes (10k parameters). Its parameters are its own
    attributes (no Optional bias), so that TorchScript scripts it for torch's RemoteModule."""

    def __init__(self, snapshot: bool = False):
        super().__init__()
        torch.manual_seed(0)
        conv1, conv2, fc = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1), nn.Linear(32 * 4 * 4, 10)
        self.w1, self.b1 = nn.Parameter(conv1.weight.detach()), nn.Parameter(conv1.bias.detach())
        self.w2, self.b2 = nn.Parameter(conv2.weight.detach()), nn.Parameter(conv2.bias.detach())
        self.w3, self.b3 = nn.Parameter(fc.weight.detach()), nn.Parameter(fc.bias.detach())
        self.snapshot = snapshot

    def _w(self, t: Tensor) -> Tensor:
        return t.clone() if self.snapshot else t

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(torch.relu(F.conv2d(x, self._w(self.w1), self._w(self.b1), padding=1)), 2)
        x = F.max_pool2d(torch.relu(F.conv2d(x, self._w(self.w2), self._w(self.b2), padding=1)), 2)
        return F.linear(x.flatten(1), self._w(self.w3), self._w(self.b3))


MODELS = {"mlp": (MLP, (32, 256)), "conv": (ConvNet, (32, 3, 16, 16))}  # class, input shape


class WithOptions(nn.Module):
    """A model of MODELS called with non-tensor arguments (a float, a str) and returning a dict
    with an int: the ``mixed`` forward of bench_remote_forward.py (plugin.nn.RemoteModule only)."""

    def __init__(self, model: str, snapshot: bool = False):
        super().__init__()
        self.inner = MODELS[model][0](snapshot)

    def forward(self, x: Tensor, scale: float = 1.0, word: str = "out"):
        return {word: self.inner(x) * scale, "rows": x.shape[0]}


class ForwardInterface:
    """The TorchScript interface torch's RemoteModule needs to script a module's forward (its only
    GIL-free path); None where torch.jit's entry points raise (TorchScript removed)."""

    def forward(self, x: Tensor) -> Tensor:  # noqa: D102
        pass


try:
    ForwardInterface = torch.jit.interface(ForwardInterface)
except Exception:  # noqa: BLE001 (torch.jit removed)
    ForwardInterface = None
