// A mutex that TorchScript code can hold with a `with` statement.
//
// The distributed optimizer's local optimizer (a ScriptModule) runs
// `with self._lock: ...` around each step, so concurrent steps from many trainers are
// serialized per owner in C++, without the GIL. TorchScript calls __exit__ also when
// the body raises, so an error in a step never leaves the lock held.
#pragma once

#include <torch/custom_class.h>

#include <mutex>

namespace dist_engine {

struct StepLock : torch::CustomClassHolder {
  void enter() {
    mutex.lock();
  }
  // (exception type, value, traceback) as in Python; returns false: never swallows.
  bool exit(const c10::IValue&, const c10::IValue&, const c10::IValue&) {
    mutex.unlock();
    return false;
  }

  std::mutex mutex;
};

}  // namespace dist_engine
