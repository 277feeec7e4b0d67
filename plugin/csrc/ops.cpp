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
#include "step_exchange.h"

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
  // On the worker that called backward: if the context's latest pass of the plugin's
  // engine reached every worker of `workers` and found, on each, that every gradient fits
  // its parameter (gradient_check.h), each one's version of the context's gradients, in
  // order; else an empty list. Then a step over those owners needs no validation round.
  def(m, "_checked_versions(int context_id, int[] workers) -> int[]");
  // On an owner: gradients_for, from the engine's gradients of the context if they are
  // still at `version` (those the backward pass checked); raises otherwise.
  def(m, "_checked_gradients_for(int context_id, Tensor[] params, int version) -> Tensor?[]");
  // The two phases of a multi-owner optimizer step (prepared_steps.h): park validated
  // gradients for at most lease_ms and get a token; take them back to apply them; or
  // drop them. Taking an unknown or expired token raises.
  def(m, "_park_step(Tensor?[] gradients, int lease_ms) -> int");
  def(m, "_take_step(int token) -> Tensor?[]");
  def(m, "_drop_step(int token) -> bool");
  // A future that completes, when `future` does, with its error message, or None when it
  // succeeded: TorchScript has no try/except, and an owner that asked the next owner to
  // step must drop its own prepared step when that failed.
  def(m, "_error_of(Future(Any) future) -> Future(str?)");
  // Milliseconds since the Unix epoch (the system clock): the deadline of the last
  // owner's part of a step over two owners is a time on the clock every host keeps.
  def(m, "_wall_clock_ms() -> int");
  // Calls the TorchScript function `function` (a qualified name) on `worker` with the
  // elements of the tuple `args`, by the agent's own send: the first owner of a chained
  // step asks the next one. TorchScript's rpc_async takes the GIL of the sending process.
  def(m, "_call_script(str worker, str function, Any args, float timeout_s) -> Future(Any)");
  // A step over several owners (step_exchange.h): give this owner's verdict of step `key`
  // (None: accepted) to the `peers` by calls of the TorchScript function `handler`; the
  // future completes with None once every peer accepted, else with the first peer's
  // rejection or failure (naming it).
  def(m, "_exchange_verdicts(int key, str[] peers, str handler, str? verdict, float timeout_s) -> Future(str?)");
  // RPC handler (async execution): peer `sender`'s verdict of step `key`; answered with
  // this owner's verdict once it has one.
  def(m, "_receive_verdict(int key, str sender, str? verdict) -> Future(str?)");
  // Counters of the optimizer's state in this process: num_param_locks (live
  // per-parameter locks), num_prepared_steps (steps parked between their phases),
  // num_step_exchanges (steps whose owners' verdicts are being exchanged).
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
  // torch.classes.dist_engine.RejectOnExit(key, peers, handler, timeout_s): around an
  // owner's validation of step `key` in a `with` statement; unless accept() was called,
  // __exit__ (also when the body raises) gives the peers this owner's rejection.
  m.class_<dist_engine::RejectOnExit>("RejectOnExit")
      .def(torch::init<int64_t, std::vector<std::string>, std::string, double>())
      .def("accept", &dist_engine::RejectOnExit::accept)
      .def("__enter__", &dist_engine::RejectOnExit::enter)
      .def("__exit__", &dist_engine::RejectOnExit::exit);
}

// ---------------------------------------------------------------------------------------
// Fused CPU optimizer steps (kernels: fused_optim.h and one file per optimizer,
// fused_<name>.cpp; each also has a meta kernel that only checks its arguments).
//
// A separate namespace from dist_engine: functional_optim calls these ops, and it loads
// this library itself (functional_optim/_kernels.py) without importing the plugin
// package. Each op performs one whole step of `params` in place: it checks every list
// before mutating anything, increments the step counters (`state_steps`, float32/float64
// CPU scalars, one per parameter) and updates parameters and state with torch.optim's
// single-tensor math. Tensors of one parameter share its dtype (float32, float64,
// bfloat16, float16: the last two with float32 math), device and shape; optional state
// lists are empty when their option is off. Schemas mark what each op mutates, so the
// default alias analysis (from the schema) applies.
TORCH_LIBRARY(gilfree_optim, m) {
  m.def(
      "sgd_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] momentum_buffers, *, float lr, "
      "float weight_decay, float momentum, float dampening, bool nesterov, bool maximize, "
      "bool is_first_step) -> ()");
  m.def(
      "adam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
      "float weight_decay, float eps, bool amsgrad, bool maximize) -> ()");
  m.def(
      "adamw_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] max_exp_avg_sqs, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
      "float weight_decay, float eps, bool amsgrad, bool maximize) -> ()");
  m.def(
      "adagrad_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] state_sums, Tensor(c!)[] state_steps, "
      "*, float lr, float lr_decay, float weight_decay, float eps, bool maximize) -> ()");
  m.def(
      "rmsprop_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] grad_avgs, "
      "Tensor(d!)[] momentum_buffers, Tensor(e!)[] state_steps, *, float lr, float alpha, float eps, "
      "float weight_decay, float momentum, bool centered, bool maximize) -> ()");
  m.def(
      "adamax_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_infs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool maximize) -> ()");
  m.def(
      "adadelta_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] acc_deltas, "
      "Tensor(d!)[] state_steps, *, float lr, float rho, float eps, float weight_decay, bool maximize) -> ()");
  m.def(
      "rprop_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] prevs, Tensor(c!)[] step_sizes, "
      "Tensor(d!)[] state_steps, *, float step_size_min, float step_size_max, float etaminus, "
      "float etaplus, bool maximize) -> ()");
  m.def(
      "nadam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] mu_products, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
      "float weight_decay, float momentum_decay, float eps, bool decoupled_weight_decay, "
      "bool maximize) -> ()");
  m.def(
      "radam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, "
      "bool decoupled_weight_decay, bool maximize) -> ()");
}
