// Kernels for the distributed optimizer's local step (schemas in ops.cpp).
#include "context_registry.h"
#include "worker_error.h"

#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/library.h>

#include <optional>

namespace dist_engine {
namespace {

// The gradient of each parameter in the context, or None. The plugin engine's
// gradients when its backward reached this worker in the context, otherwise those
// of torch's distributed autograd (a backward run by torch's engine).
std::vector<std::optional<at::Tensor>> gradientsForKernel(int64_t contextId, const std::vector<at::Tensor>& params) {
  torch::distributed::autograd::ContextPtr ctx;
  try {
    ctx = torch::distributed::autograd::DistAutogradContainer::getInstance().retrieveContext(contextId);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, workerError("in an optimizer step", e.what_without_backtrace()));
  }
  GradientDict grads;
  if (EntryPtr entry = ContextRegistry::get().find(contextId)) {
    std::lock_guard<std::mutex> lock(entry->mu);
    grads = entry->snapshot();
  }
  if (grads.empty()) {
    grads = ctx->getGradients();
  }
  std::vector<std::optional<at::Tensor>> result;
  result.reserve(params.size());
  for (const auto& param : params) {
    auto it = grads.find(param);
    result.push_back(it == grads.end() ? std::nullopt : std::optional<at::Tensor>(it->value()));
  }
  return result;
}

}  // namespace

TORCH_LIBRARY_IMPL(dist_engine, CompositeImplicitAutograd, m) {
  m.impl("gradients_for", TORCH_FN(gradientsForKernel));
}

}  // namespace dist_engine
