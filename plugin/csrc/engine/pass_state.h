// The state of one distributed backward pass, as one worker sees it.
//
// A pass is identified by (context_id, pass_id); pass ids are made by the worker
// that calls backward (its worker id in bits 48 and up, like autograd message ids:
// workerScopedId in compat.h),
// and travel with every gradient message, so passes of the same context never mix.
#pragma once

#include <ATen/ThreadLocalState.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/input_buffer.h>
#include <torch/csrc/distributed/autograd/context/context.h>

#include "compat.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gilfree_rpc {

using torch::autograd::InputBuffer;
using torch::autograd::Node;
using torch::autograd::variable_list;
using ContextPtr = torch::distributed::autograd::ContextPtr;

enum class Mode { kFast, kSmart };

// A node ready to run with its accumulated inputs. Tasks on the way to another
// worker run first (see PassState::leadsToPeer); among the others, higher sequence
// numbers run first, as in torch's CPU ready queue (later forward ops first).
struct ReadyTask {
  NodePtr fn;
  InputBuffer inputs;
  // For a send function: the gradients that arrived over RPC (its outputs).
  // For the second half of a split node: its inputs, after its pre-hooks ran.
  variable_list arrived;
  bool isSend = false;
  // The second half of a node whose outputs for peers were computed first
  // (Engine::execute): compute the outputs marked here.
  bool restHalf = false;
  std::vector<bool> outputMask;
  // Set by pushReady.
  bool urgent = false;
};

struct ContextEntry;  // context_registry.h

struct PassState {
  PassState(int64_t contextId, int64_t passId, bool isRoot, Mode mode, bool keepGraph)
      : contextId(contextId), passId(passId), isRoot(isRoot), mode(mode), keepGraph(keepGraph) {}

  const int64_t contextId;
  const int64_t passId;
  const bool isRoot;
  const Mode mode;
  const bool keepGraph;

  // Holds torch's context (and through it the send/recv functions) while the pass runs.
  ContextPtr context;
  // Where this worker keeps the context's leaf gradients.
  std::shared_ptr<ContextEntry> entry;
  // On the worker that called backward: that thread's thread-local state (the
  // profiler's callbacks among it), set on every thread that runs this pass's tasks,
  // as torch's engine does with GraphTask::thread_locals_. So a profiler started around
  // backward records the nodes that run on RPC threads too. Unset on other workers.
  std::optional<at::ThreadLocalState> threadLocals;

  std::mutex mu;
  // The thread that called backward waits on this for the end of the pass.
  std::condition_variable cv;

  // --- graph bookkeeping, filled by computeDependencies (graph_walk.cpp) ---
  // Number of inputs each node still waits for.
  std::unordered_map<Node*, int> dependencies;
  // Inputs gathered so far for nodes that are not ready yet.
  std::unordered_map<Node*, InputBuffer> notReady;
  // Recv functions of the context on this worker -> their autograd_message_id.
  std::unordered_map<Node*, int64_t> recvMessageIds;
  // Nodes of the pass from which one of this worker's recv functions is reachable
  // (recv functions included): their work is on the way to another worker, which
  // waits for it, so they run before work that only ends in local leaves.
  std::unordered_set<Node*> leadsToPeer;
  // Send functions of this worker that still wait for their gradients.
  std::unordered_map<int64_t, NodePtr> pendingSends;
  // Smart mode: every reached send function of the pass (all workers), forwarded
  // with each gradient message so that peers know theirs.
  std::vector<int64_t> reached;
  // The arguments of the part-end hook (part_end.h), forwarded with each gradient message.
  std::vector<int64_t> hookArgs;

  // --- execution ---
  // A max-heap on the node's sequence number (see pushReady / popReady).
  std::vector<std::unique_ptr<ReadyTask>> ready;
  // Tasks queued or running.
  int64_t outstandingTasks = 0;
  // Gradient messages sent and not yet answered.
  int64_t pendingRpcs = 0;
  // The same, per destination worker (id, count), to name the workers a stuck
  // pass waits for (Engine::describeLocked).
  std::vector<std::pair<int64_t, int64_t>> pendingRpcsTo;
  // The node a thread is running for this pass, if any.
  NodePtr running;
  // Every gradient this pass handed to a leaf here, held until the pass ends here, as
  // torch's engine holds them (GraphTask::captured_vars_): a tensor that one backward
  // function returns for two leaves is then referenced by the other leaf's input or by
  // this list when each leaf stores it, so both store a copy, as with torch
  // (Engine::execute; torch's test_no_grad_copy).
  variable_list leafGradients;
  // A thread is executing this pass's tasks (at most one at a time).
  bool draining = false;
  // The thread that called backward waits in runAsOwner for the pass to end.
  bool ownerWaiting = false;

  // --- outcome ---
  bool finished = false;
  // The completion future was settled and the pass left the registry.
  bool settled = false;
  std::string error;  // empty on success
  // The root: the pass ended because it ran past the RPC timeout (its own deadline,
  // or a message that timed out); `stateAtTimeout` says what it still waited for.
  bool timedOut = false;
  std::string stateAtTimeout;
  // Part-end answers (part_end.h) of the workers this one was the first to contact (and
  // of those they were first to contact...), flattened as [worker, word0, word1, ...],
  // gathered from the answers to its messages.
  std::vector<int64_t> partEndAnswers;
  // Completed when the pass ends on this worker, with this worker's part-end answer
  // followed by those it gathered, or set with the error. On a non-root worker it answers the pass's first gradient message.
  c10::intrusive_ptr<c10::ivalue::Future> completion =
      c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofInts());

  void countRpcTo(int64_t worker, int64_t delta) {
    for (auto& [id, count] : pendingRpcsTo) {
      if (id == worker) {
        count += delta;
        return;
      }
    }
    pendingRpcsTo.emplace_back(worker, delta);
  }

  bool quiescent() const {
    return outstandingTasks == 0 && pendingRpcs == 0 && pendingSends.empty();
  }

  void pushReady(std::unique_ptr<ReadyTask> task) {
    task->urgent = !task->restHalf && leadsToPeer.count(task->fn.get()) > 0;
    ready.push_back(std::move(task));
    std::push_heap(ready.begin(), ready.end(), laterFirst);
    ++outstandingTasks;
  }

  std::unique_ptr<ReadyTask> popReady() {
    std::pop_heap(ready.begin(), ready.end(), laterFirst);
    auto task = std::move(ready.back());
    ready.pop_back();
    return task;
  }

 private:
  // The heap's "less": true when `b` runs before `a`.
  static bool laterFirst(const std::unique_ptr<ReadyTask>& a, const std::unique_ptr<ReadyTask>& b) {
    if (a->urgent != b->urgent) {
      return b->urgent;
    }
    return a->fn->sequence_nr() < b->fn->sequence_nr();
  }
};

using PassPtr = std::shared_ptr<PassState>;

}  // namespace gilfree_rpc
