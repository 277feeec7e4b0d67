#include "engine/peer_watch.h"

#include "compat.h"
#include "engine/context_registry.h"
#include "engine/engine.h"
#include "rpc/transport.h"

#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

namespace gilfree_rpc {

namespace rpc = torch::distributed::rpc;
using torch::distributed::autograd::DistAutogradContainer;

namespace {

// Used when the agent has no RPC timeout.
constexpr std::chrono::milliseconds kPeriodWithoutTimeout{30000};
// How often the thread looks for a running RPC agent (the thread starts when `plugin`
// is imported, usually before RPC starts).
constexpr std::chrono::milliseconds kPeriodWithoutAgent{1000};

struct Watch {
  // Set at process exit: the thread touches nothing (torch's RPC statics are being
  // destroyed) and ends.
  std::atomic<bool> exiting{false};
  std::mutex mu;
  std::condition_variable cv;
  std::unordered_set<int64_t> pinging;  // workers with a ping in flight
  std::unordered_set<int64_t> failed;
  std::deque<int64_t> toRelease;
};

Watch& watch() {
  // Leaky: the thread may run while the process exits.
  static auto* state = new Watch();
  return *state;
}

void releaseWorker(int64_t workerId) {
  Engine::get().abortPassesOf(workerId);
  auto& container = DistAutogradContainer::getInstance();
  int64_t released = 0;
  for (int64_t contextId : ContextRegistry::get().releaseContextsOf(workerId)) {
    try {
      container.retrieveContext(contextId);
    } catch (const std::exception&) {
      continue;  // not on this worker
    }
    container.releaseContextIfPresent(contextId);
    ++released;
  }
  ContextRegistry::get().countReleasedForFailedPeer(released);
}

// Pings every worker that is not failed and has no ping in flight.
void pingAll(const std::shared_ptr<rpc::RpcAgent>& agent, float timeoutSeconds) {
  auto& state = watch();
  const int64_t self = agent->getWorkerInfo().id_;
  for (const auto& info : agent->getWorkerInfos()) {
    const int64_t id = info.id_;
    {
      std::lock_guard<std::mutex> lock(state.mu);
      if (id == self || state.failed.count(id) != 0 || !state.pinging.insert(id).second) {
        continue;
      }
    }
    c10::intrusive_ptr<c10::ivalue::Future> answer;
    try {
      answer = ping(id, timeoutSeconds);
    } catch (const std::exception&) {
      std::lock_guard<std::mutex> lock(state.mu);
      state.pinging.erase(id);
      continue;  // the agent is shutting down: no verdict
    }
    answer->addCallback([id](c10::ivalue::Future& done) {
      auto& state = watch();
      std::lock_guard<std::mutex> lock(state.mu);
      state.pinging.erase(id);
      if (isPeerUnreachable(done) && state.failed.insert(id).second) {
        state.toRelease.push_back(id);
        state.cv.notify_all();
      }
    });
  }
}

void watchLoop() {
  auto& state = watch();
  auto period = kPeriodWithoutAgent;
  while (true) {
    std::vector<int64_t> release;
    {
      std::unique_lock<std::mutex> lock(state.mu);
      state.cv.wait_for(lock, period, [&] { return !state.toRelease.empty() || state.exiting; });
      if (state.exiting) {
        return;
      }
      release.assign(state.toRelease.begin(), state.toRelease.end());
      state.toRelease.clear();
    }
    try {
      for (int64_t worker : release) {
        releaseWorker(worker);
      }
      if (!rpc::RpcAgent::isCurrentRpcAgentSet()) {
        period = kPeriodWithoutAgent;
        continue;
      }
      auto agent = rpc::RpcAgent::getCurrentRpcAgent();
      const auto timeout = agent->getRpcTimeout();
      period = timeout.count() > 0 ? std::max(timeout / 2, std::chrono::milliseconds(50)) : kPeriodWithoutTimeout;
      if (DistAutogradContainer::getInstance().numAutogradContexts() == 0) {
        continue;  // nothing here a failed worker could leave behind
      }
      pingAll(agent, timeout.count() > 0 ? std::chrono::duration<float>(timeout).count() : kAgentTimeout);
    } catch (const std::exception&) {
      // RPC or distributed autograd is not (or no longer) running; try again later.
    }
  }
}

}  // namespace

void startPeerWatch() {
  static std::once_flag started;
  std::call_once(started, [] {
    std::thread(watchLoop).detach();
    // Runs before the destructors of statics constructed earlier (torch's among them).
    std::atexit([] {
      auto& state = watch();
      state.exiting = true;
      std::lock_guard<std::mutex> lock(state.mu);
      state.cv.notify_all();
    });
  });
}

int64_t numFailedPeers() {
  auto& state = watch();
  std::lock_guard<std::mutex> lock(state.mu);
  return static_cast<int64_t>(state.failed.size());
}

}  // namespace gilfree_rpc
