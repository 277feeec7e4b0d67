// The distributed autograd engine: runs a backward pass across workers.
//
// The worker that calls backward (the root) and every worker that receives
// gradients keep one PassState per pass. A pass on a worker ends when every
// send function it expects has received its gradients, every task has run and
// every gradient message it sent has been answered (messages to the root excepted:
// the root always knows the pass, so their answers only matter if they are errors).
// A worker that hears of a pass for the first time answers that first message only
// when its own part has ended ("first contact"); later messages are answered once
// their work has run. The first-contact answers form a tree rooted at the caller,
// so when the root's part ends, every worker's part has ended.
//
// Threads: a message's work runs on the RPC thread that brought it, unless another
// thread is running the pass's tasks on that worker already; the root's own work
// starts on the thread that called backward. No thread ever waits for another
// worker except the one that called backward.
//
// Fast mode expects a gradient for every send function of the context (the
// design note's FAST mode; a forward RPC whose output is unused never gets one and
// the pass ends only at the RPC timeout). Smart mode first finds which send
// functions the pass reaches (smart_walk.cpp) and expects only those.
#pragma once

#include "engine/context_registry.h"
#include "engine/pass_state.h"

#include <torch/csrc/autograd/edge.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gilfree_rpc {

class Engine {
 public:
  static Engine& get();

  // Runs a backward pass from `roots` in context `contextId` and returns when it
  // has ended on every worker. Throws the first worker's error, naming it. `hookArgs`:
  // the arguments of every worker's part-end hook in this pass (part_end.h).
  void backward(
      int64_t contextId,
      const variable_list& roots,
      bool retainGraph,
      Mode mode,
      std::vector<int64_t> hookArgs = {});

  // RPC handler: gradients for this worker's send function `messageId`.
  c10::intrusive_ptr<c10::ivalue::Future> receiveGradients(
      int64_t contextId,
      int64_t passId,
      int64_t messageId,
      variable_list grads,
      bool retainGraph,
      bool smart,
      std::vector<int64_t> reached,
      std::vector<int64_t> hookArgs);

  // RPC handler (smart mode): this worker's flattened reachability table.
  std::vector<int64_t> reachability(int64_t contextId);

  // RPC handler: ends a pass that failed elsewhere. Returns what this worker's part
  // of it was still waiting for (describeLocked), "" if it was not running here.
  std::string abortPass(int64_t contextId, int64_t passId);

  // Ends every pass here that belongs to `workerId` (started by it, or in one of its
  // contexts), as if aborted: that worker failed (peer_watch.cpp).
  void abortPassesOf(int64_t workerId);

  // This worker's accumulated gradients for the context (a new dict, same tensors).
  c10::Dict<at::Tensor, at::Tensor> getGradients(int64_t contextId);

  // Nodes this worker ran in two halves, outputs for peers first (runPeerOutputsFirst).
  int64_t numSplitNodes() const {
    return splitNodes_.load();
  }

 private:
  Engine() = default;

  using Clock = std::chrono::steady_clock;

  // smart_walk.cpp: autograd_message_ids of the send functions reachable from the
  // roots, across all workers. Raises, naming the worker, when one does not answer
  // before `deadline` (unless `timeoutSeconds` is kAgentTimeout: no deadline).
  std::vector<int64_t> findReachedSends(
      const ContextPtr& ctx,
      const torch::autograd::edge_list& rootEdges,
      Clock::time_point deadline,
      bool hasDeadline);

  // Runs queued tasks until the queue is empty. Caller has set pass.draining.
  void drain(const PassPtr& pass);
  // The root's calling thread: runs the first tasks, then waits until the pass ends
  // or `deadline` passes.
  void runAsOwner(const PassPtr& pass, Clock::time_point deadline, bool hasDeadline, std::chrono::milliseconds timeout);
  void execute(const PassPtr& pass, ReadyTask& task);
  // Routes a node's outputs to the next nodes' input buffers; queues ready ones.
  // With `only`, just the outputs marked there (the others go with the node's other half).
  void forwardOutputs(const PassPtr& pass, Node& fn, variable_list&& outputs, const std::vector<bool>* only = nullptr);
  // Splits a node whose outputs go both towards other workers and to local-only
  // work: computes the first now and queues the rest. False if it does not apply.
  bool runPeerOutputsFirst(const PassPtr& pass, ReadyTask& task);
  // Gradients computed by a recv function go to the worker holding its send function.
  void sendToPeer(const PassPtr& pass, int64_t messageId, variable_list&& grads);
  // Queues gradients that arrived for send function `messageId` of `pass`. Returns
  // true when the caller must run the pass's tasks (nobody else is running them).
  bool deliver(const PassPtr& pass, int64_t messageId, variable_list&& grads);

  // The following expect pass.mu to be held.
  // Marks the caller as the pass's drainer; false if another thread is one already.
  bool claimDrain(PassState& pass);
  void maybeFinishLocked(PassState& pass);
  void failLocked(PassState& pass, const std::string& error);
  // What this worker's part of a running pass still waits for: send functions without
  // their gradients, workers that have not answered, the node being run. "" if nothing.
  std::string describeLocked(const PassState& pass);
  // Completes the pass's future and removes it from the registry, once, after it
  // finished. Call without holding pass.mu.
  void settle(const PassPtr& pass);

  // Aborts a failed pass on every other worker and waits for their answers, but no
  // longer than `waitSeconds`. Returns each worker's answer (see abortPass), or
  // nullopt for a worker that did not answer in time or could not be reached.
  std::vector<std::pair<int64_t, std::optional<std::string>>> abortEverywhere(
      int64_t contextId, int64_t passId, double waitSeconds);
  // The root's error for a pass that ran past the RPC timeout, from its own state and
  // the other workers' answers to the abort.
  std::string timeoutReport(
      const PassState& pass,
      std::chrono::milliseconds timeout,
      const std::vector<std::pair<int64_t, std::optional<std::string>>>& answers);

  std::atomic<int64_t> nextPassNumber_{0};
  std::atomic<int64_t> splitNodes_{0};
};

}  // namespace gilfree_rpc
