"""Worker-side helpers for the native lookup tests (plugin.embedding): embedding tables that
live on a worker, by name."""
from typing import Dict, List

import torch
import torch.distributed.autograd
from torch import Tensor
from torch.distributed.rpc import RRef

import plugin.autograd
import plugin.embedding

TABLES: Dict[str, torch.nn.EmbeddingBag] = {}


def make_table(name: str, rows: int, dim: int, mode: str, seed: int) -> int:
    """A table here (float32, seeded), shared for native lookups; its handle."""
    torch.manual_seed(seed)
    TABLES[name] = torch.nn.EmbeddingBag(rows, dim, mode=mode, sparse=True)
    return plugin.embedding.share_embedding_bag(TABLES[name])


def weight(name: str) -> Tensor:
    return TABLES[name].weight.detach().clone()


def weight_rref(name: str) -> RRef:
    return RRef(TABLES[name].weight)


def python_lookup(name: str, inputs: Tensor, offsets: Tensor) -> Tensor:
    """The Python RPC way (torch's parameter-server tutorial): the module's forward."""
    return TABLES[name](inputs, offsets)


def gradients(context_id: int, names: List[str]) -> List[Tensor]:
    """The engine's gradient of each table in the context (sparse COO), or None."""
    grads = plugin.autograd.get_gradients(context_id)
    return [grads.get(TABLES[n].weight) for n in names]


def torch_gradients(context_id: int, names: List[str]) -> List[Tensor]:
    """torch's dist_autograd.get_gradients of each table in the context, or None."""
    grads = torch.distributed.autograd.get_gradients(context_id)
    return [grads.get(TABLES[n].weight) for n in names]


def share(module_kind: str) -> int:
    """share_embedding_bag of a module it must refuse (for the error tests)."""
    if module_kind == "dense":
        return plugin.embedding.share_embedding_bag(torch.nn.EmbeddingBag(4, 2, sparse=False))
    if module_kind == "padding":
        return plugin.embedding.share_embedding_bag(torch.nn.EmbeddingBag(4, 2, sparse=True, padding_idx=0))
    if module_kind == "max":
        return plugin.embedding.share_embedding_bag(torch.nn.EmbeddingBag(4, 2, mode="max", sparse=True))
    return plugin.embedding.share_embedding_bag(torch.nn.Linear(2, 2))
