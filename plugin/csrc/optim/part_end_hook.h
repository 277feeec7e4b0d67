// What an owner does as its part of a backward pass ends, and what the caller of
// backward reads of it afterwards: the optimizer's part-end hook (engine/part_end.h),
// registered when the library loads.
//
// 1. The check of a step's gradients. Before it changes anything, a local optimizer checks
//    that each gradient fits its parameter: dense or sparse COO, with the parameter's
//    shape, dtype and device. A step over several owners must know that every owner
//    passes that check before any applies (all or nothing). The hook makes it on every
//    worker whose part of a pass of the plugin's engine ends, on every gradient the engine
//    holds there, and answers with its finding (kGradientsFit, and kSomeSparse when one of
//    them is sparse; 0 when the engine holds none there: torch's gradients, which a step
//    would then read, are not vouched for) and the version of the context's gradients
//    there (engine/gradients.h). The caller then steps every owner in one round trip
//    (checkedVersions); an owner whose gradients changed since (another pass) refuses
//    (kChanged) instead of applying gradients nobody checked.
// 2. The step inside the backward pass (DistributedOptimizer.backward_and_step). The hook
//    arguments are [deadline_ms, worker_id, handle, worker_id, handle, ...] (deadline in ms
//    since the Unix epoch, -1: none; each owner's native local optimizer) or empty. An owner
//    named there applies its step to the context's gradients as its part ends (its
//    gradients are final then), before it answers: no message of its own. Per owner, not
//    all or nothing: one that refuses (its optimizer's check failed: nothing applied) or
//    reaches its locks after the deadline leaves the others applied. The caller reads the
//    outcomes with stepOutcomes. The arguments come from another worker: malformed ones
//    (an even length, a worker named twice, a negative handle) apply no step (kRefused).
//
// Answer: word 0 = finding | (status + 1) << 4 (the status of this worker's step in the
// pass; 0 when none was asked of it), word 1 = the version.
#pragma once

#include "optim/local_optimizer.h"
#include "optim/step_status.h"

#include <cstdint>
#include <vector>

namespace gilfree_rpc {

constexpr int64_t kGradientsFit = 1;
constexpr int64_t kSomeSparse = 2;

// On the worker that called backward: if the latest pass of the context (one the plugin's
// engine ran from here, ended everywhere, none running now) reached each of `workers` once
// and each found that its gradients fit (none sparse unless `acceptSparse`), their
// versions in the order of `workers`; otherwise an empty list.
std::vector<int64_t> checkedVersions(int64_t contextId, const std::vector<int64_t>& workers, bool acceptSparse);

// On the worker that called backward with steps, after a pass that ended everywhere: each
// worker's StepStatus (step_status.h) in `workers`' order (a worker that answered twice shows its worst).
std::vector<int64_t> stepOutcomes(int64_t contextId, const std::vector<int64_t>& workers);

}  // namespace gilfree_rpc
