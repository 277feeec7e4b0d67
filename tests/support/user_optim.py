"""An optimizer that a user might write: a ``torch.optim.Optimizer`` subclass with no
functional counterpart, in an importable module so that workers can unpickle the class.

``HeavyBall`` is SGD with heavy-ball momentum and decoupled weight decay:

    buf <- momentum * buf + grad              (buf = grad at the first step)
    p   <- p * (1 - lr * weight_decay) - lr * buf

with an ``int`` step count in the state (as some hand-written optimizers keep it). It rejects
sparse gradients and invalid hyperparameters the way torch.optim's classes do.
"""
import torch


class HeavyBall(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, momentum=0.9, weight_decay=0.0):
        if lr < 0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("HeavyBall does not support sparse gradients")
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = p.grad.clone()
                    state["count"] = 0
                else:
                    state["buf"].mul_(group["momentum"]).add_(p.grad)
                state["count"] += 1
                p.mul_(1 - group["lr"] * group["weight_decay"]).add_(state["buf"], alpha=-group["lr"])
        return None


class FailsHalfway(torch.optim.Optimizer):
    """Steps its first parameter (p -= lr * grad), then raises at the second: a step that
    fails after it changed something."""

    def __init__(self, params, lr=1.0):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        group = self.param_groups[0]
        for i, p in enumerate(group["params"]):
            if p.grad is None:
                continue
            if i == 1:
                raise ArithmeticError("FailsHalfway gives up at parameter 1")
            self.state[p]["seen"] = torch.ones(())
            p.add_(p.grad, alpha=-group["lr"])
