// Kernels of the distributed optimizer's ops that belong to no one local optimizer: the
// checked gradients' versions, parked steps, the deadline clock, the status table, its counters
// (schemas in ops.cpp; a local optimizer's own: local_optimizer.cpp).
#include "debug_counters.h"
#include "optim/part_end_hook.h"
#include "optim/prepared_steps.h"
#include "optim/step_status.h"

#include <torch/library.h>

#include <optional>

namespace gilfree_rpc {
namespace {

c10::Dict<std::string, int64_t> stepStatusesKernel() {
  c10::Dict<std::string, int64_t> table;
  for (const auto& [name, status] : kStepStatuses) {
    table.insert(name, status);
  }
  return table;
}

// The distributed optimizer's counters in plugin.debug_info() (debug_counters.h): steps parked
// between their phases.
const DebugCounters kOptimizerCounters("optim", [] {
  return Counters{{"num_prepared_steps", numParkedSteps()}};
});

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_checked_versions", TORCH_FN(checkedVersions));  // part_end_hook.h
  m.impl("_step_outcomes", TORCH_FN(stepOutcomes));
  // steps parked for no particular local optimizer (owner -1: prepared_steps.h)
  m.impl("_park_step", [](const c10::List<std::optional<at::Tensor>>& gradients, int64_t leaseMs) {
    return parkStep(Gradients(gradients.begin(), gradients.end()), leaseMs);
  });
  m.impl("_take_step", [](int64_t token) { return takeStep(token); });
  m.impl("_drop_step", [](int64_t token) { return dropStep(token); });
  m.impl("_wall_clock_ms", TORCH_FN(wallClockMs));
  m.impl("_step_statuses", TORCH_FN(stepStatusesKernel));
}

}  // namespace gilfree_rpc
