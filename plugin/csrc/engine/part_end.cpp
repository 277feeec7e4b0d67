#include "engine/part_end.h"

#include "engine/context_registry.h"

#include <mutex>

namespace gilfree_rpc {
namespace {

struct HookSlot {
  std::mutex mu;
  PartEndHook hook;
};

HookSlot& slot() {
  static auto* s = new HookSlot();  // leaky: RPC threads may call in while the process exits
  return *s;
}

}  // namespace

void setPartEndHook(PartEndHook hook) {
  std::lock_guard<std::mutex> lock(slot().mu);
  slot().hook = std::move(hook);
}

PartEndAnswer runPartEndHook(int64_t contextId, const std::vector<int64_t>& hookArgs) {
  PartEndHook hook;
  {
    std::lock_guard<std::mutex> lock(slot().mu);
    hook = slot().hook;
  }
  if (!hook) {
    return {0, 0};
  }
  try {
    return hook(contextId, hookArgs);
  } catch (const std::exception&) {
    return {0, 0};
  }
}

std::optional<PartEndAnswers> partEndAnswers(int64_t contextId) {
  EntryPtr entry = ContextRegistry::get().find(contextId);
  if (!entry) {
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->rootBackwardRunning) {
    return std::nullopt;  // about to change
  }
  return entry->partEndAnswers;
}

}  // namespace gilfree_rpc
