"""The distributed optimizer and the local optimizers it builds on the owners.

* :class:`DistributedOptimizer`: ``torch.distributed.optim.DistributedOptimizer`` whose
  owners step without their GIL and without TorchScript (``_distributed.py``);
* :class:`NativeLocalOptimizer`: an owner's native local optimizer, for the fourteen built-in
  optimizers (C++; ``_native.py``);
* :class:`PythonLocalOptimizer`, :class:`PythonStepWarning`: the Python local optimizer, for
  other ``torch.optim`` classes and configurations the native one does not cover (``_python.py``);
* :class:`ScriptLocalOptimizer`: the TorchScript local optimizer, optional, for functional
  classes users register (``_scripted.py``);
* :func:`clip_grad_norm_`: gradient clipping across owners (``_clip.py``).

The owners' side of a distributed optimizer (which local optimizer an owner builds, the
functions the caller calls there) is ``_local.py``; the caller's fan-out to the owners,
``_owners.py``; the ``param_groups`` face for LR schedulers, ``_param_groups.py``.
"""
from ._clip import clip_grad_norm_
from ._distributed import DistributedOptimizer
from ._native import NativeLocalOptimizer
from ._python import PythonLocalOptimizer, PythonStepWarning
from ._scripted import ScriptLocalOptimizer

__all__ = [
    "DistributedOptimizer", "NativeLocalOptimizer", "PythonLocalOptimizer", "PythonStepWarning", "ScriptLocalOptimizer",
    "clip_grad_norm_",
]
