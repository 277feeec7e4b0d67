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
// A finding says "every gradient fits" (dense, or sparse COO, with the leaf's shape,
// dtype and device), whether any of them is sparse (which only some optimizers take: the
// step knows whether its optimizer does), or "not known to": a worker where the engine
// holds no gradient of the context (torch's engine may have stored some since: they are
// not checked) reports "not known to", and the step then validates on the owners before
// it applies, as without this check. A finding also carries the worker's version of the context's gradients
// (ContextEntry::version); the step sends it back, and an owner whose gradients changed
// since (a pass of the context started by another worker, or by another thread of the
// caller) refuses its part instead of applying gradients nobody checked.
#pragma once

#include "engine/context_registry.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace dist_engine {

// The bits of a worker's finding.
constexpr int64_t kGradientsFit = 1;  // every gradient fits its leaf
constexpr int64_t kSomeSparse = 2;    // and at least one of them is sparse

// The gradient of each of `params` in `grads`, or None.
std::vector<std::optional<at::Tensor>> gradientsOf(const GradientDict& grads, const std::vector<at::Tensor>& params);

// The gradient of each of `params` in the context on this worker (None where it has none),
// as a step reads them (gradientsForStep). A context this worker does not know gives no
// gradients (no backward pass of it reached this worker): the caller checks that the
// context exists on its side, and sends its step while the context is open there, so an
// owner cannot have released it already. Only retrieves: never creates a context.
std::vector<std::optional<at::Tensor>> gradientsFor(int64_t contextId, const std::vector<at::Tensor>& params);

// The gradients an optimizer step reads on this worker for the context: the plugin
// engine's (committed and staged, summed), or torch's distributed autograd's when the
// engine holds none. `entry` may be null (no pass of the engine reached this worker).
GradientDict gradientsForStep(const ContextPtr& ctx, const EntryPtr& entry);

// The engine's gradients of the context here, as gradientsForStep reads them, if the
// entry's version is still `version`; otherwise raises, saying that they changed after
// the backward pass checked them (nothing is applied then).
GradientDict checkedGradientsForStep(int64_t contextId, int64_t version);
// As checkedGradientsForStep, with nullopt instead of the error.
std::optional<GradientDict> checkedGradientsIfCurrent(int64_t contextId, int64_t version);

// The finding on the context's gradients here: kGradientsFit when the engine holds some
// and every one fits its leaf (strided and not nested, or sparse COO; the leaf's sizes,
// dtype and device), with kSomeSparse when one of them is sparse; 0 otherwise. Must hold
// entry.mu.
int64_t gradientsFitLocked(const ContextEntry& entry);

// What a worker's part of a pass reports: a flattened triple (worker id, finding,
// version), followed by the triples it received from the workers it was the first to
// contact.
std::vector<int64_t> fitReport(int64_t workerId, const ContextEntry& entry, const std::vector<int64_t>& received);

// On the worker that called backward, at the end of a pass that ended everywhere: keeps
// each reached worker's finding (flattened triples, as above) as the context's record,
// replacing the previous one. Must hold entry.mu.
void recordFitReportsLocked(ContextEntry& entry, const std::vector<int64_t>& reports);

// On the worker that called backward: if the latest pass of the context (a pass the
// plugin's engine ran from here, which ended everywhere, with none running now) reached
// every worker of `workers` and each reported that its gradients fit (and none is sparse,
// unless `acceptSparse`), their versions, in the order of `workers`; otherwise an empty
// list (also for an unknown context).
std::vector<int64_t> gradientsCheckedInBackward(
    int64_t contextId,
    const std::vector<int64_t>& workers,
    bool acceptSparse);

}  // namespace dist_engine
