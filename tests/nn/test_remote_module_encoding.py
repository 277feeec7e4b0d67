"""The forward program's encoding round-trips through C++: every table of
``ops._nn_program_tables()`` (argument codes, integer operations, dtype, layout and memory format
names, defined in C++ only), written by Python's lowering (``plugin.nn._lower``) and read by the
C++ decoder, gives what eager mode gives.

The oracle is eager mode, never the tables themselves: modules (or single operator calls) that use
each code, operation and name are lowered, run natively (``_remote_forward`` on this process, outside
any context: no RPC) and compared with the same calls run eagerly (values, dtype, layout, strides,
or the same error type where eager refuses). Every entry of each C++ table must be exercised: a new
code, operation or name there fails these tests until a case uses it. Where a name also travels
the other way (the input check's messages, value -> name), that is checked too.
"""
import types
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from plugin import ops
from plugin.nn import _lower

TABLES = ops._nn_program_tables()
CODES = TABLES["codes"]
CPU = torch.device("cpu")


def test_the_tables_are_what_lowering_reads():
    assert set(TABLES) == {"codes", "int_ops", "dtypes", "layouts", "memory_formats"}
    assert sorted(CODES.values()) == list(range(len(CODES)))  # distinct
    assert _lower._DEFAULT == CODES["default"] and _lower._SLOT == CODES["slot"]
    assert set(_lower._INT_OPS.values()) == set(TABLES["int_ops"])


def torch_object(name: str):
    """The torch object a table name stands for: "torch.float32" -> torch.float32."""
    assert name.startswith("torch."), name
    return getattr(torch, name[len("torch."):])


def used_tags(codes):
    """The codes that lead a value in a stream of argument codes (the format of
    plugin/csrc/nn/program_encoding.h: a list is followed by its length and its items, None and
    default by nothing, every other code by one operand)."""
    found, pos = set(), 0

    def value():
        nonlocal pos
        tag = codes[pos]
        pos += 1
        found.add(tag)
        if tag == CODES["list"]:
            n = codes[pos]
            pos += 1
            for _ in range(n):
                value()
        elif tag not in (CODES["none"], CODES["default"]):
            pos += 1

    while pos < len(codes):
        value()
    return found


class Recording:
    """A ForwardProgram whose add_call and add_int_op arguments are kept."""

    def __init__(self, program):
        self.program, self.codes = program, []

    def __getattr__(self, name):
        method = getattr(self.program, name)
        if name == "add_call":
            return lambda *args: (self.codes.extend(args[4]), method(*args))[1]
        if name == "add_int_op":
            return lambda *args: (self.codes.extend(args[2]), method(*args))[1]
        return method


class Native:
    """``module`` exported, lowered (through Python's encoder) and registered on this process;
    called, it runs the program natively (``_remote_forward``, no context)."""

    def __init__(self, module, example, monkeypatch):
        made = []
        real = ops.new_forward_program
        monkeypatch.setattr(ops, "new_forward_program", lambda *args: made.append(Recording(real(*args))) or made[-1])
        params = list(module.parameters())
        self.ep = _lower.export(module, example, _lower.default_dynamic_shapes(example))
        program, self.spec = _lower.lower(self.ep, module, params, CPU, _lower.input_names(module, example))
        monkeypatch.setattr(ops, "new_forward_program", real)
        self.codes = made[0].codes
        self.registration = ops.new_native_module(type(module).__name__, params)
        program.install(self.registration.handle(), True)

    def __call__(self, *inputs):
        flat = pytree.tree_leaves(inputs)
        outputs, _, answer_id = ops._remote_forward(self.registration.handle(), -1, -1, flat, [False] * len(flat), False)
        assert answer_id == -1
        return pytree.tree_unflatten(outputs, self.spec)

    def targets(self):
        return {node.target for node in self.ep.graph.nodes if node.op == "call_function"}


def assert_same(got, want, values=True):
    """Equal dtype, layout, shape, strides and (``values``) elements."""
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        assert g.dtype == w.dtype and g.layout == w.layout and g.shape == w.shape
        if g.layout == torch.strided:
            assert g.stride() == w.stride()
            if values:
                assert torch.equal(g, w)


class EveryCode(nn.Module):
    """One forward whose operator calls need every argument code (the comment names it)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)  # slot
        h = torch.clamp(h, None, 0.5)  # none, float
        h = h * 3  # int (a number where the schema takes a Tensor)
        s = h.sum([1], keepdim=True)  # list, bool, default (dtype not given)
        g = F.gelu(h, approximate="tanh")  # str
        d = h.to(torch.float64)  # dtype
        z = torch.zeros(2, 4, device="cpu", layout=torch.strided)  # device, layout
        c = x.reshape(-1, 2, 2, 1).clone(memory_format=torch.channels_last)  # memory_format
        return s, g, d, z, c


def test_every_argument_code_round_trips(monkeypatch):
    native = Native(EveryCode(), (torch.randn(3, 4),), monkeypatch)
    assert used_tags(native.codes) == set(CODES.values())  # every code of C++'s table is used
    twin = EveryCode()
    for batch in (2, 3, 6):
        x = torch.randn(batch, 4)
        assert_same(native(x), twin(x))


class EveryIntOp(nn.Module):
    """Sizes computed from a dynamic batch n with each integer operation."""

    def forward(self, x):
        n = x.shape[0]
        rows = x.reshape(n, -1)[: (-n) + 2 * n]  # neg (then add, mul)
        return rows, x.new_ones(n + 1, n * 2 - 1, n // 2 + 1, n % 3 + 1)  # add, mul, sub, floordiv, mod


def test_every_integer_operation_round_trips(monkeypatch):
    native = Native(EveryIntOp(), (torch.randn(5, 2),), monkeypatch)
    import operator

    ran = {name for name in TABLES["int_ops"] if getattr(operator, name) in native.targets()}
    assert ran == set(TABLES["int_ops"]), "an integer operation of C++'s table is not exercised"
    for batch in (2, 3, 4, 7, 9):
        x = torch.randn(batch, 2)
        assert_same(native(x), EveryIntOp()(x))


# --- names: a program of one operator call, its arguments written by Python's encoder ----------

ENCODER = _lower._Lowering(None, nn.Module(), [], CPU, "names", [])
NODE = types.SimpleNamespace(name="call", target="call")


def encoded(values):
    codes, floats, strings = [], [], []
    for value in values:
        ENCODER.encode(NODE, "argument", value, codes, floats, strings)
    return codes, floats, strings


def run_call(op, overload, values, inputs=()):
    """aten::<op>.<overload> on ``inputs`` (slots 0..) and ``values`` (encoded), run natively."""
    program = ops.new_forward_program("Names", len(inputs) + 1, CPU)
    for i, t in enumerate(inputs):
        program.add_input(i, f"x{i}", str(t.dtype), [-1] * t.dim(), [0] * t.dim(), list(t.shape))
    codes, floats, strings = encoded(values)
    slots = []
    for i in range(len(inputs)):
        slots += [CODES["slot"], i]
    program.add_call(f"aten::{op}", overload, "call", False, slots + codes, floats, strings, [len(inputs)])
    program.set_outputs([len(inputs)])
    registration = ops.new_native_module("Names", [])
    program.install(registration.handle(), True)
    outputs, _, _ = ops._remote_forward(registration.handle(), -1, -1, list(inputs), [False] * len(inputs), False)
    return outputs[0]


def same_or_both_raise(native, eager, values=True):
    try:
        want = eager()
    except Exception as error:  # noqa: BLE001 (eager's type is the expectation)
        with pytest.raises(type(error)):
            native()
        return "raises"
    assert_same(native(), want, values)
    return "runs"


def unique(table):
    """{torch object: its names in ``table``}."""
    out = {}
    for name in table:
        out.setdefault(torch_object(name), []).append(name)
    return out


@pytest.mark.parametrize("dtype", sorted(unique(TABLES["dtypes"]), key=str), ids=str)
def test_every_dtype_name_round_trips(dtype):
    names = unique(TABLES["dtypes"])[dtype]
    assert str(dtype) in names  # the name Python writes is one C++ reads
    assert len({TABLES["dtypes"][n] for n in names}) == 1
    # name -> value: the dtype of what the decoded call makes, as eager makes it
    outcome = same_or_both_raise(lambda: run_call("empty", "memory_format", [[2, 3], dtype, None, None, None, None]),
                                 lambda: torch.empty((2, 3), dtype=dtype), values=False)  # (empty: no values)
    if outcome == "raises":
        return
    # an input of this dtype is accepted; one of another dtype is refused, naming this one (value -> name)
    t = torch.empty((2, 3), dtype=dtype)
    if t.is_quantized:
        return  # (quint4x2, quint2x4: packed elements, less storage than 6 elements: the check refuses them)
    forward = identity(str(dtype))
    assert forward(t).data_ptr() == t.data_ptr()
    other = torch.zeros(2, 3, dtype=torch.int64 if dtype != torch.int64 else torch.float32)
    with pytest.raises(ValueError, match=f"must have dtype {str(dtype)} "):
        forward(other)


def identity(dtype_name):
    """A program whose output is its one input, a (2, 3) tensor of dtype ``dtype_name``, run natively."""
    program = ops.new_forward_program("Names", 1, CPU)
    program.add_input(0, "x", dtype_name, [-1, -1], [0, 0], [2, 3])
    program.set_outputs([0])
    registration = ops.new_native_module("Names", [])
    program.install(registration.handle(), True)
    return lambda x: ops._remote_forward(registration.handle(), -1, -1, [x], [False], False)[0][0]


@pytest.mark.parametrize("layout", sorted(unique(TABLES["layouts"]), key=str), ids=str)
def test_every_layout_name_round_trips(layout):
    assert [str(layout)] == unique(TABLES["layouts"])[layout]
    outcome = same_or_both_raise(lambda: run_call("empty", "memory_format", [[2, 3], None, layout, None, None, None]),
                                 lambda: torch.empty((2, 3), layout=layout), values=False)
    if outcome == "raises" or layout in (torch.strided, torch.jagged):
        return  # (a jagged tensor is a Python subclass, which reaches the op through __torch_dispatch__)
    # value -> name: an input of this layout is refused, naming it
    with pytest.raises(ValueError, match=f"got layout {str(layout)}"):
        identity("torch.float32")(torch.empty((2, 3), layout=layout))


def test_a_nested_input_is_refused_by_the_input_check():
    """A nested tensor reaches the op's kernel (a jagged one, a Python subclass, through its
    __torch_dispatch__: the kernel is CompositeImplicitAutograd) and is refused by the input
    check before any instruction runs, naming the input and its layout."""
    forward = identity("torch.float32")
    rows = [torch.randn(3), torch.randn(3)]  # (2, 3) as a dense tensor: what the program takes
    assert forward(torch.stack(rows)).shape == (2, 3)
    jagged = torch.nested.nested_tensor(rows, layout=torch.jagged)
    assert jagged.dtype == torch.float32 and jagged.dim() == 2  # the dtype and rank the program takes
    with pytest.raises(ValueError, match=r"input x \(inputs\[0\]\) must be a dense \(strided\) tensor, got layout "
                                         r"torch\.jagged \(a nested tensor\)"):
        forward(jagged)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: the strided layout of nested tensors is a prototype)
        strided = torch.nested.nested_tensor(rows)
    with pytest.raises(ValueError, match=r"input x \(inputs\[0\]\) must be a dense \(strided\) tensor, got layout "
                                         r"torch\.strided \(a nested tensor\)"):
        forward(strided)


CHANNELS_LAST = [torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
                 torch.randn(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)]


@pytest.mark.parametrize("memory_format", sorted(unique(TABLES["memory_formats"]), key=str), ids=str)
def test_every_memory_format_name_round_trips(memory_format):
    assert [str(memory_format)] == unique(TABLES["memory_formats"])[memory_format]
    outcomes = [same_or_both_raise(lambda: run_call("clone", "", [memory_format], [x]),
                                   lambda: x.clone(memory_format=memory_format)) for x in CHANNELS_LAST]
    assert "runs" in outcomes
