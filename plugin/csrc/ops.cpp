// Every op schema of the library, declared in one place.
//
// Kernels are registered next to the code they run (engine_kernels.cpp, step_lock.cpp).
// Ops whose names start with an underscore are the engine's RPC handlers and
// bookkeeping; they are public only because TorchScript functions must reach them.
#include <torch/library.h>

TORCH_LIBRARY(dist_engine, m) {
  // Distributed backward pass from `roots` (scalars on this worker) in the given
  // distributed autograd context. `mode` is "smart" or "fast".
  m.def(
      "backward(int context_id, Tensor[] roots, bool retain_graph=False, "
      "str mode=\"smart\") -> ()");
  // Gradients accumulated on this worker for the context: {leaf tensor: gradient}.
  m.def("get_gradients(int context_id) -> Dict(Tensor, Tensor)");

  // RPC handler: gradients for the send function `autograd_message_id` of a pass.
  // Completes when this worker may answer (see engine.cpp, "first contact").
  m.def(
      "_receive_gradients(int context_id, int pass_id, int autograd_message_id, "
      "Tensor[] grads, bool retain_graph, bool smart, int[] reached) -> Future(int)");
  // RPC handler (smart mode): this worker's reachability table for the context,
  // flattened as [send_id, n, recv_id_1 .. recv_id_n, send_id, n, ...].
  m.def("_reachability(int context_id) -> int[]");
  // RPC handler: drop every trace of a failed pass on this worker.
  m.def("_abort_pass(int context_id, int pass_id) -> int");
  // Tells the engine the qualified names of the TorchScript functions that wrap the
  // three handlers above (plugin/_handlers.py), so it can address them on peers.
  m.def(
      "_register_handlers(str receive_gradients, str reachability, str abort_pass) -> ()");
  // Forgets this worker's engine state for a context (gradients, finished passes).
  m.def("_release_context(int context_id) -> ()");
  // Counters for tests and monitoring: live contexts, running passes, ...
  m.def("_debug_info() -> Dict(str, int)");
}
