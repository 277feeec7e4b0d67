// What the engine keeps per distributed autograd context and per running pass.
//
// Leaf gradients live here, per context and per worker, not in `.grad`. An entry
// holds only a weak reference to torch's DistAutogradContext: when torch releases
// the context (the `with context()` block exits on the worker that created it, and
// torch's cleanup RPCs reach the others) the entry expires and is swept away at the
// next engine call, so gradients of finished iterations do not pile up.
#pragma once

#include "pass_state.h"

#include <ATen/core/Dict.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace dist_engine {

struct ContextEntry {
  explicit ContextEntry(const ContextPtr& ctx) : context(ctx) {}

  std::weak_ptr<torch::distributed::autograd::DistAutogradContext> context;
  std::mutex mu;
  // Leaf tensor -> gradient accumulated over this context's backward passes.
  c10::Dict<at::Tensor, at::Tensor> grads;
  // A backward pass started on this worker is running for this context.
  bool rootBackwardRunning = false;
  // Passes that failed or were aborted here: late gradient messages are refused.
  std::unordered_set<int64_t> abortedPasses;
};

using EntryPtr = std::shared_ptr<ContextEntry>;

class ContextRegistry {
 public:
  static ContextRegistry& get();

  // The entry for a live context, created on first use. Sweeps released contexts.
  EntryPtr entry(const ContextPtr& ctx);
  // The entry for a context id, or nullptr.
  EntryPtr find(int64_t contextId);

  // Adds `grad` to the gradient of `variable` in `entry` (out of place, so a
  // dictionary returned by get_gradients earlier keeps its values).
  static void accumulate(ContextEntry& entry, const at::Tensor& variable, at::Tensor&& grad);

  PassPtr findPass(int64_t contextId, int64_t passId);
  // Inserts `pass` unless a pass with the same ids exists; returns the one registered.
  PassPtr insertPass(const PassPtr& pass);
  void erasePass(int64_t contextId, int64_t passId);

  void release(int64_t contextId);
  std::unordered_map<std::string, int64_t> debugInfo();

 private:
  void sweepLocked();

  std::mutex mu_;
  std::unordered_map<int64_t, EntryPtr> contexts_;
  std::map<std::pair<int64_t, int64_t>, PassPtr> passes_;
};

}  // namespace dist_engine
