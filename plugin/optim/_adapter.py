"""The steps that the Python and TorchScript local optimizers share, written once: how a caller's
step reaches them (their adapters to ``_owners.Owner``, the caller's one owner interface; the
native kind answers the same calls in C++), the two-phase step's first phase
(:meth:`StepAdapter.prepare_step`) and the locked, deadline-checked application of gradients
(``_apply_before``). A subclass keeps ``_params`` (its parameters, in order) and ``_lock`` (their
``ops.new_step_lock``), and defines the two hooks: ``_apply(gradients)``, the optimizer's step,
run under the locks; and ``_try(gradients)``, the trial of phase 1 (``pass`` where the
optimizer's checks are known to be the gradient checks already run).
"""
from typing import List, Optional

import torch
from torch import Tensor

from functional_optim.configuration import check_gradients

from .. import ops
from ._status import APPLIED, LATE

__all__ = ["StepAdapter"]


class StepAdapter:
    """The steps of a Python or TorchScript local optimizer (a mixin; TorchScript compiles them
    with the ScriptModule)."""

    # the statuses (``_status.py``); a ScriptModule subclass declares them ``torch.jit.Final``
    # and sets them on the instance, which TorchScript then compiles as constants
    _applied = APPLIED
    _late = LATE

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

    @torch.jit.export
    def prepare_step(self, context_id: int, lease_ms: int) -> int:
        """Phase 1 of a step over several owners: reads the context's gradients of this
        worker's parameters, checks them (count, shape, dtype, device), runs the local
        optimizer's trial of them (:class:`~plugin.optim.PythonLocalOptimizer`: the
        optimizer's step on copies of them, under the parameters' locks, undone: parameters,
        ``state`` and ``param_groups`` restored, so that a gradient the optimizer rejects is
        rejected here, before any owner applies the step; :class:`~plugin.optim.ScriptLocalOptimizer`:
        none, no lock taken), and keeps them (references, not copies) for :meth:`commit_step`.
        Changes nothing. A prepared step that is neither committed nor dropped within
        ``lease_ms`` is forgotten. (The native local optimizer's phase 1 only checks, without a
        lock.)

        Args:
            context_id (int): a distributed autograd context id.
            lease_ms (int): milliseconds, > 0, that the prepared step waits for its commit.

        Returns:
            int: a token for :meth:`commit_step` (or the op ``_drop_step``).

        Raises:
            ValueError: a gradient whose shape, dtype or device differs from its parameter's
                (``torch.jit.Error`` once scripted).
            RuntimeError: a sparse gradient for an optimizer that does not take them.
            Exception: what the optimizer's step raises on these gradients (the Python local
                optimizer's trial).
        """
        gradients = ops.gradients_for(context_id, self._params)
        check_gradients(self._params, gradients)
        self._try(gradients)
        return ops._park_step(gradients, lease_ms)

    def _apply_before(self, gradients: List[Optional[Tensor]], deadline_ms: int) -> int:
        """Under the parameters' locks, ``_apply(gradients)`` (``APPLIED``), unless the system
        clock reached ``deadline_ms`` (-1: none; then ``LATE``, nothing applied). TorchScript
        holds the locks with ``with`` (a ScriptObject with ``__enter__``/``__exit__``); Python by
        ``ops._holding`` (only one branch is compiled: ``torch.jit.is_scripting()`` is a
        constant to TorchScript)."""
        if torch.jit.is_scripting():
            with self._lock:
                return self._apply_unless_late(gradients, deadline_ms)
        else:
            with ops._holding(self._lock):
                return self._apply_unless_late(gradients, deadline_ms)

    def _apply_unless_late(self, gradients: List[Optional[Tensor]], deadline_ms: int) -> int:
        """:meth:`_apply_before`'s body, the locks held."""
        if deadline_ms >= 0 and ops._wall_clock_ms() >= deadline_ms:
            return self._late
        self._apply(gradients)
        return self._applied
