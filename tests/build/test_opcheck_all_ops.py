"""``torch.library.opcheck`` over every op of the two op libraries, and a test that no op is left
out: a new op of either library fails ``test_every_op_is_opchecked`` (naming it) until some test
opchecks it.

* ``torch.ops.gilfree_optim``: tests/functional_optim/test_opcheck.py (the group steps and the gradient
  check) and tests/functional_optim/test_fused_kernels.py::test_opcheck (the kernels ``<name>_`` of its
  ``name`` parametrization) opcheck them; the coverage test reads which ops from those files (the
  ``torch.library.opcheck`` calls of the first, the parametrization of the second). The three
  sparse-gradient kernels (``sparse_adam_``, ``sparse_adagrad_``, ``sparse_sgd_``), which neither
  checks, are opchecked here (``test_sparse_kernels``): every util but ``test_schema``, whose
  mode reads every tensor's storage, which a sparse COO gradient has not (as
  test_opcheck.py::test_sparse_group_step).
* ``torch.ops.gilfree_rpc``: every op here (``SAMPLES``: op name -> its samples, each a function
  making fresh arguments), with ``test_utils=("test_schema", "test_autograd_registration")``,
  one util per call and fresh arguments for each (a token, a handle, a context or a graph is
  used once). Each check leaves nothing behind (``Sample.after``): no context, table, parked step
  or current context outlives the module.

Why ``test_faketensor`` and ``test_aot_dispatch_*`` do not apply to gilfree_rpc: every op reads or
changes state outside its arguments (torch's distributed autograd contexts, the plugin's engine
and its passes, the registries of tables, modules, local optimizers and parked steps, the thread's
current context, RPC futures and RRefs, the RPC transport), which is why docs/api.md says they
are all declared with conservative alias analysis (plugin/csrc/ops.cpp). None has a fake kernel
(fake tensors would reach its CompositeImplicitAutograd kernel, below, which acts on that state),
and none is ever traced by torch.compile or torch.export: the package calls them eagerly
(plugin.ops) or from TorchScript, and a fake kernel could not say what the op's state gives (the
gradients of a context, the outputs of a remote module).

What the two utils see of these ops. Every gilfree_rpc kernel is registered as
CompositeImplicitAutograd (they need no autograd of their own), so:

* ``test_autograd_registration`` finds that registration and passes without running the op when
  an input requires grad (and returns at once when none does): it checks the registration.
* ``test_schema`` runs the op once under torch's SchemaCheckMode. An op without tensor arguments
  reaches the mode itself (its arguments and results checked against its schema); an op with
  tensor arguments runs its kernel above the mode, which then checks every aten op the kernel
  calls (what the kernel does to tensors). (For ``_gradient_norms``, whose ``RRef(Tensor)[]``
  argument torch.fx's schema reader cannot read, see opcheck_remote.rref_type_known.)

Where they run: here (worker0 of the session's RPC group, the ``cluster`` fixture) for the ops a
caller runs and for state this process can hold (contexts it made, graphs through worker1, a
local optimizer, tables and parked steps); on worker1 (tests/support/opcheck_remote.py, by RPC)
for the RPC handlers, which read state there: the owner's native local optimizers, gradients,
send functions, shared tables and remote module (tests/support/native_rpc_remote.Target); in a
process of its own for ``_configure_auth_transport``, which sets up the transport of the
process's next RPC agent (and loads libcrypto, runs the transport's self-test once per process).

Two ops run the utils on their arguments themselves rather than on opcheck's copies of their
tensors (``copy_inputs=False``, torch's own util functions): ``backward``, whose roots must have
a ``grad_fn`` (opcheck copies tensors under no_grad: a copy of a root has none, and the op
refuses it), and ``gradients_for``, which finds gradients by parameter (a copy has none).
"""
import ast
import hashlib
import inspect
import math
import subprocess
import sys
import time
from typing import Callable, Dict, List, NamedTuple, Optional

import pytest
import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import functional_optim
import plugin.optim
import plugin.rpc
from functional_optim import _kernels
from plugin import _rpc_functions, ops
from plugin.nn import RemoteModule
from tests.functional_optim import test_fused_kernels, test_opcheck
from tests.support import REPO, embedding_remote, graphs, native_rpc_remote, opcheck_remote, optim_remote
from tests.support import nn_modules as mods

UTILS = ("test_schema", "test_autograd_registration")

OWNER = "worker1"
# `Sample.on` for an op checked in a process of its own (python -c, no RPC agent)
OWN_PROCESS = "a process of its own"


class Sample(NamedTuple):
    """One sample of an op: ``args()`` makes fresh arguments (once per util); the check runs on
    worker ``on`` (None: here; OWN_PROCESS); ``copy_inputs=False`` runs the utils on those
    arguments themselves (see the module); ``after(args)`` undoes what the check left behind (what
    the op made, or what the arguments hold when the util did not run the op)."""
    args: Callable[[], tuple]
    on: Optional[str] = None
    copy_inputs: bool = True
    after: Optional[Callable[[tuple], None]] = None


class Env:
    """What the samples act on, made once for the module (see the module: where they run)."""

    def __init__(self):
        self.here_id, self.owner_id = rpc.get_worker_info().id, rpc.get_worker_info(OWNER).id
        self.contexts: List[int] = []  # released at the end
        # on worker1: parameters with gradients in an open context and native local optimizers
        # (Adam over a dense one, Adagrad over a sparse one), and a send function to receive
        # gradients for
        self.target = native_rpc_remote.Target(OWNER, prefix="opcheck")
        self.table = rpc.rpc_sync(OWNER, embedding_remote.make_table, args=("opcheck_bags", 10, 3, "sum", 0))
        self.module = RemoteModule(f"{OWNER}/cpu", mods.MLP, example_inputs=(torch.randn(4, 6),))
        assert self.module.native, self.module.reason
        # here: a parameter and a native local optimizer over it
        self.w = torch.ones(3, requires_grad=True)
        self.local_optimizer = plugin.optim.NativeLocalOptimizer(functional_optim.Adam, [self.w], lr=0.01)

    def graph(self):
        """A new context and the root of a graph in it through worker1 (``2 * w`` computed there);
        no context is current afterwards."""
        context_id = dist_autograd._new_context()._context_id()  # now this thread's current one
        self.contexts.append(context_id)
        try:
            y = rpc.rpc_sync(OWNER, torch.mul, args=(self.w, 2.0))
        finally:
            ops._swap_current_context(-1)
        return context_id, [y.sum()]

    def passed(self, steps=()):
        """A new context after a pass of the plugin's engine over ``graph()`` (``steps``: its
        part-end hook arguments, see plugin.ops._backward_and_step)."""
        context_id, roots = self.graph()
        ops._backward_and_step(context_id, roots, False, "smart", list(steps))
        return context_id

    def steps_here(self):
        """Hook arguments of a step of the local optimizer here, without deadline."""
        return [-1, self.here_id, self.local_optimizer.handle]

    def on_owner(self, op: str, *args):
        """The op's answer on worker1, called as a peer calls it."""
        return self.target.call(op, *args).wait()

    def release(self):
        for context_id in self.contexts:
            dist_autograd._release_context(context_id)
        self.target.release()
        rpc.rpc_sync(OWNER, ops._unshare_table, args=(self.table,))


# --- the samples of each gilfree_rpc op -----------------------------------------------------------

SAMPLES: Dict[str, Callable[[Env], List[Sample]]] = {}


def samples(name: str):
    """Registers the function making op ``name``'s samples."""
    def register(fn):
        SAMPLES[name] = fn
        return fn
    return register


def _no_current_context(args):
    ops._swap_current_context(-1)


def _unshare_the_last_table(args):
    # handles are consecutive in a process: the op's table is the one before a new one
    probe = ops._share_table(torch.zeros(1, 1), 0)
    ops._unshare_table(probe - 1)
    ops._unshare_table(probe)


def _drop_the_last_parked_step(args):
    # tokens are consecutive in a process: the op's step is the one before a new one
    probe = ops._park_step([None], 60_000)
    ops._drop_step(probe - 1)
    ops._drop_step(probe)


# the engine (plugin/csrc/engine)

@samples("backward")
def _(env):
    # on the roots themselves (see the module): a fresh graph each time
    return [
        Sample(lambda: env.graph(), copy_inputs=False),
        Sample(lambda: (*env.graph(), False, "fast"), copy_inputs=False),
        Sample(lambda: (*env.graph(), True, "smart", env.steps_here()), copy_inputs=False),
    ]


@samples("get_gradients")
def _(env):
    return [Sample(lambda: (env.passed(),)), Sample(lambda: (env.graph()[0],))]


@samples("_receive_gradients")
def _(env):
    t = env.target

    def args(smart):
        # gradients for the send function of the owner's answer in the receive context, a new pass
        grads, reached = [torch.ones(native_rpc_remote.TABLE_SHAPE)], [t.table_message_id]
        return (t.receive_context_id, next(t.pass_ids), t.table_message_id, grads, False, smart, reached, [])

    def passes_ended(args):
        # the pass the op started on the owner ends there (its future completes)
        for _ in range(200):
            if rpc.rpc_sync(OWNER, graphs.engine_debug_info)["num_running_passes"] == 0:
                return
            time.sleep(0.05)
        raise AssertionError("a pass of _receive_gradients is still running on the owner")

    return [Sample(lambda: args(False), on=OWNER, after=passes_ended),
            Sample(lambda: args(True), on=OWNER, after=passes_ended)]


@samples("_reachability")
def _(env):
    return [Sample(lambda: (env.target.context_id,), on=OWNER),
            Sample(lambda: (env.target.receive_context_id,), on=OWNER)]


@samples("_abort_pass")
def _(env):
    return [Sample(lambda: (env.target.context_id, next(env.target.pass_ids)), on=OWNER),
            Sample(lambda: (-1, -1), on=OWNER)]  # the failed-worker watch's ping


@samples("_release_context")
def _(env):
    return [Sample(lambda: (env.passed(),))]


@samples("_debug_info")
def _(env):
    return [Sample(lambda: ())]


@samples("gradients_for")
def _(env):
    # on the parameter itself (see the module); in a context the pass did not reach: all None
    return [Sample(lambda: (env.passed(), [env.w]), copy_inputs=False),
            Sample(lambda: (env.graph()[0], [env.w, torch.ones(2)]), copy_inputs=False)]


# embedding-bag lookups (plugin/csrc/embedding)

@samples("_share_table")
def _(env):
    return [Sample(lambda: (torch.randn(5, 3, requires_grad=True), 0), after=_unshare_the_last_table),
            Sample(lambda: (torch.randn(5, 3), 1), after=_unshare_the_last_table)]


@samples("_unshare_table")
def _(env):
    return [Sample(lambda: (ops._share_table(torch.randn(5, 3), 0),),
                   after=lambda args: ops._unshare_table(*args))]  # (when the util did not run the op)


@samples("_lookup_bags")
def _(env):
    # three bags (the second empty), from the table once and twice (side by side)
    indices, offsets = torch.tensor([0, 2, 4, 9]), torch.tensor([0, 1, 1])
    return [
        Sample(lambda: (-1, [env.table], [indices], [offsets]), on=OWNER),
        # in a context (the owner records a send function for the bags)
        Sample(lambda: (env.target.context_id, [env.table, env.table], [indices, indices[:3]], [offsets, offsets]),
               on=OWNER),
    ]


@samples("_check_lookup")
def _(env):
    return [Sample(lambda: ("opcheck: ", [torch.tensor([0, 2, 4])], [torch.tensor([0, 1])])),
            Sample(lambda: ("opcheck: ", [torch.tensor([1, 1]), torch.tensor([], dtype=torch.int64)],
                            [torch.tensor([0]), torch.tensor([0])]))]


# native RPC calls recorded in a context (plugin/csrc/rpc)

@samples("_begin_call")
def _(env):
    return [Sample(lambda: ("opcheck", env.graph()[0], env.owner_id, [True, False])),
            Sample(lambda: ("opcheck", -1, env.owner_id, [False]))]  # nothing to record


@samples("_record_call")
def _(env):
    def remote_forward():
        # a call of the remote module's forward as RemoteModule makes it: begun here, answered by
        # the owner (which recorded its side), to be recorded here
        x = torch.randn(3, 6, requires_grad=True)
        context_id, autograd_message_id = ops._begin_call("opcheck", env.graph()[0], env.owner_id, [True])
        outputs, marks, answer_id = _rpc_functions.call(
            OWNER, "_remote_forward", (env.module._handle, context_id, autograd_message_id, [x], [True], False)).wait()
        return ("opcheck", context_id, autograd_message_id, [x], answer_id, env.owner_id, outputs, marks)

    return [Sample(remote_forward),
            Sample(lambda: ("opcheck", -1, -1, [], -1, env.owner_id, [torch.ones(2)], [False]))]  # nothing recorded


@samples("_failure_kind")
def _(env):
    def done():
        future = torch.futures.Future()
        future.set_result(1)
        return (future,)

    def failed(timeout):
        # an RPC that raises on the owner (a parameter it does not have), or outlives its timeout
        if timeout:
            future = rpc.rpc_async(OWNER, graphs.sleep, args=(0.5,), timeout=0.05)
        else:
            future = rpc.rpc_async(OWNER, optim_remote.param_value, args=("no such parameter",))
        with pytest.raises(RuntimeError):
            future.wait()
        return (future,)

    return [Sample(lambda: (torch.futures.Future(),)), Sample(done),  # pending, succeeded
            Sample(lambda: failed(False)), Sample(lambda: failed(True))]


@samples("_error_parts")
def _(env):
    # a native op's error as it comes back over RPC, a backward pass's, and text with no trailer
    return [Sample(lambda: ("RuntimeError: boom [ValueError raised on worker 'worker1' (id 1), in gilfree_rpc::_x]\n",)),
            Sample(lambda: ("Error on Node 2: boom [on worker 'worker2' (id 2), in the backward pass of context 5]",)),
            Sample(lambda: ("no trailer",))]


@samples("_check_context")
def _(env):
    return [Sample(lambda: ("opcheck", env.graph()[0], "call"))]  # a live context: nothing raised


@samples("_swap_current_context")
def _(env):
    return [Sample(lambda: (env.graph()[0],), after=_no_current_context),
            Sample(lambda: (-1,), after=_no_current_context)]


@samples("_configure_auth_transport")
def _(env):
    # a key (libcrypto loaded, the transport's self-test), and none
    key = hashlib.sha256(b"opcheck").hexdigest()
    return [Sample(lambda: (key, plugin._auth.libcrypto_path(), "127.0.0.1"), on=OWN_PROCESS),
            Sample(lambda: ("", "", ""), on=OWN_PROCESS)]


# remote modules (plugin/csrc/nn)

@samples("_remote_forward")
def _(env):
    def in_a_request():
        # inputs that require grad, under an autograd_message_id this worker made for the owner
        context_id, autograd_message_id = ops._begin_call("opcheck", env.target.context_id, env.owner_id, [True])
        return (env.module._handle, context_id, autograd_message_id, [torch.randn(3, 6, requires_grad=True)], [True], False)

    return [
        Sample(lambda: (env.module._handle, -1, -1, [torch.randn(3, 6)], [False], False), on=OWNER),
        Sample(lambda: (env.module._handle, env.target.context_id, -1, [torch.randn(5, 6)], [False], False), on=OWNER),
        Sample(in_a_request, on=OWNER),
    ]


# the distributed optimizer's bookkeeping (plugin/csrc/optim)

@samples("_checked_versions")
def _(env):
    return [Sample(lambda: (env.passed(), [env.here_id, env.owner_id], False)),
            Sample(lambda: (env.passed(env.steps_here()), [env.here_id], True))]


@samples("_step_outcomes")
def _(env):
    return [Sample(lambda: (env.passed(env.steps_here()), [env.here_id, env.owner_id])),
            Sample(lambda: (env.graph()[0], [env.here_id]))]  # no pass


@samples("_park_step")
def _(env):
    return [Sample(lambda: ([torch.ones(3), None, torch.ones(2).to_sparse()], 60_000),
                   after=_drop_the_last_parked_step)]


@samples("_take_step")
def _(env):
    return [Sample(lambda: (ops._park_step([torch.ones(3), None], 60_000),),
                   after=lambda args: ops._drop_step(*args))]  # (when the util did not run the op)


@samples("_drop_step")
def _(env):
    return [Sample(lambda: (ops._park_step([torch.ones(3)], 60_000),), after=lambda args: ops._drop_step(*args)),
            Sample(lambda: (ops._park_step([None], 1),))]  # (expired by then, most likely)


@samples("_wall_clock_ms")
def _(env):
    return [Sample(lambda: ())]


@samples("_step_statuses")
def _(env):
    return [Sample(lambda: ())]


@samples("_nn_program_tables")
def _(env):
    return [Sample(lambda: ())]


@samples("_gradient_norms")
def _(env):
    # RRefs of the owner's parameters (its own there), their gradients in the context: the dense
    # parameter's (the op raises for a sparse gradient, as torch's clip_grad_norm_:
    # torch._foreach_norm has no sparse kernel), and none (the receive context has no gradient)
    t = env.target
    return [Sample(lambda: (t.context_id, [t.dense], 2.0), on=OWNER),
            Sample(lambda: (t.context_id, [t.dense], math.inf), on=OWNER),
            Sample(lambda: (env.target.receive_context_id, [t.dense], 2.0), on=OWNER)]


@samples("_scale_gradients")
def _(env):
    # the dense parameter's gradient only: the schema check reads the storage of every tensor
    # the kernel's aten ops touch, which the table's sparse gradient has not
    t = env.target
    return [Sample(lambda: (t.context_id, [t.dense], torch.tensor(0.5)), on=OWNER)]


# the native local optimizers, on the owner (plugin/csrc/optim/local_optimizer.h)

@samples("_optimizer_step")
def _(env):
    t = env.target
    return [Sample(lambda: (t.adam_handle, t.context_id, -1, -1), on=OWNER),
            Sample(lambda: (t.adagrad_handle, t.context_id, -1, -1), on=OWNER),  # a sparse gradient
            Sample(lambda: (t.adam_handle, t.context_id, -1, 0), on=OWNER)]  # late: nothing applied


@samples("_optimizer_prepare")
def _(env):
    t = env.target

    def drop_the_last_prepared_step(args):
        probe = env.on_owner("_optimizer_prepare", t.adam_handle, t.context_id, 60_000)
        env.on_owner("_optimizer_drop", t.adam_handle, probe - 1)
        env.on_owner("_optimizer_drop", t.adam_handle, probe)

    return [Sample(lambda: (t.adam_handle, t.context_id, 60_000), on=OWNER, after=drop_the_last_prepared_step)]


@samples("_optimizer_commit")
def _(env):
    t = env.target
    # a step prepared for it each time (dropped after, when the util did not run the op)
    prepared = lambda: env.on_owner("_optimizer_prepare", t.adam_handle, t.context_id, 60_000)  # noqa: E731
    return [Sample(lambda: (t.adam_handle, prepared(), -1), on=OWNER,
                   after=lambda args: env.on_owner("_optimizer_drop", *args[:2]))]


@samples("_optimizer_drop")
def _(env):
    t = env.target
    prepared = lambda: env.on_owner("_optimizer_prepare", t.adam_handle, t.context_id, 60_000)  # noqa: E731
    return [Sample(lambda: (t.adam_handle, prepared()), on=OWNER,
                   after=lambda args: env.on_owner("_optimizer_drop", *args))]


@samples("_optimizer_step_gradients")
def _(env):
    t = env.target
    return [Sample(lambda: (t.adam_handle, [torch.ones(native_rpc_remote.DENSE_SHAPE)]), on=OWNER),
            Sample(lambda: (t.adam_handle, [None]), on=OWNER)]


# --- the tests ------------------------------------------------------------------------------------


def registered(namespace: str) -> set:
    """The names of the ops of a library (its schemas in torch's registry)."""
    return {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith(namespace + "::")}


def opchecked_by_test_opcheck() -> set:
    """The gilfree_optim ops tests/functional_optim/test_opcheck.py passes to ``torch.library.opcheck``: the
    first argument of each call, ``torch.ops.gilfree_optim.<name>.default``, read from its source."""
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(test_opcheck))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.library.opcheck":
            op = ast.unparse(node.args[0]).split(".")
            assert op[:3] == ["torch", "ops", "gilfree_optim"] and op[4:] == ["default"] and len(op) == 5, (
                f"test_opcheck.py opchecks {'.'.join(op)}: this test reads only torch.ops.gilfree_optim.<name>.default")
            names.add(op[3])
    return names


def opchecked_by_test_fused_kernels() -> set:
    """The kernels tests/functional_optim/test_fused_kernels.py::test_opcheck opchecks: ``_kernels.op_for(name)``
    for each ``name`` of its parametrization."""
    (mark,) = [m for m in test_fused_kernels.test_opcheck.pytestmark if m.name == "parametrize"]
    argname, names = mark.args[:2]
    assert argname == "name", mark
    return {_kernels.op_for(n)._qualified_op_name.split("::", 1)[1] for n in names}


# functional_optim's sparse-gradient kernels, checked here: _kernels.op_for's name -> (args, kwargs)
def _sparse_kernel_args(name: str):
    params = [torch.randn(6, 3), torch.randn(4)]
    grads = [torch.sparse_coo_tensor(torch.tensor([[0, 4, 0]]), torch.ones(3, 3), (6, 3), check_invariants=True),
             torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1), (4,), check_invariants=True)]  # (row 0 twice)
    state = lambda: [torch.zeros_like(p) for p in params]  # noqa: E731
    steps = [torch.tensor(0.0), torch.tensor(3.0)]
    if name == "sparse_adam":
        return (params, grads, state(), state(), steps), dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-8, maximize=False)
    if name == "sparse_adagrad":
        return (params, grads, state(), steps), dict(lr=0.1, lr_decay=0.01, eps=1e-10, maximize=True)
    assert name == "sparse_sgd", name
    return (params, grads), dict(lr=0.1, maximize=False)


SPARSE_KERNELS = ("sparse_adam", "sparse_adagrad", "sparse_sgd")


@pytest.mark.timeout(60)
def test_every_op_is_opchecked():
    """Both libraries' ops, as registered, are exactly the ops the opcheck tests check (the module's
    imports loaded both libraries)."""
    _kernels.load()
    checked = {
        "gilfree_rpc": set(SAMPLES),
        "gilfree_optim": opchecked_by_test_opcheck() | opchecked_by_test_fused_kernels()
        | {_kernels.op_for(n)._qualified_op_name.split("::", 1)[1] for n in SPARSE_KERNELS},
    }
    for namespace, names in checked.items():
        ops_of = registered(namespace)
        assert len(ops_of) > 0, f"no op of {namespace} is registered"
        assert not ops_of - names, f"{namespace} ops that no test opchecks: {sorted(ops_of - names)}"
        assert not names - ops_of, f"opchecked as {namespace} ops, but not registered: {sorted(names - ops_of)}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", SPARSE_KERNELS)
def test_sparse_kernels(name):
    """Every util but test_schema (see the module): the kernel's meta kernel, its autograd
    registration, its dispatch under AOT autograd."""
    args, kwargs = _sparse_kernel_args(name)
    torch.library.opcheck(_kernels.op_for(name), args, kwargs,
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_static",
                                      "test_aot_dispatch_dynamic"))


@pytest.fixture(scope="module")
def env(cluster):
    """What the samples act on (see Env), on the session's RPC group."""
    e = Env()
    yield e
    e.release()


def check(name: str, sample: Sample, test_util: str) -> None:
    """One util of opcheck on fresh arguments of one sample, where the sample says."""
    args = sample.args()
    try:
        if sample.on is None:
            opcheck_remote.opcheck(name, args, test_util, sample.copy_inputs)
        elif sample.on == OWN_PROCESS:
            code = f"from tests.support.opcheck_remote import opcheck; opcheck({name!r}, {args!r}, {test_util!r})"
            out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, f"{name}{args} ({test_util}) in a process of its own:\n{out.stderr}"
        else:
            rpc.rpc_sync(sample.on, opcheck_remote.opcheck, args=(name, args, test_util, sample.copy_inputs))
    finally:
        if sample.after is not None:
            sample.after(args)


@pytest.mark.timeout(240)  # the first one starts the cluster and makes the env
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_gilfree_rpc_op(env, name):
    """opcheck's schema and autograd-registration utils on every sample of op ``name``, one util at a
    time on fresh arguments."""
    for sample in SAMPLES[name](env):
        for test_util in UTILS:
            check(name, sample, test_util)
