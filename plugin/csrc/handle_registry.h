// Objects that ops, local or called by other workers, reach by a handle: an int64 unique in
// the process and never reused. The registry holds each object by weak reference, so an object
// lives as long as its owner's references to it (a Python object, an RRef's value) and leaves
// the registry when the last one goes (its release_resources calls remove); a handle whose
// object is gone is not found. Thread-safe.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace gilfree_rpc {

template <class T>
class HandleRegistry {
 public:
  // Registers `object` under a new handle; returns the handle.
  int64_t add(const c10::intrusive_ptr<T>& object) {
    const int64_t handle = next_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    entries_.emplace(handle, c10::weak_intrusive_ptr<T>(object));
    return handle;
  }

  // The object of `handle`; null when it was never registered or is gone.
  c10::intrusive_ptr<T> find(int64_t handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    return it == entries_.end() ? c10::intrusive_ptr<T>() : it->second.lock();
  }

  // How many registered objects are alive now (for counters: debug_counters.h).
  int64_t numLive() const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t live = 0;
    for (const auto& [handle, entry] : entries_) {
      live += entry.expired() ? 0 : 1;
    }
    return live;
  }

  // Forgets `handle` (the object's release_resources calls it).
  void remove(int64_t handle) {
    c10::weak_intrusive_ptr<T> entry(c10::intrusive_ptr<T>{});  // released after the mutex
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    if (it != entries_.end()) {
      entry = std::move(it->second);
      entries_.erase(it);
    }
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<int64_t, c10::weak_intrusive_ptr<T>> entries_;
  std::atomic<int64_t> next_{1};
};

}  // namespace gilfree_rpc
