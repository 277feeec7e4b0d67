#include "gradient_check.h"

#include <mutex>

namespace dist_engine {
namespace {

// The check functional_optim/_validation.py's check_gradients accepts without a second
// look, and no more: a gradient it would take only after a closer look (a sparse one)
// does not fit here.
bool fits(const at::Tensor& leaf, const at::Tensor& grad) {
  return grad.defined() && grad.layout() == c10::kStrided && !grad.is_nested() && grad.sizes().equals(leaf.sizes()) &&
      grad.dtype() == leaf.dtype() && grad.device() == leaf.device();
}

bool allFit(const GradientDict& grads) {
  for (const auto& item : grads) {
    if (!fits(item.key(), item.value())) {
      return false;
    }
  }
  return true;
}

}  // namespace

GradientDict gradientsForStep(const ContextPtr& ctx, const EntryPtr& entry) {
  GradientDict grads;
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    grads = entry->snapshot();
  }
  return grads.empty() ? ctx->getGradients() : grads;
}

bool gradientsFitLocked(const ContextPtr& ctx, const ContextEntry& entry) {
  // The same dicts as gradientsForStep reads, without summing them: a sum of gradients
  // that each fit their leaf fits it too.
  bool engineHasSome = !entry.grads.empty();
  if (!allFit(entry.grads)) {
    return false;
  }
  for (const auto& [passId, passGrads] : entry.staged) {
    engineHasSome = engineHasSome || !passGrads.empty();
    if (!allFit(passGrads)) {
      return false;
    }
  }
  return engineHasSome || allFit(ctx->getGradients());
}

std::vector<int64_t> fitReport(int64_t workerId, bool fits, const std::vector<int64_t>& received) {
  std::vector<int64_t> report{workerId, fits ? 1 : 0};
  report.insert(report.end(), received.begin(), received.end());
  return report;
}

void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports) {
  entry.gradientsFit.clear();
  for (size_t i = 0; i + 1 < reports.size(); i += 2) {
    entry.gradientsFit[reports[i]] = reports[i + 1] != 0;
  }
}

bool gradientsCheckedInBackward(int64_t contextId, const std::vector<int64_t>& workers) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (!entry) {
    return false;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->rootBackwardRunning) {
    return false;  // the record is about to change
  }
  for (int64_t worker : workers) {
    auto it = entry->gradientsFit.find(worker);
    if (it == entry->gradientsFit.end() || !it->second) {
      return false;
    }
  }
  return true;
}

}  // namespace dist_engine
