// Orders work queued on one device stream before work queued later on another, as torch's RPC
// orders the streams of device-mapped tensors: the producer records an event on its current
// stream after it queued a write; the consumer, before it queues what reads (or overwrites)
// the same memory, makes its own current stream wait for that event (the host never waits).
// For CUDA (any device type with streams and events: the device-generic c10::Event); nothing
// happens for CPU tensors, so the CPU paths pay one empty check.
//
// Used for the remote modules' snapshots and buffers (nn/remote_module.h, nn/interpreter.cpp)
// and for the parameters' writes of every optimizer step (param_locks.h: whoever holds a
// parameter's lock waits for the previous holder's work on it, and records its own).
//
// A StreamOrder is not synchronized itself: its owner guards it (a parameter's lock, the
// buffers' mutex, or a snapshot made before it is shared).
#pragma once

#include "compat.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Event.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace gilfree_rpc {

// An event recorded on `device`'s current stream (a device with streams, not the CPU).
inline std::shared_ptr<const c10::Event> recordedEvent(c10::Device device) {
  auto event = std::make_shared<c10::Event>(device.type());
  event->record(currentStream(device));
  return event;
}

class StreamOrder {
 public:
  // What the next wait() waits for: the work queued so far on the current stream of `device`
  // (nothing for the CPU).
  void record(c10::Device device) {
    events_.clear();
    if (!device.is_cpu()) {
      events_.push_back(recordedEvent(device));
    }
  }
  // The same for each device (not the CPU) that `tensors` are on.
  void record(const std::vector<at::Tensor>& tensors) {
    events_.clear();
    for (const auto& t : tensors) {
      const c10::Device device = t.device();
      if (device.is_cpu() || std::any_of(events_.begin(), events_.end(), [&](const auto& e) { return e->device() == device; })) {
        continue;
      }
      events_.push_back(recordedEvent(device));
    }
  }
  // An event recorded already (recordedEvent), shared with other orders; null: none.
  void set(std::shared_ptr<const c10::Event> event) {
    events_.clear();
    if (event) {
      events_.push_back(std::move(event));
    }
  }
  // Makes the current stream of each recorded event's device wait for it.
  void wait() const {
    for (const auto& event : events_) {
      event->block(currentStream(event->device()));
    }
  }

 private:
  std::vector<std::shared_ptr<const c10::Event>> events_;
};

// Tells the caching allocator that `tensors` (those not on the CPU) are used on their device's
// current stream too (Tensor::record_stream): their memory is not given to another stream's
// allocation before the work queued here on them is done, whichever stream made them.
// Called below autograd and ADInplaceOrView (the op's schema says it writes its tensor: it must
// not move the version counter of a tensor that a graph saved).
inline void usedOnCurrentStream(const std::vector<at::Tensor>& tensors) {
  at::AutoDispatchBelowADInplaceOrView belowAutograd;
  for (const auto& t : tensors) {
    if (t.defined() && !t.device().is_cpu()) {
      t.record_stream(currentStream(t.device()));
    }
  }
}

}  // namespace gilfree_rpc
