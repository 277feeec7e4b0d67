// This worker's debug counters, one table for every room: each room registers the function
// that reads its own counters (a static DebugCounters at namespace scope in its kernels' file),
// and the one op `_debug_info` (plugin.debug_info()) collects them all. A room's counters
// leave the room only through here, so the engine knows no optimizer and no room knows the
// op. Counter names are unique across rooms (checked when they are collected).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gilfree_rpc {

using Counters = std::vector<std::pair<std::string, int64_t>>;

class DebugCounters {
 public:
  // Registers `read` (called on every collect, from any thread; it must not block for long)
  // for `room`, at static initialization.
  DebugCounters(const char* room, std::function<Counters()> read);
};

// Every registered room's counters, in registration order; raises an internal error when
// two rooms name one counter.
Counters collectDebugCounters();

}  // namespace gilfree_rpc
