#include "optim/gradient_check.h"

#include "optim/step_in_backward.h"
#include "rpc/worker_error.h"

#include <torch/csrc/distributed/autograd/context/container.h>

#include <mutex>

namespace dist_engine {
namespace {

// What functional_optim/_validation.py's check_gradients accepts, and no more: a strided
// (dense) gradient, or a sparse COO one, with the leaf's sizes, dtype and device. Whether
// a sparse gradient is taken depends on the optimizer: the report says there is one.
struct Fit {
  bool fits = true;
  bool sparse = false;
};

void addFit(Fit& fit, const at::Tensor& leaf, const at::Tensor& grad) {
  const bool dense = grad.defined() && grad.layout() == c10::kStrided && !grad.is_nested();
  const bool sparse = grad.defined() && grad.layout() == c10::kSparse;
  fit.fits = fit.fits && (dense || sparse) && grad.sizes().equals(leaf.sizes()) && grad.dtype() == leaf.dtype() &&
      grad.device() == leaf.device();
  fit.sparse = fit.sparse || sparse;
}

void addFits(Fit& fit, const GradientDict& grads) {
  for (const auto& item : grads) {
    addFit(fit, item.key(), item.value());
  }
}

}  // namespace

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

std::vector<std::optional<at::Tensor>> gradientsFor(int64_t contextId, const std::vector<at::Tensor>& params) {
  auto& container = torch::distributed::autograd::DistAutogradContainer::getInstance();
  torch::distributed::autograd::ContextPtr ctx;
  try {
    ctx = container.retrieveContext(contextId);
  } catch (const c10::Error&) {
    return std::vector<std::optional<at::Tensor>>(params.size());  // unknown here: every parameter is skipped
  }
  return gradientsOf(gradientsForStep(ctx, ContextRegistry::get().find(contextId)), params);
}

GradientDict gradientsForStep(const ContextPtr& ctx, const EntryPtr& entry) {
  GradientDict grads;
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    grads = entry->snapshot();
  }
  return grads.empty() ? ctx->getGradients() : grads;
}

std::optional<GradientDict> checkedGradientsIfCurrent(int64_t contextId, int64_t version) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (entry) {
    std::lock_guard<std::mutex> lock(entry->mu);
    if (entry->version == version) {
      return entry->snapshot();  // not empty: the check found gradients here
    }
  }
  return std::nullopt;
}

GradientDict checkedGradientsForStep(int64_t contextId, int64_t version) {
  auto grads = checkedGradientsIfCurrent(contextId, version);
  TORCH_CHECK(
      grads.has_value(),
      workerError(
          "in a step of context " + std::to_string(contextId),
          "the context's gradients on this worker changed after the backward pass checked them (another backward "
          "pass of the context, started elsewhere or from another thread, or the context was released); nothing "
          "was applied on this worker"));
  return std::move(*grads);
}

int64_t gradientsFitLocked(const ContextEntry& entry) {
  // The dicts gradientsForStep sums, without summing them: a sum of gradients that each
  // fit their leaf fits it too (a sparse and a dense one sum to a dense one, which fits).
  // Without any, a step would read torch's gradients, which may still change: not
  // vouched for.
  bool engineHasSome = !entry.grads.empty();
  Fit fit;
  addFits(fit, entry.grads);
  for (const auto& [passId, passGrads] : entry.staged) {
    engineHasSome = engineHasSome || !passGrads.empty();
    addFits(fit, passGrads);
  }
  if (!engineHasSome || !fit.fits) {
    return 0;
  }
  return kGradientsFit | (fit.sparse ? kSomeSparse : 0);
}

std::vector<int64_t> fitReport(int64_t workerId, const ContextEntry& entry, const std::vector<int64_t>& received) {
  std::vector<int64_t> report{workerId, gradientsFitLocked(entry), entry.version};
  report.insert(report.end(), received.begin(), received.end());
  return report;
}

void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports) {
  entry.gradientsFit.clear();
  for (size_t i = 0; i + 2 < reports.size(); i += 3) {
    auto [it, inserted] = entry.gradientsFit.try_emplace(reports[i], reports[i + 1], reports[i + 2]);
    if (!inserted) {
      // A worker reported twice: its gradients are not vouched for; the bits of its step in
      // the backward pass (step_in_backward.h) are kept, both reports' together.
      it->second.first = (it->second.first | reports[i + 1]) & kStepBits;
    }
  }
}

std::vector<int64_t> gradientsCheckedInBackward(
    int64_t contextId,
    const std::vector<int64_t>& workers,
    bool acceptSparse) {
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
    if (it == entry->gradientsFit.end()) {
      return {};
    }
    const int64_t finding = it->second.first;
    if ((finding & kGradientsFit) == 0 || ((finding & kSomeSparse) != 0 && !acceptSparse)) {
      return {};
    }
    versions.push_back(it->second.second);
  }
  return versions;
}

}  // namespace dist_engine
