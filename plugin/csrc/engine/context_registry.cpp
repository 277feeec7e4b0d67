#include "engine/context_registry.h"

#include "compat.h"

#include <ATen/Parallel.h>
#include <torch/csrc/distributed/autograd/context/container.h>

#include <algorithm>

namespace gilfree_rpc {

ContextRegistry& ContextRegistry::get() {
  // Leaky singleton: RPC threads may still call in while the process exits.
  static auto* registry = new ContextRegistry();
  return *registry;
}

std::vector<EntryPtr> ContextRegistry::sweepLocked() {
  std::vector<EntryPtr> released;
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    if (it->second->context.expired()) {
      released.push_back(std::move(it->second));
      it = contexts_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

void ContextRegistry::freeLater(std::vector<EntryPtr>&& released) {
  if (released.empty()) {
    return;
  }
  // Freeing a context's gradients can take milliseconds (large tensors go back to
  // the system); the sweep runs at the start of a backward pass, so do it elsewhere.
  at::launch([entries = std::move(released)]() mutable { entries.clear(); });
}

EntryPtr ContextRegistry::entry(const ContextPtr& ctx) {
  std::vector<EntryPtr> released;
  EntryPtr result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(ctx->contextId());
    if (it != contexts_.end() && !it->second->context.expired()) {
      return it->second;
    }
    released = sweepLocked();
    result = std::make_shared<ContextEntry>(ctx);
    contexts_[ctx->contextId()] = result;
    auto& highest = highestContextOf_[workerIdOf(ctx->contextId())];
    highest = std::max(highest, ctx->contextId());
  }
  freeLater(std::move(released));
  // Free the entry when torch destroys the context, as torch frees its own gradients
  // then. (If torch's own engine runs a backward pass in the same context, the hook
  // fires early: contextDestroyed keeps the entry of a live context, and the sweep
  // drops it once the context is gone.)
  callWhenContextDestroyed(*ctx, [contextId = ctx->contextId()] {
    ContextRegistry::get().contextDestroyed(contextId);
  });
  return result;
}

void ContextRegistry::contextDestroyed(int64_t contextId) {
  EntryPtr released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(contextId);
    if (it == contexts_.end() || !it->second->context.expired()) {
      return;  // gone already, or the context lives on (the list was cleared early)
    }
    released = std::move(it->second);
    contexts_.erase(it);
  }
  // `released` (and the gradients with it, unless a running pass still holds the
  // entry) is freed here, outside the registry's lock.
}

EntryPtr ContextRegistry::find(int64_t contextId) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(contextId);
  if (it == contexts_.end() || it->second->context.expired()) {
    return nullptr;
  }
  return it->second;
}

namespace {

// a + b, a new tensor; dense + sparse in the order at::add defines (add(sparse, dense) is not).
at::Tensor addGradients(const at::Tensor& a, const at::Tensor& b) {
  return a.is_sparse() && !b.is_sparse() ? b + a : a + b;
}

// dict[variable] += grad, out of place (a new sum, for a snapshot).
void addInto(GradientDict& dict, const at::Tensor& variable, at::Tensor grad) {
  auto it = dict.find(variable);
  if (it == dict.end()) {
    dict.insert(variable, std::move(grad));
  } else {
    dict.insert_or_assign(variable, addGradients(it->value(), grad));
  }
}

// dict[variable] += grad, in place where torch's AccumulateGrad adds in place (compat.h,
// accumulateStored): a dict returned by get_gradients earlier sees the sum, as with torch.
void accumulateInto(GradientDict& dict, const at::Tensor& variable, at::Tensor grad) {
  auto it = dict.find(variable);
  if (it == dict.end()) {
    dict.insert(variable, std::move(grad));
    return;
  }
  at::Tensor sum = accumulateStored(it->value(), grad);
  if (!sum.is_same(it->value())) {
    dict.insert_or_assign(variable, std::move(sum));
  }
}

}  // namespace

void ContextEntry::commitEarlierPasses(int64_t current) {
  bool committed = false;
  for (auto it = staged.begin(); it != staged.end();) {
    if (it->first == current) {
      ++it;
      continue;
    }
    for (const auto& item : it->second) {
      accumulateInto(grads, item.key(), item.value());
    }
    it = staged.erase(it);
    committed = true;
  }
  if (committed) {
    publishLocked();  // the sums are the committed tensors now
  }
}

void ContextEntry::commitPass(int64_t passId) {
  auto it = staged.find(passId);
  if (it == staged.end()) {
    return;
  }
  for (const auto& item : it->second) {
    accumulateInto(grads, item.key(), item.value());
  }
  staged.erase(it);
  publishLocked();
}

void ContextEntry::discardPass(int64_t passId) {
  if (staged.erase(passId) != 0) {
    ++version;
    publishLocked();
  }
}

void ContextEntry::publishLocked() {
  auto ctx = context.lock();
  if (!ctx) {
    return;
  }
  GradientDict theirs = torchGradientStore(*ctx);
  // What torch's engine stored there on its own: an entry this engine never put (a pass of
  // torch's that ran first) is kept as torch's and published summed with this engine's; one
  // that replaced this engine's tensor is left as torch made it (its sum includes ours).
  for (const auto& item : theirs) {
    auto mine = published.find(item.key());
    if (mine == published.end()) {
      if (!foreign.contains(item.key())) {
        foreign.insert(item.key(), item.value());
      }
      bothEngines = true;
    } else if (!mine->value().is_same(item.value())) {
      bothEngines = true;
    }
  }
  GradientDict now = snapshot();
  for (const auto& item : published) {
    auto it = theirs.find(item.key());
    if (!now.contains(item.key()) && it != theirs.end() && it->value().is_same(item.value())) {
      auto torchs = foreign.find(item.key());
      if (torchs != foreign.end()) {
        theirs.insert_or_assign(item.key(), torchs->value());
      } else {
        (void)theirs.erase(item.key());
      }
    }
  }
  GradientDict put;
  for (const auto& item : now) {
    auto it = theirs.find(item.key());
    auto mine = published.find(item.key());
    if (it != theirs.end() && mine != published.end() && !it->value().is_same(mine->value())) {
      continue;  // torch's engine replaced what this engine put: left as torch made it
    }
    auto torchs = foreign.find(item.key());
    at::Tensor value = torchs == foreign.end() ? item.value() : addGradients(torchs->value(), item.value());
    theirs.insert_or_assign(item.key(), value);
    put.insert(item.key(), value);
  }
  published = std::move(put);
}

bool ContextEntry::torchEngineRanLocked() const {
  if (bothEngines) {
    return true;
  }
  auto ctx = context.lock();
  if (!ctx) {
    return false;
  }
  for (const auto& item : torchGradientStore(*ctx)) {
    auto it = published.find(item.key());
    if (it == published.end() || !it->value().is_same(item.value())) {
      return true;
    }
  }
  return false;
}

GradientDict ContextEntry::snapshot() const {
  GradientDict all = grads.copy();
  for (const auto& [passId, passGrads] : staged) {
    for (const auto& item : passGrads) {
      addInto(all, item.key(), item.value());
    }
  }
  return all;
}

void ContextRegistry::accumulate(
    ContextEntry& entry,
    int64_t passId,
    const at::Tensor& variable,
    at::Tensor&& grad,
    size_t expectedRefs) {
  // Keep the incoming tensor without a copy where torch's engine would (compat.h,
  // gradientToStore): when nothing but the engine refers to it and it obeys the gradient
  // layout contract. Otherwise store a copy, so that an in-place change by the user to one
  // leaf's gradient cannot leak into another's (an add hands the same gradient tensor to
  // both of its inputs), and so that a stride-0 view (sum's gradient) can be scaled in place.
  // A pass's gradient is the leaf's only one in its staged dict (the engine sums a node's
  // inputs before it runs), so this is always the first gradient torch's rule speaks of;
  // adding to the context's gradients happens when the pass is committed.
  at::Tensor owned = gradientToStore(std::move(grad), variable, expectedRefs);
  std::lock_guard<std::mutex> lock(entry.mu);
  if (entry.abortedPasses.count(passId) != 0) {
    return;  // a task that was already running when the pass failed
  }
  auto passGrads = entry.staged.find(passId);
  if (passGrads == entry.staged.end()) {
    passGrads = entry.staged.emplace(passId, GradientDict()).first;
  }
  addInto(passGrads->second, variable, std::move(owned));
  ++entry.version;
}

PassPtr ContextRegistry::findPass(int64_t contextId, int64_t passId) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = passes_.find({contextId, passId});
  return it == passes_.end() ? nullptr : it->second;
}

PassPtr ContextRegistry::insertPass(const PassPtr& pass) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = passes_.emplace(std::make_pair(pass->contextId, pass->passId), pass);
  return it->second;
}

std::vector<PassPtr> ContextRegistry::passesOf(int64_t workerId) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<PassPtr> found;
  for (const auto& [ids, pass] : passes_) {
    if (workerIdOf(ids.first) == workerId || workerIdOf(ids.second) == workerId) {
      found.push_back(pass);
    }
  }
  return found;
}

std::vector<int64_t> ContextRegistry::releaseContextsOf(int64_t workerId) {
  std::vector<EntryPtr> released;
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = contexts_.begin(); it != contexts_.end();) {
      if (workerIdOf(it->first) == workerId) {
        ids.push_back(it->first);
        released.push_back(std::move(it->second));
        it = contexts_.erase(it);
      } else {
        ++it;
      }
    }
    const int64_t lowest = workerScopedId(workerId, 0);
    auto highest = highestContextOf_.find(workerId);
    const int64_t newest = highest == highestContextOf_.end() ? lowest : highest->second;
    for (int64_t id = std::max(lowest, newest - kContextsScanned); id <= newest + kContextsScanned; ++id) {
      ids.push_back(id);
    }
  }
  freeLater(std::move(released));
  return ids;
}

void ContextRegistry::countReleasedForFailedPeer(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  releasedForFailedPeers_ += n;
}

void ContextRegistry::erasePass(int64_t contextId, int64_t passId) {
  std::lock_guard<std::mutex> lock(mu_);
  passes_.erase({contextId, passId});
}

void ContextRegistry::release(int64_t contextId) {
  std::vector<EntryPtr> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contexts_.find(contextId);
    if (it != contexts_.end()) {
      released.push_back(std::move(it->second));
      contexts_.erase(it);
    }
    auto expired = sweepLocked();
    released.insert(released.end(), expired.begin(), expired.end());
  }
  freeLater(std::move(released));
}

namespace {

int64_t numTorchContexts() {
  try {
    return static_cast<int64_t>(
        torch::distributed::autograd::DistAutogradContainer::getInstance().numAutogradContexts());
  } catch (const std::exception&) {
    return 0;  // distributed autograd is not initialized
  }
}

}  // namespace

std::unordered_map<std::string, int64_t> ContextRegistry::debugInfo() {
  std::vector<EntryPtr> released;
  std::lock_guard<std::mutex> lock(mu_);
  released = sweepLocked();
  int64_t numGrads = 0;
  for (auto& [id, entry] : contexts_) {
    std::lock_guard<std::mutex> entryLock(entry->mu);
    numGrads += static_cast<int64_t>(entry->grads.size());
    for (const auto& [passId, passGrads] : entry->staged) {
      numGrads += static_cast<int64_t>(passGrads.size());
    }
  }
  return {
      {"num_live_contexts", static_cast<int64_t>(contexts_.size())},
      {"num_running_passes", static_cast<int64_t>(passes_.size())},
      {"num_stored_gradients", numGrads},
      {"num_torch_contexts", numTorchContexts()},
      {"num_contexts_released_for_failed_workers", releasedForFailedPeers_},
  };
}

}  // namespace gilfree_rpc
