// Steps of the distributed optimizer between their two phases, on an owner.
//
// A multi-owner step first *prepares* on every owner (reads the context's gradients,
// validates them) and, only when every owner succeeded, *commits* (applies them).
// Between the phases the owner parks the gradients here under a token: the tensors
// are held by reference, so a release of the context in the meantime cannot free
// them, and the step does not need the context any more.
//
// A parked step is bounded by a lease: if no commit or drop comes for it in time (the
// caller died or froze between the phases), it is forgotten, and a late commit fails
// with an error that says so. No lock is held between the phases.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace dist_engine {

using Gradients = std::vector<std::optional<at::Tensor>>;

// Parks `gradients` for `leaseMs` milliseconds (> 0); returns the token.
int64_t parkStep(Gradients gradients, int64_t leaseMs);
// Takes the gradients of a parked step; raises (naming this worker) when the token
// is unknown or its lease has expired.
Gradients takeStep(int64_t token);
// Forgets a parked step; returns whether it was still parked.
bool dropStep(int64_t token);
// Parked steps whose lease has not expired (expired ones are forgotten first).
int64_t numParkedSteps();

}  // namespace dist_engine
