#include "engine/gradients.h"

#include "rpc/worker_error.h"

#include <torch/csrc/distributed/autograd/context/container.h>

#include <mutex>

namespace gilfree_rpc {

std::vector<std::optional<at::Tensor>> gradientsOf(const GradientDict& grads, const std::vector<at::Tensor>& params) {
  std::vector<std::optional<at::Tensor>> result(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = grads.find(params[i]);
    if (it != grads.end()) {
      result[i] = it->value();
    }
  }
  return result;
}

GradientDict contextGradients(const ContextPtr& ctx, const EntryPtr& entry) {
  GradientDict grads;
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    grads = entry->snapshot();
    TORCH_CHECK(
        grads.empty() || !entry->torchEngineRanLocked(),
        "distributed autograd context ", ctx->contextId(), " on ", thisWorkerLabel(),
        " holds gradients of backward passes of both engines, torch's (torch.distributed.autograd.backward) and "
        "the plugin's (plugin.autograd.backward): they do not add up; run every backward pass of a context with "
        "one of them (plugin.autograd.backward, or backward_and_step, for the plugin's DistributedOptimizer)");
  }
  return grads.empty() ? ctx->getGradients() : grads;
}

std::vector<std::optional<at::Tensor>> gradientsFor(int64_t contextId, const std::vector<at::Tensor>& params) {
  auto& container = torch::distributed::autograd::DistAutogradContainer::getInstance();
  torch::distributed::autograd::ContextPtr ctx;
  try {
    ctx = container.retrieveContext(contextId);
  } catch (const c10::Error&) {
    return std::vector<std::optional<at::Tensor>>(params.size());  // unknown here: every parameter is skipped
  }
  return gradientsOf(contextGradients(ctx, ContextRegistry::get().find(contextId)), params);
}

std::optional<GradientDict> gradientsAtVersion(int64_t contextId, int64_t version) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    if (entry->version == version && !entry->torchEngineRanLocked()) {
      return entry->snapshot();
    }
  }
  return std::nullopt;
}

std::optional<StoredGradients> storedGradients(int64_t contextId) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (!entry) {
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->torchEngineRanLocked()) {
    return std::nullopt;  // not this engine's alone: its readers raise (contextGradients)
  }
  StoredGradients stored{{entry->grads.copy()}, entry->version};  // copies: read after the lock
  for (const auto& [passId, passGrads] : entry->staged) {
    stored.dicts.push_back(passGrads.copy());
  }
  return stored;
}

}  // namespace gilfree_rpc
