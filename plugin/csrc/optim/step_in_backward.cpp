#include "optim/step_in_backward.h"

#include "engine/context_registry.h"
#include "optim/local_optimizer.h"
#include "rpc/transport.h"

#include <c10/util/Exception.h>

#include <unordered_set>

namespace dist_engine {

void checkStepRequests(const std::vector<int64_t>& steps) {
  if (steps.empty()) {
    return;
  }
  TORCH_CHECK(
      steps.size() % 2 == 1,
      "steps must be [deadline_ms, worker_id, handle, ...] (an odd length), got ", steps.size(), " values");
  std::unordered_set<int64_t> workers;
  for (size_t i = 1; i + 1 < steps.size(); i += 2) {
    TORCH_CHECK(workers.insert(steps[i]).second, "steps names worker ", steps[i], " twice");
    TORCH_CHECK(steps[i + 1] >= 0, "steps gives worker ", steps[i], " the handle ", steps[i + 1]);
  }
}

int64_t applyStepInBackward(const std::vector<int64_t>& steps, int64_t contextId) {
  const int64_t self = selfWorkerId();
  for (size_t i = 1; i + 1 < steps.size(); i += 2) {
    if (steps[i] != self) {
      continue;
    }
    try {
      return LocalOptimizer::find(steps[i + 1])->stepBefore(contextId, steps[0]) == 0 ? kStepApplied : kStepLate;
    } catch (const std::exception&) {
      // Nothing changed here (the optimizer checks before it applies); the caller asks
      // this owner for the reason on the usual path (DistributedOptimizer.backward_and_step).
      return kStepRefused;
    }
  }
  return 0;
}

std::vector<int64_t> stepOutcomes(int64_t contextId, const std::vector<int64_t>& workers) {
  std::vector<int64_t> outcomes(workers.size(), kOutcomeNotReached);
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (!entry) {
    return outcomes;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  for (size_t i = 0; i < workers.size(); ++i) {
    auto it = entry->gradientsFit.find(workers[i]);
    if (it == entry->gradientsFit.end()) {
      continue;
    }
    const int64_t bits = it->second.first;
    // A worker that reported twice (recordFitReportsLocked keeps both reports' step
    // bits) shows its worst outcome.
    if (bits & kStepRefused) {
      outcomes[i] = kOutcomeRefused;
    } else if (bits & kStepLate) {
      outcomes[i] = kOutcomeLate;
    } else if (bits & kStepApplied) {
      outcomes[i] = kOutcomeApplied;
    }
  }
  return outcomes;
}

}  // namespace dist_engine
