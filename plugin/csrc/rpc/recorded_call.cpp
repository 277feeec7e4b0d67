#include "rpc/recorded_call.h"

#include "python_names.h"
#include "rpc/worker_error.h"

#include <ATen/core/grad_mode.h>
#include <torch/library.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace gilfree_rpc {
namespace {

namespace dist_autograd = torch::distributed::autograd;

// The caller's context `contextId` if it is live here, else nullptr.
dist_autograd::ContextPtr liveContext(int64_t contextId) {
  try {
    return dist_autograd::DistAutogradContainer::getInstance().retrieveContext(contextId);
  } catch (const c10::Error&) {
    return nullptr;  // released (or never made here)
  }
}

// Whether `workerId` is a worker of the current group.
bool isGroupWorker(int64_t workerId) {
  namespace rpc = torch::distributed::rpc;
  if (workerId < 0 || workerId > std::numeric_limits<rpc::worker_id_t>::max() ||
      !rpc::RpcAgent::isCurrentRpcAgentSet()) {
    return false;
  }
  try {
    rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo(static_cast<rpc::worker_id_t>(workerId));
    return true;
  } catch (const std::exception&) {
    return false;  // not a worker of this group
  }
}

// checkLiveContext's message (recorded_call.h).
std::string noContextMessage(
    const std::string& what, int64_t contextId, const std::string& advice, const std::string& after) {
  return what + ": no distributed autograd context " + std::to_string(contextId) + " on this worker (" +
      thisWorkerLabel() + "; released, or never made here): " + advice +
      " inside the `with dist_autograd.context()` block that created it" + after;
}

}  // namespace

void checkLiveContext(const std::string& what, int64_t contextId, const std::string& advice, const std::string& after) {
  TORCH_CHECK(liveContext(contextId) != nullptr, noContextMessage(what, contextId, advice, after));
}

std::tuple<int64_t, int64_t> beginCall(
    const std::string& what,
    int64_t contextId,
    int64_t callee,
    const std::vector<bool>& requiresGrad) {
  if (contextId == -1) {
    contextId = dist_autograd::DistAutogradContainer::currentContextId();
    if (contextId == -1 || !at::GradMode::is_enabled()) {
      return {-1, -1};
    }
  }
  auto ctx = liveContext(contextId);
  TORCH_CHECK(ctx != nullptr, noContextMessage(what, contextId, "call", "; nothing was sent"));
  TORCH_CHECK(isGroupWorker(callee), what, ": worker id ", callee, " is not a worker of this group");
  ctx->addKnownWorkerId(static_cast<torch::distributed::rpc::worker_id_t>(callee));
  const bool any = std::any_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; });
  return {contextId, any ? dist_autograd::DistAutogradContainer::getInstance().newAutogradMessageId() : -1};
}

std::vector<at::Tensor> recordCall(
    const std::string& what,
    int64_t contextId,
    int64_t autogradMessageId,
    const std::vector<at::Tensor>& sent,
    int64_t answerId,
    int64_t fromWorker,
    std::vector<at::Tensor> answer,
    const std::vector<bool>& answerRequiresGrad) {
  if (answerId < 0) {
    return answer;
  }
  TORCH_CHECK(
      answerRequiresGrad.size() == answer.size(), what, ": the answer of ", workerLabel(fromWorker), " marks ",
      answerRequiresGrad.size(), " tensors as requiring grad, for ", answer.size(), " tensors");
  for (size_t i = 0; i < answer.size(); ++i) {
    TORCH_CHECK(
        !answerRequiresGrad[i] || at::isFloatingType(answer[i].scalar_type()) ||
            at::isComplexType(answer[i].scalar_type()),
        what, ": the answer of ", workerLabel(fromWorker), " marks its tensor ", i, " (",
        dtypeName(answer[i].scalar_type()), ") as requiring grad; only floating point and complex tensors can");
  }
  for (const auto& t : sent) {
    TORCH_CHECK(t.requires_grad(), what, ": a tensor of the request no longer requires grad; nothing was recorded");
  }
  auto ctx = liveContext(contextId);
  if (ctx) {
    if (autogradMessageId >= 0) {
      std::vector<at::Tensor> request(sent.begin(), sent.end());
      recordSendFunction(ctx, autogradMessageId, request);
    }
    std::vector<at::Tensor> received;
    for (size_t i = 0; i < answer.size(); ++i) {
      if (answerRequiresGrad[i]) {
        if (!answer[i].requires_grad()) {
          answer[i].set_requires_grad(true);  // a leaf, as it came off the wire
        }
        received.push_back(answer[i]);
      }
    }
    recordRecvFunction(ctx, answerId, fromWorker, received);  // the context's release now reaches the callee
    for (size_t i = 0, k = 0; i < answer.size(); ++i) {
      if (answerRequiresGrad[i]) {
        answer[i] = received[k++];
      }
    }
  }
  // Released before the answer (or while it was being recorded): that release may not have
  // known the callee, which recorded the call in its side of the context (creating it), so
  // tell the callee now.
  const bool recorded = ctx && liveContext(contextId) == ctx;
  if (!recorded) {
    sendContextRelease(fromWorker, contextId);
  }
  TORCH_CHECK(
      recorded, what, ": the distributed autograd context ", contextId, " was released on this worker before the answer of ",
      workerLabel(fromWorker), " arrived; nothing was recorded, and the owner was told to release its side");
  return answer;
}

void checkCallerContextId(const std::string& prefix, int64_t contextId) {
  if (contextId == -1) {
    return;
  }
  TORCH_CHECK(
      contextId >= 0, prefix, "context_id must be -1 (no context) or a distributed autograd context id, got ", contextId);
  TORCH_CHECK(
      isGroupWorker(workerIdOf(contextId)), prefix, "context_id ", contextId,
      " was not made by a worker of this group (it names worker id ", workerIdOf(contextId), ")");
}

void checkAutogradMessageId(const std::string& prefix, int64_t contextId, int64_t autogradMessageId) {
  if (autogradMessageId == -1) {
    return;
  }
  TORCH_CHECK(
      autogradMessageId >= 0, prefix, "autograd_message_id must be -1 (nothing requires grad) or a message id, got ", autogradMessageId);
  TORCH_CHECK(
      contextId >= 0, prefix, "autograd_message_id ", autogradMessageId, " given without a distributed autograd context");
  TORCH_CHECK(
      isGroupWorker(workerIdOf(autogradMessageId)), prefix, "autograd_message_id ", autogradMessageId,
      " was not made by a worker of this group (it names worker id ", workerIdOf(autogradMessageId), ")");
  if (auto ctx = liveContext(contextId)) {
    const auto recvs = ctx->recvFunctions();
    const auto sends = ctx->sendFunctions();
    TORCH_CHECK(
        recvs.find(autogradMessageId) == recvs.end() && sends.find(autogradMessageId) == sends.end(), prefix, "autograd_message_id ",
        autogradMessageId, " is already recorded in distributed autograd context ", contextId, " on this worker");
  }
}

HeldRequest holdRequest(
    int64_t contextId,
    int64_t autogradMessageId,
    std::vector<at::Tensor>& tensors,
    const std::vector<bool>& requiresGrad) {
  TORCH_CHECK(requiresGrad.size() == tensors.size(), "holdRequest: one flag per tensor");
  HeldRequest held;
  held.contextId = contextId;
  held.autogradMessageId = autogradMessageId;
  if (autogradMessageId < 0 || std::none_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; })) {
    return held;
  }
  held.ctx = dist_autograd::DistAutogradContainer::getInstance().getOrCreateContext(contextId);
  std::vector<at::Tensor> marked;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (requiresGrad[i]) {
      tensors[i] = tensors[i].detach();  // a tensor of its own, over the same data
      tensors[i].set_requires_grad(true);
      marked.push_back(tensors[i]);
    }
  }
  held.recv = makeRecvFunction(held.ctx, autogradMessageId, workerIdOf(autogradMessageId), marked);
  for (size_t i = 0, k = 0; i < tensors.size(); ++i) {
    if (requiresGrad[i]) {
      tensors[i] = marked[k++];
    }
  }
  return held;
}

int64_t recordCallee(const std::string& prefix, HeldRequest& held, int64_t contextId, const std::vector<at::Tensor>& answer) {
  const bool any = std::any_of(answer.begin(), answer.end(), [](const at::Tensor& t) { return t.requires_grad(); });
  if (!any) {
    dropRequest(held);
    return -1;
  }
  auto& container = dist_autograd::DistAutogradContainer::getInstance();
  auto ctx = held.ctx ? held.ctx : container.getOrCreateContext(contextId);
  if (held.recv) {
    addRecvFunction(ctx, held.recv, held.autogradMessageId, workerIdOf(held.autogradMessageId));
  }
  const int64_t messageId = container.newAutogradMessageId();
  std::vector<at::Tensor> sent(answer.begin(), answer.end());
  recordSendFunction(ctx, messageId, sent);
  TORCH_CHECK(
      liveContext(contextId) == ctx, prefix, "the distributed autograd context ", contextId,
      " was released on this worker while the call ran; nothing was recorded for good");
  held = HeldRequest();
  return messageId;
}

void dropRequest(HeldRequest& held) {
  held = HeldRequest();
}

}  // namespace gilfree_rpc

// Kernels (schemas in ops.cpp).
TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_check_context", [](const std::string& what, int64_t contextId, const std::string& advice) {
    gilfree_rpc::checkLiveContext(what, contextId, advice);
  });
  m.impl("_begin_call", [](const std::string& what, int64_t contextId, int64_t callee, c10::List<bool> requiresGrad) {
    return gilfree_rpc::beginCall(what, contextId, callee, std::vector<bool>(requiresGrad.begin(), requiresGrad.end()));
  });
  m.impl("_record_call", [](const std::string& what, int64_t contextId, int64_t autogradMessageId,
                            const std::vector<at::Tensor>& sent, int64_t answerId, int64_t fromWorker,
                            std::vector<at::Tensor> answer, c10::List<bool> answerRequiresGrad) {
    return gilfree_rpc::recordCall(
        what, contextId, autogradMessageId, sent, answerId, fromWorker, std::move(answer),
        std::vector<bool>(answerRequiresGrad.begin(), answerRequiresGrad.end()));
  });
}
