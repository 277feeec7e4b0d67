"""The part of the ``torch.optim.Optimizer`` face that :class:`functional_optim.TorchOptimizer`
and :class:`plugin.optim.DistributedOptimizer` share.

Both are ``torch.optim.Optimizer`` subclasses (so that ``torch.optim.lr_scheduler`` drives them)
whose gradients and state do not live where ``torch.optim`` keeps them: gradients are passed to
``step`` or read from a distributed autograd context, never from ``.grad``; the state lives in a
TorchScript object or on other workers; the parameter groups are fixed. This mixin holds what
follows from that, once. It lives here because ``plugin`` may import ``functional_optim`` and
not the other way round. A subclass lists it before ``torch.optim.Optimizer`` and sets the four
messages below; it calls :meth:`_init_hooks` where ``torch.optim.Optimizer.__init__`` would
have set up the hooks (that ``__init__`` cannot run: it takes local leaf tensors).
"""
from collections import OrderedDict
from typing import Any, Dict

__all__ = ["TorchOptimizerFace"]


class TorchOptimizerFace:
    """``zero_grad``, ``add_param_group``, ``state``, the state-dict hook registrations and
    pickling, for an optimizer whose gradients, state and groups ``torch.optim`` does not hold.

    Raises nothing itself (its members raise; see each).
    """

    # Set by each subclass: the messages of what it does not support.
    _STATE_ERROR = "the optimizer state is read with state_dict()"
    _ADD_PARAM_GROUP_ERROR = "add_param_group is not supported"
    _HOOKS_ERROR = "this optimizer does not run state_dict or load_state_dict hooks"
    _PICKLE_ERROR = "this optimizer cannot be pickled; save its state_dict() instead"

    def _init_hooks(self) -> None:
        # What torch.optim.Optimizer.__init__ sets up for its hooks; step() then runs torch's
        # step hooks (register_step_pre_hook, register_step_post_hook) as torch.optim's does.
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self._patch_step_function()

    @property
    def state(self):
        """Not available: the state lives in a TorchScript object (``as_torch_optimizer``) or on
        the owners (``DistributedOptimizer``), not in a ``torch.optim`` dict.

        Raises:
            AttributeError: always; read the state with ``state_dict()``.
        """
        raise AttributeError(self._STATE_ERROR)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Does nothing: ``.grad`` of the parameters is not used. The gradients are passed to
        ``step`` (``as_torch_optimizer``) or live in each distributed autograd context, which
        starts from zero (``DistributedOptimizer``). For code written for ``torch.optim``.

        Args:
            set_to_none (bool): ignored.

        Raises nothing.
        """

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Not supported: the parameter groups are fixed when the optimizer is built (a
        ``DistributedOptimizer`` has one).

        Args:
            param_group (Dict[str, Any]): ignored.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(self._ADD_PARAM_GROUP_ERROR)

    def _no_state_dict_hooks(self, hook: Any, prepend: bool = False) -> None:
        """Not supported (``register_state_dict_pre_hook``, ``register_state_dict_post_hook``,
        ``register_load_state_dict_pre_hook``, ``register_load_state_dict_post_hook``): the
        state dict is not built by ``torch.optim.Optimizer``'s code, which runs those hooks.

        Args:
            hook (Callable): ignored.
            prepend (bool): ignored.

        Raises:
            NotImplementedError: always (rather than a hook that would never run).
        """
        raise NotImplementedError(self._HOOKS_ERROR)

    register_state_dict_pre_hook = _no_state_dict_hooks
    register_state_dict_post_hook = _no_state_dict_hooks
    register_load_state_dict_pre_hook = _no_state_dict_hooks
    register_load_state_dict_post_hook = _no_state_dict_hooks

    def __getstate__(self):
        raise TypeError(self._PICKLE_ERROR)
