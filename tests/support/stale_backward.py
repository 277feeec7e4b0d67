"""Worker-side helpers for the stale-backward tests (tests/optim/test_version_counters.py): an
``nn.Linear`` owned by one worker, a pickled Python forward of it called by the trainers, and a
second trainer's whole iteration (forward, backward, a DistributedOptimizer's step), run on its
own worker."""
from typing import Dict, List

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch import Tensor
from torch.distributed.rpc import RRef

# name -> the owner's module
MODULES: Dict[str, torch.nn.Linear] = {}


def make_linear(name: str, seed: int) -> List[RRef]:
    """On the owner: a 4 -> 3 ``nn.Linear`` (float64); RRefs to its weight and bias."""
    torch.manual_seed(seed)
    MODULES[name] = torch.nn.Linear(4, 3, dtype=torch.float64)
    return [RRef(p) for p in MODULES[name].parameters()]


def forward(name: str, x: Tensor) -> Tensor:
    """On the owner: the module's forward (what a trainer's pickled Python forward runs there);
    autograd saves the weight for the input's gradient."""
    return MODULES[name](x)


def versions(name: str) -> List[int]:
    """On the owner: the parameters' version counters."""
    return [p._version for p in MODULES[name].parameters()]


def trainer_iteration(owner: str, name: str, rrefs: List[RRef], optimizer_class: type, kwargs: dict, engine: str) -> None:
    """On a second trainer: a whole iteration over the owner's module, stepping it with a
    DistributedOptimizer of ``optimizer_class`` (the engine: ``"plugin"`` or ``"torch"``), on a
    thread of its own (outside the caller's distributed autograd context, which torch made
    this RPC thread's)."""
    import threading

    import plugin.autograd
    from plugin.optim import DistributedOptimizer

    errors = []

    def iteration():
        try:
            optimizer = DistributedOptimizer(optimizer_class, rrefs, **kwargs)
            with dist_autograd.context() as ctx:
                loss = rpc.rpc_sync(owner, forward, args=(name, torch.ones(2, 4, dtype=torch.float64))).sum()
                if engine == "plugin":
                    plugin.autograd.backward(ctx, [loss])
                else:
                    dist_autograd.backward(ctx, [loss])
                optimizer.step(ctx)
        except BaseException as e:  # noqa: BLE001 (raised on the caller's thread)
            errors.append(e)

    thread = threading.Thread(target=iteration)
    thread.start()
    thread.join(timeout=120)
    if errors:
        raise errors[0]
