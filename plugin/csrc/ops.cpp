// Every op schema of the library, declared in one place.
//
// Kernels are registered next to the code they run (engine_kernels.cpp,
// optimizer_kernels.cpp); the one custom class is declared here too.
// Ops whose names start with an underscore are the engine's RPC handlers and
// bookkeeping; they are public only because TorchScript functions must reach them.
//
// All of them act on or read state outside their arguments (the engine, torch's
// distributed autograd contexts), so they are declared with CONSERVATIVE alias
// analysis: TorchScript must neither drop a call whose result is unused nor merge
// or reorder two calls.
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
  // Completes when this worker may answer (see engine.cpp, "first contact").
  def(
      m,
      "_receive_gradients(int context_id, int pass_id, int autograd_message_id, "
      "Tensor[] grads, bool retain_graph, bool smart, int[] reached) -> Future(int)");
  // RPC handler (smart mode): this worker's reachability table for the context,
  // flattened as [send_id, n, recv_id_1 .. recv_id_n, send_id, n, ...].
  def(m, "_reachability(int context_id) -> int[]");
  // RPC handler: drop every trace of a failed pass on this worker. Returns what this
  // worker's part of the pass was still waiting for ("" if it was not running here).
  def(m, "_abort_pass(int context_id, int pass_id) -> str");
  // Tells the engine the qualified names of the TorchScript functions that wrap the
  // three handlers above (plugin/_handlers.py), so it can address them on peers.
  def(
      m,
      "_register_handlers(str receive_gradients, str reachability, str abort_pass) -> ()");
  // Forgets this worker's engine state for a context (gradients, finished passes).
  def(m, "_release_context(int context_id) -> ()");
  // Counters for tests and monitoring: live contexts, running passes, ...
  def(m, "_debug_info() -> Dict(str, int)");

  // The gradient of each of `params` in the context on this worker (None where it has
  // none): the plugin engine's, or torch's distributed autograd's when only torch's
  // engine ran. What a local optimizer step reads.
  def(m, "gradients_for(int context_id, Tensor[] params) -> Tensor?[]");

  // torch.classes.dist_engine.StepLock: a mutex for TorchScript `with` statements.
  m.class_<dist_engine::StepLock>("StepLock")
      .def(torch::init<>())
      .def("__enter__", &dist_engine::StepLock::enter)
      .def("__exit__", &dist_engine::StepLock::exit);
}
