#include "gradient_check.h"

#include "worker_error.h"

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

GradientDict checkedGradientsForStep(int64_t contextId, int64_t version) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    if (entry->version == version) {
      return entry->snapshot();  // not empty: the check found gradients here
    }
  }
  TORCH_CHECK(
      false,
      workerError(
          "in a step of context " + std::to_string(contextId),
          "the context's gradients on this worker changed after the backward pass checked them (another backward "
          "pass of the context, started elsewhere or from another thread, or the context was released); nothing "
          "was applied on this worker"));
}

bool gradientsFitLocked(const ContextEntry& entry) {
  // The dicts gradientsForStep sums, without summing them: a sum of gradients that each
  // fit their leaf fits it too. Without any, a step would read torch's gradients, which
  // may still change: not vouched for.
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
  return engineHasSome;
}

std::vector<int64_t> fitReport(int64_t workerId, const ContextEntry& entry, const std::vector<int64_t>& received) {
  std::vector<int64_t> report{workerId, gradientsFitLocked(entry) ? 1 : 0, entry.version};
  report.insert(report.end(), received.begin(), received.end());
  return report;
}

void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports) {
  entry.gradientsFit.clear();
  for (size_t i = 0; i + 2 < reports.size(); i += 3) {
    auto [it, inserted] = entry.gradientsFit.try_emplace(reports[i], reports[i + 1] != 0, reports[i + 2]);
    if (!inserted) {
      it->second.first = false;  // a worker reported twice: not vouched for
    }
  }
}

std::vector<int64_t> gradientsCheckedInBackward(int64_t contextId, const std::vector<int64_t>& workers) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (!entry) {
    return {};
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->rootBackwardRunning) {
    return {};  // the record is about to change
  }
  std::vector<int64_t> versions;
  for (int64_t worker : workers) {
    auto it = entry->gradientsFit.find(worker);
    if (it == entry->gradientsFit.end() || !it->second.first) {
      return {};
    }
    versions.push_back(it->second.second);
  }
  return versions;
}

}  // namespace dist_engine
