"""``torch.library.opcheck`` of a ``gilfree_rpc`` op where the state it reads lives
(tests/build/test_opcheck_all_ops.py): called by RPC on an owner (its native local optimizers,
send functions, shared tables and remote modules live in that process), or in a process of its
own (``python -c``, for ``_configure_auth_transport``, which sets up the transport of the
process's next RPC agent)."""
import contextlib
from typing import Any, Tuple

import torch
import torch.distributed.rpc as rpc
from torch.fx import operator_schemas
from torch.testing._internal.optests import generate_tests

import plugin  # noqa: F401  (loads the op library)

# torch.library.opcheck's test utils, each called as opcheck calls it (the op, its arguments,
# its keyword arguments), but with copy_inputs=False: on the arguments themselves rather than
# on copies of their tensors (torch internal, torch 2.13: opcheck has no such option).
UNCOPIED = {
    "test_schema": generate_tests.safe_schema_check,
    "test_autograd_registration": generate_tests.safe_autograd_registration_check,
}


@contextlib.contextmanager
def rref_type_known():
    """SchemaCheckMode reads an op's arguments with torch.fx's schema reader, which evaluates each
    argument's type (``List[RRef[Tensor]]``) among names that lack ``RRef`` (torch 2.13): the check
    of an op with RRef arguments (``_gradient_norms``) would fail there with a NameError before
    checking anything. Gives it torch's RRef class under that name while a check runs."""
    names = operator_schemas._type_eval_globals
    added = "RRef" not in names
    if added:
        names["RRef"] = rpc.RRef
    try:
        yield
    finally:
        if added:
            del names["RRef"]


def opcheck(op_name: str, args: Tuple[Any, ...], test_util: str, copy_inputs: bool = True) -> None:
    """``torch.library.opcheck(torch.ops.gilfree_rpc.<op_name>.default, args, test_utils=(test_util,))``
    here; with ``copy_inputs=False``, the same util on ``args`` themselves (an op whose tensors
    count by identity: the roots of a graph, parameters). Raises what the check raises."""
    op = getattr(torch.ops.gilfree_rpc, op_name).default
    with rref_type_known():
        if copy_inputs:
            torch.library.opcheck(op, args, test_utils=(test_util,))
        else:
            UNCOPIED[test_util](op, args, {}, copy_inputs=False)
