#include "context_registry.h"

namespace dist_engine {

ContextRegistry& ContextRegistry::get() {
  // Leaky singleton: RPC threads may still call in while the process exits.
  static auto* registry = new ContextRegistry();
  return *registry;
}

void ContextRegistry::sweepLocked() {
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    if (it->second->context.expired()) {
      it = contexts_.erase(it);
    } else {
      ++it;
    }
  }
}

EntryPtr ContextRegistry::entry(const ContextPtr& ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(ctx->contextId());
  if (it != contexts_.end() && !it->second->context.expired()) {
    return it->second;
  }
  sweepLocked();
  auto fresh = std::make_shared<ContextEntry>(ctx);
  contexts_[ctx->contextId()] = fresh;
  return fresh;
}

EntryPtr ContextRegistry::find(int64_t contextId) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = contexts_.find(contextId);
  if (it == contexts_.end() || it->second->context.expired()) {
    return nullptr;
  }
  return it->second;
}

void ContextRegistry::accumulate(ContextEntry& entry, const at::Tensor& variable, at::Tensor&& grad) {
  // Keep the incoming tensor only when nothing else refers to it (the engine has
  // moved its last reference here); otherwise store a copy, so that an in-place
  // change by the user to one leaf's gradient cannot leak into another's (an add
  // hands the same gradient tensor to both of its inputs).
  at::Tensor owned = grad.use_count() == 1 ? std::move(grad) : grad.clone();
  std::lock_guard<std::mutex> lock(entry.mu);
  auto it = entry.grads.find(variable);
  if (it == entry.grads.end()) {
    entry.grads.insert(variable, std::move(owned));
  } else {
    entry.grads.insert_or_assign(variable, it->value() + owned);
  }
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

void ContextRegistry::erasePass(int64_t contextId, int64_t passId) {
  std::lock_guard<std::mutex> lock(mu_);
  passes_.erase({contextId, passId});
}

void ContextRegistry::release(int64_t contextId) {
  std::lock_guard<std::mutex> lock(mu_);
  contexts_.erase(contextId);
  sweepLocked();
}

std::unordered_map<std::string, int64_t> ContextRegistry::debugInfo() {
  std::lock_guard<std::mutex> lock(mu_);
  sweepLocked();
  int64_t numGrads = 0;
  for (auto& [id, entry] : contexts_) {
    std::lock_guard<std::mutex> entryLock(entry->mu);
    numGrads += static_cast<int64_t>(entry->grads.size());
  }
  return {
      {"num_live_contexts", static_cast<int64_t>(contexts_.size())},
      {"num_running_passes", static_cast<int64_t>(passes_.size())},
      {"num_stored_gradients", numGrads},
  };
}

}  // namespace dist_engine
