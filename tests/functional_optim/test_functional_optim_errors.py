"""Bad input gives clear errors, raised before anything changes, eagerly and in TorchScript.

Invalid hyperparameters come from the table in optim_configs.py and are checked against
torch.optim's own behaviour. Bad gradients are checked on every optimizer with a snapshot of
the parameters, the state and the hyperparameters taken before the call and compared bit by bit
after it.
"""
import re
from typing import Any, Dict, List

import pytest
import torch

import functional_optim as F
from functional_optim import _validation, ops, scripting
from functional_optim._param_groups import split_values
from functional_optim.scripting import script_optimizer

from tests.support import optim_configs as C
from tests.support import scripted_optim_fns

INVALID_CASES = [
    pytest.param(info, bad, id=f"{info.name}-{'-'.join(f'{k}={v}' for k, v in bad.kwargs.items())}")
    for info in C.INFOS
    for bad in info.invalid
]


@pytest.mark.parametrize("info, bad", INVALID_CASES)
def test_invalid_hyperparameters(info, bad):
    params = C.make_params(torch.float32, info=info)
    if "not supported" not in bad.match:
        # The expected message is torch's own: check that first.
        with pytest.raises(bad.error, match=bad.match):
            info.torch_class([torch.nn.Parameter(p.clone()) for p in params], **bad.kwargs)
    with pytest.raises(bad.error, match=bad.match):
        info.ours(params, **bad.kwargs)
    # The same values through a param group and through the protocol (eager and scripted).
    hyper = {k: v for k, v in bad.kwargs.items() if not isinstance(v, bool)}
    if len(hyper) == 1 and len(bad.kwargs) == 1:
        (name, value), = hyper.items()
        with pytest.raises(bad.error, match=bad.match):
            info.ours([{"params": params, name: value}])
        opt = info.ours([p.clone() for p in params])
        before = opt.hyperparameters()
        with pytest.raises(bad.error, match=bad.match):
            opt.param_groups[0][name] = value
        assert opt.hyperparameters() == before
        module = script_optimizer(opt)
        try:  # the value as the protocol takes it (tuples split, None and strings as numbers)
            updates, _, _ = split_values({name: value}, before[0].keys(), [])
        except bad.error as e:  # a value no number stands for (an unknown string): refused here
            assert re.search(bad.match, str(e))
        else:
            with pytest.raises(torch.jit.Error, match=bad.match.split(":")[0]):
                module.set_group(0, updates, {})
        assert module.hyperparameters() == before


@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_invalid_lr_raises_inside_torchscript(info):
    train = scripting.script(scripted_optim_fns.TRAIN[info.name])
    with pytest.raises(torch.jit.Error, match=re.escape(info.lr_message.split(":")[0])):
        train(C.make_params(torch.float32, info=info), [], -1.0)


def test_empty_parameter_list_is_the_op_librarys_one_check():
    """"optimizer got an empty parameter list" is written once, in the op library
    (``check_param_count``): the op, an empty ``params``, a list of empty param groups and a
    TorchScript class raise it alike (the plugin's native local optimizer calls the same op:
    tests/optim/test_native_local_optimizer.py)."""
    message = "^optimizer got an empty parameter list$"
    with pytest.raises(ValueError, match=message):
        ops.check_param_count(0)
    ops.check_param_count(1)
    assert (ops.param_count_error(0), ops.param_count_error(2)) == ("optimizer got an empty parameter list", "")
    with pytest.raises(ValueError, match=message):
        F.SGD([])
    with pytest.raises(ValueError, match=message):
        F.Adagrad([{"params": []}, {"params": []}])
    train = scripting.script(scripted_optim_fns.TRAIN["Adam"])
    with pytest.raises(torch.jit.Error, match="optimizer got an empty parameter list"):
        train([], [], 0.01)


def test_messages_describe_tensors_with_the_op_librarys_words():
    """The Python messages name dtypes and describe tensors with the op library's one table
    (``dtype_name``, ``describe_tensor``), as its gradient checks do."""
    assert _validation.dtype_name(torch.bfloat16) == "torch.bfloat16" == ops.dtype_name(torch.bfloat16)
    assert _validation.dtype_name(torch.complex64) == "torch.complex64"
    assert _validation.describe(torch.zeros(4, 5)) == "shape [4, 5], dtype torch.float32, device cpu"
    sparse = torch.zeros(2, 3).to_sparse()
    assert _validation.describe(sparse) == "shape [2, 3], dtype torch.float32, device cpu, sparse"
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    assert _validation.describe(nested) == "shape (nested), dtype torch.float32, device cpu"
    p = torch.zeros(2)
    with pytest.raises(ValueError, match=re.escape("(shape [3], dtype torch.float64, device cpu)")):
        F.SGD([p]).step_param(torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))


def test_bad_params():
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        F.Adam([])
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        F.SGD(torch.zeros(3))
    p = torch.zeros(3)
    with pytest.raises(ValueError, match="more than one parameter group"):
        F.SGD([{"params": [p]}, {"params": [p]}])
    with pytest.raises(ValueError, match="non-leaf"):
        F.SGD([torch.zeros(3, requires_grad=True) * 2])
    with pytest.raises(ValueError, match="complex parameters are not supported"):
        F.Adam([torch.zeros(3, dtype=torch.complex64)])
    with pytest.raises(RuntimeError, match="`fused=True` requires all the params to be floating point"):
        F.Adam([torch.zeros(3, dtype=torch.int64)], fused=True)
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):  # (Tensor rules: test_functional_optim_tensor_hparams.py)
        F.Adam([torch.zeros(3)], lr=torch.tensor([0.1, 0.2]))
    with pytest.raises(TypeError, match="hyperparameter 'lr' must be a number or a 1-element Tensor, got str"):
        F.Adam([torch.zeros(3)], lr="0.1")
    opt = F.Adam([torch.zeros(3)])
    with pytest.raises(ValueError, match="unknown hyperparameter 'momentum'"):
        opt.set_hyperparameter(0, "momentum", 0.9)
    with pytest.raises(ValueError, match="parameter group 1 does not exist"):
        opt.set_hyperparameter(1, "lr", 0.1)
    with pytest.raises(ValueError, match="parameters of a functional_optim param group cannot be replaced"):
        opt.param_groups[0]["params"] = []


# ----------------------------------------------------------------------------- bad gradients
def _snapshot(opt) -> Dict[str, Any]:
    def clone(t):
        return t.clone()

    return {
        "params": [p.clone() for p in opt._params_for_test],
        "state": {i: {k: clone(v) for k, v in entry.items()} for i, entry in opt.get_state().items()},
        "hyperparameters": opt.hyperparameters(),
        "options": opt.options(),
    }


def _assert_unchanged(before: Dict[str, Any], opt) -> None:
    after = _snapshot(opt)
    assert after["hyperparameters"] == before["hyperparameters"]
    assert after["options"] == before["options"]
    for b, a in zip(before["params"], after["params"]):
        assert torch.equal(a, b), "a parameter changed"
    assert sorted(after["state"]) == sorted(before["state"])
    for i, entry in before["state"].items():
        assert sorted(entry) == sorted(after["state"][i])
        for key, value in entry.items():
            assert torch.equal(after["state"][i][key], value), f"state[{i}][{key!r}] changed"


def _stepped(info, scripted: bool, impl: str = "single", **kwargs):
    params = C.make_params(torch.float32, info=info)
    opt = info.ours(params, **C.impl_flags(info, impl), **kwargs)
    if scripted:
        opt = script_optimizer(opt)
    opt._params_for_test = params if not scripted else params
    generator = torch.Generator().manual_seed(0)
    for step in range(3):
        opt.step(C.make_gradients(step, torch.float32, generator, late_start=False, info=info))
    return opt


def _good(shapes, generator=None) -> List[torch.Tensor]:
    generator = generator or torch.Generator().manual_seed(9)
    return [torch.randn(s, generator=generator) for s in shapes]


def _shape(shape) -> str:
    return re.escape(str(list(shape)))


def _bad_gradient_cases(shapes):
    good = _good(shapes)
    too_few = good[:2]
    too_many = good + [torch.zeros(1)]
    wrong_shape = [good[0], torch.zeros(4), good[2]]
    wrong_dtype = [good[0], good[1], torch.zeros(shapes[2], dtype=torch.float64)]
    wrong_device = [good[0].to("meta"), good[1], good[2]]
    return [
        ("too_few", too_few, r"expected 3 gradients .* got 2"),
        ("too_many", too_many, r"expected 3 gradients .* got 4"),
        ("wrong_shape", wrong_shape, rf"gradients\[1\]: expected shape {_shape(shapes[1])}, dtype torch.float32, device cpu .*; got shape \[4\]"),
        ("wrong_dtype", wrong_dtype, rf"gradients\[2\]: expected shape {_shape(shapes[2])}, dtype torch.float32.*got shape {_shape(shapes[2])}, dtype torch.float64"),
        ("wrong_device", wrong_device, r"gradients\[0\]: expected .*device cpu.*got .*device meta"),
    ]


BAD_GRADIENT_CASES = [
    pytest.param(info, impl, scripted, name, grads, match, id=f"{info.name}-{impl}-{'script' if scripted else 'eager'}-{name}")
    for info in C.INFOS
    for impl in info.impls
    for scripted in (False, True)
    for name, grads, match in _bad_gradient_cases(C.shapes_of(info))
]


@pytest.mark.parametrize("info, impl, scripted, name, grads, match", BAD_GRADIENT_CASES)
def test_bad_gradients_change_nothing(info, impl, scripted, name, grads, match):
    opt = _stepped(info, scripted, impl)
    before = _snapshot(opt)
    error = torch.jit.Error if scripted else ValueError
    with pytest.raises(error, match=match):
        opt.step(grads)
    _assert_unchanged(before, opt)


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
@pytest.mark.parametrize("info", [i for i in C.INFOS if i.sparse_error], ids=str)
def test_sparse_gradient_rejected_like_torch(info, scripted):
    params = C.make_params(torch.float32, info=info)
    tp = [torch.nn.Parameter(p.clone()) for p in params]
    for p in tp:
        p.grad = torch.ones_like(p).to_sparse()
    with pytest.raises(RuntimeError, match=info.sparse_error):
        info.torch_class(tp).step()
    opt = _stepped(info, scripted)
    before = _snapshot(opt)
    grads = [torch.ones(s) for s in C.shapes_of(info)]
    grads[1] = grads[1].to_sparse()
    with pytest.raises(torch.jit.Error if scripted else RuntimeError, match=info.sparse_error):
        opt.step(grads)
    _assert_unchanged(before, opt)


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
@pytest.mark.parametrize(
    "name, impl, kwargs, match",
    [
        ("Adagrad", "single", {"weight_decay": 0.1}, "weight_decay option is not compatible with sparse gradients"),
        ("Adagrad", "fused", {}, "`fused` does not support sparse grad"),
        ("SGD", "fused", {"momentum": 0.9}, "`_fused_sgd` does not support sparse gradients"),
    ],
)
def test_sparse_gradient_errors_change_nothing(name, impl, kwargs, match, scripted):
    opt = _stepped(C.INFO_BY_NAME[name], scripted, impl, **kwargs)
    before = _snapshot(opt)
    grads = [torch.ones(s) for s in C.SHAPES]
    grads[1] = grads[1].to_sparse()
    with pytest.raises(torch.jit.Error if scripted else RuntimeError, match=match):
        opt.step(grads)
    _assert_unchanged(before, opt)


@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
@pytest.mark.parametrize("info", C.INFOS, ids=str)
def test_step_param_errors_change_nothing(info, scripted):
    opt = _stepped(info, scripted)
    before = _snapshot(opt)
    error = torch.jit.Error if scripted else ValueError
    with pytest.raises(error, match="is not a parameter of this optimizer"):
        opt.step_param(torch.zeros(5), torch.zeros(5))
    with pytest.raises(error, match=rf"gradients\[1\]: expected shape {_shape(C.shapes_of(info)[1])}"):
        opt.step_param(opt._params_for_test[1], torch.zeros(6))
    _assert_unchanged(before, opt)


# ----------------------------------------------------------------------------- gradient check
def _describe(t):
    """``_validation.describe``'s form, a nested tensor's shape as ``(nested)``."""
    shape = "(nested)" if t.is_nested else str(list(t.shape))
    return f"shape {shape}, dtype {_validation.dtype_name(t.dtype)}, device {t.device}" + (", sparse" if t.is_sparse else "")


def _reference_check_gradients(params, gradients, offsets, sparse_errors):
    """The straightforward gradient check (one full check per gradient, in index order) that
    ``_validation.check_gradients`` must agree with, result for result and error for error:
    each gradient a dense (strided, not nested) or sparse COO tensor of its parameter's shape,
    dtype and device (a CSR or nested one is refused as one of another kind)."""
    if len(gradients) != len(params):
        raise ValueError(
            "step: expected " + str(len(params)) + " gradients (one per parameter, None to skip one); got "
            + str(len(gradients))
        )
    indices, grads, sparse = [], [], []
    for g in range(len(offsets) - 1):
        group_indices, group_grads, group_sparse = [], [], False
        for i in range(offsets[g], offsets[g + 1]):
            grad = gradients[i]
            if grad is not None:
                param = params[i]
                kind_fits = (grad.layout == torch.strided and not grad.is_nested) or grad.layout == torch.sparse_coo
                if (not kind_fits or grad.dtype != param.dtype or grad.device != param.device
                        or grad.shape != param.shape):
                    raise ValueError("gradients[" + str(i) + "]: expected " + _describe(param)
                                     + " (like its parameter); got " + _describe(grad))
                if grad.is_sparse and sparse_errors[g] is not None:
                    raise RuntimeError(sparse_errors[g])
                group_sparse = group_sparse or grad.is_sparse
                group_indices.append(i)
                group_grads.append(grad)
        indices.append(group_indices)
        grads.append(group_grads)
        sparse.append(group_sparse)
    return indices, grads, sparse


def _gradient_kinds(param):
    return {
        "good": lambda: torch.randn_like(param),
        "none": lambda: None,
        "sparse": lambda: torch.randn_like(param).to_sparse(),
        "shape": lambda: torch.zeros(param.numel() + 1, dtype=param.dtype),
        "scalar": lambda: torch.zeros((1,) if param.dim() == 0 else (), dtype=param.dtype),
        "dtype": lambda: torch.zeros(param.shape, dtype=torch.float16),
        "device": lambda: torch.zeros(param.shape, dtype=param.dtype, device="meta"),
        "sparse_shape": lambda: torch.zeros(param.numel() + 1, dtype=param.dtype).to_sparse(),
        "strided": lambda: torch.randn(tuple(reversed(param.shape)), dtype=param.dtype).t() if param.dim() == 2 else torch.randn_like(param),
        "nested": lambda: torch.nested.nested_tensor([torch.randn_like(param)]),
        "csr": lambda: torch.randn_like(param).to_sparse_csr() if param.dim() == 2 else torch.randn_like(param),
    }


def _gradient_cases(n_cases: int = 400):
    rng = torch.Generator().manual_seed(1)
    kinds = list(_gradient_kinds(torch.zeros(1)))
    weights = torch.tensor([30.0, 8, 4, 1, 1, 1, 1, 1, 2, 0.5, 1])
    for case in range(n_cases):
        sizes = [[3], [2, 4], [1, 1, 3], [5]][case % 4]
        offsets = [0]
        for n in sizes:
            offsets.append(offsets[-1] + n)
        shapes = [(4, 3), (5,), (), (2, 2, 1)]
        params = [
            torch.randn(shapes[int(torch.randint(4, (1,), generator=rng))],
                        dtype=torch.float64 if torch.rand(1, generator=rng) < 0.2 else torch.float32)
            for _ in range(offsets[-1])
        ]
        picks = torch.multinomial(weights, offsets[-1], replacement=True, generator=rng).tolist()
        if case % 5 == 0:  # mostly clean
            picks = [0 if k > 2 else k for k in picks]
        gradients = [_gradient_kinds(p)[kinds[k]]() for p, k in zip(params, picks)]
        if case % 37 == 0:
            gradients = gradients[:-1]
        groups = [params[offsets[g]:offsets[g + 1]] for g in range(len(sizes))]
        full = [list(range(offsets[g], offsets[g + 1])) for g in range(len(sizes))]
        # per group: None (takes sparse gradients) or the message; mixed within a case
        sparse_errors = [None if (case + g * (case % 3)) % 2 == 0 else "Foo does not support sparse gradients"
                         for g in range(len(sizes))]
        yield params, gradients, offsets, sparse_errors, groups, full


def _outcome(fn, *args):
    try:
        indices, grads, sparse = fn(*args)
    except (ValueError, RuntimeError, torch.jit.Error) as e:
        message = str(e)
        for kind in ("ValueError", "RuntimeError"):
            marker = "builtins." + kind + ": "
            if marker in message:  # from TorchScript: "... builtins.ValueError: <message>"
                return ("raised", kind, message.split(marker, 1)[1].strip())
        if "failed in the TorchScript interpreter" in message:  # an op's own error is the last line
            kind, _, message = message.strip().splitlines()[-1].partition(": ")
            return ("raised", kind, message)
        return ("raised", type(e).__name__, message)
    return ("ok", indices, [[id(t) for t in group] for group in grads], sparse)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state:UserWarning")
@pytest.mark.parametrize("scripted", [False, True], ids=["eager", "script"])
def test_check_gradients_agrees_with_reference(scripted):
    check = scripting.script(_validation.check_gradients) if scripted else _validation.check_gradients
    outcomes = set()
    nested_seen = False
    for params, gradients, offsets, sparse_errors, groups, full in _gradient_cases():
        expected = _outcome(_reference_check_gradients, params, gradients, offsets, sparse_errors)
        # The same tensors come back (ids compared): TorchScript keeps a tensor's Python object.
        assert _outcome(check, params, gradients, offsets, sparse_errors, groups, full) == expected
        outcomes.add(expected[0] if expected[0] == "ok" else expected[1])
        nested_seen = nested_seen or (expected[0] == "raised" and "(nested)" in expected[2])
    assert outcomes == {"ok", "ValueError", "RuntimeError"}
    assert nested_seen


def test_choice_hyperparameters_are_the_op_librarys_table():
    """The strings of Muon's ``adjust_lr_fn`` are listed once, by its group step
    (``csrc/steps/muon.cpp``, op ``hyperparameter_choices``): the typed dicts' numbers, torch's
    values and the error for another string all follow that table, eagerly and in TorchScript."""
    from functional_optim import _state

    table = ops.hyperparameter_choices()
    assert table == {"adjust_lr_fn": ["original", "match_rms_adamw"]}
    assert _state.CHOICE_HYPERPARAMETERS["adjust_lr_fn"][0] == tuple(table["adjust_lr_fn"])
    for number, name in enumerate(table["adjust_lr_fn"], start=1):
        opt = F.Muon([torch.zeros(3, 2)], adjust_lr_fn=name)
        assert opt.hyperparameters()[0]["adjust_lr_fn"] == number and opt.param_groups[0]["adjust_lr_fn"] == name
        scripted = script_optimizer(opt)
        assert scripted.hyperparameters()[0]["adjust_lr_fn"] == number
    with pytest.raises(ValueError, match="^Adjust learning rate function other is not supported$"):
        F.Muon([torch.zeros(3, 2)], adjust_lr_fn="other")
