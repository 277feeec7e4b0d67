#include "rpc/transport.h"

#include "compat.h"
#include "rpc/rpc_functions.h"

#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>

namespace gilfree_rpc {

namespace rpc = torch::distributed::rpc;
using c10::ivalue::Future;

namespace {

std::shared_ptr<rpc::RpcAgent> agent() {
  TORCH_CHECK(
      rpc::RpcAgent::isCurrentRpcAgentSet(),
      "gilfree_rpc: RPC is not initialized; call rpc.init_rpc (or plugin.rpc.init_rpc) first");
  return rpc::RpcAgent::getCurrentRpcAgent();
}

}  // namespace

c10::intrusive_ptr<Future> callFunction(
    int64_t workerId,
    const std::string& op,
    std::vector<c10::IValue>&& args,
    const c10::TypePtr& returnType,
    float timeoutSeconds) {
  TORCH_CHECK(isRpcFunctionOp(op), "gilfree_rpc: the op ", op, " has no RPC function (rpc_functions.cpp)");
  const auto name = rpcFunctionName(op);
  const bool asyncExecution = isAsyncRpcFunctionOp(op);
  auto rpcAgent = agent();
  const auto& dst = rpcAgent->getWorkerInfo(static_cast<rpc::worker_id_t>(workerId));
  // The agent's own send, not rpcTorchscript: rpcTorchscript attaches send/recv
  // autograd functions when the calling thread has a current distributed autograd
  // context, and a backward pass must not grow the graph it is running.
  static_assert(kAgentTimeout == rpc::kUnsetRpcTimeout);
  auto messageFuture = rpcAgent->send(dst, scriptCallMessage(name, std::move(args), asyncExecution), timeoutSeconds);
  auto result = c10::make_intrusive<Future>(returnType);
  messageFuture->addCallback([result](Future& done) {
    if (done.hasError()) {
      result->setError(done.exception_ptr());
      return;
    }
    try {
      result->markCompleted(replyValue(done));
    } catch (const std::exception&) {
      result->setError(std::current_exception());
    }
  });
  return result;
}

int64_t selfWorkerId() {
  return torch::distributed::autograd::DistAutogradContainer::getInstance().getWorkerId();
}

c10::intrusive_ptr<Future> sendGradients(
    int64_t contextId,
    int64_t passId,
    int64_t messageId,
    torch::autograd::variable_list grads,
    bool retainGraph,
    bool smart,
    const std::vector<int64_t>& reached,
    const std::vector<int64_t>& hookArgs) {
  const int64_t dst = workerIdOf(messageId);
  auto rpcAgent = agent();
  // CUDA gradients travel under this worker's device map to the peer. A device the
  // map does not cover goes through the CPU; the peer moves the gradient back to
  // the device its tensor lives on (node_exec.cpp, validateGradients).
  const auto deviceMap = rpcAgent->getDeviceMap(rpcAgent->getWorkerInfo(static_cast<rpc::worker_id_t>(dst)));
  for (auto& grad : grads) {
    if (grad.defined() && !grad.device().is_cpu() && deviceMap.count(grad.device()) == 0) {
      grad = grad.cpu();
    }
  }
  std::vector<c10::IValue> args{
      contextId, passId, messageId, c10::List<at::Tensor>(grads), retainGraph, smart, c10::List<int64_t>(reached),
      c10::List<int64_t>(hookArgs)};
  return callFunction(dst, "_receive_gradients", std::move(args), c10::ListType::ofInts());
}

c10::intrusive_ptr<Future> requestReachability(int64_t workerId, int64_t contextId, float timeoutSeconds) {
  return callFunction(workerId, "_reachability", {contextId}, c10::ListType::ofInts(), timeoutSeconds);
}

c10::intrusive_ptr<Future> requestAbort(int64_t workerId, int64_t contextId, int64_t passId, float timeoutSeconds) {
  return callFunction(workerId, "_abort_pass", {contextId, passId}, c10::StringType::get(), timeoutSeconds);
}

c10::intrusive_ptr<Future> ping(int64_t workerId, float timeoutSeconds) {
  return requestAbort(workerId, -1, -1, timeoutSeconds);
}

std::vector<int64_t> allWorkerIds() {
  std::vector<int64_t> ids;
  for (const auto& info : agent()->getWorkerInfos()) {
    ids.push_back(info.id_);
  }
  return ids;
}

}  // namespace gilfree_rpc
