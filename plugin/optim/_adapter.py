"""The steps that the Python and TorchScript local optimizers share, written once: how a caller's
step reaches them (their adapters to ``_owners.Owner``, the caller's one owner interface; the
native kind answers the same calls in C++). A subclass keeps ``_params`` (its parameters, in
order) and defines ``_apply_before(gradients, deadline_ms) -> int``, which applies the gradients
under the parameters' locks unless the deadline has passed (then ``LATE``; ``_status.py``), and
``prepare_step``.
"""
from typing import List, Optional

import torch
from torch import Tensor

from functional_optim.configuration import check_gradients

from .. import ops

__all__ = ["StepAdapter"]


class StepAdapter:
    """The steps of a Python or TorchScript local optimizer (a mixin; TorchScript compiles them
    with the ScriptModule)."""

    @torch.jit.export
    def step(self, context_id: int) -> None:
        """Applies the gradients of distributed autograd context ``context_id`` on this worker
        (the plugin engine's, or torch's when only its engine ran), checked first, under the
        parameters' locks. A parameter without a gradient in the context is skipped, as torch
        skips a ``None`` ``.grad``; so is every parameter when the context is not known here.

        Args:
            context_id (int): a distributed autograd context id whose backward pass has ended.

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (``torch.jit.Error`` once scripted). Nothing changes then.
            Exception: what the optimizer's step raises on these gradients; nothing changed then.
        """
        self.step_gradients(ops.gradients_for(context_id, self._params))

    @torch.jit.export
    def step_gradients(self, gradients: List[Optional[Tensor]]) -> None:
        """Applies ``gradients`` as :meth:`step` does.

        Args:
            gradients (List[Optional[Tensor]]): one per parameter, in the order given at
                construction: a tensor of the parameter's shape, dtype and device, or ``None`` to
                skip that parameter.

        Raises:
            ValueError: wrong number of gradients, or one whose shape, dtype or device differs
                from its parameter's (``torch.jit.Error`` once scripted). Nothing changes then.
            Exception: what the optimizer's step raises on these gradients; nothing changed then.
        """
        check_gradients(self._params, gradients)
        self._apply_before(gradients, -1)

    @torch.jit.export
    def step_before(self, context_id: int, deadline_ms: int) -> int:
        """:meth:`step`, unless the system clock reached ``deadline_ms`` when the locks are held:
        the owner's part of a step in one round trip.

        Args:
            context_id (int): a distributed autograd context id whose backward pass has ended.
            deadline_ms (int): ms since the Unix epoch on the system clock, or -1 (none).

        Returns:
            int: ``APPLIED``, or ``LATE``: the deadline passed (nothing applied; ``_status.py``).

        Raises:
            ValueError, Exception: as :meth:`step`.
        """
        gradients = ops.gradients_for(context_id, self._params)
        check_gradients(self._params, gradients)
        return self._apply_before(gradients, deadline_ms)

    @torch.jit.export
    def commit_step(self, token: int, deadline_ms: int) -> int:
        """Phase 2 of a step over several owners: applies the gradients that ``prepare_step``
        kept, as :meth:`step_before`.

        Args:
            token (int): from ``prepare_step`` on this local optimizer.
            deadline_ms (int): ms since the Unix epoch on the system clock, or -1 (none).

        Returns:
            int: ``APPLIED``, or ``LATE``: the deadline passed (nothing applied; ``_status.py``).

        Raises:
            RuntimeError: the token is unknown or its lease expired (nothing is applied).
            Exception: what the optimizer's step raises (hyperparameters changed since the
                prepare); nothing changed then.
        """
        return self._apply_before(ops._take_step(token), deadline_ms)
