"""On a remote module's owner: a module exported with ``torch.export`` and lowered to a
``ForwardProgram`` (``plugin/csrc/nn/program.h``) that C++ runs op by op.

:func:`lower` walks the exported program's graph (torch.export's training IR: ATen operators,
the module's parameters, buffers and tensor constants and the forward's tensor inputs as
placeholders) and builds the program with one builder call per node: the parameters are bound
by their index in the module's parameter list (the C++ reads them from a snapshot at each
forward), buffers and constants as the live tensors, each input with the shape the export allows
(fixed sizes, and symbols with their ranges for the dimensions it kept dynamic), then every node
in order: a call of an operator (``OpOverload``, its arguments encoded for its schema), an element
of a list result (``operator.getitem``), integer arithmetic on sizes, and the sub-graphs of
``torch.no_grad()`` regions inlined with grad mode off. A node that C++ cannot run without Python
raises :class:`NotNative`, naming the node and why: an operator whose kernel is written in Python,
a higher-order operator other than the grad-mode one, any other Python callable.

Source of the approach: ``torch.export``'s IR specification (the graph's nodes are
``torch.ops`` overloads, ``operator.getitem`` and symbolic-size arithmetic) and the JIT
interpreter's boxed operator calls.
"""
import gc
import inspect
import operator
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import sympy
import torch
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils._sympy.numbers import int_oo
from torch.utils import _pytree as pytree

from .. import ops

__all__ = ["NotNative", "export", "lower", "default_dynamic_shapes", "default_dynamic_inputs", "input_names",
           "call_names"]

# The encoding's tables, defined in C++ only (plugin/csrc/nn/program_encoding.h, python_names.h),
# read once: the argument codes, the integer operations (by their names in Python's operator
# module), and the dtype, layout and memory format names the decoder reads.
_TABLES = ops._nn_program_tables()
_CODES = _TABLES["codes"]
_NONE, _INT, _FLOAT, _BOOL, _STR, _SLOT, _LIST, _DTYPE, _DEVICE, _LAYOUT, _MEMORY_FORMAT, _DEFAULT = (
    _CODES[name] for name in ("none", "int", "float", "bool", "str", "slot", "list", "dtype", "device", "layout",
                              "memory_format", "default"))
_INT_OPS = {getattr(operator, name): name for name in _TABLES["int_ops"]}
_NAMED = {torch.dtype: ("dtype", _DTYPE, _TABLES["dtypes"]), torch.layout: ("layout", _LAYOUT, _TABLES["layouts"]),
          torch.memory_format: ("memory format", _MEMORY_FORMAT, _TABLES["memory_formats"])}

# The dispatch keys whose kernels a CPU or CUDA call of an operator can run (an operator with a
# kernel written in Python for one of them needs Python, and its GIL, to run).
_RUN_KEYS = ("CPU", "CUDA", "AutogradCPU", "AutogradCUDA", "Autograd", "AutogradOther", "CompositeImplicitAutograd",
             "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "ADInplaceOrView", "BackendSelect")
_REGISTRATION = re.compile(r"^(\w+)(?:\[alias\])?: registered at (.*?):\d+")

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _bound(value: Any) -> Optional[int]:
    """A range bound of torch.export's ``range_constraints`` as an int; None when infinite."""
    if value in (sympy.oo, -sympy.oo, int_oo, -int_oo):
        return None
    return int(value)


class NotNative(Exception):
    """The module's program holds something that cannot run without Python (or torch.export
    refused the module): ``str()`` says what and where."""


def _dynamic_by_default(leaf: Any) -> bool:
    """Whether the default ``dynamic_shapes`` makes dimension 0 of ``leaf`` dynamic: a tensor with
    at least one dimension."""
    return isinstance(leaf, torch.Tensor) and leaf.dim() > 0


def default_dynamic_inputs(example_inputs: tuple) -> List[Tuple[Any, torch.Tensor]]:
    """The (path, tensor) of each input whose dimension 0 :func:`default_dynamic_shapes` makes dynamic."""
    return [(path, leaf) for path, leaf in pytree.tree_flatten_with_path(tuple(example_inputs))[0]
            if _dynamic_by_default(leaf)]


def default_dynamic_shapes(example_inputs: tuple) -> Any:
    """``dynamic_shapes`` for ``torch.export.export``: dimension 0 of every tensor input with at
    least one dimension dynamic (``Dim.AUTO``: torch.export finds its range and the dimensions it
    must equal), every other dimension fixed."""
    return tuple(pytree.tree_map(lambda leaf: {0: torch.export.Dim.AUTO} if _dynamic_by_default(leaf) else None,
                                 tuple(example_inputs)))


def input_names(module: torch.nn.Module, example_inputs: tuple) -> List[str]:
    """The name of each tensor of ``example_inputs`` flattened, for messages: the forward's
    parameter name, then the path inside it (``"x"``, ``"pair[1]"``)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i, arg in enumerate(example_inputs):
        top = params[i].name if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) else f"args[{i}]"
        leaves = pytree.tree_flatten_with_path(arg)[0]
        names += [top + pytree.keystr(path) for path, _ in leaves]
    return names


def call_names(module: torch.nn.Module, args: tuple, kwargs: Dict[str, Any]) -> List[str]:
    """The name of each tensor of the call ``(args, kwargs)`` flattened, for messages: the
    forward's parameter name (or the keyword), then the path inside it (``"x"``, ``"pair[1]"``,
    ``"extra['a']"``)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    tops = [(params[i].name if i < len(params) and params[i].kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) else f"args[{i}]", arg)
        for i, arg in enumerate(args)] + list(kwargs.items())
    for top, arg in tops:
        names += [top + pytree.keystr(path) for path, leaf in pytree.tree_flatten_with_path(arg)[0]
                  if isinstance(leaf, torch.Tensor)]
    return names


def export(module: torch.nn.Module, example_inputs: tuple, dynamic_shapes: Any) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``module`` (in its current mode) on ``example_inputs``; its
    error raised as :class:`NotNative` with torch.export's message."""
    try:
        return torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    except Exception as error:  # noqa: BLE001 (torch.export raises many types; its message is the reason)
        raise NotNative(f"torch.export.export failed: {type(error).__name__}: {error}") from None
    finally:
        # torch.export leaves reference cycles that hold the module (frames of its tracing, a wrapper
        # whose _export_root is the module): collected now, the module's lifetime is plain reference
        # counting again, so its registration goes with its last RRef, not at some later collection.
        gc.collect()


def _python_kernel(op: torch._ops.OpOverload) -> Optional[str]:
    """The dispatch key of ``op`` whose kernel is registered from Python (``"CPU"``), if any of
    those a CPU or CUDA call runs."""
    for line in torch._C._dispatch_dump(op.name()).splitlines():
        match = _REGISTRATION.match(line.strip())
        if match and match.group(1) in _RUN_KEYS and match.group(2).endswith(".py"):
            return match.group(1)
    return None


class _Lowering:
    def __init__(self, ep: torch.export.ExportedProgram, module: torch.nn.Module, params: List[torch.Tensor],
                 device: torch.device, name: str, names: List[str]):
        self.ep, self.module, self.device, self.name, self.names = ep, module, device, name, names
        self.param_index = {id(p): i for i, p in enumerate(params)}
        self.values: Dict[torch.fx.Node, Any] = {}  # node -> slot, or a list of slots (a tuple result)
        self.next_slot = 0
        self.checked_ops: Dict[str, None] = {}

    def slot(self) -> int:
        self.next_slot += 1
        return self.next_slot - 1

    def refuse(self, node: torch.fx.Node, why: str):
        raise NotNative(f"node {node.name} ({node.target}): {why}")

    def build(self) -> Tuple[torch.ScriptObject, Any]:
        graph = self.ep.graph_module.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        specs = self.ep.graph_signature.input_specs
        assert len(placeholders) == len(specs)
        # Slots are numbered as they are made; the program is built once their number is known.
        bindings, inputs = [], []
        for node, spec in zip(placeholders, specs):
            self.values[node] = self.slot()
            if spec.kind == InputKind.PARAMETER:
                param = self.module.get_parameter(spec.target)
                bindings.append(("parameter", self.values[node], self.param_index[id(param)]))
            elif spec.kind == InputKind.BUFFER:
                bindings.append(("buffer", self.values[node], self.module.get_buffer(spec.target)))
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                bindings.append(("constant", self.values[node], self.ep.constants[spec.target].to(self.device)))
            elif spec.kind == InputKind.USER_INPUT:
                if not isinstance(node.meta.get("val"), torch.Tensor):
                    self.refuse(node, "an input that is not a tensor (remote modules take tensors, and tuples "
                                      "and lists of them)")
                inputs.append(node)
            else:
                self.refuse(node, f"an input of kind {spec.kind.name}, which the native forward does not take")
        calls: List[tuple] = []
        self.walk(graph, calls, grad_off=False)
        output = next(n for n in graph.nodes if n.op == "output")
        for spec in self.ep.graph_signature.output_specs:
            if spec.kind != OutputKind.USER_OUTPUT:
                self.refuse(output, f"an output of kind {spec.kind.name} (the forward writes "
                                    f"{'an input' if spec.kind == OutputKind.USER_INPUT_MUTATION else 'state'} "
                                    f"in place), which the native forward does not give")
        outputs = []
        for value in output.args[0]:
            if not isinstance(value, torch.fx.Node) or not isinstance(value.meta.get("val"), torch.Tensor):
                self.refuse(output, f"an output that is not a tensor ({value!r}); remote modules return tensors, "
                                    f"and tuples and lists of them")
            outputs.append(self.single(value, output))

        program = ops.new_forward_program(self.name, self.next_slot, self.device)
        for kind, slot, value in bindings:
            if kind == "parameter":
                program.bind_parameter(slot, value)
            else:
                program.bind_tensor(slot, value, kind == "buffer")
        self.add_inputs(program, inputs)
        for call in calls:
            getattr(program, call[0])(*call[1:])
        program.set_outputs(outputs)
        return program, self.ep.call_spec.out_spec

    def add_inputs(self, program: torch.ScriptObject, inputs: List[torch.fx.Node]) -> None:
        symbols: Dict[sympy.Symbol, int] = {}
        shapes = []
        for node in inputs:
            dims = []
            for d, size in enumerate(node.meta["val"].shape):
                if isinstance(size, int):
                    dims.append((-1, 0, size))
                    continue
                expr = size.node.expr
                if not expr.free_symbols:  # a dynamic dimension the export fixed (Dim.AUTO found it constant)
                    dims.append((-1, 0, int(expr)))
                    continue
                free = list(expr.free_symbols)
                if len(free) != 1:
                    self.refuse(node, f"dimension {d} has size {expr}, which the native forward cannot check")
                s = free[0]
                scale, offset = expr.coeff(s), expr.subs(s, 0)
                if not (scale.is_Integer and offset.is_Integer and sympy.expand(scale * s + offset - expr) == 0
                        and int(scale) > 0):
                    self.refuse(node, f"dimension {d} has size {expr}, which the native forward cannot check")
                if s not in symbols:
                    symbols[s] = len(symbols)
                dims.append((symbols[s], int(scale), int(offset)))
            shapes.append(dims)
        for s in symbols:
            bounds = self.ep.range_constraints.get(s)
            low = _bound(bounds.lower) if bounds is not None else None
            high = _bound(bounds.upper) if bounds is not None else None
            program.add_symbol(max(low or 0, 0), -1 if high is None else high)
        for i, (node, dims) in enumerate(zip(inputs, shapes)):
            name = self.names[i] if i < len(self.names) else node.name
            program.add_input(self.values[node], name, str(node.meta["val"].dtype), [s for s, _, _ in dims],
                              [a for _, a, _ in dims], [b for _, _, b in dims])

    def single(self, value: torch.fx.Node, user: torch.fx.Node) -> int:
        slot = self.values.get(value)
        if not isinstance(slot, int):
            self.refuse(user, f"reads {value.name}, which is not one value")
        return slot

    def encode(self, node: torch.fx.Node, name: str, value: Any, codes: List[int], floats: List[float],
               strings: List[str]) -> None:
        def string(text: str) -> int:
            strings.append(text)
            return len(strings) - 1

        if value is None:
            codes.append(_NONE)
        elif isinstance(value, bool):
            codes += [_BOOL, int(value)]
        elif isinstance(value, int):
            if not _INT64_MIN <= value <= _INT64_MAX:
                self.refuse(node, f"argument {name} = {value} does not fit int64")
            codes += [_INT, value]
        elif isinstance(value, float):
            floats.append(value)
            codes += [_FLOAT, len(floats) - 1]
        elif isinstance(value, str):
            codes += [_STR, string(value)]
        elif isinstance(value, torch.fx.Node):
            codes += [_SLOT, self.single(value, node)]
        elif isinstance(value, (list, tuple)):
            codes += [_LIST, len(value)]
            for item in value:
                self.encode(node, name, item, codes, floats, strings)
        elif type(value) in _NAMED:
            kind, code, names = _NAMED[type(value)]
            if str(value) not in names:
                self.refuse(node, f"argument {name} = {value}: a {kind} the native forward does not know")
            codes += [code, string(str(value))]
        elif isinstance(value, torch.device):
            codes += [_DEVICE, string(str(value))]
        else:
            self.refuse(node, f"argument {name} = {value!r} ({type(value).__name__}) is not a value the native forward "
                              f"passes to an operator")

    def check_op(self, node: torch.fx.Node, op: torch._ops.OpOverload) -> None:
        qualified = op.name()
        if qualified in self.checked_ops:
            return
        key = _python_kernel(op)
        if key is not None:
            self.refuse(node, f"the operator's {key} kernel is written in Python (it would need the owner's GIL)")
        self.checked_ops[qualified] = None

    def walk(self, graph: torch.fx.Graph, calls: List[tuple], grad_off: bool) -> None:
        for node in graph.nodes:
            if node.op in ("placeholder", "output", "get_attr"):
                continue
            if node.op != "call_function":
                self.refuse(node, f"a {node.op} node")
            target = node.target
            if isinstance(target, torch._ops.OpOverload):
                self.call(node, target, calls, grad_off)
            elif target is operator.getitem:
                source, index = node.args
                value = self.values.get(source)
                if isinstance(value, list):
                    self.values[node] = value[index]
                elif isinstance(value, int) and isinstance(source.meta.get("val"), (list, tuple)):
                    self.values[node] = self.slot()
                    calls.append(("add_list_item", node.name, value, index, self.values[node]))
                else:
                    self.refuse(node, f"an element of {source.name}, which is not a list")
            elif target in _INT_OPS:
                codes: List[int] = []
                for arg in node.args:
                    self.encode(node, "operand", arg, codes, [], [])
                self.values[node] = self.slot()
                calls.append(("add_int_op", node.name, _INT_OPS[target], codes, self.values[node]))
            elif target is torch.ops.higher_order.wrap_with_set_grad_enabled:
                enabled, submodule, *operands = node.args
                sub = getattr(self.ep.graph_module, submodule.target)
                inner = [n for n in sub.graph.nodes if n.op == "placeholder"]
                for placeholder, operand in zip(inner, operands):
                    self.values[placeholder] = self.single(operand, node) if isinstance(operand, torch.fx.Node) else \
                        self.refuse(node, "a constant operand of a grad-mode region")
                self.walk(sub.graph, calls, grad_off=not enabled)  # the innermost region decides
                result = next(n for n in sub.graph.nodes if n.op == "output").args[0]
                self.values[node] = [self.single(v, node) for v in result]
            elif isinstance(target, torch._ops.HigherOrderOperator):
                self.refuse(node, f"the higher-order operator {target.__name__} (only torch.no_grad()/enable_grad() "
                                  f"regions run natively)")
            else:
                self.refuse(node, f"a call of the Python function {getattr(target, '__qualname__', target)!s}, which "
                                  f"cannot run without Python")

    def call(self, node: torch.fx.Node, op: torch._ops.OpOverload, calls: List[tuple], grad_off: bool) -> None:
        self.check_op(node, op)
        schema = op._schema
        codes: List[int] = []
        floats: List[float] = []
        strings: List[str] = []
        for i, argument in enumerate(schema.arguments):
            if not argument.kwarg_only and i < len(node.args):
                value = node.args[i]
            elif argument.name in node.kwargs:
                value = node.kwargs[argument.name]
            elif argument.has_default_value():
                codes.append(_DEFAULT)
                continue
            else:
                self.refuse(node, f"argument {argument.name} is not given")
            self.encode(node, argument.name, value, codes, floats, strings)
        outputs = [self.slot() for _ in schema.returns]
        self.values[node] = outputs[0] if len(outputs) == 1 else outputs
        namespace, _, name = schema.name.partition("::")
        calls.append(("add_call", schema.name, schema.overload_name, node.name, grad_off, codes, floats, strings,
                      outputs))


def lower(ep: torch.export.ExportedProgram, module: torch.nn.Module, params: List[torch.Tensor],
          device: torch.device, names: List[str], name: Optional[str] = None) -> Tuple[torch.ScriptObject, Any]:
    """The ForwardProgram of ``ep`` (exported from ``module``, whose parameters the program reads
    by their index in ``params``), run on ``device``, its inputs named ``names``; and the
    output's tree spec. Raises :class:`NotNative` (naming the node and the reason) for a node
    that cannot run without Python, and the program's own errors (``RuntimeError``) for an
    argument the operator's schema does not take. ``name``: the module's name in messages
    (default: its class's)."""
    try:
        return _Lowering(ep, module, params, device, name or type(module).__qualname__, names).build()
    except NotNative:
        raise
    except RuntimeError as error:
        raise NotNative(str(error)) from error
