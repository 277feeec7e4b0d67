"""A functional optimizer that a user might write and register: ``HeavyBallFunctional``, the
functional counterpart of ``tests.support.user_optim.HeavyBall`` (SGD with heavy-ball momentum
and decoupled weight decay), a standalone TorchScript class with the state protocol of
``functional_optim.state_protocol``, which :func:`register` maps ``HeavyBallRegistered`` to (a
``HeavyBall`` of its own, so that ``HeavyBall`` itself keeps no functional counterpart).

A DistributedOptimizer over ``HeavyBallRegistered`` builds a TorchScript local optimizer on each
owner where the pair is registered, or a Python one where torch no longer compiles TorchScript. Its state is ``{'buf': Tensor}`` per parameter (``HeavyBall`` keeps
an ``int`` count beside it, which this class does not).
"""
from typing import Dict, List, Optional

import torch
from torch import Tensor

import functional_optim
from tests.support.user_optim import HeavyBall


class HeavyBallFunctional:
    def __init__(self, params: List[Tensor], lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0):
        self.params = params
        self.index: Dict[Tensor, int] = {}
        for i in range(len(params)):
            self.index[params[i]] = i
        self.values: Dict[str, float] = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.0}
        self.buf: Dict[int, Tensor] = {}
        no_options: Dict[str, Optional[bool]] = {}
        self.set_group(0, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay}, no_options)

    def step(self, gradients: List[Optional[Tensor]]) -> None:
        if len(gradients) != len(self.params):
            raise ValueError("expected " + str(len(self.params)) + " gradients, got " + str(len(gradients)))
        for i in range(len(gradients)):
            grad = gradients[i]
            if grad is not None:
                self._step_one(i, grad)

    def step_param(self, param: Tensor, grad: Optional[Tensor]) -> None:
        if param not in self.index:
            raise ValueError("not a parameter of this optimizer")
        if grad is not None:
            self._step_one(self.index[param], grad)

    def _step_one(self, i: int, grad: Tensor) -> None:
        if grad.is_sparse:
            raise RuntimeError("HeavyBall does not support sparse gradients")
        p = self.params[i]
        with torch.no_grad():
            if i in self.buf:
                buf = self.buf[i]
                buf.mul_(self.values["momentum"]).add_(grad)
            else:
                buf = grad.clone()
                self.buf[i] = buf
            p.mul_(1 - self.values["lr"] * self.values["weight_decay"]).add_(buf, alpha=-self.values["lr"])

    def param_group_indices(self) -> List[List[int]]:
        return [list(range(len(self.params)))]

    def hyperparameters(self) -> List[Dict[str, float]]:
        return [dict(self.values)]

    def options(self) -> List[Dict[str, Optional[bool]]]:
        flags: Dict[str, Optional[bool]] = {"maximize": False}
        return [flags]

    def set_hyperparameter(self, group: int, name: str, value: float) -> None:
        no_options: Dict[str, Optional[bool]] = {}
        self.set_group(group, {name: value}, no_options)

    def set_option(self, group: int, name: str, value: Optional[bool]) -> None:
        no_values: Dict[str, float] = {}
        self.set_group(group, no_values, {name: value})

    def set_group(self, group: int, hyperparameters: Dict[str, float], options: Dict[str, Optional[bool]]) -> None:
        if group != 0:
            raise ValueError("parameter group " + str(group) + " does not exist (the optimizer has 1 groups)")
        for name, value in hyperparameters.items():
            if name not in self.values:
                raise ValueError("HeavyBall has no hyperparameter '" + name + "'")
        for name, flag in options.items():
            if name != "maximize" or flag is None or flag:
                raise ValueError("HeavyBall has no option '" + name + "' that can be set")
        lr = hyperparameters.get("lr", self.values["lr"])
        momentum = hyperparameters.get("momentum", self.values["momentum"])
        if lr < 0:
            raise ValueError("Invalid learning rate: " + str(lr))
        if not 0.0 <= momentum < 1.0:
            raise ValueError("Invalid momentum value: " + str(momentum))
        for name, value in hyperparameters.items():
            self.values[name] = value

    def get_state(self) -> Dict[int, Dict[str, Tensor]]:
        out: Dict[int, Dict[str, Tensor]] = {}
        for i, buf in self.buf.items():
            out[i] = {"buf": buf}
        return out

    def set_state(self, state: Dict[int, Dict[str, Tensor]]) -> None:
        copied: Dict[int, Tensor] = {}
        for i, entry in state.items():
            if i < 0 or i >= len(self.params):
                raise ValueError("set_state: no parameter with index " + str(i))
            if "buf" in entry:
                p = self.params[i]
                copied[i] = entry["buf"].to(device=p.device, dtype=p.dtype, copy=True)
        self.buf = copied


class HeavyBallRegistered(HeavyBall):
    """``HeavyBall``, registered with :class:`HeavyBallFunctional` as its functional counterpart."""


def register() -> None:
    """Registers the pair in this process (each worker that builds a local optimizer of it, and
    the caller, as a user would)."""
    functional_optim.register_functional_optimizer(HeavyBallRegistered, HeavyBallFunctional)


def unregister() -> None:
    """Takes the pair out of this process's registry again (the other tests count the pairs)."""
    from functional_optim import registry

    registry._REGISTRY.pop(HeavyBallRegistered, None)
