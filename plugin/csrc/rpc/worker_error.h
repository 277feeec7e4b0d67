// The library's one error contract, and messages that name the worker they come from.
//
// Raising: every error is a typed c10 error (TORCH_CHECK: RuntimeError, TORCH_CHECK_VALUE:
// ValueError, TORCH_CHECK_TYPE, TORCH_CHECK_INDEX, TORCH_CHECK_NOT_IMPLEMENTED) whose message
// is the text itself, torch's prefixes first where torch has them; no Python type written in
// the text. Called through torch.ops on this worker, torch gives it its Python type.
//
// Crossing RPC: an error raised by an op answered as a native RPC function (rpc_functions.h)
// reaches the caller as text (the callee's TorchScript interpreter writes every error as
// "RuntimeError: <message>"), so the RPC function's kernel (withTrailer) appends ONE trailer
// that names its type, this worker and where it was raised:
//   <message> [ValueError raised on worker 'worker1' (id 1), in gilfree_rpc::_lookup_bags]
// An error in a backward pass has the same trailer (passError), after torch's form
// "Error on Node <n>: " (n: the id of the worker where it happened, as torch's distributed
// engine writes it) and the original message:
//   Error on Node 2: Simulate error on backward pass [ValueError raised by a Python
//   autograd.Function while running SimulateBackwardErrorBackward on worker 'worker2'
//   (id 2), in the backward pass of context 5]
// The trailer's form, "[<origin> on worker '<name>' (id <n>), <where>]" at the end of a line
// (the origin optional, "<Type> raised ..." when an exception raised; no brackets in origin
// or where), is read in one place: errorParts, here, which Python reads through the op
// _error_parts (plugin/_errors.py decodes every native error with it: the type and message
// rebuilt, torch's message first). A pass error travels back to the worker that called
// backward unchanged, from hop to hop (findPassError finds it in the text of an RPC error).
//
// Other errors name the worker in their text: "Error on Node <n>: worker '<name>' (id <n>)
// <where>: <what>" (workerError: a handle or token unknown on this worker).
#pragma once

#include <c10/util/Exception.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace gilfree_rpc {

// "worker '<name>' (id <n>)" for this process, or "worker ?" before RPC starts.
std::string thisWorkerLabel();
// The same label for a peer, looked up through the current RPC agent.
std::string workerLabel(int64_t workerId);

// "Error on Node <n>: worker '<name>' (id <n>) <where>: <what>" (n is -1 before RPC starts).
std::string workerError(const std::string& where, const std::string& what);

// " [<origin> on worker '<name>' (id <n>), <where>]" for this worker ("[on worker ..." without
// an origin): the trailer, with the blank that separates it from the message.
std::string errorTrailer(const std::string& origin, const std::string& where);

// "Error on Node <n>: <what> [<origin> on worker '<name>' (id <n>), in the backward pass of
// context <contextId>]", n being this worker's id (-1 before RPC starts); without an origin,
// "[on worker ...". `what` is the original message, trailing blank space removed; `origin`
// says what raised it ("ValueError raised by a Python hook while running MulBackward0",
// "sending gradients to worker 'w0' (id 0) failed"), "" for the engine's own errors.
std::string passError(int64_t contextId, const std::string& what, const std::string& origin = "");

// Throws `error` again, of its own type, its message followed by errorTrailer("<Type> raised",
// where), <Type> the Python type torch gives it (compat.h pythonTypeOf: the one table of
// them); unchanged when its message already ends with a trailer (raised further on). Called
// inside a catch handler.
[[noreturn]] void rethrowWithTrailer(const c10::Error& error, const std::string& where);

// Runs `body` (an RPC function's kernel); its c10 errors leave with the trailer (where: "in
// gilfree_rpc::<op>").
template <class F>
decltype(auto) withTrailer(const char* where, F&& body) {
  try {
    return std::forward<F>(body)();
  } catch (const c10::Error& e) {
    rethrowWithTrailer(e, where);
  }
}

// The parts of the last trailer in `text` (at the end of a line), empty if none: "message"
// (the text before it), "origin" ("" when none), "type" (the origin's "<Type> raised": its
// type; "" when none), "worker", "worker_id", "where", "at_end" ("1" when nothing but blank
// space follows it); and, when `text` begins with "Error on Node <n>: ", "node" (n) and
// "what" (the message after that prefix); when the where is "in the backward pass of context
// <id>", "context_id".
std::map<std::string, std::string> errorParts(const std::string& text);

// The pass error (passError's form) inside `text`, an error that came back over RPC (the
// last one in it, from its "Error on Node <n>: " to its closing bracket); nullopt if none.
std::optional<std::string> findPassError(const std::string& text);

}  // namespace gilfree_rpc
