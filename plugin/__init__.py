"""gilfree-rpc: GIL-free distributed autograd and optimizers over ``torch.distributed.rpc``.

Importing this package loads the op library that registers ``torch.ops.gilfree_rpc`` and
the functions other workers call by RPC (the engine's messages, the distributed
optimizer's steps, gradient clipping; ``plugin/csrc/rpc/rpc_functions.h``), which run natively,
without the GIL and without TorchScript. Every worker taking part in a backward pass or an
optimizer step must import it (or load the library).
"""
from typing import Dict as _Dict

from ._library import load_library as _load_library

_load_library()

from . import ops  # noqa: E402
from . import autograd  # noqa: E402
from . import optim  # noqa: E402,F401
from . import embedding  # noqa: E402,F401

__all__ = ["autograd", "debug_info", "embedding", "ops"]


def debug_info() -> _Dict[str, int]:
    """This worker's counters, of every room (one op, ``gilfree_rpc::_debug_info``; each room
    registers its own: ``plugin/csrc/debug_counters.h``). For tests and monitoring.

    Returns:
        Dict[str, int]: the engine's ``num_live_contexts`` (contexts whose gradients the
        engine holds; released contexts are dropped before counting), ``num_running_passes``
        (backward passes under way on this worker), ``num_stored_gradients`` (leaf gradients
        held), ``num_split_nodes`` (backward functions this worker has run in two halves since
        it started, the outputs bound for other workers first; see the engine guide),
        ``num_torch_contexts`` (torch's distributed autograd contexts alive on this worker),
        ``num_failed_workers`` (workers this one found dead: the agent could not reach them)
        and ``num_contexts_released_for_failed_workers`` (torch contexts of those workers
        released here; see ``docs/failures.md``); the optimizer's ``num_param_locks`` (live
        per-parameter locks, shared with the remote modules) and ``num_prepared_steps``
        (steps parked between their two phases); the remote modules' ``num_native_modules``
        (native modules alive on this worker), ``num_native_forwards`` and ``num_snapshots``
        (their forwards and parameter snapshots since each was made, summed over the live
        ones). One module's own counters: ``RemoteModule``'s owner keeps them per module.

    Raises nothing.
    """
    return dict(ops._debug_info())
