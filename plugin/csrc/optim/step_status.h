// The outcome of an owner's part of a distributed optimizer's step: one table for every step
// protocol (one round trip, two phases, the step inside the backward pass) and every kind of
// local optimizer (native, Python, TorchScript). Defined here only: the Python reads it from the
// op _step_statuses (plugin/optim/_status.py), by name, when the package loads; the TorchScript
// local optimizer's steps read those names' values as constants. Nothing is applied but for
// kApplied.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace gilfree_rpc {

enum StepStatus : int64_t {
  kApplied = 0,
  kChanged = 1,     // the gradients changed since the backward pass checked them: nothing applied
  kLate = 2,        // the owner reached its locks after the deadline: nothing applied
  kRefused = 3,     // the optimizer's check failed (step in the pass): nothing applied
  kNotReached = 4,  // no part of the pass ran there (step in the pass): no gradient to apply
};

// Each status by the name the Python reads it under (plugin/optim/_status.py).
inline constexpr std::array<std::pair<const char*, StepStatus>, 5> kStepStatuses{{
    {"applied", kApplied},
    {"changed", kChanged},
    {"late", kLate},
    {"refused", kRefused},
    {"not_reached", kNotReached},
}};

}  // namespace gilfree_rpc
