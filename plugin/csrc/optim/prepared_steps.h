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
// with an error that says so. No lock is held between the phases. A step is parked for
// one local optimizer (a native one's handle; -1 for the Python and TorchScript ones):
// taking or dropping it for another leaves it parked (a caller's mistaken handle cannot
// apply one optimizer's gradients to another's parameters).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace gilfree_rpc {

using Gradients = std::vector<std::optional<at::Tensor>>;

// The longest lease: a day (a caller's leases are at most twice its RPC timeout, or 10
// minutes when that is infinite).
constexpr int64_t kMaxLeaseMs = 24 * 3600 * 1000;

// Parks `gradients` for `owner` for `leaseMs` milliseconds (0 < leaseMs <= kMaxLeaseMs, else
// a ValueError); returns the token.
int64_t parkStep(Gradients gradients, int64_t leaseMs, int64_t owner = -1);
// Takes the gradients of a step parked for `owner`; raises (naming this worker) when the
// token is unknown, its lease has expired, or it was parked for another optimizer (then it
// stays parked).
Gradients takeStep(int64_t token, int64_t owner = -1);
// Forgets a step parked for `owner`; returns whether it was (false for another's: it stays).
bool dropStep(int64_t token, int64_t owner = -1);
// Parked steps whose lease has not expired (expired ones are forgotten first).
int64_t numParkedSteps();

}  // namespace gilfree_rpc
