// The check of a step's gradients, made during the backward pass.
//
// Before it changes anything, every functional_optim optimizer checks that each gradient
// fits its parameter: dense, with the parameter's shape, dtype and device
// (functional_optim/_validation.py, check_gradients). A step over several owners must
// know that every owner passes that check before any owner applies (all or nothing).
// The engine learns it during the backward pass: when a worker's part of a pass ends,
// the worker checks every gradient a step would read there and adds its finding to its
// answer to the pass's first message; the answers form a tree rooted at the worker that
// called backward (engine.h, "first contact"), so that worker ends the pass knowing every
// reached worker's finding, and keeps them with the context (ContextEntry::gradientsFit).
// A step whose owners all reported gradients that fit applies at once on every owner,
// with no validation round first (plugin/optim.py, DistributedOptimizer.step).
//
// A finding only says "every gradient fits" or "not known to": a sparse gradient, which
// some optimizers take, reports "not known to", and the step then validates on the
// owners before it applies, as without this check.
#pragma once

#include "context_registry.h"

#include <cstdint>
#include <vector>

namespace dist_engine {

// The gradients an optimizer step reads on this worker for the context: the plugin
// engine's (committed and staged, summed), or torch's distributed autograd's when the
// engine holds none. `entry` may be null (no pass of the engine reached this worker).
GradientDict gradientsForStep(const ContextPtr& ctx, const EntryPtr& entry);

// Whether every one of those gradients fits its leaf (strided, not nested, the leaf's
// sizes, dtype and device); true when there are none. Must hold entry.mu.
bool gradientsFitLocked(const ContextPtr& ctx, const ContextEntry& entry);

// What a worker's part of a pass reports: its id and whether its gradients fit, as a
// flattened pair (worker id, 1 or 0), followed by the pairs it received from the workers
// it was the first to contact.
std::vector<int64_t> fitReport(int64_t workerId, bool fits, const std::vector<int64_t>& received);

// On the worker that called backward, at the end of a pass that ended everywhere: keeps
// each reached worker's finding (a flattened report, as above) as the context's record,
// replacing the previous one. Must hold entry.mu.
void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports);

// On the worker that called backward: whether the latest pass of the context (a pass
// the plugin's engine ran from here, which ended everywhere, with none running now)
// reached every worker of `workers` and each reported that its gradients fit. False for
// an unknown context or one whose latest pass failed.
bool gradientsCheckedInBackward(int64_t contextId, const std::vector<int64_t>& workers);

}  // namespace dist_engine
