// The library's messages between workers.
//
// Each message is a call (rpc::ScriptCall) of one of the RPC functions of
// rpc_functions.h, each of which calls one op of this library on the peer, natively,
// without the GIL. The gradient handler is called with async execution, so the RPC is
// answered when the future it returns completes and no server thread waits for it
// meanwhile.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/variable.h>

#include <string>
#include <vector>

namespace gilfree_rpc {

int64_t selfWorkerId();

// Gradients for the send function `messageId` (held by worker workerIdOf(messageId)).
// The future completes with the peer's answer (see Engine::receiveGradients): an int
// list, the part-end answers it gathered (engine/part_end.h), or empty.
c10::intrusive_ptr<c10::ivalue::Future> sendGradients(
    int64_t contextId,
    int64_t passId,
    int64_t messageId,
    torch::autograd::variable_list grads,
    bool retainGraph,
    bool smart,
    const std::vector<int64_t>& reached,
    const std::vector<int64_t>& hookArgs);

// Timeouts are in seconds; kAgentTimeout stands for the agent's default RPC timeout.
constexpr float kAgentTimeout = -1;

// Calls the op gilfree_rpc::<op> on `workerId` with `args`, by its RPC function
// (rpc_functions.h), through the agent's own send (never with autograd metadata). The
// returned future completes with the op's result there (of `returnType`), or with the
// peer's error. Raises for an op that has no RPC function.
c10::intrusive_ptr<c10::ivalue::Future> callFunction(
    int64_t workerId,
    const std::string& op,
    std::vector<c10::IValue>&& args,
    const c10::TypePtr& returnType,
    float timeoutSeconds = kAgentTimeout);

// Asks `workerId` for its reachability table of the context (smart mode); the
// future's value is the flattened table (int list).
c10::intrusive_ptr<c10::ivalue::Future> requestReachability(
    int64_t workerId, int64_t contextId, float timeoutSeconds = kAgentTimeout);

// Tells `workerId` to drop a failed pass. The future's value (a string) says what
// that worker's part of the pass was still waiting for ("" if it was not running).
c10::intrusive_ptr<c10::ivalue::Future> requestAbort(
    int64_t workerId, int64_t contextId, int64_t passId, float timeoutSeconds = kAgentTimeout);

// Whether `workerId` answers: an abort of a pass that cannot exist (context and pass
// id -1), the one message every worker answers, natively, without the GIL.
c10::intrusive_ptr<c10::ivalue::Future> ping(int64_t workerId, float timeoutSeconds);

// Ids of every worker in the RPC group.
std::vector<int64_t> allWorkerIds();

}  // namespace gilfree_rpc
