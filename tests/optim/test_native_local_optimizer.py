"""plugin.optim.NativeLocalOptimizer (the native local optimizer, C++) against functional_optim's eager
instances with the same arguments (bitwise: the same kernels), locally; and its ops called by
their RPC functions on a real worker, also while a thread there holds the GIL."""
import copy
import ctypes
import gc
import threading
import time
from typing import Dict

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import functional_optim
import plugin
from plugin import _rpc_functions, ops
from plugin.optim import NativeLocalOptimizer, _status
from tests.support import optim_remote

F = functional_optim

# Per optimizer: several configurations (the options each takes; Tensor lr; capturable=False).
CONFIGS = {
    F.SGD: [dict(lr=0.1), dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
            dict(lr=0.05, momentum=0.9, nesterov=True, maximize=True), dict(lr="tensor", momentum=0.5)],
    F.Adam: [dict(lr=0.01), dict(lr=0.01, amsgrad=True, weight_decay=0.01, maximize=True, capturable=False),
             dict(lr="tensor", betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)],
    F.AdamW: [dict(lr=0.01), dict(lr="tensor", amsgrad=True, weight_decay=0.1, maximize=True)],
    F.Adagrad: [dict(lr=0.1), dict(lr=0.1, lr_decay=0.1, weight_decay=0.01, initial_accumulator_value=0.1, eps=1e-8),
                dict(lr="tensor", maximize=True)],
    F.RMSprop: [dict(lr=0.01), dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.01),
                dict(lr="tensor", alpha=0.9, maximize=True, capturable=False)],
    F.Adamax: [dict(lr=0.01), dict(lr="tensor", weight_decay=0.01, maximize=True, betas=(0.8, 0.9))],
    F.Adadelta: [dict(lr=0.5), dict(lr="tensor", rho=0.8, weight_decay=0.01, maximize=True)],
    F.Rprop: [dict(lr=0.01), dict(lr="tensor", etas=(0.4, 1.3), step_sizes=(1e-5, 1.0), maximize=True)],
    F.NAdam: [dict(lr=0.01), dict(lr="tensor", momentum_decay=0.01, weight_decay=0.01, decoupled_weight_decay=True),
              dict(lr=0.01, weight_decay=0.01, maximize=True)],
    F.RAdam: [dict(lr=0.01), dict(lr="tensor", weight_decay=0.01, decoupled_weight_decay=True, maximize=True)],
}
CASES = [(cls, i) for cls, configs in CONFIGS.items() for i in range(len(configs))]


def case_id(case):
    return f"{case[0].__name__}-{case[1]}"


def make_params(seed=0, dtypes=(torch.float32, torch.float64, torch.bfloat16, torch.float32)):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(3, 4), (5,), (2, 3), (4,)]
    return [(torch.rand(s, generator=gen, dtype=torch.float64) + 0.5).to(d).requires_grad_() for s, d in zip(shapes, dtypes)]


def kwargs_of(cls, i):
    kwargs = dict(CONFIGS[cls][i])
    if kwargs.get("lr") == "tensor":
        kwargs["lr"] = torch.tensor(0.02)
    return kwargs


def groups_of(params, kwargs):
    """Two param groups: mixed dtypes in the first, another lr (a number) in the second."""
    lr = kwargs.get("lr", 0.01)
    other_lr = 0.5 * (lr.item() if isinstance(lr, torch.Tensor) else lr)
    return [{"params": params[:3]}, {"params": params[3:], "lr": other_lr}]


def gradients(params, step, skip=()):
    gen = torch.Generator().manual_seed(100 + step)
    return [None if k in skip else torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            for k, p in enumerate(params)]


def pair(cls, kwargs, seed=0, dtypes=None):
    """An eager functional_optim instance and a native one, each over its own copy of the same
    parameters, built with the same arguments (each its own Tensors)."""
    extra = {} if dtypes is None else {"dtypes": dtypes}
    eager_params, native_params = make_params(seed, **extra), make_params(seed, **extra)
    eager = cls(groups_of(eager_params, kwargs), **copy.deepcopy(kwargs))
    native = NativeLocalOptimizer(cls, groups_of(native_params, kwargs), **copy.deepcopy(kwargs))
    return eager, eager_params, native, native_params


def assert_same_params(a, b):
    for k, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and torch.equal(x.detach(), y.detach()), f"parameter {k}"


def assert_same_state(eager_state, native_state):
    assert sorted(eager_state) == sorted(native_state)
    for i in eager_state:
        assert list(eager_state[i]) == list(native_state[i]), f"keys of state[{i}]"
        for key, value in eager_state[i].items():
            other = native_state[i][key]
            assert (value.dtype, value.device, value.shape) == (other.dtype, other.device, other.shape), (i, key)
            if value.is_sparse:
                value, other = value.to_dense(), other.to_dense()
            assert torch.equal(value, other), f"state[{i}]['{key}']"


def assert_same_groups(eager_groups, native_groups):
    assert len(eager_groups) == len(native_groups)
    for e, n in zip(eager_groups, native_groups):
        assert list(e) == list(n)
        for key, value in e.items():
            other = n[key]
            if isinstance(value, torch.Tensor) or isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value):
                as_list = lambda v: [float(x) for x in (v if isinstance(v, tuple) else (v,))]  # noqa: E731
                assert as_list(value) == as_list(other), key
            else:
                assert value == other, key


def assert_same(eager, eager_params, native, native_params):
    assert_same_params(eager_params, native_params)
    sd = native.state_dict()
    assert_same_state(eager.state_dict()["state"], sd["state"])
    assert_same_groups(eager.state_dict()["param_groups"], sd["param_groups"])


# --- bitwise parity ------------------------------------------------------------------------


def test_an_empty_parameter_list_is_refused_by_functional_optims_one_check():
    """The C++ object checks its parameters with functional_optim's op (check_param_count,
    through group_step_ops.h): torch's ValueError and message, as the class raises it."""
    message = "^optimizer got an empty parameter list$"
    with pytest.raises(ValueError, match=message):
        ops.new_local_optimizer("adam", [[]], None)
    with pytest.raises(ValueError, match=message):
        NativeLocalOptimizer(F.Adam, [])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_steps_match_functional_optim_bitwise(case):
    """Four steps (some gradients None, a Tensor lr changed in place between steps): parameters,
    state and state_dict equal to the eager instance's, to the bit."""
    cls, i = case
    kwargs = kwargs_of(cls, i)
    eager, eager_params, native, native_params = pair(cls, kwargs)
    assert NativeLocalOptimizer.why_not_native(cls, make_params(), **copy.deepcopy(kwargs)) is None
    for step in range(4):
        skip = {1} if step == 1 else ({0, 3} if step == 2 else ())
        grads = gradients(eager_params, step, skip)
        eager.step([None if g is None else g.clone() for g in grads])
        native.step_gradients(grads)
        if step == 1 and isinstance(kwargs.get("lr"), torch.Tensor):
            # a scheduler's change of a Tensor lr, in place: followed by both from the next step on
            eager.param_groups[0]["lr"].fill_(0.005)
            native.state_dict()["param_groups"][0]["lr"].fill_(0.005)  # the Tensor it follows, as torch's
        assert_same(eager, eager_params, native, native_params)
    assert native.hyperparameters() == eager.hyperparameters()
    assert native.options() == eager.options()
    protocol = functional_optim.state_dict(eager)
    native_sd = native.state_dict()
    assert_same_state(protocol["state"], native_sd["state"])


def test_float16_and_one_dtype_per_group_match():
    """float16 parameters (a fused dtype too) and groups of one dtype each."""
    for cls in (F.Adam, F.NAdam, F.SGD):
        kwargs = dict(lr=0.01, momentum=0.9) if cls is F.SGD else dict(lr=0.01)
        dtypes = (torch.float16, torch.float16, torch.float16, torch.float64)
        eager, eager_params, native, native_params = pair(cls, kwargs, dtypes=dtypes)
        for step in range(3):
            grads = gradients(eager_params, step)
            eager.step(grads)
            native.step_gradients(grads)
        assert_same(eager, eager_params, native, native_params)


# --- sparse gradients ----------------------------------------------------------------------


def sparse_gradient(shape, step):
    rows = torch.tensor([[0, 2, 0, 3][step % 2:], [1, 0, 1, 2][step % 2:]])  # duplicates: uncoalesced
    values = torch.arange(1.0, rows.shape[1] + 1) * (0.5 + step)
    return torch.sparse_coo_tensor(rows, values, shape, check_invariants=True)


@pytest.mark.parametrize("cls,kwargs", [
    (F.SGD, dict(lr=0.1)), (F.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    (F.SGD, dict(lr=0.1, momentum=0.5, dampening=0.2)),
    (F.Adagrad, dict(lr=0.1, lr_decay=0.1)), (F.Adagrad, dict(lr=0.1, maximize=True, eps=1e-6)),
], ids=["sgd", "sgd-momentum-nesterov", "sgd-dampening", "adagrad", "adagrad-maximize"])
def test_sparse_gradients_match_bitwise(cls, kwargs):
    """SGD and Adagrad take sparse gradients (one group, a dense gradient beside them), bitwise
    as the eager instance; a checked step's owner says so (accepts_sparse)."""
    def params():
        gen = torch.Generator().manual_seed(3)
        return [torch.rand(4, 3, generator=gen).requires_grad_(), torch.rand(3, generator=gen).requires_grad_()]

    eager_params, native_params = params(), params()
    eager = cls(eager_params, **kwargs)
    native = NativeLocalOptimizer(cls, native_params, **kwargs)
    assert native.accepts_sparse()
    for step in range(3):
        grads = [sparse_gradient((4, 3), step), torch.full((3,), 0.25 * (step + 1))]
        eager.step(grads)
        native.step_gradients(grads)
        assert_same_params(eager_params, native_params)
        assert_same_state(eager.state_dict()["state"], native.state_dict()["state"])


REJECTING = [(cls, dict(lr=0.01)) for cls in (F.Adam, F.AdamW, F.RMSprop, F.Adamax, F.Adadelta, F.Rprop, F.NAdam, F.RAdam)]
REJECTING += [(F.SGD, dict(lr=0.1, fused=True)), (F.Adagrad, dict(lr=0.1, weight_decay=0.1)),
              (F.Adagrad, dict(lr=0.1, fused=True))]


@pytest.mark.parametrize("cls,kwargs", REJECTING, ids=lambda v: v.__name__ if isinstance(v, type) else str(sorted(v)))
def test_a_sparse_gradient_is_rejected_with_functional_optims_message(cls, kwargs):
    eager, eager_params, native, native_params = pair(cls, kwargs)
    grads = gradients(eager_params, 0)
    eager.step(grads)
    native.step_gradients(grads)
    before = copy.deepcopy(native.state_dict())
    bad = gradients(eager_params, 1)
    bad[1] = bad[1].to_sparse()
    with pytest.raises(RuntimeError) as expected:
        eager.step(bad)
    with pytest.raises(RuntimeError) as got:
        native.step_gradients(bad)
    assert str(got.value) == str(expected.value)
    assert not native.accepts_sparse()
    assert_same(eager, eager_params, native, native_params)
    assert_same_state(before["state"], native.state_dict()["state"])


# --- bad gradients -------------------------------------------------------------------------


def bad_gradient_lists(params):
    good = gradients(params, 0)
    wrong_shape = list(good)
    wrong_shape[1] = torch.zeros(6, dtype=torch.float64)
    wrong_dtype = list(good)
    wrong_dtype[2] = torch.zeros(2, 3, dtype=torch.float32)
    wrong_device = list(good)
    wrong_device[3] = torch.zeros(4, device="meta")
    return {"count": good[:3], "shape": wrong_shape, "dtype": wrong_dtype, "device": wrong_device}


@pytest.mark.parametrize("cls", [F.SGD, F.Adam, F.RMSprop, F.Rprop])
@pytest.mark.parametrize("kind", ["count", "shape", "dtype", "device"])
def test_a_bad_gradient_raises_functional_optims_error_and_changes_nothing(cls, kind):
    kwargs = dict(lr=0.1, momentum=0.9) if cls is F.SGD else dict(lr=0.1)
    eager, eager_params, native, native_params = pair(cls, kwargs)
    grads = gradients(eager_params, 0)
    eager.step(grads)
    native.step_gradients(grads)
    before = copy.deepcopy(native.state_dict())
    bad = bad_gradient_lists(eager_params)[kind]
    with pytest.raises(ValueError) as expected:
        eager.step(bad)
    with pytest.raises(ValueError) as got:
        native.step_gradients(bad)
    assert str(got.value) == str(expected.value)
    assert_same(eager, eager_params, native, native_params)
    assert_same_state(before["state"], native.state_dict()["state"])


# --- state_dict, load_state_dict, set_group -----------------------------------------------


@pytest.mark.parametrize("cls", list(CONFIGS))
def test_state_dict_round_trip(cls):
    """A native optimizer's state_dict loads into a fresh native one and into the eager class;
    all three then step alike, to the bit."""
    kwargs = kwargs_of(cls, len(CONFIGS[cls]) - 1)
    # (functional_optim's NAdam cannot step a bfloat16 parameter after a load: the load casts
    # mu_product to bfloat16, which its kernel refuses; so no bfloat16 parameter for NAdam here)
    dtypes = (torch.float32, torch.float64, torch.float32, torch.float32) if cls is F.NAdam else None
    eager, eager_params, native, native_params = pair(cls, kwargs, dtypes=dtypes)
    for step in range(2):
        grads = gradients(eager_params, step)
        eager.step(grads)
        native.step_gradients(grads)
    saved = copy.deepcopy(native.state_dict())
    loaded_eager, loaded_eager_params, fresh, fresh_params = pair(cls, kwargs, seed=0, dtypes=dtypes)
    with torch.no_grad():
        for p, q, r in zip(fresh_params, loaded_eager_params, native_params):
            p.copy_(r)
            q.copy_(r)
    fresh.load_state_dict(copy.deepcopy(saved))
    loaded_eager.load_state_dict(copy.deepcopy(saved))
    assert_same(loaded_eager, loaded_eager_params, fresh, fresh_params)
    assert_same_groups(saved["param_groups"], fresh.state_dict()["param_groups"])
    if cls is not F.NAdam:  # (loading casts NAdam's mu_product to the parameter's dtype, as torch)
        assert_same_state(saved["state"], fresh.state_dict()["state"])
    grads = gradients(eager_params, 5)
    for opt in (eager, loaded_eager):
        opt.step(grads)
    for opt in (native, fresh):
        opt.step_gradients(grads)
    assert_same(eager, eager_params, native, native_params)
    assert_same(loaded_eager, loaded_eager_params, fresh, fresh_params)


def test_load_state_dict_sets_values_and_rejects_a_bad_one_changing_nothing():
    eager, eager_params, native, native_params = pair(F.Adam, dict(lr=0.01))
    grads = gradients(eager_params, 0)
    eager.step(grads)
    native.step_gradients(grads)
    saved = copy.deepcopy(native.state_dict())
    saved["param_groups"][1]["lr"] = 0.125
    saved["param_groups"][0]["amsgrad"] = True
    saved["param_groups"][0]["initial_lr"] = 0.5
    eager.load_state_dict(copy.deepcopy(saved))
    native.load_state_dict(copy.deepcopy(saved))
    assert native.hyperparameters() == eager.hyperparameters()
    assert native.options() == eager.options()
    assert native.state_dict()["param_groups"][0]["initial_lr"] == 0.5
    before = copy.deepcopy(native.state_dict())
    bad_shape = copy.deepcopy(saved)
    bad_shape["state"][0]["exp_avg"] = torch.zeros(7)
    bad_value = copy.deepcopy(saved)
    bad_value["param_groups"][0]["lr"] = -1.0
    for bad in (bad_shape, bad_value):
        with pytest.raises(ValueError) as expected:
            eager.load_state_dict(copy.deepcopy(bad))
        with pytest.raises(ValueError) as got:
            native.load_state_dict(copy.deepcopy(bad))
        assert str(got.value) == str(expected.value)
        assert_same_state(before["state"], native.state_dict()["state"])
        assert_same_groups(before["param_groups"], native.state_dict()["param_groups"])
    with pytest.raises(RuntimeError, match="would no longer run the fused implementation"):
        native.load_state_dict(dict(saved, param_groups=[dict(g, foreach=True) for g in saved["param_groups"]]))
    grads = gradients(eager_params, 1)
    eager.step(grads)
    native.step_gradients(grads)
    assert_same(eager, eager_params, native, native_params)


def test_loads_a_torch_optim_state_dict():
    params = make_params(dtypes=(torch.float32,) * 4)
    reference = torch.optim.NAdam(params, lr=0.01)
    for p, g in zip(params, gradients(params, 0)):
        p.grad = g
    reference.step()
    eager, eager_params, native, native_params = pair(F.NAdam, dict(lr=0.01), dtypes=(torch.float32,) * 4)
    sd = reference.state_dict()
    sd["param_groups"] = [dict(sd["param_groups"][0], params=[0, 1, 2]), dict(sd["param_groups"][0], params=[3])]
    eager.load_state_dict(copy.deepcopy(sd))
    native.load_state_dict(copy.deepcopy(sd))
    assert_same(eager, eager_params, native, native_params)


def test_set_group_effects_and_errors():
    eager, eager_params, native, native_params = pair(F.SGD, dict(lr=0.1, momentum=0.9))
    for values in ({"lr": 0.01}, {"momentum": 0.5, "dampening": 0.25}):
        eager.set_group(1, values, {})
        native.set_group(1, values, {})
    eager.set_group(0, {}, {"maximize": True})
    native.set_group(0, {}, {"maximize": True})
    lr = torch.tensor(0.03)
    eager.param_groups[0]["lr"] = lr
    native.set_group(0, {}, {}, {"lr": lr})
    assert native.hyperparameters() == eager.hyperparameters()
    for step in range(2):
        grads = gradients(eager_params, step)
        eager.step(grads)
        native.step_gradients(grads)
    assert_same(eager, eager_params, native, native_params)
    lr.fill_(0.001)  # followed by both (the same Tensor)
    native.set_hyperparameter(1, "lr", 0.02)
    eager.set_hyperparameter(1, "lr", 0.02)
    grads = gradients(eager_params, 3)
    eager.step(grads)
    native.step_gradients(grads)
    assert_same(eager, eager_params, native, native_params)
    before = copy.deepcopy(native.state_dict())
    for args, error in [((0, {"lr": -1.0}, {}), ValueError), ((0, {"nope": 1.0}, {}), ValueError),
                        ((0, {}, {"nope": True}), ValueError), ((2, {"lr": 1.0}, {}), ValueError),
                        ((0, {}, {"maximize": None}), ValueError), ((0, {"momentum": 0.0}, {"nesterov": True}), ValueError)]:
        with pytest.raises(error) as expected:
            eager.set_group(*args)
        with pytest.raises(error) as got:
            native.set_group(*args)
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="would no longer run the fused implementation with foreach=True"):
        native.set_group(0, {"lr": 0.5}, {"foreach": True})
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        native.set_group(0, {}, {"foreach": True, "fused": True})
    assert_same_state(before["state"], native.state_dict()["state"])
    assert_same_groups(before["param_groups"], native.state_dict()["param_groups"])
    native.set_group(0, {}, {"fused": True})  # still fused: allowed
    assert native.options()[0]["fused"] is True
    assert not NativeLocalOptimizer(F.SGD, make_params(), lr=0.1, fused=True).accepts_sparse()


def test_why_not_native_says_why():
    params = make_params()
    assert NativeLocalOptimizer.why_not_native(F.Adam, params, lr=0.1, foreach=True) == "foreach=True"
    assert NativeLocalOptimizer.why_not_native(F.Adam, params, lr=0.1, fused=False) == "fused=False"
    assert NativeLocalOptimizer.why_not_native(F.SGD, params, lr=0.1, differentiable=True) == "differentiable=True"
    assert NativeLocalOptimizer.why_not_native(
        F.SGD, [{"params": params[:2]}, {"params": params[2:], "foreach": True}], lr=0.1) == "foreach=True (param group 1)"

    class Mine:
        pass

    assert NativeLocalOptimizer.why_not_native(Mine, params) == "a functional class registered by the user"
    meta = [torch.zeros(3, device="meta", requires_grad=True)]
    assert NativeLocalOptimizer.why_not_native(F.RMSprop, meta, lr=0.1) == "no fused implementation for RMSprop on meta"
    assert NativeLocalOptimizer.why_not_native(F.Adam, params, lr=-1.0) is None  # the constructor raises it
    with pytest.raises(ValueError, match="Invalid learning rate: -1.0"):
        NativeLocalOptimizer(F.Adam, params, lr=-1.0)
    with pytest.raises(ValueError, match="foreach=True"):
        NativeLocalOptimizer(F.Adam, params, lr=0.1, foreach=True)


def test_a_handle_whose_optimizer_is_gone_raises_naming_it():
    native = NativeLocalOptimizer(F.Adam, make_params(), lr=0.1)
    handle = native.handle
    other = NativeLocalOptimizer(F.Adam, make_params(), lr=0.1)
    assert other.handle != handle
    torch.ops.gilfree_rpc._optimizer_step_gradients(handle, [None] * 4)
    del native
    gc.collect()
    with pytest.raises(RuntimeError, match=rf"there is no local optimizer with handle {handle} here"):
        torch.ops.gilfree_rpc._optimizer_step_gradients(handle, [None] * 4)
    with pytest.raises(RuntimeError, match=rf"handle {handle} "):
        torch.ops.gilfree_rpc._optimizer_step(handle, 0, -1, -1)
    assert other.hyperparameters()[0]["lr"] == 0.1


def test_a_step_waits_for_the_parameters_locks_without_the_gil():
    """A step holds the locks of its parameters, shared with every local optimizer of this
    process over them: two optimizers over one parameter stepping from two threads lose no
    update."""
    param = torch.zeros(1000)
    param.requires_grad_()
    a = NativeLocalOptimizer(F.SGD, [param], lr=1.0)
    b = NativeLocalOptimizer(F.SGD, [param], lr=1.0)
    grad = torch.full((1000,), -1.0)

    def run(opt):
        for _ in range(200):
            opt.step_gradients([grad])

    threads = [threading.Thread(target=run, args=(o,)) for o in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert torch.equal(param.detach(), torch.full((1000,), 400.0))


# --- by RPC, on a real worker --------------------------------------------------------------

_LOCAL: Dict[str, NativeLocalOptimizer] = {}


def build_on_owner(name: str, cls: type, kwargs: dict) -> int:
    """On the owner: a native local optimizer over its parameter ``name``; returns its handle."""
    _LOCAL[name] = NativeLocalOptimizer(cls, [optim_remote.PARAMS[name]], **kwargs)
    return _LOCAL[name].handle


def state_dict_on_owner(name: str) -> dict:
    return _LOCAL[name].state_dict()


def set_group_on_owner(name: str, hparams: dict, options: dict) -> None:
    _LOCAL[name].set_group(0, hparams, options)


def load_state_dict_on_owner(name: str, state_dict: dict) -> None:
    _LOCAL[name].load_state_dict(state_dict)


def forget_on_owner(name: str) -> None:
    del _LOCAL[name]
    gc.collect()


def hold_gil_on_owner(seconds: float) -> None:
    """Starts a thread that keeps this process's GIL for ``seconds`` (usleep through
    ctypes.PyDLL, which does not release it), after 0.3 s; records when it ends."""
    def hog():
        time.sleep(0.3)
        libc = ctypes.PyDLL(None)
        for _ in range(int(seconds / 0.5)):
            libc.usleep(500_000)
        _HOG["done"] = time.time()

    _HOG.clear()
    threading.Thread(target=hog, daemon=True).start()


_HOG: Dict[str, float] = {}


def gil_hog_done_at() -> float:
    while "done" not in _HOG:
        time.sleep(0.05)
    return _HOG["done"]


def forward_backward(name: str, owner: str, scale: float):
    with dist_autograd.context() as ctx:
        x = torch.full((4,), scale, dtype=torch.float64)
        loss = (rpc.rpc_sync(owner, optim_remote.use_param, args=(x, name)) ** 2).sum()
        plugin.autograd.backward(ctx, [loss])
        yield ctx


def owner_gradient(ctx: int, name: str, owner: str):
    return rpc.rpc_sync(owner, optim_remote.context_gradients, args=(ctx, [name]))[0]


def call(owner, op, *args):
    return _rpc_functions.call(owner, op, args).wait()


def test_ops_by_rpc_on_an_owner(cluster):
    owner, name = "worker1", "native_a"
    rref = rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (3, 4), 7, torch.float64))
    handle = rpc.rpc_sync(owner, build_on_owner, args=(name, F.Adam, {"lr": 0.1}))
    reference_param = rref.to_here().detach().clone().requires_grad_()
    reference = F.Adam([reference_param], lr=0.1)
    # a step, phases 1 and 2, a dropped step, a checked step
    for step in range(4):
        for ctx in forward_backward(name, owner, 0.5 + step):
            grad = owner_gradient(ctx, name, owner)
            if step == 0:
                call(owner, "_optimizer_step", handle, ctx, -1, -1)
            elif step == 1:
                token = call(owner, "_optimizer_prepare", handle, ctx, 10_000)
                dropped = call(owner, "_optimizer_prepare", handle, ctx, 10_000)
                assert call(owner, "_optimizer_drop", handle, dropped) is True
                assert call(owner, "_optimizer_drop", handle, dropped) is False
                call(owner, "_optimizer_commit", handle, token, -1)
            else:
                versions = ops._checked_versions(ctx, [1], False)
                assert len(versions) == 1
                if step == 3:  # a deadline in the past: late; other gradients: changed; nothing applied
                    assert call(owner, "_optimizer_step", handle, ctx, versions[0], 1) == _status.LATE
                    assert call(owner, "_optimizer_step", handle, ctx, versions[0] + 1, -1) == _status.CHANGED
                assert call(owner, "_optimizer_step", handle, ctx, versions[0], -1) == _status.APPLIED
        reference.step([grad])
        assert torch.equal(rref.to_here(), reference_param.detach()), f"step {step}"
    # its values and state: Python on the owner (functional_optim's optimizer there)
    saved = rpc.rpc_sync(owner, state_dict_on_owner, args=(name,))
    assert_same_state(reference.get_state(), saved["state"])
    assert saved["param_groups"] == functional_optim.state_dict(reference)["param_groups"]
    rpc.rpc_sync(owner, set_group_on_owner, args=(name, {"lr": 0.05}, {"amsgrad": True}))
    loaded = {"state": {0: {k: v * 2 for k, v in saved["state"][0].items()}},
              "param_groups": [dict(saved["param_groups"][0], lr=0.2, amsgrad=False)]}
    rpc.rpc_sync(owner, load_state_dict_on_owner, args=(name, loaded))
    again = rpc.rpc_sync(owner, state_dict_on_owner, args=(name,))
    assert_same_state(loaded["state"], again["state"])
    assert again["param_groups"][0]["lr"] == 0.2 and again["param_groups"][0]["amsgrad"] is False
    # errors come back with their type (the steps': their error trailer names it), nothing changed
    with pytest.raises(ValueError, match=r"set_state: state\[0\]\['exp_avg'\] has shape \[7\]"):
        rpc.rpc_sync(owner, load_state_dict_on_owner,
                     args=(name, dict(loaded, state={0: {"exp_avg": torch.zeros(7)}})))
    with pytest.raises(RuntimeError, match=r"RuntimeError: Adam does not support sparse gradients"):
        with dist_autograd.context() as ctx:
            bad = rpc.rpc_sync(owner, optim_remote.use_param_sparse, args=(torch.tensor([0, 1]), name))
            plugin.autograd.backward(ctx, [bad.sum()])
            call(owner, "_optimizer_step", handle, ctx, -1, -1)
    assert_same_state(loaded["state"], rpc.rpc_sync(owner, state_dict_on_owner, args=(name,))["state"])
    rpc.rpc_sync(owner, forget_on_owner, args=(name,))
    with pytest.raises(RuntimeError, match=rf"worker 'worker1' \(id 1\).*no local optimizer with handle {handle} here"):
        call(owner, "_optimizer_drop", handle, 1)


@pytest.mark.parametrize("phases", ["step", "prepare-commit", "checked"])
def test_an_owner_steps_while_a_thread_holds_its_gil(cluster, phases):
    """The owner answers the ops by RPC without its GIL: the step completes while a thread there
    holds the GIL for 4 seconds."""
    owner, name = "worker2", f"native_gil_{phases}"
    rref = rpc.rpc_sync(owner, optim_remote.make_param, args=(name, (3, 4), 9, torch.float64))
    handle = rpc.rpc_sync(owner, build_on_owner, args=(name, F.NAdam, {"lr": 0.1}))
    before = rref.to_here()
    for ctx in forward_backward(name, owner, 1.0):
        versions = ops._checked_versions(ctx, [2], False)
        rpc.rpc_sync(owner, hold_gil_on_owner, args=(4.0,))
        time.sleep(1.0)  # the thread holds the owner's GIL now
        if phases == "step":
            call(owner, "_optimizer_step", handle, ctx, -1, -1)
        elif phases == "prepare-commit":
            call(owner, "_optimizer_commit", handle, call(owner, "_optimizer_prepare", handle, ctx, 10_000), -1)
        else:
            assert call(owner, "_optimizer_step", handle, ctx, versions[0], -1) == _status.APPLIED
        stepped_at = time.time()
    done_at = rpc.rpc_sync(owner, gil_hog_done_at)
    assert stepped_at < done_at
    assert not torch.equal(rref.to_here(), before)
    rpc.rpc_sync(owner, forget_on_owner, args=(name,))
