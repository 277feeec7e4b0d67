// The engine's messages between workers.
//
// Each message is a TorchScript function call (rpc::ScriptCall) to one of the
// handler functions defined in plugin/_handlers.py, which every worker compiles when
// it imports `plugin`. The peer runs the handler as TorchScript, without the GIL;
// the gradient handler is called with async execution, so the RPC is answered when
// the future it returns completes and no server thread waits for it meanwhile.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/variable.h>

#include <string>
#include <vector>

namespace dist_engine {

void registerHandlers(
    const std::string& receiveGradients,
    const std::string& reachability,
    const std::string& abortPass);

int64_t selfWorkerId();

// Gradients for the send function `messageId` (held by worker workerIdOf(messageId)).
// The future completes with the peer's answer (see Engine::receiveGradients): an int
// list, the findings of gradient_check.h (fitReport) or empty.
c10::intrusive_ptr<c10::ivalue::Future> sendGradients(
    int64_t contextId,
    int64_t passId,
    int64_t messageId,
    torch::autograd::variable_list grads,
    bool retainGraph,
    bool smart,
    const std::vector<int64_t>& reached);

// Timeouts are in seconds; kAgentTimeout stands for the agent's default RPC timeout.
constexpr float kAgentTimeout = -1;

// Sends a call of the TorchScript function `name` to `workerId` through the agent's own
// send. The returned future completes with the deserialized return value (of
// `returnType`), or with the peer's error.
c10::intrusive_ptr<c10::ivalue::Future> callScript(
    int64_t workerId,
    const c10::QualifiedName& name,
    std::vector<c10::IValue>&& args,
    bool asyncExecution,
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
// id -1), the one message every worker answers from TorchScript, without the GIL.
c10::intrusive_ptr<c10::ivalue::Future> ping(int64_t workerId, float timeoutSeconds);

// Ids of every worker in the RPC group.
std::vector<int64_t> allWorkerIds();

}  // namespace dist_engine
