#include "optim/prepared_steps.h"

#include "rpc/worker_error.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>
#include <unordered_map>

namespace gilfree_rpc {
namespace {

using Clock = std::chrono::steady_clock;

struct Parked {
  Gradients gradients;
  Clock::time_point deadline;
  int64_t leaseMs;
  int64_t owner;
};

struct PreparedTable {
  std::mutex mu;
  std::unordered_map<int64_t, Parked> steps;
  int64_t nextToken = 1;
};

PreparedTable& preparedTable() {
  static auto* t = new PreparedTable();  // leaky: RPC threads may call in while the process exits
  return *t;
}

// Removes the expired entries; returns them, to be freed outside the mutex.
std::vector<Parked> sweepLocked(PreparedTable& t, Clock::time_point now) {
  std::vector<Parked> expired;
  for (auto it = t.steps.begin(); it != t.steps.end();) {
    if (it->second.deadline <= now) {
      expired.push_back(std::move(it->second));
      it = t.steps.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

}  // namespace

int64_t parkStep(Gradients gradients, int64_t leaseMs, int64_t owner) {
  TORCH_CHECK_VALUE(
      leaseMs > 0 && leaseMs <= kMaxLeaseMs, "lease_ms must be positive and at most ", kMaxLeaseMs,
      " (a day), got ", leaseMs);
  auto& t = preparedTable();
  auto now = Clock::now();
  std::vector<Parked> expired;
  std::lock_guard<std::mutex> guard(t.mu);
  expired = sweepLocked(t, now);
  int64_t token = t.nextToken++;
  t.steps.emplace(token, Parked{std::move(gradients), now + std::chrono::milliseconds(leaseMs), leaseMs, owner});
  return token;
}

Gradients takeStep(int64_t token, int64_t owner) {
  auto& t = preparedTable();
  std::optional<Parked> found;
  bool another = false;
  {
    std::lock_guard<std::mutex> guard(t.mu);
    auto it = t.steps.find(token);
    another = it != t.steps.end() && it->second.owner != owner;
    if (it != t.steps.end() && !another) {
      found = std::move(it->second);
      t.steps.erase(it);
    }
  }
  const auto error = [token](const std::string& what) {
    return workerError("in an optimizer step", "the prepared step " + std::to_string(token) + what);
  };
  TORCH_CHECK(
      !another,
      error(" belongs to another local optimizer here; nothing was applied, and it stays prepared for its own"));
  TORCH_CHECK(
      found.has_value(),
      error(" is unknown here (its lease expired, or it was dropped); nothing was applied on this worker"));
  TORCH_CHECK(
      Clock::now() < found->deadline,
      error(" expired (lease " + std::to_string(found->leaseMs) +
            " ms) before its commit arrived; nothing was applied on this worker"));
  return std::move(found->gradients);
}

bool dropStep(int64_t token, int64_t owner) {
  auto& t = preparedTable();
  std::optional<Parked> found;
  std::lock_guard<std::mutex> guard(t.mu);
  auto it = t.steps.find(token);
  if (it == t.steps.end() || it->second.owner != owner) {
    return false;
  }
  found = std::move(it->second);
  t.steps.erase(it);
  return true;
}

int64_t numParkedSteps() {
  auto& t = preparedTable();
  std::vector<Parked> expired;
  std::lock_guard<std::mutex> guard(t.mu);
  expired = sweepLocked(t, Clock::now());
  return static_cast<int64_t>(t.steps.size());
}

}  // namespace gilfree_rpc
