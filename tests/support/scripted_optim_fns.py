"""TorchScript functions that create and step each optimizer inside TorchScript.

TorchScript needs the concrete class in each signature, so the two functions are written once,
as a template, and made for every optimizer of the config table (``optim_configs.INFOS``):
``train_sgd``, ``step_sgd``, ``train_adam``, ... and the maps :data:`TRAIN` and :data:`STEP`
(optimizer name -> function). The tests compile them with ``functional_optim.scripting.script``.

TorchScript compiles a function from its source (``inspect.getsource``), so each generated
source is registered in ``linecache`` under a file name of its own (an entry without a
modification time, which ``linecache.checkcache`` never drops), as interactive shells do for
the code typed into them.
"""
import linecache
from typing import Callable, Dict, List, Optional

from torch import Tensor

from tests.support import optim_configs as C

_TEMPLATE = '''
def train_{name}(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a {cls} inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = {cls}(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_{name}(opt: {cls}, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)
'''


def _make(info: C.OptimInfo) -> Dict[str, Callable]:
    """``train_<name>`` and ``step_<name>`` for one optimizer, by name."""
    name = info.name.lower()
    source = _TEMPLATE.format(name=name, cls=info.name)
    filename = f"<{__name__}: {info.name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {
        "__name__": __name__, "Dict": Dict, "List": List, "Optional": Optional, "Tensor": Tensor,
        info.name: info.ours,
    }
    exec(compile(source, filename, "exec"), namespace)
    return {f"train_{name}": namespace[f"train_{name}"], f"step_{name}": namespace[f"step_{name}"]}


TRAIN: Dict[str, Callable] = {}
STEP: Dict[str, Callable] = {}
for _info in C.INFOS:
    _functions = _make(_info)
    globals().update(_functions)
    TRAIN[_info.name] = _functions["train_" + _info.name.lower()]
    STEP[_info.name] = _functions["step_" + _info.name.lower()]
