// Per-parameter locks, held in C++ (no GIL while waiting): every optimizer step of this
// library holds its parameters' locks while it writes them (optim/), and a remote module takes
// its parameters' snapshot under them (nn/remote_module.h), so it never reads half a step.
//
// Every parameter (a TensorImpl, i.e. the tensor object, not its storage) that some
// local optimizer steps has one ParamLock in this process. A StepLock is the set of
// ParamLocks of one local optimizer's parameters, sorted by the locks' creation
// order, which is one global order for the whole process: two StepLocks that share
// a parameter serialize their steps on it, and two StepLocks over overlapping sets
// cannot deadlock, since both take the shared locks in the same order.
//
// Lifetime: a ParamLock lives as long as some StepLock holds it (StepLocks hold
// shared_ptrs); the registry holds only weak references and forgets a lock when it
// is destroyed, so the locks of freed parameters (whose optimizers are gone) do not
// pile up. The registry keys locks by TensorImpl address and keeps a weak
// intrusive_ptr to the TensorImpl next to it: while that weak reference exists the
// address cannot be reused by another tensor.
//
// Streams: a parameter on a GPU is written (a step) and read (a remote module's snapshot) on
// the current stream of whoever holds its lock; each holder's stream first waits for the
// work the previous holder queued on it, and records its own when it releases the lock
// (stream_order.h), so the lock orders the GPU's work as it orders the threads.
//
// Lock order inside the library: a StepLock's ParamLocks (in the global order) are
// taken before any engine or registry mutex; the registry mutex is never held while
// waiting for a ParamLock.
#pragma once

#include "stream_order.h"

#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace gilfree_rpc {

struct ParamLock {
  explicit ParamLock(const c10::TensorImpl* key, uint64_t order) : key(key), order(order) {}
  ~ParamLock();
  ParamLock(const ParamLock&) = delete;
  ParamLock& operator=(const ParamLock&) = delete;

  const c10::TensorImpl* const key;
  // Position in the global lock order (creation order; unique in the process).
  const uint64_t order;
  std::mutex mutex;
  // The last holder's work on the parameter's device (guarded by `mutex`).
  StreamOrder writes;
};

// After taking `locks`: the current streams wait for the previous holders' work. Before
// releasing them: records this holder's (one event per device, not the CPU).
inline void waitForPreviousHolders(const std::vector<std::shared_ptr<ParamLock>>& locks) {
  for (const auto& lock : locks) {
    lock->writes.wait();
  }
}
inline void recordThisHolder(const std::vector<std::shared_ptr<ParamLock>>& locks) {
  std::vector<std::shared_ptr<const c10::Event>> events;
  for (const auto& lock : locks) {
    const c10::Device device = lock->key->device();  // the holder keeps the tensor alive
    if (device.is_cpu()) {
      continue;
    }
    auto found = std::find_if(events.begin(), events.end(), [&](const auto& e) { return e->device() == device; });
    if (found == events.end()) {
      events.push_back(recordedEvent(device));
      found = events.end() - 1;
    }
    lock->writes.set(*found);
  }
}

// The ParamLocks of `params`, sorted by the global order, one per distinct tensor.
std::vector<std::shared_ptr<ParamLock>> paramLocksFor(const std::vector<at::Tensor>& params);
// Number of live ParamLocks in this process (for tests and monitoring).
int64_t numParamLocks();

// Holds `locks` (in the global order, as paramLocksFor sorts them) for a scope; releases them
// in reverse order.
class HeldParamLocks {
 public:
  explicit HeldParamLocks(const std::vector<std::shared_ptr<ParamLock>>& locks) : locks_(locks) {
    for (const auto& lock : locks_) {
      lock->mutex.lock();
    }
    waitForPreviousHolders(locks_);
  }
  ~HeldParamLocks() {
    try {
      recordThisHolder(locks_);
    } catch (...) {
      // a device error (the device is unusable then): the next holder waits for older work only
    }
    for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) {
      (*it)->mutex.unlock();
    }
  }
  HeldParamLocks(const HeldParamLocks&) = delete;
  HeldParamLocks& operator=(const HeldParamLocks&) = delete;

 private:
  const std::vector<std::shared_ptr<ParamLock>>& locks_;
};

// torch.classes.gilfree_rpc.StepLock(params): the locks of one local optimizer's
// parameters, for a TorchScript `with` statement. `__enter__` takes them in the
// global order; `__exit__` releases them in reverse order. TorchScript calls
// __exit__ also when the body raises, and on the same thread that entered (the body
// of a step never waits on another thread), as std::mutex requires.
struct StepLock : torch::CustomClassHolder {
  explicit StepLock(const std::vector<at::Tensor>& params) : locks(paramLocksFor(params)) {}

  void enter() {
    for (auto& lock : locks) {
      lock->mutex.lock();
    }
    waitForPreviousHolders(locks);
  }
  // (exception type, value, traceback) as in Python; returns false: never swallows.
  bool exit(const c10::IValue&, const c10::IValue&, const c10::IValue&) {
    recordThisHolder(locks);
    for (auto it = locks.rbegin(); it != locks.rend(); ++it) {
      (*it)->mutex.unlock();
    }
    return false;
  }
  int64_t size() const {
    return static_cast<int64_t>(locks.size());
  }

  const std::vector<std::shared_ptr<ParamLock>> locks;
};

}  // namespace gilfree_rpc
