#include "engine/graph_walk.h"

#include "engine/context_registry.h"

#include <torch/csrc/distributed/autograd/context/container.h>

#include <algorithm>
#include <deque>
#include <unordered_set>

namespace gilfree_rpc {

std::unordered_map<Node*, int64_t> recvMessageIds(const ContextPtr& ctx) {
  std::unordered_map<Node*, int64_t> ids;
  for (const auto& [messageId, recv] : ctx->recvFunctions()) {
    ids.emplace(recv.get(), messageId);
  }
  return ids;
}

void computeDependencies(PassState& pass, Node* graphRoot) {
  std::lock_guard<std::mutex> graphLock(pass.entry->graphMu);
  const int64_t self = torch::distributed::autograd::DistAutogradContainer::getInstance().getWorkerId();
  pass.recvMessageIds = recvMessageIds(pass.context);

  std::deque<Node*> queue;
  if (graphRoot != nullptr) {
    queue.push_back(graphRoot);
  }
  std::unordered_set<int64_t> reachedHere;
  for (int64_t id : pass.reached) {
    if (workerIdOf(id) == self) {
      reachedHere.insert(id);
    }
  }
  for (const auto& [messageId, send] : pass.context->sendFunctions()) {
    if (pass.mode == Mode::kSmart && reachedHere.count(messageId) == 0) {
      continue;
    }
    // The context owns the send function; keep it alive while we wait for it.
    pass.pendingSends.emplace(messageId, NodePtr(send));
    queue.push_back(send.get());
  }

  std::unordered_set<Node*> seen(queue.begin(), queue.end());
  // next node -> the nodes with an edge to it, for the walk back from the recv functions
  // (not needed on a worker without recv functions: nothing leads to a peer there)
  const bool findPeerPaths = !pass.recvMessageIds.empty();
  std::unordered_map<Node*, std::vector<Node*>> producers;
  while (!queue.empty()) {
    Node* fn = queue.front();
    queue.pop_front();
    for (const auto& edge : fn->next_edges()) {
      Node* next = edge.function.get();
      if (next == nullptr) {
        continue;
      }
      pass.dependencies[next] += 1;
      if (findPeerPaths) {
        producers[next].push_back(fn);
      }
      if (seen.insert(next).second) {
        queue.push_back(next);
      }
    }
  }

  // pass.leadsToPeer: every node of the pass from which a recv function is reachable.
  for (const auto& [recv, messageId] : pass.recvMessageIds) {
    if (seen.count(recv) != 0 && pass.leadsToPeer.insert(recv).second) {
      queue.push_back(recv);
    }
  }
  while (!queue.empty()) {
    Node* fn = queue.front();
    queue.pop_front();
    auto found = producers.find(fn);
    if (found == producers.end()) {
      continue;
    }
    for (Node* producer : found->second) {
      if (pass.leadsToPeer.insert(producer).second) {
        queue.push_back(producer);
      }
    }
  }
}

ReachabilityTable computeReachability(const ContextPtr& ctx, const torch::autograd::edge_list& roots) {
  EntryPtr entry = ContextRegistry::get().entry(ctx);
  std::lock_guard<std::mutex> graphLock(entry->graphMu);
  const auto recvIds = recvMessageIds(ctx);
  // Each node's set of reachable recv ids, computed once (post-order, iterative).
  std::unordered_map<Node*, std::vector<int64_t>> memo;

  auto reach = [&](Node* start) -> const std::vector<int64_t>& {
    struct Frame {
      Node* fn;
      size_t nextEdge;
    };
    std::vector<Frame> stack;
    if (memo.count(start) == 0) {
      stack.push_back({start, 0});
    }
    std::unordered_set<Node*> onStack{start};
    while (!stack.empty()) {
      Frame& frame = stack.back();
      const auto& edges = frame.fn->next_edges();
      bool pushed = false;
      while (frame.nextEdge < edges.size()) {
        Node* child = edges[frame.nextEdge++].function.get();
        if (child != nullptr && memo.count(child) == 0 && onStack.insert(child).second) {
          stack.push_back({child, 0});
          pushed = true;
          break;
        }
      }
      if (pushed) {
        continue;
      }
      Node* fn = frame.fn;
      std::vector<int64_t> ids;
      auto recv = recvIds.find(fn);
      if (recv != recvIds.end()) {
        ids.push_back(recv->second);
      }
      for (const auto& edge : fn->next_edges()) {
        auto it = memo.find(edge.function.get());
        if (it != memo.end()) {
          ids.insert(ids.end(), it->second.begin(), it->second.end());
        }
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      memo.emplace(fn, std::move(ids));
      stack.pop_back();
    }
    return memo.at(start);
  };

  ReachabilityTable table;
  for (const auto& edge : roots) {
    if (edge.function) {
      const auto& ids = reach(edge.function.get());
      table.fromRoots.insert(table.fromRoots.end(), ids.begin(), ids.end());
    }
  }
  std::sort(table.fromRoots.begin(), table.fromRoots.end());
  table.fromRoots.erase(std::unique(table.fromRoots.begin(), table.fromRoots.end()), table.fromRoots.end());
  for (const auto& [messageId, send] : ctx->sendFunctions()) {
    table.fromSends.emplace(messageId, reach(send.get()));
  }
  return table;
}

std::vector<int64_t> flattenTable(const ReachabilityTable& table) {
  std::vector<int64_t> flat;
  for (const auto& [sendId, recvs] : table.fromSends) {
    flat.push_back(sendId);
    flat.push_back(static_cast<int64_t>(recvs.size()));
    flat.insert(flat.end(), recvs.begin(), recvs.end());
  }
  return flat;
}

std::unordered_map<int64_t, std::vector<int64_t>> unflattenTable(const std::vector<int64_t>& flat) {
  std::unordered_map<int64_t, std::vector<int64_t>> table;
  size_t i = 0;
  while (i + 1 < flat.size()) {
    const int64_t sendId = flat[i];
    const auto n = static_cast<size_t>(flat[i + 1]);
    TORCH_CHECK(i + 2 + n <= flat.size(), "malformed reachability table");
    table.emplace(sendId, std::vector<int64_t>(flat.begin() + i + 2, flat.begin() + i + 2 + n));
    i += 2 + n;
  }
  return table;
}

}  // namespace gilfree_rpc
