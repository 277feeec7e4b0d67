// Error messages that name the worker they come from.
//
// An error in a backward pass has torch's form first, "Error on Node <n>: " (n: the id
// of the worker where it happened, as torch's distributed engine writes it) and the
// original message right after it, then where it happened, in brackets at the end:
//   Error on Node 2: Simulate error on backward pass [Exception raised by a Python
//   autograd.Function while running SimulateBackwardErrorBackward on worker 'worker2'
//   (id 2), in the backward pass of context 5]
// (passError). It travels back to the worker that called backward unchanged, from hop to
// hop (findPassError finds it in the text of an RPC error); plugin/autograd.py reads the
// bracketed part to raise plugin.autograd.BackwardError.
//
// Other errors (the optimizer's steps on the owners) read
// "Error on Node <n>: worker '<name>' (id <n>) <where>: <what>" (workerError).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gilfree_rpc {

// "worker '<name>' (id <n>)" for this process, or "worker <id>" before RPC starts.
std::string thisWorkerLabel();
// The same label for a peer, looked up through the current RPC agent.
std::string workerLabel(int64_t workerId);

// "Error on Node <n>: worker '<name>' (id <n>) <where>: <what>" (n is -1 before RPC starts).
std::string workerError(const std::string& where, const std::string& what);

// "Error on Node <n>: <what> [<origin> on worker '<name>' (id <n>), in the backward pass of
// context <contextId>]", n being this worker's id (-1 before RPC starts); without an origin,
// "[on worker ...". `what` is the original message, trailing blank space removed; `origin`
// says what raised it ("ValueError raised by a Python hook while running MulBackward0",
// "sending gradients to worker 'w0' (id 0) failed"), "" for the engine's own errors.
std::string passError(int64_t contextId, const std::string& what, const std::string& origin = "");

// The pass error (passError's form) inside `text`, an error that came back over RPC (the
// last one in it, from its "Error on Node <n>: " to its closing bracket); nullopt if none.
std::optional<std::string> findPassError(const std::string& text);

}  // namespace gilfree_rpc
