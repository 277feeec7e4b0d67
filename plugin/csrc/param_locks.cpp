#include "param_locks.h"

#include "debug_counters.h"

#include <algorithm>
#include <unordered_map>

namespace gilfree_rpc {
namespace {

struct Entry {
  std::weak_ptr<ParamLock> lock;
  // Keeps the TensorImpl's memory (not its data) allocated, so that its address,
  // the key, is not reused while the entry exists.
  c10::weak_intrusive_ptr<c10::TensorImpl> tensor;
};

struct LockRegistry {
  std::mutex mu;
  std::unordered_map<const c10::TensorImpl*, Entry> entries;
  uint64_t nextOrder = 0;
};

LockRegistry& lockRegistry() {
  // Leaky singleton: locks may be destroyed while the process exits.
  static auto* r = new LockRegistry();
  return *r;
}

}  // namespace

ParamLock::~ParamLock() {
  auto& r = lockRegistry();
  std::lock_guard<std::mutex> guard(r.mu);
  auto it = r.entries.find(key);
  // The entry may already name a newer lock for the same tensor (created after this
  // one's last reference went away and before this destructor took the mutex).
  if (it != r.entries.end() && it->second.lock.expired()) {
    r.entries.erase(it);
  }
}

std::vector<std::shared_ptr<ParamLock>> paramLocksFor(const std::vector<at::Tensor>& params) {
  std::vector<std::shared_ptr<ParamLock>> locks;
  locks.reserve(params.size());
  {
    auto& r = lockRegistry();
    std::lock_guard<std::mutex> guard(r.mu);
    for (const auto& param : params) {
      TORCH_CHECK(param.defined(), "StepLock: undefined tensor among the parameters");
      const c10::TensorImpl* key = param.unsafeGetTensorImpl();
      auto it = r.entries.find(key);
      std::shared_ptr<ParamLock> lock = it == r.entries.end() ? nullptr : it->second.lock.lock();
      if (!lock) {
        lock = std::make_shared<ParamLock>(key, r.nextOrder++);
        Entry entry{lock, c10::weak_intrusive_ptr<c10::TensorImpl>(param.getIntrusivePtr())};
        if (it == r.entries.end()) {
          r.entries.emplace(key, std::move(entry));
        } else {
          it->second = std::move(entry);
        }
      }
      locks.push_back(std::move(lock));
    }
  }
  // Sorted by the global order, without duplicates (a tensor listed twice is locked once).
  std::sort(locks.begin(), locks.end(), [](const auto& a, const auto& b) { return a->order < b->order; });
  locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
  return locks;
}

int64_t numParamLocks() {
  auto& r = lockRegistry();
  std::lock_guard<std::mutex> guard(r.mu);
  return static_cast<int64_t>(r.entries.size());
}

namespace {

// The locks' counter in plugin.debug_info() (debug_counters.h): live per-parameter locks.
const DebugCounters kParamLockCounters("param_locks", [] {
  return Counters{{"num_param_locks", numParamLocks()}};
});

}  // namespace

}  // namespace gilfree_rpc
