"""TorchScript-compatible functional optimizers (gradients passed in, never read from ``.grad``).

Fourteen optimizers with ``torch.optim``'s hyperparameters, defaults and results: :class:`SGD`,
:class:`Adam`, :class:`AdamW`, :class:`Adagrad`, :class:`RMSprop`, :class:`Adamax`,
:class:`Adadelta`, :class:`Rprop`, :class:`NAdam`, :class:`RAdam`, :class:`SparseAdam` (sparse
gradients only; SGD and Adagrad also take sparse gradients), :class:`ASGD`, :class:`Adafactor`
and :class:`Muon` (2-D parameters only). Each works eagerly (with
torch-style param groups, ``param_groups`` and ``state_dict``) and as a TorchScript class, with
single-tensor, multi-tensor (``torch._foreach_*``) and, where torch has kernels, fused
(``torch._fused_*``) implementations, all usable inside TorchScript. Each module also has the
functional form (``functional_optim.adam.adam`` ...).

* State protocol shared by all classes (what the distributed optimizer uses):
  :mod:`functional_optim.state_protocol`.
* Running an optimizer as TorchScript: :func:`functional_optim.scripting.script_optimizer`.
* ``torch.optim.lr_scheduler`` on an eager optimizer: :func:`as_torch_optimizer`.
* ``torch.optim`` class -> functional class: :func:`functional_optimizer_for`,
  :func:`register_functional_optimizer`.
"""
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .asgd import ASGD
from .muon import Muon
from .nadam import NAdam
from .radam import RAdam
from . import configuration
from .registry import functional_optimizer_for, register_functional_optimizer, registered_optimizers, torch_optimizer_for
from .rmsprop import RMSprop
from .rprop import Rprop
from .scripting import OptimizerModule, script_optimizer
from .sgd import SGD
from .sparse_adam import SparseAdam
from .state_protocol import load_state_dict, state_dict
from .torch_optimizer import as_torch_optimizer

__all__ = [
    "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "Adadelta", "Rprop", "NAdam", "RAdam", "SparseAdam",
    "ASGD", "Adafactor", "Muon",
    "functional_optimizer_for", "register_functional_optimizer", "registered_optimizers", "torch_optimizer_for",
    "configuration",
    "OptimizerModule", "script_optimizer", "state_dict", "load_state_dict", "as_torch_optimizer",
]
