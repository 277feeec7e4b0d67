// Walks over one worker's part of a distributed autograd graph.
//
// The local graph of a context is not connected: it starts at the backward roots
// (on the worker that calls backward) and at the context's send functions (one per
// tensor-carrying RPC received in the forward pass), and it stops at AccumulateGrad
// leaves and at recv functions (which hand their gradients to another worker).
#pragma once

#include "engine/pass_state.h"

#include <torch/csrc/autograd/edge.h>

#include <unordered_map>
#include <vector>

namespace gilfree_rpc {

// Recv function node -> its autograd_message_id, for every recv of the context.
std::unordered_map<Node*, int64_t> recvMessageIds(const ContextPtr& ctx);

// Fills `pass.dependencies`, `pass.recvMessageIds`, `pass.pendingSends` and
// `pass.leadsToPeer`.
// Starts at `graphRoot` (may be null on a worker that did not call backward) and at
// the send functions the pass expects gradients for: every send function of the
// context in fast mode, the reached ones in smart mode. Must hold `pass.mu`.
void computeDependencies(PassState& pass, Node* graphRoot);

// The smart-mode walk's local step. For every send function of the context on this
// worker (and for `roots`, when given) the autograd_message_ids of the recv
// functions reachable from it through this worker's graph. Visits each node once.
struct ReachabilityTable {
  // recv ids reachable from the roots (empty when no roots were given)
  std::vector<int64_t> fromRoots;
  // send id -> recv ids reachable from that send function
  std::unordered_map<int64_t, std::vector<int64_t>> fromSends;
};
ReachabilityTable computeReachability(
    const ContextPtr& ctx,
    const torch::autograd::edge_list& roots);

// Flat wire form of a ReachabilityTable's `fromSends`:
// [send_id, n, recv_1, ..., recv_n, send_id, n, ...].
std::vector<int64_t> flattenTable(const ReachabilityTable& table);
std::unordered_map<int64_t, std::vector<int64_t>> unflattenTable(const std::vector<int64_t>& flat);

}  // namespace gilfree_rpc
