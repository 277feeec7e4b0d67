"""The table that drives the functional_optim tests (in the spirit of torch's OptimizerInfo).

One :class:`OptimInfo` per optimizer lists:

* ``impls``: the implementation paths it has (``single``, ``foreach``, and ``fused`` where torch
  has a kernel); each parity config is run on each of them;
* ``configs``: flag/hyperparameter combinations that ``torch.optim`` supports for it, including
  several param groups with their own hyperparameters; every run also skips some parameters
  (``None`` gradients, see :func:`gradient_schedule`);
* ``sparse_configs``: configs run with sparse COO gradients (only SGD and Adagrad take them);
* ``invalid``: constructor arguments that must be rejected, with the exception type and the
  message ``torch.optim`` itself gives;
* ``shapes``: the parameters' shapes (:data:`SHAPES`: a matrix, a vector and a scalar; Muon's
  are all matrices, as it takes 2-D parameters only) and ``lr_message``: the start of torch's
  message for a negative ``lr``.

The implementation flags differ between classes (Muon has no ``foreach``; Adafactor and Muon
no ``differentiable``): :func:`impl_flags` and :func:`takes` read them off the class.

Generic tests walk the table; nothing here is specific to one test file.
"""
import dataclasses
import inspect
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import torch

import functional_optim as F

# Parameter shapes used by every parity run: a matrix, a vector and a scalar.
SHAPES: List[Tuple[int, ...]] = [(4, 3), (5,), ()]
STEPS = 50


@dataclasses.dataclass(frozen=True)
class Config:
    """One parity configuration.

    ``kwargs`` go to both constructors. ``groups`` (optional) splits the parameters into param
    groups: a list of ``(parameter indices, per-group overrides)``.
    """

    name: str
    kwargs: Dict[str, Any]
    groups: Optional[List[Tuple[List[int], Dict[str, Any]]]] = None


@dataclasses.dataclass(frozen=True)
class Invalid:
    """Constructor arguments that must raise ``error`` with a message matching ``match``."""

    kwargs: Dict[str, Any]
    error: Type[Exception]
    match: str


@dataclasses.dataclass(frozen=True)
class OptimInfo:
    name: str
    torch_class: type
    ours: type
    impls: Tuple[str, ...]
    configs: List[Config]
    invalid: List[Invalid]
    sparse_configs: List[Config] = dataclasses.field(default_factory=list)
    # Error message for a sparse gradient ("" when sparse gradients are accepted).
    sparse_error: str = ""
    # torch's fused SGD fails ("expected Tensor as element 2 ... but got NoneType") when one
    # parameter's momentum buffer starts later than the others'; its fused runs then use a
    # schedule without a late start (our handling of that case is tested separately).
    fused_late_start: bool = True
    shapes: Tuple[Tuple[int, ...], ...] = ()
    lr_message: str = "Invalid learning rate: "

    def __str__(self) -> str:
        return self.name


IMPL_FLAGS = {"single": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}

_COMMON_INVALID = [
    Invalid({"lr": -1.0}, ValueError, "Invalid learning rate: -1.0"),
    Invalid({"differentiable": True}, ValueError, "differentiable=True is not supported"),
]
_BETAS_INVALID = [
    Invalid({"betas": (1.0, 0.999)}, ValueError, "Invalid beta parameter at index 0: 1.0"),
    Invalid({"betas": (0.9, -0.1)}, ValueError, r"Invalid beta parameter at index 1: -0.1"),
    Invalid({"eps": -1e-8}, ValueError, "Invalid epsilon value: -1e-08"),
    Invalid({"weight_decay": -0.5}, ValueError, "Invalid weight_decay value: -0.5"),
]
_FUSED_INVALID = [
    Invalid({"fused": True, "foreach": True}, RuntimeError, "`fused` and `foreach` cannot be `True` together."),
]


def _groups(defaults: Dict[str, Any], groups: List[Tuple[List[int], Dict[str, Any]]]) -> Config:
    """The config named ``"groups"``: ``defaults`` for every group, then ``(parameter indices,
    overrides)`` per group."""
    return Config("groups", defaults, groups)


def _adam_configs(decoupled_default: bool) -> List[Config]:
    extra = {} if decoupled_default else {"decoupled_weight_decay": True}
    return [
        Config("default", {}),
        Config("amsgrad_wd", {"amsgrad": True, "weight_decay": 0.1, "lr": 0.01}),
        Config("maximize_betas", {"maximize": True, "betas": (0.8, 0.95), "eps": 1e-6, "lr": 0.02}),
        Config("decoupled", {"weight_decay": 0.05, "lr": 0.01, **extra}),
        _groups({"lr": 0.01},
                [([0], {"lr": 0.05, "betas": (0.85, 0.99), "amsgrad": True}),
                 ([1, 2], {"weight_decay": 0.2, "maximize": True})]),
    ]


INFOS: List[OptimInfo] = [
    OptimInfo(
        "SGD", torch.optim.SGD, F.SGD, ("single", "foreach", "fused"),
        [
            Config("default", {"lr": 0.05}),
            Config("momentum", {"lr": 0.05, "momentum": 0.9}),
            Config("dampening_wd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.1}),
            Config("nesterov_maximize", {"lr": 0.05, "momentum": 0.8, "nesterov": True, "maximize": True, "weight_decay": 0.01}),
            _groups({"lr": 0.05, "momentum": 0.5},
                    [([0, 2], {"lr": 0.1, "nesterov": True}), ([1], {"momentum": 0.0, "weight_decay": 0.3})]),
        ],
        _COMMON_INVALID + _FUSED_INVALID + [
            Invalid({"momentum": -0.1}, ValueError, "Invalid momentum value: -0.1"),
            Invalid({"weight_decay": -0.1}, ValueError, "Invalid weight_decay value: -0.1"),
            Invalid({"nesterov": True}, ValueError, "Nesterov momentum requires a momentum and zero dampening"),
            Invalid({"nesterov": True, "momentum": 0.9, "dampening": 0.1}, ValueError,
                    "Nesterov momentum requires a momentum and zero dampening"),
        ],
        fused_late_start=False,
        sparse_configs=[
            Config("sparse", {"lr": 0.05}),
            Config("sparse_momentum", {"lr": 0.05, "momentum": 0.9, "maximize": True}),
        ],
    ),
    OptimInfo(
        "Adam", torch.optim.Adam, F.Adam, ("single", "foreach", "fused"), _adam_configs(False),
        _COMMON_INVALID + _BETAS_INVALID + _FUSED_INVALID + [
            Invalid({"capturable": True}, ValueError, "capturable=True is not supported"),
        ],
        sparse_error="Adam does not support sparse gradients, please consider SparseAdam instead",
    ),
    OptimInfo(
        "AdamW", torch.optim.AdamW, F.AdamW, ("single", "foreach", "fused"), _adam_configs(True),
        _COMMON_INVALID + _BETAS_INVALID + _FUSED_INVALID,
        sparse_error="Adam does not support sparse gradients, please consider SparseAdam instead",
    ),
    OptimInfo(
        "Adagrad", torch.optim.Adagrad, F.Adagrad, ("single", "foreach", "fused"),
        [
            Config("default", {}),
            Config("lr_decay_wd", {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.1}),
            Config("init_acc_maximize", {"initial_accumulator_value": 0.5, "maximize": True, "eps": 1e-8}),
            _groups({"lr": 0.05, "initial_accumulator_value": 0.1},
                    [([0], {"lr": 0.1, "lr_decay": 0.05}), ([1, 2], {"weight_decay": 0.2, "maximize": True})]),
        ],
        _COMMON_INVALID + _FUSED_INVALID + [
            Invalid({"lr_decay": -0.1}, ValueError, "Invalid lr_decay value: -0.1"),
            Invalid({"weight_decay": -0.1}, ValueError, "Invalid weight_decay value: -0.1"),
            Invalid({"initial_accumulator_value": -1.0}, ValueError, "Invalid initial_accumulator_value value: -1.0"),
            Invalid({"eps": -1.0}, ValueError, "Invalid epsilon value: -1.0"),
        ],
        sparse_configs=[
            Config("sparse", {"lr": 0.05}),
            Config("sparse_lr_decay_maximize", {"lr": 0.05, "lr_decay": 0.01, "maximize": True, "initial_accumulator_value": 0.1}),
        ],
    ),
    OptimInfo(
        "RMSprop", torch.optim.RMSprop, F.RMSprop, ("single", "foreach"),
        [
            Config("default", {}),
            Config("momentum_wd", {"momentum": 0.9, "weight_decay": 0.1, "alpha": 0.9}),
            Config("centered_maximize", {"centered": True, "maximize": True, "eps": 1e-6}),
            Config("centered_momentum", {"centered": True, "momentum": 0.5, "lr": 0.005}),
            _groups({"lr": 0.005},
                    [([0], {"momentum": 0.7, "centered": True}), ([1, 2], {"alpha": 0.95, "weight_decay": 0.2})]),
        ],
        _COMMON_INVALID + [
            Invalid({"eps": -1.0}, ValueError, "Invalid epsilon value: -1.0"),
            Invalid({"momentum": -0.5}, ValueError, "Invalid momentum value: -0.5"),
            Invalid({"weight_decay": -0.5}, ValueError, "Invalid weight_decay value: -0.5"),
            Invalid({"alpha": -0.5}, ValueError, "Invalid alpha value: -0.5"),
        ],
        sparse_error="RMSprop does not support sparse gradients",
    ),
    OptimInfo(
        "Adamax", torch.optim.Adamax, F.Adamax, ("single", "foreach"),
        [
            Config("default", {}),
            Config("wd_betas", {"weight_decay": 0.1, "betas": (0.8, 0.99), "lr": 0.01}),
            Config("maximize", {"maximize": True, "eps": 1e-4}),
            _groups({"lr": 0.01},
                    [([0, 1], {"lr": 0.02, "maximize": True}), ([2], {"weight_decay": 0.3})]),
        ],
        _COMMON_INVALID + _BETAS_INVALID,
        sparse_error="Adamax does not support sparse gradients",
    ),
    OptimInfo(
        "Adadelta", torch.optim.Adadelta, F.Adadelta, ("single", "foreach"),
        [
            Config("default", {}),
            Config("rho_wd", {"rho": 0.8, "weight_decay": 0.1, "lr": 0.5}),
            Config("maximize", {"maximize": True, "eps": 1e-4}),
            _groups({"lr": 0.5},
                    [([0], {"rho": 0.95, "weight_decay": 0.2}), ([1, 2], {"lr": 1.0, "maximize": True})]),
        ],
        _COMMON_INVALID + [
            Invalid({"rho": 1.5}, ValueError, "Invalid rho value: 1.5"),
            Invalid({"eps": -1.0}, ValueError, "Invalid epsilon value: -1.0"),
            Invalid({"weight_decay": -1.0}, ValueError, "Invalid weight_decay value: -1.0"),
        ],
        sparse_error="Adadelta does not support sparse gradients",
    ),
    OptimInfo(
        "Rprop", torch.optim.Rprop, F.Rprop, ("single", "foreach"),
        [
            Config("default", {}),
            Config("etas_step_sizes", {"etas": (0.3, 1.5), "step_sizes": (1e-4, 0.05), "lr": 0.02}),
            Config("maximize", {"maximize": True}),
            _groups({"lr": 0.02},
                    [([0], {"etas": (0.4, 1.1)}), ([1, 2], {"step_sizes": (1e-3, 1.0), "maximize": True, "lr": 0.05})]),
        ],
        _COMMON_INVALID + [
            Invalid({"etas": (1.5, 1.2)}, ValueError, "Invalid eta values: 1.5, 1.2"),
            Invalid({"etas": (0.5, 0.9)}, ValueError, "Invalid eta values: 0.5, 0.9"),
        ],
        sparse_error="Rprop does not support sparse gradients",
    ),
    OptimInfo(
        "NAdam", torch.optim.NAdam, F.NAdam, ("single", "foreach"),
        [
            Config("default", {}),
            Config("wd_momentum_decay", {"weight_decay": 0.1, "momentum_decay": 0.01}),
            Config("decoupled_maximize", {"weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True}),
            _groups({"lr": 0.01},
                    [([0, 2], {"betas": (0.8, 0.9), "momentum_decay": 0.02}), ([1], {"weight_decay": 0.1, "decoupled_weight_decay": True})]),
        ],
        _COMMON_INVALID + _BETAS_INVALID + [
            Invalid({"momentum_decay": -0.1}, ValueError, "Invalid momentum_decay value: -0.1"),
        ],
        sparse_error="NAdam does not support sparse gradients",
    ),
    OptimInfo(
        "RAdam", torch.optim.RAdam, F.RAdam, ("single", "foreach"),
        [
            Config("default", {"lr": 0.01}),
            Config("wd_maximize", {"weight_decay": 0.1, "maximize": True, "lr": 0.01}),
            Config("decoupled", {"weight_decay": 0.1, "decoupled_weight_decay": True, "betas": (0.8, 0.9)}),
            _groups({"lr": 0.01},
                    [([0], {"betas": (0.7, 0.9)}), ([1, 2], {"weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True})]),
        ],
        _COMMON_INVALID + _BETAS_INVALID,
        sparse_error="RAdam does not support sparse gradients",
    ),
    OptimInfo(
        "ASGD", torch.optim.ASGD, F.ASGD, ("single", "foreach"),
        [
            Config("default", {}),
            # t0 within the run: the average starts (mu < 1) at step 11
            Config("t0_lambd_wd", {"lr": 0.05, "t0": 10, "lambd": 1e-3, "weight_decay": 0.1}),
            Config("alpha_maximize", {"lr": 0.02, "alpha": 0.5, "t0": 5, "maximize": True}),
            _groups({"lr": 0.02, "t0": 3},
                    [([0], {"lr": 0.05, "lambd": 0.01}), ([1, 2], {"weight_decay": 0.2, "maximize": True, "t0": 20})]),
        ],
        _COMMON_INVALID + [
            Invalid({"weight_decay": -0.5}, ValueError, "Invalid weight_decay value: -0.5"),
            Invalid({"capturable": True}, ValueError, "capturable=True is not supported"),
        ],
        sparse_error="ASGD does not support sparse gradients",
    ),
    OptimInfo(
        "Adafactor", torch.optim.Adafactor, F.Adafactor, ("single", "foreach"),
        [
            Config("default", {}),
            Config("wd_beta2_decay", {"lr": 0.05, "weight_decay": 0.1, "beta2_decay": -0.5}),
            Config("eps_d_maximize", {"eps": (1e-20, 1e-2), "d": 2.0, "maximize": True}),
            _groups({"lr": 0.02},
                    [([0], {"eps": (None, 1e-2), "d": 1.5}),
                     ([1, 2], {"weight_decay": 0.1, "maximize": True, "eps": (1e-25, 1e-3)})]),
        ],
        [
            Invalid({"lr": -1.0}, ValueError, "Learning rate should be >= 0 but is: -1.0"),
            Invalid({"beta2_decay": 0.5}, ValueError, "beta2_decay should be <= 0 but is: 0.5"),
            Invalid({"eps": (-1.0, 1e-3)}, ValueError, "epsilon1 should be >= 0 but is: -1.0"),
            Invalid({"eps": (None, -1.0)}, ValueError, "epsilon2 should be >= 0 but is: -1.0"),
            Invalid({"d": 0.5}, ValueError, "Clipping threshold d should be >= 1 but is: 0.5"),
            Invalid({"weight_decay": -0.5}, ValueError, "weight_decay should be >= 0 but is: -0.5"),
        ],
        sparse_error="Adafactor does not support sparse gradients",
        lr_message="Learning rate should be >= 0 but is: ",
    ),
    OptimInfo(
        "Muon", torch.optim.Muon, F.Muon, ("single",),
        [
            Config("default", {"lr": 0.02}),
            Config("plain_momentum_wd", {"lr": 0.02, "nesterov": False, "momentum": 0.9, "weight_decay": 0.01}),
            Config("match_rms_adamw", {"lr": 0.01, "adjust_lr_fn": "match_rms_adamw", "ns_steps": 3, "eps": 1e-6}),
            Config("coefficients", {"lr": 0.02, "adjust_lr_fn": "original", "ns_coefficients": (3.0, -3.2, 1.2)}),
            _groups({"lr": 0.02},
                    [([0], {"ns_steps": 4, "adjust_lr_fn": "match_rms_adamw"}),
                     ([1, 2], {"momentum": 0.8, "nesterov": False, "ns_coefficients": (2.0, -1.5, 0.5)})]),
        ],
        [
            Invalid({"lr": -1.0}, ValueError, "Learning rate should be >= 0 but is: -1.0"),
            Invalid({"momentum": -0.1}, ValueError, "momentum should be >= 0 but is: -0.1"),
            Invalid({"weight_decay": -0.1}, ValueError, "weight decay should be >= 0 but is: -0.1"),
            Invalid({"adjust_lr_fn": "rms"}, ValueError, "Adjust learning rate function rms is not supported"),
        ],
        sparse_error="Muon does not support sparse gradients",
        # 2-D only: a square, a tall and a wide matrix (the iteration runs on the transpose of
        # a tall one)
        shapes=((4, 4), (5, 2), (3, 6)),
        lr_message="Learning rate should be >= 0 but is: ",
    ),
]

INFO_BY_NAME = {info.name: info for info in INFOS}


def takes(info: OptimInfo, name: str) -> bool:
    """Whether our class of ``info`` has the constructor argument ``name``."""
    return name in inspect.signature(info.ours.__init__).parameters


def impl_flags(info: OptimInfo, impl: str, for_torch: bool = False) -> Dict[str, Any]:
    """The constructor flags that select implementation ``impl`` (see :data:`IMPL_FLAGS`) in
    our class of ``info`` (``fused=False`` for the single-tensor path of a class without
    ``foreach``: Muon) or, ``for_torch``, in torch's (none where it has one path only)."""
    if impl == "single" and not takes(info, "foreach"):
        return {} if for_torch else {"fused": False}
    return IMPL_FLAGS[impl]


def shapes_of(info: Optional[OptimInfo]) -> List[Tuple[int, ...]]:
    """The parameter shapes of ``info``'s runs (:data:`SHAPES` unless it has its own)."""
    return list(info.shapes) if info is not None and info.shapes else SHAPES


def gradient_schedule(step: int, n_params: int, late_start: bool = True) -> List[bool]:
    """Which parameters get a gradient at ``step`` (False -> None, skipped as torch skips it).

    Parameter 1 is skipped every fourth step; with ``late_start``, parameter 2 is skipped for
    the first three steps, so its state starts late.
    """
    present = [True] * n_params
    if n_params > 1 and step % 4 == 1:
        present[1] = False
    if late_start and n_params > 2 and step < 3:
        present[2] = False
    return present


def make_params(dtype: torch.dtype, seed: int = 0, info: Optional[OptimInfo] = None) -> List[torch.Tensor]:
    """Seeded parameters of the shapes of ``info`` (:func:`shapes_of`)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=dtype) for shape in shapes_of(info)]


def make_gradients(
    step: int, dtype: torch.dtype, generator: torch.Generator, sparse: bool = False,
    late_start: bool = True, info: Optional[OptimInfo] = None,
) -> List[Optional[torch.Tensor]]:
    """Seeded gradients for one step (sparse ones keep about half of the entries), for the
    parameters of ``info``."""
    grads: List[Optional[torch.Tensor]] = []
    shapes = shapes_of(info)
    for shape, present in zip(shapes, gradient_schedule(step, len(shapes), late_start)):
        grad = torch.randn(shape, generator=generator, dtype=dtype)
        if sparse:
            mask = torch.rand(shape, generator=generator) < 0.5
            grad = (grad * mask).to_sparse() if len(shape) > 0 else grad  # a scalar's stays dense
        grads.append(grad if present else None)
    return grads


def build_params_arg(config: Config, params: Sequence[torch.Tensor]) -> Any:
    """The ``params`` argument for both constructors: a list of tensors or of group dicts."""
    if config.groups is None:
        return list(params)
    return [{"params": [params[i] for i in indices], **overrides} for indices, overrides in config.groups]


def flat_order(config: Config) -> List[int]:
    """Indices (into the parameters' shapes: three of them) of the parameters in flat order,
    group after group."""
    if config.groups is None:
        return list(range(len(SHAPES)))
    return [i for indices, _ in config.groups for i in indices]


def compiled_tolerances(info: OptimInfo) -> Optional[Dict[str, float]]:
    """How close a compiled step that Inductor fuses must come to the eager one: None (float32's
    tolerances) but for Muon, whose update is a bfloat16 iteration Inductor fuses in its own
    order (bfloat16's, torch.testing's default for it)."""
    return {"rtol": 1.6e-2, "atol": 1e-5} if info.name == "Muon" else None


def tolerances(dtype: torch.dtype) -> Dict[str, float]:
    if dtype == torch.float64:
        return {"rtol": 1e-10, "atol": 1e-12}
    return {"rtol": 1e-5, "atol": 1e-6}
