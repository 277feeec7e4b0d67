"""Worker-side helpers for the tests of compiled models through the plugin's engine: a small
module per name on the worker, run eagerly or through ``torch.compile``."""
from typing import Dict, List, Tuple

import torch
from torch import Tensor, nn
from torch.distributed.rpc import RRef

import plugin.autograd

# name -> (the module, what the forward pass calls: the module or its compiled form)
MODULES: Dict[str, Tuple[nn.Module, nn.Module]] = {}


def make_module(name: str, seed: int, compiled: bool, sizes=(6, 8, 3)) -> List[RRef]:
    gen = torch.Generator().manual_seed(seed)
    module = nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.Tanh(), nn.Linear(sizes[1], sizes[2])).double()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    MODULES[name] = (module, torch.compile(module) if compiled else module)
    return [RRef(p) for p in module.parameters()]


def forward(name: str, x: Tensor) -> Tensor:
    return MODULES[name][1](x)


def gradients(name: str, context_id: int) -> List[Tensor]:
    """The plugin engine's gradients of the module's parameters in the context, on this worker."""
    grads = plugin.autograd.get_gradients(context_id)
    return [grads[p] for p in MODULES[name][0].parameters()]


def parameters(name: str) -> List[Tensor]:
    return [p.detach().clone() for p in MODULES[name][0].parameters()]
