// Every op schema of the library, declared in one place.
//
// Kernels are registered next to the code they run, one TORCH_LIBRARY_IMPL block per file
// that has kernels: engine/engine_kernels.cpp (the engine), optim/optimizer_kernels.cpp,
// optim/local_optimizer.cpp and optim/gradient_clipping.cpp (the distributed optimizer),
// embedding/remote_lookup.cpp, nn/remote_module.cpp, rpc/recorded_call.cpp,
// rpc/rpc_functions.cpp and rpc/auth_transport.cpp; the custom classes are declared here too.
// Errors follow one contract (rpc/worker_error.h): typed c10 errors, and a trailer naming the
// type and the worker on those that leave a worker in an RPC function's answer.
// Ops whose names start with an underscore are the RPC handlers and bookkeeping of
// the engine and the distributed optimizer; the handlers are what other workers call
// by RPC (rpc_functions.h), the rest serve the package's Python modules.
//
// All of them act on or read state outside their arguments (the engine, torch's
// distributed autograd contexts), so they are declared with CONSERVATIVE alias
// analysis: TorchScript must neither drop a call whose result is unused nor merge
// or reorder two calls.
#include "engine/peer_watch.h"
#include "nn/remote_module.h"
#include "optim/local_optimizer.h"
#include "rpc/rpc_functions.h"
#include "param_locks.h"

#include <torch/library.h>

namespace {

void def(torch::Library& m, const char* schema) {
  m.def(torch::schema(schema, c10::AliasAnalysisKind::CONSERVATIVE));
}

}  // namespace

TORCH_LIBRARY(gilfree_rpc, m) {
  // Distributed backward pass from `roots` (scalars on this worker) in the given
  // distributed autograd context. `mode` is "smart" or "fast". `hook_args`: the arguments
  // of the part-end hook every reached worker runs as its part of the pass ends
  // (engine/part_end.h; the optimizer's: optim/part_end_hook.h).
  def(
      m,
      "backward(int context_id, Tensor[] roots, bool retain_graph=False, "
      "str mode=\"smart\", int[] hook_args=[]) -> ()");
  // Gradients accumulated on this worker for the context: {leaf tensor: gradient}.
  def(m, "get_gradients(int context_id) -> Dict(Tensor, Tensor)");

  // RPC handler: gradients for the send function `autograd_message_id` of a pass.
  // Completes when this worker may answer (see engine.h, "first contact"): for the
  // pass's first message here, with the part-end answers this worker gathered
  // (engine/part_end.h); for any other, with an empty list.
  def(
      m,
      "_receive_gradients(int context_id, int pass_id, int autograd_message_id, "
      "Tensor[] grads, bool retain_graph, bool smart, int[] reached, int[] hook_args) -> Future(int[])");
  // RPC handler (smart mode): this worker's reachability table for the context,
  // flattened as [send_id, n, recv_id_1 .. recv_id_n, send_id, n, ...].
  def(m, "_reachability(int context_id) -> int[]");
  // RPC handler: drop every trace of a failed pass on this worker. Returns what this
  // worker's part of the pass was still waiting for ("" if it was not running here).
  def(m, "_abort_pass(int context_id, int pass_id) -> str");
  // Forgets this worker's engine state for a context (gradients, finished passes).
  def(m, "_release_context(int context_id) -> ()");
  // Embedding-bag lookups served natively by RPC (remote_lookup.h): share a table's weight
  // (2-D) with its bag mode (0 sum, 1 mean) and get its handle; forget a handle.
  def(m, "_share_table(Tensor weight, int mode) -> int");
  def(m, "_unshare_table(int handle) -> bool");
  // RPC handler: the bags of tables `handles` (concatenated along dim 1) and, in a context
  // (context_id >= 0, grad enabled), the autograd_message_id of the send function recorded
  // for them (-1 otherwise).
  def(m, "_lookup_bags(int context_id, int[] handles, Tensor[] indices, Tensor[] offsets) -> (Tensor, int)");
  // On the caller, before sending: _lookup_bags' checks that need no table, each message
  // after `prefix`, the rows named `inputs`.
  def(m, "_check_lookup(str prefix, Tensor[] inputs, Tensor[] offsets) -> ()");
  // Native RPC calls recorded in a distributed autograd context (rpc/recorded_call.h), on the
  // caller: before sending to worker `callee`, the context to record the call in (context_id,
  // or with -1 this thread's current one when grad mode is on) and, when some tensor of the
  // request requires grad, the request's autograd_message_id ((-1, -1): nothing to record);
  // the callee becomes a worker the context knows. When the answer arrived, records the
  // request's send function over `sent` and the answer's recv function over the tensors of
  // `answer` marked in `answer_requires_grad` (nothing when answer_id is -1); returns
  // `answer`, now in the context's graph.
  // Raises RuntimeError unless context_id is a live distributed autograd context here, the
  // message beginning with `what` and telling to `advice` inside its `with` block
  // (recorded_call.h, checkLiveContext: the library's one text for it).
  def(m, "_check_context(str what, int context_id, str advice) -> ()");
  def(m, "_begin_call(str what, int context_id, int callee, bool[] requires_grad) -> (int, int)");
  def(m,
      "_record_call(str what, int context_id, int autograd_message_id, Tensor[] sent, int answer_id, int from_worker, "
      "Tensor[] answer, bool[] answer_requires_grad) -> Tensor[]");

  // Remote modules (nn/remote_module.h): a module registered on its owner
  // (torch.classes.gilfree_rpc.NativeModule(name, params): its handle, its mode, its counters),
  // and the class of a forward program, whose `install` gives it to a module (by handle) for
  // train (training=True) or eval mode.
  m.class_<gilfree_rpc::nn::NativeModule>("NativeModule")
      .def(torch::init([](const std::string& name, const std::vector<at::Tensor>& params) {
        return gilfree_rpc::nn::NativeModule::registered(c10::make_intrusive<gilfree_rpc::nn::NativeModule>(name, params));
      }))
      .def("handle", &gilfree_rpc::nn::NativeModule::handle)
      .def("set_training", &gilfree_rpc::nn::NativeModule::setTraining)
      .def("info", &gilfree_rpc::nn::NativeModule::info);
  m.class_<gilfree_rpc::nn::ForwardProgram>("ForwardProgram")
      .def(torch::init<std::string, int64_t, c10::Device>())
      .def("bind_parameter", &gilfree_rpc::nn::ForwardProgram::bindParameter)
      .def("bind_tensor", &gilfree_rpc::nn::ForwardProgram::bindTensor)
      .def("add_symbol", &gilfree_rpc::nn::ForwardProgram::addSymbol)
      .def("add_input", &gilfree_rpc::nn::ForwardProgram::addInput)
      .def("add_call", &gilfree_rpc::nn::ForwardProgram::addCall)
      .def("add_list_item", &gilfree_rpc::nn::ForwardProgram::addListItem)
      .def("add_int_op", &gilfree_rpc::nn::ForwardProgram::addIntOp)
      .def("set_outputs", &gilfree_rpc::nn::ForwardProgram::setOutputs)
      .def("num_inputs", &gilfree_rpc::nn::ForwardProgram::numInputs)
      .def("num_instructions", &gilfree_rpc::nn::ForwardProgram::numInstructions)
      .def("install", [](const c10::intrusive_ptr<gilfree_rpc::nn::ForwardProgram>& self, int64_t handle,
                         bool training) {
        gilfree_rpc::nn::NativeModule::find(handle, "install")->setProgram(training, self);
      });
  // RPC handler: module `handle`'s forward on `inputs` (flattened) in the caller's context
  // (-1: none), the inputs marked in `requires_grad` under the caller's autograd_message_id
  // `autograd_message_id` (-1: none); the outputs, which of them require grad, and their send
  // function's autograd_message_id (-1: none recorded). Outputs on the CPU unless
  // `device_map_set`.
  def(m,
      "_remote_forward(int handle, int context_id, int autograd_message_id, Tensor[] inputs, bool[] requires_grad, "
      "bool device_map_set) -> (Tensor[], bool[], int)");
  // The tables of the remote modules' program encoding (nn/program_encoding.h, python_names.h):
  // {"codes", "int_ops", "dtypes", "layouts", "memory_formats"}, each {name: value}; what
  // plugin/nn/_lower.py writes a program with (read once, at import).
  def(m, "_nn_program_tables() -> Dict(str, Dict(str, int))");
  // This worker's counters, every room's (debug_counters.h; plugin.debug_info() lists them):
  // live contexts, running passes, parameter locks, parked steps, native modules, ...
  def(m, "_debug_info() -> Dict(str, int)");

  // The gradient of each of `params` in the context on this worker (None where it has
  // none): the plugin engine's, or torch's distributed autograd's when only torch's
  // engine ran. What a local optimizer step reads.
  def(m, "gradients_for(int context_id, Tensor[] params) -> Tensor?[]");
  // On the worker that called backward: if the context's latest pass of the plugin's
  // engine reached every worker of `workers` and found, on each, that every gradient fits
  // its parameter (optim/part_end_hook.h; none sparse unless `accept_sparse`), each one's
  // version of the context's gradients, in order; else an empty list. Then a step over
  // those owners needs no validation round.
  def(m, "_checked_versions(int context_id, int[] workers, bool accept_sparse) -> int[]");
  // On the worker that called backward with steps in the pass's hook arguments, after the
  // pass: each worker's StepStatus (optim/step_status.h; optim/part_end_hook.h) in the order of
  // `workers`: applied, late, refused or not_reached.
  def(m, "_step_outcomes(int context_id, int[] workers) -> int[]");
  // The two phases of a multi-owner optimizer step (prepared_steps.h): park validated
  // gradients for at most lease_ms and get a token; take them back to apply them; or
  // drop them. Taking an unknown or expired token raises.
  def(m, "_park_step(Tensor?[] gradients, int lease_ms) -> int");
  def(m, "_take_step(int token) -> Tensor?[]");
  def(m, "_drop_step(int token) -> bool");
  // Milliseconds since the Unix epoch (the system clock): the deadline of an owner's
  // part of a step is a time on the clock every host keeps.
  def(m, "_wall_clock_ms() -> int");
  // The kind of an RPC's failure, from its future: "" (it succeeded), "timeout" (no
  // answer within the RPC timeout), "unreachable" (the agent could not reach the peer:
  // connection refused, closed or broken), "error" (the peer answered with an error), or
  // "pending" (not completed yet).
  // Callers tell failures apart by it, not by their messages.
  def(m, "_failure_kind(Future(Any) future) -> str");
  // The parts of the last error trailer in `text` (rpc/worker_error.h, errorParts: message,
  // origin, type, worker, worker_id, where, at_end; node, what and context_id when present),
  // empty when there is none: how Python reads every native error (plugin/_errors.py).
  def(m, "_error_parts(str text) -> Dict(str, str)");
  // Gradient clipping's part on an owner (RPC handlers; gradient_clipping.cpp): the norm
  // of the gradient of each parameter of `params` (RRefs owned here) that has one in the
  // context (0-dim, its dtype, on the CPU; torch._foreach_norm per device and dtype),
  // stacked, and their positions in `params`; and multiplying those gradients in place.
  def(m, "_gradient_norms(int context_id, RRef(Tensor)[] params, float norm_type) -> (Tensor, int[])");
  def(m, "_scale_gradients(int context_id, RRef(Tensor)[] params, Tensor coefficient) -> ()");
  // Sets this thread's current distributed autograd context (-1: none); returns the
  // previous one. The optimizer sends its RPCs outside any context.
  def(m, "_swap_current_context(int context_id) -> int");
  // Authentication and encryption (auth/auth_transport.h): the key of the transport
  // "gilfree_auth" (an ASCII string; empty: none), the libcrypto to load (HMAC-SHA256,
  // AES-256-GCM), and the numeric IPv4 or IPv6 address the next agent's transport listens
  // on. Registers the transport the first time; with the first key, checks the transport's
  // mirror of TensorPipe's ABI first (auth/auth_transport_selftest.h) and raises when it fails.
  def(m, "_configure_auth_transport(str key, str crypto_library, str listen_host) -> ()");

  // The native local optimizers (local_optimizer.h): each op reaches one by its handle, on
  // this worker (a handle whose optimizer is gone raises, naming it). Every call that reads or
  // writes parameters, state or hyperparameters holds the parameters' locks (param_locks.h).
  // Errors are typed (ValueError, RuntimeError); by RPC, with the trailer (rpc/worker_error.h).
  //
  // The steps return a StepStatus (optim/step_status.h): applied; changed (the gradients
  // changed since the backward pass checked them); late (the locks were reached after
  // deadline_ms, ms since the Unix epoch; -1: none); nothing applied but for applied. Before
  // applying, each checks the gradients (functional_optim's op check_gradients: count, shape,
  // dtype, device, sparse) and raises when one does not fit, changing nothing; then it runs
  // functional_optim's group step. The optimizer's values and state are the Python's business
  // (plugin/optim/_native.py), which hands them to the object (torch.classes.gilfree_rpc.NativeLocalOptimizer).
  //
  // One round trip: the context's gradients here (gradients_for: an unknown context gives
  // none, nothing happens) when version is -1, else the engine's gradients if still at
  // `version` (as the backward pass checked them).
  def(m, "_optimizer_step(int handle, int context_id, int version, int deadline_ms) -> int");
  // Two phases: phase 1 reads and checks (no lock) and parks the gradients for at most
  // lease_ms (_park_step); returns the token. Phase 2 takes them (_take_step; raises when
  // unknown or expired) and applies them (checked again first). Drop forgets a parked step
  // (whether it was still parked).
  def(m, "_optimizer_prepare(int handle, int context_id, int lease_ms) -> int");
  def(m, "_optimizer_commit(int handle, int token, int deadline_ms) -> int");
  def(m, "_optimizer_drop(int handle, int token) -> bool");
  // A step with the given gradients (one per parameter, flat order; None skips one).
  def(m, "_optimizer_step_gradients(int handle, Tensor?[] gradients) -> ()");
  // The table of the steps' statuses (optim/step_status.h): {name: value}, what the Python's
  // status constants are (plugin/optim/_status.py).
  def(m, "_step_statuses() -> Dict(str, int)");
  // torch.classes.gilfree_rpc.NativeLocalOptimizer(name, groups, dense_error): a native local
  // optimizer's steps (local_optimizer.h); configure(groups, names, values, tensor_names,
  // tensor_values, sparse_errors, state) sets the plans of `groups` (and all state, when given),
  // state() gives copies of the state, handle() its handle.
  m.class_<gilfree_rpc::NativeLocalOptimizer>("NativeLocalOptimizer")
      .def(torch::init([](const std::string& name, const std::vector<std::vector<at::Tensor>>& groups,
                          const std::optional<std::string>& denseError) {
        return gilfree_rpc::NativeLocalOptimizer::registered(
            c10::make_intrusive<gilfree_rpc::NativeLocalOptimizer>(name, groups, denseError));
      }))
      .def("configure", &gilfree_rpc::NativeLocalOptimizer::configure)
      .def("state", &gilfree_rpc::NativeLocalOptimizer::state)
      .def("handle", &gilfree_rpc::NativeLocalOptimizer::handle);

  // torch.classes.gilfree_rpc.StepLock(params): the per-parameter locks of a set of
  // parameters, taken in one global order, for TorchScript `with` statements.
  m.class_<gilfree_rpc::StepLock>("StepLock")
      .def(torch::init<std::vector<at::Tensor>>())
      .def("size", &gilfree_rpc::StepLock::size)
      .def("__enter__", &gilfree_rpc::StepLock::enter)
      .def("__exit__", &gilfree_rpc::StepLock::exit);
}

// The RPC functions call the ops declared above: define them once those exist (static
// objects of one file are constructed in order; this runs when the library loads). From
// then on this worker answers pings (the abort function): the engine watches the others.
namespace {
const bool rpcFunctionsDefined = (gilfree_rpc::defineRpcFunctions(), gilfree_rpc::startPeerWatch(), true);
}  // namespace
