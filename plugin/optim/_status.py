"""The outcome of an owner's part of a step: the op library's table (``StepStatus``,
``plugin/csrc/optim/step_status.h``), read here once, by name, when the package loads. Every step
protocol and every kind of local optimizer answers with these values (the TorchScript local
optimizer's compiled steps read them as constants); nothing is applied but for ``APPLIED``.
"""
from .. import ops

__all__ = ["APPLIED", "CHANGED", "LATE", "REFUSED", "NOT_REACHED"]

_TABLE = ops._step_statuses()

APPLIED: int = _TABLE["applied"]
CHANGED: int = _TABLE["changed"]  # the gradients changed after the backward pass checked them
LATE: int = _TABLE["late"]  # the owner reached its locks after the step's deadline
REFUSED: int = _TABLE["refused"]  # its optimizer refused the gradients (a step in the backward pass)
NOT_REACHED: int = _TABLE["not_reached"]  # no part of the pass ran there (a step in the backward pass)
