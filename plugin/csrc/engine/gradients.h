// Reading a context's gradients on this worker: what a step, gradient clipping or a
// client's part-end hook reads (never creates a context).
#pragma once

#include "engine/context_registry.h"

#include <optional>
#include <vector>

namespace gilfree_rpc {

// The gradient of each of `params` in `grads`, or None.
std::vector<std::optional<at::Tensor>> gradientsOf(const GradientDict& grads, const std::vector<at::Tensor>& params);

// The gradients of the context here: the engine's (committed and staged, summed), or
// torch's distributed autograd's when the engine holds none. `entry` may be null (no pass
// of the engine reached this worker). Raises when both engines ran passes of the context
// here (their gradients do not add up: the engine publishes its own into torch's store,
// ContextEntry::publishLocked, but keeps its sums apart).
GradientDict contextGradients(const ContextPtr& ctx, const EntryPtr& entry);

// contextGradients of `params` (None where a parameter has none). A context this worker
// does not know gives no gradients (no backward pass of it reached this worker).
std::vector<std::optional<at::Tensor>> gradientsFor(int64_t contextId, const std::vector<at::Tensor>& params);

// The engine's gradients of the context here, summed, if its entry's version (which counts
// every change to them) is still `version` and torch's engine ran no pass of the context
// here; nullopt otherwise.
std::optional<GradientDict> gradientsAtVersion(int64_t contextId, int64_t version);

// What the engine stores for the context here, unsummed (the committed dict, then each
// staged pass's), with the entry's version; nullopt for a context the engine does not know
// or one where torch's engine ran a pass too.
struct StoredGradients {
  std::vector<GradientDict> dicts;
  int64_t version;
};
std::optional<StoredGradients> storedGradients(int64_t contextId);

}  // namespace gilfree_rpc
