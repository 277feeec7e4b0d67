"""``torch.library.opcheck`` over the ops of functional_optim's library that the optimizers
call (``torch.ops.gilfree_optim``: the group steps and the gradient check; its per-optimizer
kernels ``<name>_`` are opchecked in test_fused_kernels.py): each op's schema (what it
mutates), its fake/meta kernel (torch.compile's fake tensors), its autograd registration and
its dispatch under AOT autograd, on sample inputs of several optimizers, dense and sparse, first
steps and later ones, and for the check passing and failing inputs.
"""
import pytest
import torch

import functional_optim as F
from functional_optim import _kernels, configuration, ops

pytestmark = pytest.mark.timeout(600)

# Ops whose results are strings: AOT autograd's check compares tensor results (torch.compile
# never sees these as graph outputs: the group steps and functional_optim's Python call them
# to make or check the tensors); the other checks apply.
STRING_RESULTS = ("test_schema", "test_autograd_registration", "test_faketensor")

OPTIMIZERS = [(F.Adam, {"lr": 0.01, "amsgrad": True}), (F.SGD, {"lr": 0.1, "momentum": 0.9}), (F.RMSprop, {"lr": 0.01}),
              (F.NAdam, {"lr": 0.01}), (F.Adagrad, {"lr": 0.1}), (F.Adafactor, {"lr": 0.01})]


@pytest.fixture(scope="module", autouse=True)
def _library():
    if not _kernels.available():
        pytest.fail(f"the op library did not load: {_kernels.default_error()}")


def group(cls, kwargs, dtype=torch.float32):
    """An optimizer's group step arguments: its op name, plan, parameters, gradients, the state
    new_state makes for them."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).to(dtype) for s in ((4, 3), (5,))]
    grads = [torch.randn(p.shape, generator=gen).to(dtype) for p in params]
    optimizer = cls(params, **kwargs)
    plan, name = configuration.step_plans(optimizer)[0], configuration.optimizer_name(optimizer)
    return name, plan, params, grads


def ids(case):
    return case[0].__name__


@pytest.mark.parametrize("case", OPTIMIZERS, ids=ids)
def test_state_ops(case):
    name, plan, params, grads = group(*case)
    for dim in (0, 1, 2):
        torch.library.opcheck(torch.ops.gilfree_optim.state_keys.default, (name, dim, plan.names, plan.values),
                              test_utils=STRING_RESULTS)
    # SGD's momentum buffer is made empty (its first step writes it whole, from the gradient, as
    # torch makes it): its values are not compared
    torch.library.opcheck(torch.ops.gilfree_optim.new_state.default, (name, params, grads, plan.names, plan.values),
                          **({"test_utils": STRING_RESULTS} if name == "sgd" else {}))
    torch.library.opcheck(torch.ops.gilfree_optim.group_step_devices.default, (name,), test_utils=STRING_RESULTS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", OPTIMIZERS, ids=ids)
def test_group_step(case, dtype):
    """The first step (fresh state) and a later one, with and without a Tensor lr."""
    name, plan, params, grads = group(*case, dtype=dtype)
    state = ops.new_state(name, params, grads, plan.names, plan.values)
    for fresh, tensors in (([True, True], ([], [])), ([False, False], (["lr"], [torch.tensor(0.02)]))):
        torch.library.opcheck(
            torch.ops.gilfree_optim.group_step.default,
            (name, params, grads, state, fresh, plan.names, plan.values, *tensors),
        )


def test_group_step_packed():
    """A packed group (its state views of one buffer per dtype, GroupedState.pack)."""
    params = [torch.randn(4, 3), torch.randn(5)]
    optimizer = F.Adam(params, lr=0.01)
    optimizer.step([torch.ones_like(p) for p in params])  # the group's state made and packed
    s = optimizer._s
    assert s.packed[0], "the group is packed"
    plan = configuration.step_plans(optimizer)[0]
    torch.library.opcheck(
        torch.ops.gilfree_optim.group_step_packed.default,
        ("adam", params, [torch.ones_like(p) for p in params], s.packed[0], s.layout[0], [False, False], plan.names,
         plan.values, [], []),
    )


def test_sparse_group_step():
    params = [torch.randn(6, 3)]
    grads = [torch.sparse_coo_tensor(torch.tensor([[0, 4, 0]]), torch.ones(3, 3), (6, 3))]
    for cls in (F.SparseAdam, F.Adagrad, F.SGD):
        optimizer = cls(params, lr=0.1)
        plan, name = configuration.step_plans(optimizer)[0], configuration.optimizer_name(optimizer)
        state = ops.new_state(name, params, grads, plan.names, plan.values)
        torch.library.opcheck(
            torch.ops.gilfree_optim.group_step.default,
            (name, params, grads, state, [True], plan.names, plan.values, [], []),
            # (torch's schema check reads every tensor's storage, which a sparse COO tensor has
            # not; AOT autograd traces no sparse tensor)
            test_utils=("test_autograd_registration", "test_faketensor"),
        )


def test_gradient_check():
    """The check (both faces) on gradients that pass, and on each kind that fails."""
    params = [torch.randn(4, 3), torch.randn(5)]
    cases = [
        [torch.ones(4, 3), None],
        [torch.ones(4, 3), torch.ones(6)],  # a shape that does not fit
        [torch.ones(4, 3, dtype=torch.float64), torch.ones(5)],  # a dtype
        [torch.ones(4, 3).to_sparse(), torch.ones(5)],  # sparse, refused by the rule
    ]
    for gradients in cases:
        args = (params, gradients, [0, 2], ["no sparse gradients"], None, 0)
        torch.library.opcheck(torch.ops.gilfree_optim.gradient_error.default, args, test_utils=STRING_RESULTS)
        kind, _ = ops.gradient_error(*args)
        if kind == "":
            torch.library.opcheck(torch.ops.gilfree_optim.check_gradients.default, args)
        else:
            with pytest.raises((ValueError, RuntimeError)):
                ops.check_gradients(*args)


def test_table_and_message_ops():
    """The ops by which Python reads the library's tables and messages (issue 50: each kept once,
    in C++): the parameter-count check and its message, the dtype names, the tensor description,
    the fused implementation's dtypes, the hyperparameters' choices; and their values checked
    against what Python and torch say."""
    torch.library.opcheck(torch.ops.gilfree_optim.check_param_count.default, (2,), test_utils=STRING_RESULTS)
    for count in (0, 3):
        torch.library.opcheck(torch.ops.gilfree_optim.param_count_error.default, (count,), test_utils=STRING_RESULTS)
    assert ops.param_count_error(0) == "optimizer got an empty parameter list" and ops.param_count_error(3) == ""
    with pytest.raises(ValueError, match="^optimizer got an empty parameter list$"):
        torch.ops.gilfree_optim.check_param_count(0)
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.complex64):
        torch.library.opcheck(torch.ops.gilfree_optim.dtype_name.default, (dtype,), test_utils=STRING_RESULTS)
        torch.library.opcheck(torch.ops.gilfree_optim.fused_dtype.default, (dtype,), test_utils=STRING_RESULTS)
        assert torch.ops.gilfree_optim.fused_dtype(dtype) == (dtype in (torch.float32, torch.float64, torch.float16,
                                                                        torch.bfloat16)), dtype
    for t in (torch.randn(2, 3), torch.zeros(()), torch.ones(4, dtype=torch.float64).to_sparse()):
        torch.library.opcheck(torch.ops.gilfree_optim.describe_tensor.default, (t,), test_utils=STRING_RESULTS)
    torch.library.opcheck(torch.ops.gilfree_optim.hyperparameter_choices.default, (), test_utils=STRING_RESULTS)
    assert torch.ops.gilfree_optim.hyperparameter_choices() == {"adjust_lr_fn": ["original", "match_rms_adamw"]}  # torch.optim.Muon's
