"""The TorchScript-removed test mode: torch.jit's Python entry points raise.

torch is retiring TorchScript: torch 2.14 warns on every ``torch.jit.script`` call, and
pytorch/pytorch#189705 turns the deprecated entry points (script, script_method, interface,
trace, save, load, freeze, optimize_for_inference, fork, wait) into a ``RuntimeError``. This
file replaces them with functions that raise, so the tests show that the project runs
without them, in every process of a test: the pytest option ``--torchscript-removed`` (see
tests/conftest.py) sets ``GILFREE_TORCHSCRIPT_REMOVED=1`` and puts this folder first on
``PYTHONPATH``, and Python imports this ``sitecustomize`` at start-up in every process the
tests start (RPC workers, torchrun, the main job), which then applies :func:`remove_torchscript`
before any of the project's code runs. Without the variable it does nothing.
"""
import os

ENV_VAR = "GILFREE_TORCHSCRIPT_REMOVED"
ENTRY_POINTS = (
    "script", "script_method", "interface", "trace", "trace_module", "save", "load", "freeze",
    "optimize_for_inference", "fork", "wait",
)


def remove_torchscript() -> None:
    """Makes ``torch.jit.<name>`` raise ``RuntimeError`` for every name of :data:`ENTRY_POINTS`
    in this process (as pytorch/pytorch#189705 does, without its escape hatch)."""
    import torch.jit

    def removed(name):
        def entry_point(*args, **kwargs):
            raise RuntimeError(
                f"torch.jit.{name} was removed (the TorchScript-removed test mode, as pytorch/pytorch#189705): "
                f"this code path must not need TorchScript"
            )

        entry_point.__name__ = name
        entry_point.torchscript_removed = True
        return entry_point

    for name in ENTRY_POINTS:
        setattr(torch.jit, name, removed(name))


if os.environ.get(ENV_VAR) == "1":
    remove_torchscript()
