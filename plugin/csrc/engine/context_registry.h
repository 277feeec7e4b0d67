// What the engine keeps per distributed autograd context and per running pass.
//
// Leaf gradients live here, per context and per worker, not in `.grad`. An entry
// holds only a weak reference to torch's DistAutogradContext and is dropped when
// torch destroys the context (the `with context()` block exits on the worker that
// created it, and torch's cleanup RPCs reach the others), so the gradients of a
// finished iteration are freed when torch frees its own.
#pragma once

#include "engine/part_end.h"
#include "engine/pass_state.h"

#include <ATen/core/Dict.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gilfree_rpc {

// Leaf tensor -> gradient.
using GradientDict = c10::Dict<at::Tensor, at::Tensor>;

// Gradients are kept per pass until the pass is known to have ended on every
// worker, so that a pass that fails anywhere can be taken back everywhere: a failed
// backward leaves no partial gradients in the context.
struct ContextEntry {
  explicit ContextEntry(const ContextPtr& ctx) : context(ctx) {}

  std::weak_ptr<torch::distributed::autograd::DistAutogradContext> context;
  std::mutex mu;
  // Held while walking the context's graph (graph_walk.cpp) and while a node runs
  // with some of its next edges hidden (Engine::runPeerOutputsFirst), so that no
  // walk sees a hidden edge. Taken after a pass's `mu` when both are held.
  std::mutex graphMu;
  // Gradients of passes known to have ended everywhere, summed (in place, as torch adds
  // a second gradient to the one it stores: compat.h, accumulateStored).
  GradientDict grads;
  // What this engine put into torch's own store of the context's gradients (publishLocked).
  GradientDict published;
  // Gradients that torch's engine stored in its store before this engine put anything
  // there for the same parameter (a pass of torch's in the same context): published summed
  // with this engine's, so that torch's readers see both passes.
  GradientDict foreign;
  // Both engines ran passes of this context here (seen by publishLocked): this engine's
  // readers raise (torchEngineRanLocked).
  bool bothEngines = false;
  // pass id -> gradients of a pass that may still be aborted.
  std::map<int64_t, GradientDict> staged;
  // A backward pass started on this worker is running for this context.
  bool rootBackwardRunning = false;
  // Passes that failed or were aborted here: late gradient messages are refused.
  std::unordered_set<int64_t> abortedPasses;
  // Counts the changes to the gradients here (a gradient staged, a pass's gradients
  // discarded), so that a reader can tell that they are still those it saw before
  // (gradientsAtVersion, engine/gradients.h).
  int64_t version = 0;
  // On the worker that called backward: the part-end answers (part_end.h) of the workers
  // that the latest pass started here reached. Emptied when a pass starts; filled when it
  // ends everywhere.
  PartEndAnswers partEndAnswers;

  // Moves the staged gradients of every pass but `current` into `grads`. Called when
  // a pass starts: the worker that calls backward starts a pass only after its
  // previous one in the context ended everywhere (or was aborted everywhere).
  // Must hold `mu`.
  void commitEarlierPasses(int64_t current);
  // Moves pass `passId`'s staged gradients into `grads` (the worker that called backward,
  // once its pass ended everywhere). Must hold `mu`.
  void commitPass(int64_t passId);
  // Drops what a failed pass staged. Must hold `mu`.
  void discardPass(int64_t passId);
  // Committed and staged gradients, summed, in a new dict. Must hold `mu`.
  GradientDict snapshot() const;
  // Puts the snapshot into torch's own store of the context's gradients (compat.h,
  // torchGradientStore), so that torch's get_gradients and DistributedOptimizer see the
  // gradients of this engine's passes too; takes back what it put there earlier and no pass
  // holds now (an aborted pass's). Called as a pass's gradients change here: when a worker's
  // part ends, when a pass is committed or discarded. Must hold `mu`.
  void publishLocked();
  // Whether torch's engine ran a pass of this context too: seen by publishLocked, or an
  // entry in torch's store that this engine did not put. Must hold `mu`.
  bool torchEngineRanLocked() const;
};

using EntryPtr = std::shared_ptr<ContextEntry>;

class ContextRegistry {
 public:
  static ContextRegistry& get();

  // The entry for a live context, created on first use. Sweeps released contexts.
  EntryPtr entry(const ContextPtr& ctx);
  // The entry for a context id, or nullptr.
  EntryPtr find(int64_t contextId);

  // Stages `grad` as pass `passId`'s gradient of `variable`, without a copy where torch
  // would keep it (compat.h, gradientToStore); `expectedRefs` is the number of references
  // to `grad` the engine itself holds.
  static void accumulate(
      ContextEntry& entry,
      int64_t passId,
      const at::Tensor& variable,
      at::Tensor&& grad,
      size_t expectedRefs);

  PassPtr findPass(int64_t contextId, int64_t passId);
  // The running passes that belong to `workerId`: started by it (pass id) or in one
  // of its contexts (context id; both carry the worker id in bits 48 and up).
  std::vector<PassPtr> passesOf(int64_t workerId);
  // Inserts `pass` unless a pass with the same ids exists; returns the one registered.
  PassPtr insertPass(const PassPtr& pass);
  void erasePass(int64_t contextId, int64_t passId);

  void release(int64_t contextId);
  // Drops the engine's entries of every context created by `workerId` and returns
  // the ids of torch's contexts of that worker that may be alive here: those of the
  // entries, and every id within kContextsScanned of the newest one the engine saw
  // (contexts that only a forward pass has reached; torch cannot list its contexts,
  // and a worker numbers its contexts one after another).
  std::vector<int64_t> releaseContextsOf(int64_t workerId);
  static constexpr int64_t kContextsScanned = 64;
  // Counts the contexts released because their worker failed (debug_info).
  void countReleasedForFailedPeer(int64_t n);
  // Called when torch destroys the context `contextId`: drops its entry.
  void contextDestroyed(int64_t contextId);
  std::unordered_map<std::string, int64_t> debugInfo();

 private:
  // Removes the entries of released contexts and returns them (to be freed without
  // holding mu_).
  std::vector<EntryPtr> sweepLocked();
  static void freeLater(std::vector<EntryPtr>&& released);

  std::mutex mu_;
  std::unordered_map<int64_t, EntryPtr> contexts_;
  // Creator worker id -> highest context id of it that had an entry here.
  std::unordered_map<int64_t, int64_t> highestContextOf_;
  int64_t releasedForFailedPeers_ = 0;
  std::map<std::pair<int64_t, int64_t>, PassPtr> passes_;
};

}  // namespace gilfree_rpc
