// Every op schema of the library, declared in one place.
//
// Kernels are registered next to the code they run (engine_kernels.cpp,
// optimizer_kernels.cpp); the custom classes are declared here too.
// Ops whose names start with an underscore are the RPC handlers and bookkeeping of
// the engine and the distributed optimizer; the handlers are what other workers call
// by RPC (rpc_functions.h), the rest serve the package's Python modules.
//
// All of them act on or read state outside their arguments (the engine, torch's
// distributed autograd contexts), so they are declared with CONSERVATIVE alias
// analysis: TorchScript must neither drop a call whose result is unused nor merge
// or reorder two calls.
#include "rpc_functions.h"
#include "step_lock.h"

#include <torch/library.h>

namespace {

void def(torch::Library& m, const char* schema) {
  m.def(torch::schema(schema, c10::AliasAnalysisKind::CONSERVATIVE));
}

}  // namespace

TORCH_LIBRARY(dist_engine, m) {
  // Distributed backward pass from `roots` (scalars on this worker) in the given
  // distributed autograd context. `mode` is "smart" or "fast".
  def(
      m,
      "backward(int context_id, Tensor[] roots, bool retain_graph=False, "
      "str mode=\"smart\") -> ()");
  // Gradients accumulated on this worker for the context: {leaf tensor: gradient}.
  def(m, "get_gradients(int context_id) -> Dict(Tensor, Tensor)");

  // RPC handler: gradients for the send function `autograd_message_id` of a pass.
  // Completes when this worker may answer (see engine.h, "first contact"): for the
  // pass's first message here, with the workers' findings on their gradients
  // (gradient_check.h, fitReport); for any other, with an empty list.
  def(
      m,
      "_receive_gradients(int context_id, int pass_id, int autograd_message_id, "
      "Tensor[] grads, bool retain_graph, bool smart, int[] reached) -> Future(int[])");
  // RPC handler (smart mode): this worker's reachability table for the context,
  // flattened as [send_id, n, recv_id_1 .. recv_id_n, send_id, n, ...].
  def(m, "_reachability(int context_id) -> int[]");
  // RPC handler: drop every trace of a failed pass on this worker. Returns what this
  // worker's part of the pass was still waiting for ("" if it was not running here).
  def(m, "_abort_pass(int context_id, int pass_id) -> str");
  // Forgets this worker's engine state for a context (gradients, finished passes).
  def(m, "_release_context(int context_id) -> ()");
  // Counters for tests and monitoring: live contexts, running passes, ...
  def(m, "_debug_info() -> Dict(str, int)");

  // The gradient of each of `params` in the context on this worker (None where it has
  // none): the plugin engine's, or torch's distributed autograd's when only torch's
  // engine ran. What a local optimizer step reads.
  def(m, "gradients_for(int context_id, Tensor[] params) -> Tensor?[]");
  // On the worker that called backward: if the context's latest pass of the plugin's
  // engine reached every worker of `workers` and found, on each, that every gradient fits
  // its parameter (gradient_check.h; none sparse unless `accept_sparse`), each one's
  // version of the context's gradients, in order; else an empty list. Then a step over
  // those owners needs no validation round.
  def(m, "_checked_versions(int context_id, int[] workers, bool accept_sparse) -> int[]");
  // On an owner: gradients_for, from the engine's gradients of the context if they are
  // still at `version` (those the backward pass checked); raises otherwise.
  def(m, "_checked_gradients_for(int context_id, Tensor[] params, int version) -> Tensor?[]");
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
  // Gradient clipping's part on an owner (RPC handlers; gradient_clipping.cpp): the norm
  // of the gradient of each parameter of `params` (RRefs owned here) that has one in the
  // context (0-dim, its dtype, on the CPU; torch._foreach_norm per device and dtype),
  // stacked, and their positions in `params`; and multiplying those gradients in place.
  def(m, "_gradient_norms(int context_id, RRef(Tensor)[] params, float norm_type) -> (Tensor, int[])");
  def(m, "_scale_gradients(int context_id, RRef(Tensor)[] params, Tensor coefficient) -> ()");
  // Counters of the optimizer's state in this process: num_param_locks (live
  // per-parameter locks), num_prepared_steps (steps parked between their phases).
  def(m, "_optimizer_debug_info() -> Dict(str, int)");
  // Sets this thread's current distributed autograd context (-1: none); returns the
  // previous one. The optimizer sends its RPCs outside any context.
  def(m, "_swap_current_context(int context_id) -> int");

  // torch.classes.dist_engine.StepLock(params): the per-parameter locks of a set of
  // parameters, taken in one global order, for TorchScript `with` statements.
  m.class_<dist_engine::StepLock>("StepLock")
      .def(torch::init<std::vector<at::Tensor>>())
      .def("size", &dist_engine::StepLock::size)
      .def("__enter__", &dist_engine::StepLock::enter)
      .def("__exit__", &dist_engine::StepLock::exit);
}

// The RPC functions call the ops declared above: define them once those exist (static
// objects of one file are constructed in order; this runs when the library loads).
namespace {
const bool rpcFunctionsDefined = (dist_engine::defineRpcFunctions(), true);
}  // namespace
