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
// some optimizers take, and a worker where the engine holds no gradient of the context
// (torch's engine may have stored some since: they are not checked) report "not known
// to", and the step then validates on the owners before it applies, as without this
// check. A finding also carries the worker's version of the context's gradients
// (ContextEntry::version); the step sends it back, and an owner whose gradients changed
// since (a pass of the context started by another worker, or by another thread of the
// caller) refuses its part instead of applying gradients nobody checked.
#pragma once

#include "context_registry.h"

#include <cstdint>
#include <vector>

namespace dist_engine {

// The gradients an optimizer step reads on this worker for the context: the plugin
// engine's (committed and staged, summed), or torch's distributed autograd's when the
// engine holds none. `entry` may be null (no pass of the engine reached this worker).
GradientDict gradientsForStep(const ContextPtr& ctx, const EntryPtr& entry);

// The engine's gradients of the context here, as gradientsForStep reads them, if the
// entry's version is still `version`; otherwise raises, saying that they changed after
// the backward pass checked them (nothing is applied then).
GradientDict checkedGradientsForStep(int64_t contextId, int64_t version);

// Whether the engine holds gradients of the context here and every one fits its leaf
// (strided, not nested, the leaf's sizes, dtype and device). Must hold entry.mu.
bool gradientsFitLocked(const ContextEntry& entry);

// What a worker's part of a pass reports: a flattened triple (worker id, 1 or 0,
// version), followed by the triples it received from the workers it was the first to
// contact.
std::vector<int64_t> fitReport(int64_t workerId, const ContextEntry& entry, const std::vector<int64_t>& received);

// On the worker that called backward, at the end of a pass that ended everywhere: keeps
// each reached worker's finding (flattened triples, as above) as the context's record,
// replacing the previous one. Must hold entry.mu.
void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports);

// On the worker that called backward: if the latest pass of the context (a pass the
// plugin's engine ran from here, which ended everywhere, with none running now) reached
// every worker of `workers` and each reported that its gradients fit, their versions, in
// the order of `workers`; otherwise an empty list (also for an unknown context).
std::vector<int64_t> gradientsCheckedInBackward(int64_t contextId, const std::vector<int64_t>& workers);

}  // namespace dist_engine
