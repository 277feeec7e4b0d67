"""TorchScript functions that create and step each optimizer inside TorchScript.

Written out per class (TorchScript needs the concrete class in each signature); compiled with
``functional_optim._jit.script`` by the tests that use them.
"""
from typing import Dict, List, Optional

from torch import Tensor

from functional_optim import SGD, Adam, AdamW, Adagrad, RMSprop, Adamax, Adadelta, Rprop, NAdam, RAdam


def train_sgd(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a SGD inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = SGD(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_sgd(opt: SGD, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_adam(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a Adam inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = Adam(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_adam(opt: Adam, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_adamw(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a AdamW inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = AdamW(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_adamw(opt: AdamW, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_adagrad(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a Adagrad inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = Adagrad(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_adagrad(opt: Adagrad, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_rmsprop(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a RMSprop inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = RMSprop(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_rmsprop(opt: RMSprop, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_adamax(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a Adamax inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = Adamax(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_adamax(opt: Adamax, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_adadelta(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a Adadelta inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = Adadelta(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_adadelta(opt: Adadelta, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_rprop(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a Rprop inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = Rprop(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_rprop(opt: Rprop, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_nadam(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a NAdam inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = NAdam(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_nadam(opt: NAdam, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)

def train_radam(params: List[Tensor], grads: List[List[Optional[Tensor]]], lr: float) -> Dict[int, Dict[str, Tensor]]:
    """Create a RAdam inside TorchScript, step it once per entry of ``grads``, return its state."""
    opt = RAdam(params, lr=lr)
    for step_grads in grads:
        opt.step(step_grads)
    return opt.get_state()


def step_radam(opt: RAdam, grads: List[List[Optional[Tensor]]]) -> None:
    """Step an optimizer handed in from Python once per entry of ``grads``.

    TorchScript converts an eager optimizer into a copy of its containers (the tensors are
    shared), so state created here lives as long as this call: step it within one call.
    """
    for step_grads in grads:
        opt.step(step_grads)


TRAIN = {"SGD": train_sgd, "Adam": train_adam, "AdamW": train_adamw, "Adagrad": train_adagrad, "RMSprop": train_rmsprop, "Adamax": train_adamax, "Adadelta": train_adadelta, "Rprop": train_rprop, "NAdam": train_nadam, "RAdam": train_radam}
STEP = {"SGD": step_sgd, "Adam": step_adam, "AdamW": step_adamw, "Adagrad": step_adagrad, "RMSprop": step_rmsprop, "Adamax": step_adamax, "Adadelta": step_adadelta, "Rprop": step_rprop, "NAdam": step_nadam, "RAdam": step_radam}
