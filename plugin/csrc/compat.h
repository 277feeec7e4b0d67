// Every use of a torch internal by this library (every room: engine, rpc, optim, nn, embedding),
// each behind one named helper.
//
// "Internal" here: a private or undocumented field, type or bit layout, a test on a
// mangled type name, a behaviour torch does not promise, or a function of torch's own
// engine or RPC implementation (not of the C++ classes that extensions are meant to
// use: Node's public API, DistAutogradContainer/Context, RpcAgent, c10::ivalue::Future).
// The rest of plugin/csrc calls these helpers and touches none of those internals
// itself, so a torch upgrade has this one file to audit. It includes torch's, Python's and
// the standard library's headers only, never a header of this library's rooms (engine/,
// rpc/, ...: they include it). Each helper says what it relies on and why, and the torch
// releases it was checked on when it was written (most: 2.11 and 2.13). Where releases
// differ the code picks up types from the headers, and names a version
// (TORCH_VERSION_MAJOR/MINOR, torch/version.h) only for a member that one of them lacks.
//
// Checked releases, all helpers: 2.13.0 and 2.15.0 in CI (scripts/run_tests.sh: the whole
// test suite on 2.13.0; on 2.15.0 the library built against it, which must print no
// warning, and the engine, optimizer, lookup, security, build and main-job tests with
// torch.jit's Python entry points raising), and 2.14.1 by hand. For 2.15.0 the headers
// below were also read against 2.14.1's ("torch 2.15.0", at the end of this comment).
//
// Audit list (helper: the torch internal it relies on)
//   NodePtr, makeNode         Edge::function's pointer type (std::shared_ptr in 2.11,
//                             c10::intrusive_ptr in 2.13)
//   workerIdOf,               the autograd message id layout: the id of the worker
//   workerScopedId              that made it in bits 48 and up
//   gradientEdge              torch::autograd::impl::gradient_edge
//   takeInputs                InputBuffer::buffer (InputBuffer::variables is not exported)
//   addInput                  InputBuffer::add's signature
//   validateOutputs           torch::autograd::validate_outputs (torch's engine)
//   accumulatedLeaf           AccumulateGrad::variable
//   gradientToStore,          torch's AccumulateGrad rules for keeping a gradient without
//   accumulateStored            a copy and adding into a stored one (its use counts, the
//                             gradient layout contract's inline helpers)
//   gradLayoutContractEnforced  c10::AutogradState's layout-enforcement flag (torch 2.13;
//                             absent in 2.11 and 2.12, which always enforce the contract)
//   isGeneratedBackwardNode   generated backward functions: their mangled type name, and
//                             that they compute only the outputs whose edge is valid
//   pythonTypeOf              the Python exception type torch's bindings raise for each
//                             subclass of c10::Error (CATCH_TH_ERRORS)
//   isPythonError,            python_error's members, and the pending Python error torch's
//   takePythonException         hooks leave behind (its message is empty off torch's own
//                             threads); engine/python_errors.cpp builds the engine's
//                             description of a raised exception from these two and pythonTypeOf
//   keepPythonErrorsOnThisThread  that torch runs a Python hook under pybind11's
//                             gil_scoped_acquire (the pending error lives as long as the
//                             thread's Python thread state)
//   isPeerUnreachable         TensorPipe's transport errors say "originated at tensorpipe"
//   torchGradientStore        DistAutogradContext::getGradients returns a handle sharing
//                             the context's gradient map (the plugin publishes its own there)
//   callWhenContextDestroyed  DistAutogradContext's outstanding-RPC list, kept until the
//                             context is destroyed
//   dropMessageReferences     the request message holds one reference to each tensor it
//                             brings, until the handler returns (TensorPipe agent)
//   scriptCallMessage,        rpc::ScriptCall's wire form and the agent's reply future
//   replyValue                  (a Message custom class, decoded by deserializeRespToIValue)
//   isRpcTimeout              rpc::getRPCErrorType (parses the error message)
//   ownedTensor               an RRef argument of an op is an rpc::OwnerRRef on its owner
//                             (what TorchScript's RRef.local_value() reads)
//   recordSendFunction,       torch's RPC layer's addSendRpcBackward, and what its
//   makeRecvFunction,           addRecvRpcBackward does (distributed/autograd/utils.h,
//   addRecvFunction,            RecvRpcBackward), for the native calls that a backward pass
//   recordRecvFunction          follows (rpc/recorded_call.h)
//   sendContextRelease        torch's CleanupAutogradContextReq message (what releasing a
//                             context sends to the workers it knows), for the same calls
//   swapCurrentContext        that every RPC sent while a context is current carries
//                             autograd metadata, and makes the receiver create it
//   registerTensorPipeTransport  torch's TensorPipeTransportRegistry (tensorpipe_agent.h,
//                             built with USE_TENSORPIPE) and its TransportRegistration;
//                             TensorPipe's own transport interfaces are declared in
//                             auth/tensorpipe_abi.h (auth/auth_transport.cpp only), a mirror
//                             that auth/auth_transport_selftest.cpp checks before use with
//                             TensorPipe's public API (tensorpipe/tensorpipe.h: Context,
//                             Listener, Pipe, basic channel; shipped with torch, exported
//                             from libtorch_cpu on 2.13.0, 2.14.1 and 2.15.0)
//   currentStream             c10::impl::getDeviceGuardImpl: a device's current stream
//                             (stream_order.h, the order of CUDA streams)
//   addOpFunction             the process-wide TorchScript compilation unit in which torch's
//                             RPC agent looks up the function a SCRIPT_CALL names
//                             (torch::jit::get_python_cu, a Python-binding helper), and the
//                             JIT IR (Graph::insert, CompilationUnit::create_function) that
//                             builds a function of one op call without compiling TorchScript
//
// scriptCallMessage, replyValue, ownedTensor and addOpFunction (the native RPC functions and
// local optimizers) were checked on torch 2.13.0 and 2.14.1 only, also with torch.jit's
// Python entry points raising; on 2.11 (2.11.0+cu130, a GPU machine, 2026-11-27) only built
// (this file compiled) and tests/rpc/test_cuda.py run (passed), not the suite.
//
// The Python side relies on a few torch internals too; each sits in one named function
// (checked on torch 2.11 and 2.13):
//   plugin/rpc.py _fresh_torch_keys_after_a_restart
//                             torch.distributed.rpc._init_counter (and its lock): the
//                             counter init_rpc names its PrefixStore after
//   plugin/rpc.py _worker_names
//                             rpc.api._get_current_rpc_agent().get_worker_infos()
//   plugin/rpc.py init_rpc    TensorPipeRpcBackendOptions' _transports option, and with
//                             a key its _channels option (["basic"], "cuda_basic" too;
//                             checked on torch 2.13.0 and 2.14.1)
//   plugin/_rendezvous.py _uses_agent_store
//                             TORCHELASTIC_USE_AGENT_STORE, read as torch's tcp:// does
// (all four still there in torch 2.15.0, checked by the 2.15 test pass), and, for the remote
// modules (plugin/nn; checked on torch 2.13.0 and 2.15.0):
//   plugin/nn/__init__.py _parse_remote_device
//                             torch.distributed.remote_device._remote_device, the parser of
//                             torch's RemoteModule
//   plugin/nn/__init__.py _device_map_set
//                             the RPC agent's _get_device_map, as torch's RemoteModule reads it
//   plugin/nn/_lower.py _python_kernel
//                             the text of torch._C._dispatch_dump (a line per kernel: "<key>:
//                             registered at <file>:<line>"), to find kernels written in Python
//   plugin/nn/_lower.py       torch.export's graph: torch._ops.OpOverload targets and their
//                             _schema, torch.ops.higher_order.wrap_with_set_grad_enabled with
//                             its sub-graph, operator.getitem, SymInt sizes as sympy
//                             expressions, range_constraints bounded by
//                             torch.utils._sympy.numbers.int_oo
//
// torch 2.15.0: what changed in the headers this library includes (diffed against
// 2.14.1's on 2026-11-26), and why no helper needs a version guard for it:
//   input_buffer.h (takeInputs, addInput): InputBuffer gains a private member
//     (direct_accumulation_threads_: its size changes), get_for_direct_accumulation, and a
//     deleted copy assignment (it was already move-only here). `buffer` and add()'s five
//     parameters are unchanged, and the engine never calls get_for_direct_accumulation, so
//     add() finds no exposed slot to check. The size change is one more reason the library
//     must run with the torch it was built against: an InputBuffer laid out by 2.14's
//     header and filled by 2.15's add() would be read past its end.
//   saved_variable_hooks.h: SavedVariableHooks is no longer copyable and gains a virtual;
//     nothing here uses it.
//   jit/ir/ir.h (addOpFunction): Node's attribute getters throw c10::Error (TORCH_CHECK)
//     where they threw IRAttributeError. addOpFunction reads no attribute and nothing here
//     catches IRAttributeError; Graph::insert, addInput, registerOutput are unchanged.
//   jit/python/pybind_utils.h: its conversions throw c10::Error where they threw
//     std::runtime_error; addOpFunction calls get_python_cu only, unchanged. Where such an
//     error reaches the engine's describeException (engine/python_errors.cpp) it is now named
//     RuntimeError (before: the demangled std::runtime_error).
//   csrc/Exceptions.h: python_error (isPythonError, takePythonException) is unchanged.
//     torch's CATCH_TH_ERRORS now turns std::out_of_range into IndexError, so an op of this
//     library that lets one escape (c10::Dict::at on a missing key) raises IndexError in
//     Python on 2.15 and RuntimeError before.
//   Byte-identical to 2.14.1: autograd/{edge,engine,function,variable,grad_mode}.h,
//     autograd/functions/{accumulate_grad,utils}.h, utils/grad_layout_contract.h,
//     c10/core/AutogradState.h, ATen/{CachedTensorUtils,LegacyBatchedTensorImpl}.h,
//     Dispatcher.h, distributed/autograd/{context/context,context/container,utils}.h,
//     distributed/autograd/functions/{recvrpc,sendrpc}_backward.h,
//     distributed/autograd/rpc_messages/cleanup_autograd_context_req.h,
//     distributed/rpc/{message,rref_impl,rpc_agent,script_call,utils}.h,
//     jit/api/compilation_unit.h; tensorpipe_agent.h differs in a comment only.
#pragma once

#include <ATen/CachedTensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/LegacyBatchedTensorImpl.h>
#include <c10/core/AutogradState.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Type.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/input_buffer.h>
#include <torch/csrc/autograd/utils/grad_layout_contract.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/autograd/context/context.h>
#include <torch/csrc/distributed/autograd/functions/recvrpc_backward.h>
#include <torch/csrc/distributed/autograd/rpc_messages/cleanup_autograd_context_req.h>
#include <torch/csrc/distributed/autograd/utils.h>
#include <torch/csrc/distributed/rpc/message.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <torch/csrc/distributed/rpc/rref_impl.h>
#include <torch/csrc/distributed/rpc/script_call.h>
#include <torch/csrc/distributed/rpc/utils.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/version.h>

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace gilfree_rpc {

// --- autograd nodes -----------------------------------------------------------------

// An owning pointer to an autograd node, of the type the installed torch uses in
// Edge::function and in a DistAutogradContext's send and recv function maps:
// std::shared_ptr in torch 2.11, c10::intrusive_ptr in 2.13. Named from Edge::function
// so that it follows the headers. Checked on torch 2.11 and 2.13.
using NodePtr = decltype(std::declval<torch::autograd::Edge>().function);

// Builds a node of type T owned by a NodePtr (make_shared or make_intrusive, as the
// pointer type needs). Checked on torch 2.11 and 2.13.
template <class T, class... Args>
NodePtr makeNode(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

// The edge to the node that computes `tensor`'s gradient (its grad_fn, or its
// AccumulateGrad node for a leaf). torch::autograd::impl::gradient_edge is in torch's
// `impl` namespace (exported, undocumented); torch's distributed engine uses it for
// the roots of a pass too. Checked on torch 2.11 and 2.13.
inline torch::autograd::Edge gradientEdge(const at::Tensor& tensor) {
  return torch::autograd::impl::gradient_edge(tensor);
}

// Casts and checks `grads` against `edges` (reduces a broadcast gradient to its input's
// shape, casts its dtype, checks its device), as torch's engine does with every node's
// outputs; `formatError` builds the message of an error. torch::autograd::validate_outputs
// is a function of torch's engine (torch/csrc/autograd/engine.h, exported). Checked on
// torch 2.11 and 2.13.
inline void validateOutputs(
    const torch::autograd::edge_list& edges,
    torch::autograd::variable_list& grads,
    const std::function<std::string(const std::string&)>& formatError) {
  torch::autograd::validate_outputs(edges, grads, formatError);
}

// The leaf tensor of an AccumulateGrad node, or nullptr for any other node. Reads the
// public field AccumulateGrad::variable of torch's node class (not a documented API);
// the dynamic_cast needs the class's RTTI, which libtorch exports. Checked on torch
// 2.11 and 2.13.
inline const at::Tensor* accumulatedLeaf(torch::autograd::Node& fn) {
  auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(&fn);
  return leaf != nullptr ? &leaf->variable : nullptr;
}

// Whether `fn` is one of torch's generated backward functions (the classes of
// torch::autograd::generated, made from derivatives.yaml). The mangled name of the
// node's type is the only way to tell them from custom functions (PyNode, CppNode):
// "5torch8autograd9generated" is the Itanium ABI mangling of that namespace (GCC and
// Clang). The engine relies on what such a node does: it computes an output only when
// its next edge is valid (Node::task_should_compute_output), so hiding some edges
// computes some outputs (callFunctionMasked); custom functions compute them all.
// Checked on torch 2.11 and 2.13.
inline bool isGeneratedBackwardNode(const torch::autograd::Node& fn) {
  return std::strstr(typeid(fn).name(), "5torch8autograd9generated") != nullptr;
}

// Whether torch's AccumulateGrad makes a kept gradient obey the gradient layout contract
// on this thread. torch 2.13 added a switch for it, a thread-local flag of
// c10::AutogradState (get_grad_layout_enforcement_enabled, which AccumulateGrad reads);
// torch 2.11 and 2.12 have no such flag and always enforce the contract. Checked on torch
// 2.11 and 2.13 (and in 2.12's headers).
inline bool gradLayoutContractEnforced() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
  return c10::AutogradState::get_tls_state().get_grad_layout_enforcement_enabled();
#else
  return true;
#endif
}

// The tensor to keep as a leaf's first gradient in a context, by the rules of torch's
// AccumulateGrad::accumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h), which
// DistAutogradContext::accumulateGrad applies: `grad` itself (no copy) when at most
// `expectedRefs` references to it exist (those the engine holds) and, for a dense gradient,
// it obeys torch's gradient layout contract (strides like the leaf's; no stride-0 view such
// as a sum's expanded gradient); a sparse COO gradient whose indices and values are
// contiguous and referenced by it alone is kept as a new sparse tensor over the same
// indices and values (a shallow copy: changing the sparse tensor the node returned does not
// change the stored one); anything else is copied, a dense one laid out like the leaf
// (clone_obey_contract, an inline helper of autograd/utils/grad_layout_contract.h).
// References are counted as torch counts them, with torch::autograd::impl::is_tensor_stealable
// (an inline helper of variable.h, the same in 2.11 and 2.13): a tensor's Python object,
// once made (a gradient that a custom Function returned or a hook saw), holds a reference of
// its own, which does not count when nothing but that object refers to it from Python.
// Checked on torch 2.11 and 2.13 (tests/engine/test_gradient_storage.py compares with
// torch's engine).
inline at::Tensor gradientToStore(at::Tensor&& grad, const at::Tensor& variable, size_t expectedRefs) {
  const bool unreferenced =
      torch::autograd::impl::is_tensor_stealable(grad, expectedRefs + at::caching::is_cached_tensor(grad));
  if (grad.is_sparse()) {
    // torch's test, as written there: _indices() and _values() are aliases.
    if (grad._indices().is_contiguous() && grad._values().is_contiguous() && grad._indices().use_count() <= 1 &&
        grad._values().use_count() <= 1 && torch::autograd::impl::is_tensor_stealable(grad, expectedRefs)) {
      return at::_sparse_coo_tensor_unsafe(grad._indices(), grad._values(), grad.sizes(), grad.options());
    }
    return grad.clone();
  }
  if (grad.is_sparse_csr() || grad.is_nested() || (variable.is_sparse_csr() && grad.layout() == at::kStrided)) {
    return grad.clone();
  }
  if (unreferenced &&
      (grad.is_mkldnn() || !gradLayoutContractEnforced() ||
       torch::autograd::utils::obeys_layout_contract(grad, variable))) {
    return std::move(grad);
  }
  return grad.is_mkldnn() ? grad.clone() : torch::autograd::utils::clone_obey_contract(grad, variable);
}

// Adds `grad` to the stored gradient `stored` of `variable`, as torch's AccumulateGrad does
// with a gradient already there (GradMode off): in place (stored += grad), so the stored
// tensor stays the same tensor, unless a dense gradient meets a sparse stored one or the
// two are not vmap-compatible for an in-place op (at::inplaceIsVmapCompatible, exported);
// then the sum is a new tensor, which is returned. Checked on torch 2.11 and 2.13.
inline at::Tensor accumulateStored(at::Tensor stored, const at::Tensor& grad) {
  if (stored.is_sparse() && !grad.is_sparse()) {
    return grad + stored;  // torch's order: add(sparse, dense) is not defined
  }
  if (!at::inplaceIsVmapCompatible(stored, grad)) {
    return stored + grad;
  }
  stored += grad;
  return stored;
}

// --- input buffers ------------------------------------------------------------------

// The gradients gathered in `buffer`. InputBuffer::variables does the same but is not
// exported from libtorch; InputBuffer::buffer is a public member of this internal
// struct (torch/csrc/autograd/input_buffer.h). Checked on torch 2.11 and 2.13.
inline torch::autograd::variable_list takeInputs(torch::autograd::InputBuffer&& buffer) {
  return std::move(buffer.buffer);
}

// Adds `var` to input `pos` of `buffer`, synchronizing the producer's and the consumer's
// streams (CUDA) as torch's engine does. InputBuffer::add is exported, but its parameters
// change between releases (the consumer node `fn` is the newest). Checked on torch 2.11
// and 2.13.
inline void addInput(
    torch::autograd::InputBuffer& buffer,
    size_t pos,
    at::Tensor&& var,
    const std::optional<c10::Stream>& producerStream,
    torch::autograd::Node* fn) {
  buffer.add(pos, std::move(var), producerStream, fn->stream(), fn);
}

// --- errors -------------------------------------------------------------------------

// The Python exception type that torch's Python bindings raise for `error`: a subclass of
// c10::Error by its name (c10::ValueError: "ValueError", ...), any other c10::Error
// "RuntimeError" (torch/csrc/Exceptions.h, CATCH_TH_ERRORS: an internal header's macro).
// Checked on torch 2.11 and 2.13.
inline const char* pythonTypeOf(const c10::Error& error) {
  if (dynamic_cast<const c10::ValueError*>(&error)) {
    return "ValueError";
  }
  if (dynamic_cast<const c10::TypeError*>(&error)) {
    return "TypeError";
  }
  if (dynamic_cast<const c10::IndexError*>(&error)) {
    return "IndexError";
  }
  if (dynamic_cast<const c10::NotImplementedError*>(&error)) {
    return "NotImplementedError";
  }
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error)) {
    return "torch.OutOfMemoryError";
  }
  return "RuntimeError";
}

// A Python exception that Python code run by torch raised: new references (or null), which
// the caller releases with the GIL held.
struct PythonException {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  bool fromFunction = false;  // raised by a custom autograd.Function (else by a hook)
};

// Whether `e` is torch's python_error: what a Python tensor hook, pre-hook or post-hook, or a
// custom autograd.Function's backward throws when it raises. python_error (global namespace)
// is declared in torch's Python bindings header (torch/csrc/Exceptions.h, internal). Checked
// on torch 2.11 and 2.13.
inline bool isPythonError(const std::exception& e) {
  return dynamic_cast<const ::python_error*>(&e) != nullptr;
}

// The Python exception that python_error `e` stands for; the caller holds the GIL. torch
// builds python_error's message only when its own autograd threads ask for it with the GIL
// held (python_error::persist); on other threads what() is empty by the time the exception
// is caught, so the exception is read from Python: a python_error persisted by torch's
// autograd.Function node (before it throws) holds it in its public members `type`, `value`,
// `traceback` (new references are returned); one thrown by a hook has them unset and the
// exception is still the thread's pending Python error, which this fetches (and so clears)
// and normalizes. Checked on torch 2.11 and 2.13.
inline PythonException takePythonException(const std::exception& e) {
  PythonException taken;
  const auto& error = dynamic_cast<const ::python_error&>(e);
  if (error.type != nullptr) {
    taken.type = error.type;
    taken.value = error.value;
    taken.traceback = error.traceback;
    Py_XINCREF(taken.type);
    Py_XINCREF(taken.value);
    Py_XINCREF(taken.traceback);
    taken.fromFunction = true;
    return taken;
  }
  PyErr_Fetch(&taken.type, &taken.value, &taken.traceback);
  PyErr_NormalizeException(&taken.type, &taken.value, &taken.traceback);
  return taken;
}

// Gives this thread a Python thread state that outlives every hook call on it, so that a
// hook's exception is still pending in it when the engine catches the error
// (takePythonException). Does nothing on a thread Python knows already (the one that called
// backward), after the first call on a thread, or in a process without an interpreter; the
// first call on a new thread takes the GIL once, later calls cost one thread-local test.
// Relies on how torch calls a Python hook from C++: with pybind11's gil_scoped_acquire,
// which finds the thread's state through PyGILState_GetThisThreadState and, as that state's
// count never drops to zero, leaves it (and the exception pending in it) in place when the
// hook raises; without such a state it makes one for the call and destroys it, the
// exception with it, before the exception reaches the engine. Checked on torch 2.11 and 2.13.
inline void keepPythonErrorsOnThisThread() {
  static thread_local bool done = false;
  if (done) {
    return;
  }
  done = true;
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() != nullptr) {
    return;
  }
  // PyGILState_Ensure creates the thread state (and takes the GIL); PyEval_SaveThread gives
  // the GIL back but keeps the state, which is never released.
  PyGILState_Ensure();
  PyEval_SaveThread();
}

// --- distributed autograd contexts --------------------------------------------------

// torch's own store of the context's gradients, the one torch's get_gradients and its
// DistributedOptimizer read: DistAutogradContext::getGradients() returns a c10::Dict handle
// that shares the context's private map (accumulatedGrads_), so an insert through it is seen
// there (without torch's context lock: the engine never writes it while torch's engine runs
// a pass of the same context). Checked on torch 2.13.0 and 2.15.0 (a torch DistributedOptimizer
// then steps with what was inserted; a later pass of torch's engine adds into it).
inline c10::Dict<at::Tensor, at::Tensor> torchGradientStore(torch::distributed::autograd::DistAutogradContext& ctx) {
  return ctx.getGradients();
}

// Calls `onDestroyed` when torch destroys `ctx` (or, rarely, earlier: see below).
// DistAutogradContext has no destruction callback. The hook: a completed future handed
// to addOutstandingRpc stays in the context's list of outstanding RPCs until the
// context is destroyed, and its value (a capsule holding a guard) goes with it. Only
// torch's own engine clears that list earlier (clearAndWaitForOutstandingRpcsAsync,
// when it runs a backward pass in the same context); `onDestroyed` then runs while the
// context lives, so it must check that the context is gone (a weak_ptr) before acting.
// Checked on torch 2.11 and 2.13.
inline void callWhenContextDestroyed(
    torch::distributed::autograd::DistAutogradContext& ctx,
    std::function<void()> onDestroyed) {
  struct Guard : torch::CustomClassHolder {
    explicit Guard(std::function<void()> fn) : fn(std::move(fn)) {}
    ~Guard() override {
      fn();
    }
    std::function<void()> fn;
  };
  auto hook = c10::make_intrusive<c10::ivalue::Future>(c10::AnyType::get());
  hook->markCompleted(c10::IValue::make_capsule(c10::make_intrusive<Guard>(std::move(onDestroyed))));
  ctx.addOutstandingRpc(hook);
}

// Sets this thread's current distributed autograd context (-1: none) without checks and
// returns the previous one (DistAutogradContainer's thread-local id; forceCurrentContextId
// is public). What it is for relies on torch's behaviour, not its API: rpc_async of a
// TorchScript or Python function from a thread inside a context attaches autograd
// metadata even with no tensor that requires grad (sendMessageWithAutograd with
// forceGradRecording), and the receiver then creates the context if it does not know it
// (getOrCreateContext). The distributed optimizer sends with no current context so that
// its steps never create one on an owner. Checked on torch 2.11 and 2.13.
inline int64_t swapCurrentContext(int64_t contextId) {
  using torch::distributed::autograd::DistAutogradContainer;
  int64_t previous = DistAutogradContainer::currentContextId();
  DistAutogradContainer::forceCurrentContextId(contextId);
  return previous;
}

// Records `tensors` (answered to another worker) as a send function with `messageId` in
// `ctx`: what torch's RPC layer does for a message with autograd metadata, through the
// function it calls for that (torch/csrc/distributed/autograd/utils.h, addSendRpcBackward;
// TORCH_API, not documented for extensions). The native lookups (remote_lookup.cpp) send
// their own messages and record them this way. Checked on torch 2.13.0.
inline void recordSendFunction(
    const torch::distributed::autograd::ContextPtr& ctx,
    int64_t messageId,
    std::vector<at::Tensor>& tensors) {
  namespace dist_autograd = torch::distributed::autograd;
  dist_autograd::addSendRpcBackward(ctx, dist_autograd::AutogradMetadata(ctx->contextId(), messageId), tensors);
}

// The recv function of `tensors` from `fromWorker` with `messageId` in `ctx`: a RecvRpcBackward
// node (its constructor is TORCH_API, the class undocumented for extensions), which every tensor
// of `tensors` that requires grad gets as its history, as torch's addRecvRpcBackward
// (distributed/autograd/utils.h) gives it to an RPC's tensors; not added to the context yet
// (addRecvFunction). torch 2.11's DistAutogradContext keeps it by std::shared_ptr, 2.13's by
// c10::intrusive_ptr, as NodePtr. Checked on torch 2.13.0.
using RecvFunctionPtr =
    std::decay_t<decltype(std::declval<torch::distributed::autograd::DistAutogradContext&>().recvFunctions())>::mapped_type;
inline RecvFunctionPtr makeRecvFunction(
    const torch::distributed::autograd::ContextPtr& ctx,
    int64_t messageId,
    int64_t fromWorker,
    std::vector<at::Tensor>& tensors) {
  namespace dist_autograd = torch::distributed::autograd;
  const auto from = static_cast<torch::distributed::rpc::worker_id_t>(fromWorker);
  const dist_autograd::AutogradMetadata metadata(ctx->contextId(), messageId);
  // The device map its gradients travel with (torch's engine sends them from here to `from`):
  // this worker's map towards `from`, which torch's addRecvRpcBackward takes from the request.
  torch::distributed::rpc::DeviceMap deviceMap;
  if (torch::distributed::rpc::RpcAgent::isCurrentRpcAgentSet()) {
    auto agent = torch::distributed::rpc::RpcAgent::getCurrentRpcAgent();
    deviceMap = agent->getDeviceMap(agent->getWorkerInfo(from));
  }
  RecvFunctionPtr recv = [&] {
    if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
      return std::make_shared<dist_autograd::RecvRpcBackward>(metadata, ctx, from, deviceMap);
    } else {
      return c10::make_intrusive<dist_autograd::RecvRpcBackward>(metadata, ctx, from, deviceMap);
    }
  }();
  for (auto& tensor : tensors) {
    if (tensor.requires_grad()) {
      torch::autograd::set_history(tensor, recv);
    }
  }
  return recv;
}

// Adds `recv` (makeRecvFunction's) to `ctx` under `messageId`, and `fromWorker` as a worker `ctx`
// knows (so that the context's release reaches it): the rest of what torch's
// addRecvRpcBackward does. Checked on torch 2.13.0.
inline void addRecvFunction(
    const torch::distributed::autograd::ContextPtr& ctx,
    const RecvFunctionPtr& recv,
    int64_t messageId,
    int64_t fromWorker) {
  RecvFunctionPtr added = recv;  // (torch's addRecvFunction takes a non-const reference)
  ctx->addRecvFunction(added, messageId);
  ctx->addKnownWorkerId(static_cast<torch::distributed::rpc::worker_id_t>(fromWorker));
}

// Records answer `tensors` from `fromWorker` as the recv function with `messageId` in `ctx`,
// and `fromWorker` as a worker `ctx` knows: what torch's addRecvRpcBackward does with an RPC's
// answer, except that it takes the context instead of looking it up with getOrCreateContext,
// which would re-create a context released meanwhile. Checked on torch 2.13.0.
inline void recordRecvFunction(
    const torch::distributed::autograd::ContextPtr& ctx,
    int64_t messageId,
    int64_t fromWorker,
    std::vector<at::Tensor>& tensors) {
  addRecvFunction(ctx, makeRecvFunction(ctx, messageId, fromWorker, tensors), messageId, fromWorker);
}

// Tells worker `workerId` to release its distributed autograd context `contextId` (and, from
// there, the workers that context knows), as this worker's release of a context it shares
// with `workerId` does: torch's CleanupAutogradContextReq message
// (distributed/autograd/rpc_messages; TORCH_API, not documented for extensions), answered
// natively by torch's RPC layer (releaseContextIfPresent: nothing happens where the context is
// unknown). Best effort, as torch's own: sent without waiting, a failure ignored (the worker is
// gone). Checked on torch 2.13.0.
inline void sendContextRelease(int64_t workerId, int64_t contextId) {
  namespace rpc = torch::distributed::rpc;
  if (!rpc::RpcAgent::isCurrentRpcAgentSet()) {
    return;
  }
  try {
    auto agent = rpc::RpcAgent::getCurrentRpcAgent();
    const auto& to = agent->getWorkerInfo(static_cast<rpc::worker_id_t>(workerId));
    auto sent = agent->send(to, torch::distributed::autograd::CleanupAutogradContextReq(contextId).toMessage());
    sent->addCallback([](c10::ivalue::Future& done) { (void)done.hasError(); });
  } catch (const std::exception&) {
    // RPC is shutting down or the worker is unknown: nothing to release there.
  }
}

// --- RPC messages -------------------------------------------------------------------

// Drops, from the gradients the gradient handler received, the reference that the request
// message holds, so that torch's rule for keeping a leaf's gradient without a copy
// (gradientToStore) counts the same references in both engines. The agent deserializes a
// request's tensors into the message (rpc::Message::tensors(), which the handler's argument
// list refers to) and the TensorPipe agent keeps that message until the handler returns;
// our engine runs the work the gradients bring inside the handler (Engine::receiveGradients),
// while torch's DistEngine hands it to another thread (at::launch in
// executeSendFunctionAsync) and its handler returns, dropping the message, first. A tensor
// referenced by `grads` and the message alone (use count 2, no Python object) is replaced
// by a new tensor over the same data and metadata (TensorImpl::shallow_copy_and_detach, as
// torch's make_variable does; a sparse one keeps the same indices and values); the
// message's tensor goes with the message, never read again. A tensor with any other
// reference is left as it is: the same tensor twice in one message (the pickler writes it
// once, so the list refers to it twice: an add's gradient for both of its inputs, which
// torch copies too), or a caller other than the agent. Checked on torch 2.11 and 2.13.
inline void dropMessageReferences(std::vector<at::Tensor>& grads) {
  for (auto& grad : grads) {
    if (grad.defined() && grad.use_count() == 2 &&
        grad.unsafeGetTensorImpl()->pyobj_slot()->load_pyobj() == nullptr) {
      grad = at::Tensor(grad.unsafeGetTensorImpl()->shallow_copy_and_detach(
          /*version_counter=*/c10::VariableVersion(0), /*allow_tensor_metadata_change=*/true));
    }
  }
}

// The request message that calls the TorchScript function `name` with `args` on a peer
// (as rpc.rpc_async with a scripted function does), for RpcAgent::send. rpc::ScriptCall
// and its wire form are torch's RPC internals. With `asyncExecution` the peer answers
// when the future the function returns completes. Checked on torch 2.11 and 2.13.
inline c10::intrusive_ptr<torch::distributed::rpc::Message> scriptCallMessage(
    const c10::QualifiedName& name,
    std::vector<c10::IValue>&& args,
    bool asyncExecution) {
  torch::distributed::rpc::ScriptCall call(name, std::move(args), asyncExecution);
  return std::move(call).toMessage();
}

// The value a peer returned, from the completed future of RpcAgent::send for a
// scriptCallMessage: that future's value is the reply Message (a custom class), decoded
// by rpc::deserializeRespToIValue. Throws what decoding throws. Checked on torch 2.11
// and 2.13.
inline c10::IValue replyValue(c10::ivalue::Future& done) {
  return torch::distributed::rpc::deserializeRespToIValue(
      *done.value().toCustomClass<torch::distributed::rpc::Message>());
}

// Whether a failed RPC future failed because the RPC timed out. rpc::getRPCErrorType
// tells it by parsing the error message. Checked on torch 2.11 and 2.13.
inline bool isRpcTimeout(const c10::ivalue::Future& done) {
  return torch::distributed::rpc::getRPCErrorType(done) == torch::distributed::rpc::RPCErrorType::TIMEOUT;
}

// The tensor that `rref` holds, on the worker that owns it. An RRef that arrives in the
// arguments of an RPC is resolved by torch's RRef context to the callee's own
// rpc::OwnerRRef when the callee owns it, whose value is what TorchScript's
// RRef.local_value() (aten::local_value, a JIT-only operator) returns. Raises, naming
// `what`, for an RRef owned elsewhere or one that holds no Tensor. Checked on torch 2.11,
// 2.13 and 2.14.1.
inline at::Tensor ownedTensor(const c10::intrusive_ptr<c10::RRefInterface>& rref, const std::string& what) {
  TORCH_CHECK(rref->isOwner(), what, " is an RRef owned by worker ", rref->owner(), ", not by this worker");
  const auto& value = c10::static_intrusive_pointer_cast<torch::distributed::rpc::OwnerRRef>(rref)->getValue();
  TORCH_CHECK(value.isTensor(), what, " refers to a ", value.tagKind(), ", not a Tensor");
  return value.toTensor();
}

// Whether a failed RPC future failed because the agent could not reach the peer at
// all (connection refused, closed or broken), not because it timed out, the peer's
// handler raised, or the faulty test agent injected a failure. The RPC layer has no
// error type for it (getRPCErrorType says UNKNOWN_ERROR); TensorPipe ends such futures
// with its own error text, which always carries "(this error originated at
// tensorpipe/...)" (tensorpipe/common/error.h). Checked on torch 2.13. The errors of this
// library's own transport (auth/auth_transport_framing.cpp, transportError) name "tensorpipe
// transport gilfree_auth" as their origin, so they read the same.
inline bool isPeerUnreachable(const c10::ivalue::Future& done) {
  return done.hasError() && !isRpcTimeout(done) &&
      done.tryRetrieveErrorMessage().find("originated at tensorpipe") != std::string::npos;
}

// --- functions that RPC calls by name ----------------------------------------------

// Adds to torch's process-wide TorchScript compilation unit a function named `name` whose
// graph is one call of the registered op `op` (a dispatcher schema of this library): one
// input per argument of the op, typed as its schema says, and the op's result as the
// output (a tuple for several results, None for none). Nothing is parsed or compiled from
// source: the graph is built node by node and Graph::insert matches the op's schema, so this
// needs no TorchScript frontend (torch.jit's Python entry points may raise). Does nothing
// when the unit already holds `name`.
// Internals relied on: torch's RPC agent answers a SCRIPT_CALL by looking its function up in
// this unit (PythonRpcHandler::jitCompilationUnit(), set from torch::jit::get_python_cu(),
// an inline helper of the Python bindings that reads torch.jit._state._python_cu) and runs it
// with the JIT interpreter on the RPC thread, without the GIL; the JIT IR (Graph, Value,
// Graph::insert) and CompilationUnit::create_function are exported but not an extension API.
// Takes the GIL to read the unit. Checked on torch 2.11, 2.13 and 2.14.1.
inline void addOpFunction(const c10::QualifiedName& name, const c10::OperatorName& op) {
  std::shared_ptr<torch::jit::CompilationUnit> unit;
  {
    pybind11::gil_scoped_acquire gil;
    unit = torch::jit::get_python_cu();
  }
  if (unit->find_function(name) != nullptr) {
    return;
  }
  const auto& schema = c10::Dispatcher::singleton().findSchemaOrThrow(op.name.c_str(), op.overload_name.c_str()).schema();
  auto graph = std::make_shared<torch::jit::Graph>();
  std::vector<torch::jit::NamedValue> positional, keywords;
  for (const auto& argument : schema.arguments()) {
    auto* input = graph->addInput(argument.name())->setType(argument.type());
    if (argument.kwarg_only()) {
      keywords.emplace_back(argument.name(), input);
    } else {
      positional.emplace_back(input);
    }
  }
  graph->registerOutput(graph->insert(c10::Symbol::fromQualString(op.name), positional, keywords));
  unit->create_function(name, std::move(graph));
}

// --- ids ----------------------------------------------------------------------------

// Autograd message ids carry the id of the worker that made them (the worker holding
// the send function) in bits 48 and up, the worker's counter below
// (DistAutogradContainer, "first 16 bits is the worker_id and the next 48 bits is an
// auto-incrementing id"; the constant is private to container.cpp). The engine reads it
// to know where a recv function's gradients go. Pass ids (the engine's own) use the same
// layout. Checked on torch 2.11 and 2.13.
constexpr int kWorkerIdShift = 48;

// The worker that made the autograd message id (or pass id) `id`.
inline int64_t workerIdOf(int64_t id) {
  return id >> kWorkerIdShift;
}

// An id made by worker `workerId`, with `sequence` (below 2^48) in the low bits.
inline int64_t workerScopedId(int64_t workerId, int64_t sequence) {
  return (workerId << kWorkerIdShift) | sequence;
}

// --- streams -------------------------------------------------------------------------

// The current stream of `device` on this thread (CUDA: the stream a torch.cuda.stream()
// block or torch's RPC agent set, else the default stream), through the device guard
// implementation registered for its type (c10/core/impl, an internal namespace: the
// device-generic way that c10::Event itself records and blocks). Never called for the CPU.
// Checked on torch 2.13.0 (compiled against its CPU build; the CUDA guard is the one
// torch's CUDA builds register).
inline c10::Stream currentStream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

}  // namespace gilfree_rpc

// --- TensorPipe transports (auth/auth_transport.cpp only) -------------------------------
#ifdef GILFREE_TENSORPIPE_TRANSPORT
// tensorpipe_agent.h declares its classes only when torch was built with TensorPipe
// (USE_TENSORPIPE, on in the Linux wheels); the macro selects that part of the header,
// which then matches libtorch.
#ifndef USE_TENSORPIPE
#define USE_TENSORPIPE 1
#endif
#include <torch/csrc/distributed/rpc/tensorpipe_agent.h>

namespace gilfree_rpc {

// Registers `create` under `name` in torch's registry of TensorPipe transports: an agent
// started with TensorPipeRpcBackendOptions(_transports=[name]) calls it once, at start-up,
// and listens on the address it returns. The registry (TORCH_DECLARE_REGISTRY in
// tensorpipe_agent.h) is exported from libtorch_cpu. Checked on torch 2.13.0 and 2.14.1.
inline void registerTensorPipeTransport(
    const std::string& name,
    std::unique_ptr<torch::distributed::rpc::TransportRegistration> (*create)()) {
  torch::distributed::rpc::TensorPipeTransportRegistry()->Register(name, create);
}

}  // namespace gilfree_rpc
#endif  // GILFREE_TENSORPIPE_TRANSPORT
