// The optimizer step taken inside the backward pass (DistributedOptimizer.backward_and_step).
//
// The caller of backward names, with the pass, the native local optimizer of each owner
// (worker id, handle) and a deadline. The request travels with every gradient message of the
// pass, as smart mode's reached list does. When an owner's part of the pass ends (every
// gradient it expects has arrived and been accumulated: its gradients in the context are
// final for the pass, engine.h), the owner applies its local optimizer's step to them right
// there, on the thread that ended its part, before it answers the pass's first message
// here; the caller's own part, if it is an owner, once the pass ended everywhere. The step
// needs no message of its own.
//
// The outcome travels back in the finding of gradient_check.h (bits above its own) through
// the first-contact answers, and the caller reads it per owner (stepOutcomes). Each owner
// applies or not on its own: one that refuses (gradients its optimizer does not take: the
// check of functional_optim, before any change there), or reaches its step after the
// deadline, leaves the others applied. The caller reports that; it is not all or nothing
// (DistributedOptimizer.step is).
#pragma once

#include <cstdint>
#include <vector>

namespace dist_engine {

// Bits of a worker's finding (gradient_check.h) for its step in the backward pass.
constexpr int64_t kStepApplied = 4;
constexpr int64_t kStepLate = 8;  // the deadline had passed: nothing applied
constexpr int64_t kStepRefused = 16;  // the optimizer's check failed: nothing applied
constexpr int64_t kStepBits = kStepApplied | kStepLate | kStepRefused;

// The outcomes stepOutcomes returns, per owner.
constexpr int64_t kOutcomeApplied = 0;
constexpr int64_t kOutcomeNotReached = 1;  // no part of the pass ran there: no gradient to apply
constexpr int64_t kOutcomeLate = 2;
constexpr int64_t kOutcomeRefused = 3;

// `steps` is [deadline_ms, worker_id, handle, worker_id, handle, ...] (deadline_ms: since
// the Unix epoch, -1 for none), or empty for a pass without a step. Raises a RuntimeError
// for another shape, a worker named twice or a negative handle.
void checkStepRequests(const std::vector<int64_t>& steps);

// Applies the step `steps` requests of this worker, if any, to the gradients of context
// `contextId` here; returns its bit (0 when none is requested here). Never raises: a
// refusal is a bit (the caller asks the owner for the reason).
int64_t applyStepInBackward(const std::vector<int64_t>& steps, int64_t contextId);

// On the worker that called backward, after a pass that ended everywhere: each worker's
// outcome (kOutcome*) in `workers`' order, from the findings the pass brought back.
std::vector<int64_t> stepOutcomes(int64_t contextId, const std::vector<int64_t>& workers);

}  // namespace dist_engine
