#include "debug_counters.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_set>

namespace gilfree_rpc {
namespace {

struct CounterRoom {
  const char* room;
  std::function<Counters()> read;
};

std::mutex& roomsMutex() {
  static auto* mu = new std::mutex();  // leaky: RPC threads may read while the process exits
  return *mu;
}

std::vector<CounterRoom>& rooms() {
  static auto* registered = new std::vector<CounterRoom>();
  return *registered;
}

}  // namespace

DebugCounters::DebugCounters(const char* room, std::function<Counters()> read) {
  std::lock_guard<std::mutex> lock(roomsMutex());
  rooms().push_back(CounterRoom{room, std::move(read)});
}

Counters collectDebugCounters() {
  std::vector<CounterRoom> registered;
  {
    std::lock_guard<std::mutex> lock(roomsMutex());
    registered = rooms();
  }
  Counters all;
  std::unordered_set<std::string> seen;
  for (const auto& entry : registered) {
    for (auto& [name, value] : entry.read()) {
      TORCH_INTERNAL_ASSERT(seen.insert(name).second, "debug counter '", name, "' of room ", entry.room,
                            " is also another room's");
      all.emplace_back(std::move(name), value);
    }
  }
  return all;
}

namespace {

c10::Dict<std::string, int64_t> debugInfoKernel() {
  c10::Dict<std::string, int64_t> info;
  for (const auto& [name, value] : collectDebugCounters()) {
    info.insert(name, value);
  }
  return info;
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_debug_info", TORCH_FN(debugInfoKernel));
}

}  // namespace gilfree_rpc
