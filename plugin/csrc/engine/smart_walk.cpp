// Smart mode's first phase: which send functions does this backward pass reach?
//
// The calling worker walks its own graph from the roots to the recv functions they
// reach. A recv function's autograd_message_id names the matching send function and
// the worker that holds it (workerIdOf, compat.h), so the walk continues there. Rather than
// one message per hop, each worker is asked once for its reachability table (for every
// send function of the context on that worker, the recv functions reachable from it,
// computed in one visit of its graph) and the caller continues the walk through the
// tables it has. The walk ends because every message id is expanded once; cycles
// between workers simply meet ids already reached. Messages: one table request per
// worker that holds a reached send function (plus, sent up front, one to each worker
// the caller sent tensors to in the forward pass, whose answer may go unused), in as
// many rounds as workers are discovered one behind another.
#include "engine/engine.h"
#include "engine/graph_walk.h"
#include "rpc/transport.h"
#include "rpc/worker_error.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace gilfree_rpc {

std::vector<int64_t> Engine::findReachedSends(
    const ContextPtr& ctx,
    const torch::autograd::edge_list& rootEdges,
    Clock::time_point deadline,
    bool hasDeadline) {
  using c10::ivalue::Future;
  const int64_t self = selfWorkerId();
  const int64_t contextId = ctx->contextId();
  ReachabilityTable local = computeReachability(ctx, rootEdges);

  // worker id -> (send id -> recv ids reachable from it)
  std::unordered_map<int64_t, std::unordered_map<int64_t, std::vector<int64_t>>> tables;
  tables.emplace(self, std::move(local.fromSends));
  std::unordered_map<int64_t, c10::intrusive_ptr<Future>> requests;
  auto ask = [&](int64_t worker) {
    if (tables.count(worker) == 0 && requests.count(worker) == 0) {
      // Each request may take what is left of the pass's time, no more: a later round
      // of the walk must not restart the RPC timeout.
      float timeoutSeconds = kAgentTimeout;
      if (hasDeadline) {
        timeoutSeconds = std::max(0.001f, std::chrono::duration<float>(deadline - Clock::now()).count());
      }
      requests.emplace(worker, requestReachability(worker, contextId, timeoutSeconds));
    }
  };
  // Ask every worker this one sent tensors to right away, in parallel: most graphs
  // reach them all, and asking up front saves a round trip per level of the walk.
  // An answer that turns out not to be needed is simply dropped.
  for (auto worker : ctx->getKnownWorkerIds()) {
    ask(worker);
  }

  std::unordered_set<int64_t> reached;
  std::vector<int64_t> frontier = std::move(local.fromRoots);
  while (!frontier.empty()) {
    std::vector<int64_t> parked;
    std::set<int64_t> needed;
    while (!frontier.empty()) {
      const int64_t id = frontier.back();
      frontier.pop_back();
      if (reached.count(id) != 0) {
        continue;
      }
      const int64_t owner = workerIdOf(id);
      auto table = tables.find(owner);
      if (table == tables.end()) {
        parked.push_back(id);
        needed.insert(owner);
        continue;
      }
      auto sendEntry = table->second.find(id);
      TORCH_CHECK(
          sendEntry != table->second.end(),
          passError(contextId, workerLabel(owner) + " holds no send function with autograd_message_id " + std::to_string(id)));
      reached.insert(id);
      frontier.insert(frontier.end(), sendEntry->second.begin(), sendEntry->second.end());
    }
    for (int64_t worker : needed) {
      ask(worker);
    }
    // This is the calling thread of backward, not an RPC thread: it may wait.
    for (int64_t worker : needed) {
      auto& request = requests.at(worker);
      request->wait();
      if (request->hasError()) {
        TORCH_CHECK(
            false,
            findPassError(request->tryRetrieveErrorMessage())
                .value_or(passError(
                    contextId,
                    request->tryRetrieveErrorMessage(),
                    "asking " + workerLabel(worker) + " for its reachability table failed")));
      }
      tables.emplace(worker, unflattenTable(request->value().toIntVector()));
      requests.erase(worker);
    }
    frontier = std::move(parked);
  }
  std::vector<int64_t> result(reached.begin(), reached.end());
  std::sort(result.begin(), result.end());
  return result;
}

}  // namespace gilfree_rpc
