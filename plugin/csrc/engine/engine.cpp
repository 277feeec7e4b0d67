#include "engine/engine.h"

#include "engine/gradients.h"
#include "engine/graph_walk.h"
#include "engine/node_exec.h"
#include "engine/part_end.h"
#include "engine/python_errors.h"
#include "rpc/transport.h"
#include "rpc/worker_error.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>
#include <c10/core/StreamGuard.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

namespace gilfree_rpc {

using torch::autograd::GraphRoot;
using torch::distributed::autograd::DistAutogradContainer;
using c10::ivalue::Future;

namespace {

// How long a failed pass's root waits for the other workers to confirm its abort
// when the agent has no RPC timeout.
constexpr double kAbortWaitWithoutTimeoutS = 10.0;

constexpr const char* kFastModeHint =
    "Fast mode expects a gradient for every send function of the context; "
    "if some RPC outputs do not reach the loss, use mode=\"smart\"";

// Torch's context for `contextId`; an unknown id raises torch's message, naming
// this worker.
ContextPtr retrieveContext(int64_t contextId) {
  try {
    return DistAutogradContainer::getInstance().retrieveContext(contextId);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, passError(contextId, describeException(e, std::nullopt).message));
  }
}

// The answer to a gradient message that is not the pass's first here: no findings.
c10::intrusive_ptr<Future> completedFuture() {
  auto done = c10::make_intrusive<Future>(c10::ListType::ofInts());
  done->markCompleted(c10::IValue(c10::List<int64_t>()));
  return done;
}

// Clears the root-side "backward running" flag of a context when backward returns.
struct RunningFlagGuard {
  EntryPtr entry;
  ~RunningFlagGuard() {
    std::lock_guard<std::mutex> lock(entry->mu);
    entry->rootBackwardRunning = false;
  }
};

}  // namespace

Engine& Engine::get() {
  // Leaky singleton: RPC threads may still call in while the process exits.
  static auto* engine = new Engine();
  return *engine;
}

// ---------------------------------------------------------------------------
// The worker that calls backward
// ---------------------------------------------------------------------------

void Engine::backward(
    int64_t contextId,
    const variable_list& roots,
    bool retainGraph,
    Mode mode,
    std::vector<int64_t> hookArgs) {
  // The profiler event around the whole pass, named as the one torch's
  // dist_autograd.backward records, so that a profile reads the same with either engine.
  RECORD_FUNCTION("torch::distributed::autograd::backward", std::vector<c10::IValue>());

  // The whole pass, smart walk included, gets one RPC timeout from here.
  namespace rpc = torch::distributed::rpc;
  const auto timeout = rpc::RpcAgent::isCurrentRpcAgentSet() ? rpc::RpcAgent::getCurrentRpcAgent()->getRpcTimeout()
                                                              : std::chrono::milliseconds(0);
  const bool hasDeadline = timeout.count() > 0;
  const auto deadline = Clock::now() + timeout;
  ContextPtr ctx = retrieveContext(contextId);

  TORCH_CHECK(!roots.empty(), "No tensors provided for gradient computation.");
  torch::autograd::edge_list rootEdges;
  variable_list rootGrads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const auto& root = roots[i];
    TORCH_CHECK(root.defined(), "roots[", i, "] is an undefined tensor");
    TORCH_CHECK(root.requires_grad(), "requires_grad not set on root (roots[", i, "])");
    TORCH_CHECK(
        root.numel() == 1, "roots[", i, "] (shape ", root.sizes(), ") is not a scalar, all roots need to be scalar");
    TORCH_CHECK(root.grad_fn(), "roots[", i, "] does not have a valid gradient function.");
    rootEdges.push_back(gradientEdge(root));
    rootGrads.push_back(at::ones_like(root, LEGACY_CONTIGUOUS_MEMORY_FORMAT));
  }
  validateOutputs(rootEdges, rootGrads, [](const std::string& msg) { return msg; });

  EntryPtr entry = ContextRegistry::get().entry(ctx);
  {
    std::lock_guard<std::mutex> lock(entry->mu);
    TORCH_CHECK(
        !entry->rootBackwardRunning,
        "a backward pass of context ", contextId, " is already running on ", thisWorkerLabel(),
        "; wait for it to finish before starting another in the same context");
    entry->rootBackwardRunning = true;
    entry->partEndAnswers.clear();  // filled again only if this pass ends everywhere
  }
  RunningFlagGuard runningGuard{entry};

  const int64_t passId = workerScopedId(selfWorkerId(), nextPassNumber_.fetch_add(1));
  {
    std::lock_guard<std::mutex> lock(entry->mu);
    entry->commitEarlierPasses(passId);
  }
  auto pass = std::make_shared<PassState>(contextId, passId, /*isRoot=*/true, mode, retainGraph);
  pass->context = ctx;
  pass->entry = entry;
  pass->threadLocals.emplace();
  pass->hookArgs = std::move(hookArgs);
  if (mode == Mode::kSmart) {
    pass->reached = findReachedSends(ctx, rootEdges, deadline, hasDeadline);
  }

  NodePtr graphRoot = makeNode<GraphRoot>(rootEdges, rootGrads);
  ContextRegistry::get().insertPass(pass);
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    computeDependencies(*pass, graphRoot.get());
    auto task = std::make_unique<ReadyTask>(ReadyTask{graphRoot, InputBuffer(0), {}, false});
    pass->pushReady(std::move(task));
  }
  runAsOwner(pass, deadline, hasDeadline, timeout);
  settle(pass);
  if (!pass->error.empty()) {
    // Every other worker drops the pass. The answers are awaited a tenth of the RPC
    // timeout at most (a stopped or dead worker never answers), so that backward raises
    // within 1.1 times the timeout; a worker that has not answered by then is named.
    const double waitSeconds =
        hasDeadline ? 0.1 * std::chrono::duration<double>(timeout).count() : kAbortWaitWithoutTimeoutS;
    auto answers = abortEverywhere(contextId, passId, waitSeconds);
    TORCH_CHECK(false, pass->timedOut ? timeoutReport(*pass, timeout, answers) : pass->error);
  }
  std::vector<int64_t> answers;
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    answers = std::move(pass->partEndAnswers);
  }
  // The pass ended everywhere (this worker's part ends last), so nothing can abort it
  // now: add its gradients to the context's here, as torch's engine does at once; run the
  // part-end hook here; and keep every reached worker's answer (part_end.h).
  {
    std::lock_guard<std::mutex> lock(entry->mu);
    entry->commitPass(passId);
  }
  const auto own = runPartEndHook(contextId, pass->hookArgs);
  answers.insert(answers.end(), {selfWorkerId(), own[0], own[1]});
  std::lock_guard<std::mutex> lock(entry->mu);
  for (size_t i = 0; i + 2 < answers.size(); i += 3) {
    entry->partEndAnswers[answers[i]].push_back({answers[i + 1], answers[i + 2]});
  }
}

std::string Engine::timeoutReport(
    const PassState& pass,
    std::chrono::milliseconds timeout,
    const std::vector<std::pair<int64_t, std::optional<std::string>>>& answers) {
  std::ostringstream what;
  what << "the pass did not finish within the RPC timeout (" << std::chrono::duration<double>(timeout).count()
       << " s).";
  bool allAnswered = true;
  for (const auto& [worker, answer] : answers) {
    if (!answer) {
      allAnswered = false;
      what << " No answer from " << workerLabel(worker) << " (stopped, dead, or all its RPC threads busy).";
    }
  }
  if (!pass.stateAtTimeout.empty()) {
    what << " " << thisWorkerLabel() << " " << pass.stateAtTimeout << ".";
  }
  for (const auto& [worker, answer] : answers) {
    if (answer && !answer->empty()) {
      what << " " << workerLabel(worker) << " " << *answer << ".";
    }
  }
  if (allAnswered && pass.mode == Mode::kFast) {
    what << " " << kFastModeHint;
  }
  return passError(pass.contextId, what.str());
}

std::string Engine::describeLocked(const PassState& pass) {
  std::vector<std::string> parts;
  if (!pass.pendingSends.empty()) {
    std::vector<int64_t> ids;
    for (const auto& [id, fn] : pass.pendingSends) {
      ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    std::ostringstream text;
    text << "waited for the gradients of its send functions (autograd_message_id)";
    for (auto id : ids) {
      text << " " << id;
    }
    parts.push_back(text.str());
  }
  for (const auto& [worker, count] : pass.pendingRpcsTo) {
    if (count > 0) {
      parts.push_back("waited for an answer from " + workerLabel(worker));
    }
  }
  if (pass.running) {
    parts.push_back("was running " + pass.running->name());
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    text += (i == 0 ? "" : "; ") + parts[i];
  }
  return text;
}

void Engine::runAsOwner(
    const PassPtr& pass,
    Clock::time_point deadline,
    bool hasDeadline,
    std::chrono::milliseconds timeout) {

  std::unique_lock<std::mutex> lock(pass->mu);
  while (!pass->finished) {
    if (!pass->ready.empty() && !pass->draining) {
      // The root's first tasks (and any left when this thread gets here).
      pass->draining = true;
      lock.unlock();
      drain(pass);
      lock.lock();
      continue;
    }
    // Later work arrives by RPC and runs on the threads that bring it; wait for the end.
    pass->ownerWaiting = true;
    bool timedOut = false;
    if (hasDeadline) {
      timedOut = pass->cv.wait_until(lock, deadline) == std::cv_status::timeout;
    } else {
      pass->cv.wait(lock);
    }
    pass->ownerWaiting = false;
    if (timedOut && !pass->finished) {
      pass->timedOut = true;
      pass->stateAtTimeout = describeLocked(*pass);
      failLocked(*pass, passError(pass->contextId, "the pass did not finish within the RPC timeout"));
    }
  }
}

std::vector<std::pair<int64_t, std::optional<std::string>>> Engine::abortEverywhere(
    int64_t contextId,
    int64_t passId,
    double waitSeconds) {
  const int64_t self = selfWorkerId();
  std::vector<std::pair<int64_t, c10::intrusive_ptr<Future>>> acks;
  std::vector<std::pair<int64_t, std::optional<std::string>>> answers;
  for (int64_t worker : allWorkerIds()) {
    if (worker == self) {
      continue;
    }
    try {
      // The agent ends the request with a timeout error after waitSeconds.
      acks.emplace_back(worker, requestAbort(worker, contextId, passId, static_cast<float>(waitSeconds)));
    } catch (const std::exception&) {
      answers.emplace_back(worker, std::nullopt);  // the message could not even be sent
    }
  }
  // Wait for the answers, so that once backward has raised, no worker that answers
  // still holds the failed pass; but not past waitSeconds (plus a margin for the
  // agent's timeout to fire), whatever the agent does.
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(waitSeconds * 1.05 + 0.05));
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
  };
  auto waiter = std::make_shared<Waiter>();
  for (auto& [worker, ack] : acks) {
    ack->addCallback([waiter](Future&) {
      std::lock_guard<std::mutex> lock(waiter->mu);
      ++waiter->done;
      waiter->cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(waiter->mu);
    waiter->cv.wait_until(lock, until, [&] { return waiter->done == acks.size(); });
  }
  for (auto& [worker, ack] : acks) {
    if (ack->completed() && !ack->hasError()) {
      answers.emplace_back(worker, ack->value().toStringRef());
    } else {
      answers.emplace_back(worker, std::nullopt);
    }
  }
  std::sort(answers.begin(), answers.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return answers;
}

// ---------------------------------------------------------------------------
// RPC handlers
// ---------------------------------------------------------------------------

c10::intrusive_ptr<Future> Engine::receiveGradients(
    int64_t contextId,
    int64_t passId,
    int64_t messageId,
    variable_list grads,
    bool retainGraph,
    bool smart,
    std::vector<int64_t> reached,
    std::vector<int64_t> hookArgs) {
  // Gradients come from another worker: each must be dense (strided) or a sparse COO tensor
  // whose indices lie within its size (torch's unpickler builds sparse tensors without
  // checking that; validate_outputs compares sizes only), before anything uses them.
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& grad = grads[i];
    if (!grad.defined()) {
      continue;
    }
    TORCH_CHECK(
        (grad.layout() == c10::kStrided || grad.layout() == c10::kSparse) && !grad.is_nested(),
        passError(contextId, "gradient " + std::to_string(i) + " of autograd_message_id " + std::to_string(messageId) +
                                 " is neither dense nor sparse COO; refused"));
    if (grad.is_sparse()) {
      try {
        at::_validate_sparse_coo_tensor_args(grad._indices(), grad._values(), grad.sizes(), grad.is_coalesced());
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, passError(contextId, "gradient " + std::to_string(i) + " of autograd_message_id " +
                                                    std::to_string(messageId) + " is not a valid sparse tensor (" +
                                                    e.what_without_backtrace() + "); refused"));
      }
    }
  }
  ContextPtr ctx = retrieveContext(contextId);
  EntryPtr entry = ContextRegistry::get().entry(ctx);
  {
    std::lock_guard<std::mutex> lock(entry->mu);
    TORCH_CHECK(
        entry->abortedPasses.count(passId) == 0,
        passError(contextId, "gradients arrived for a pass that was aborted"));
  }

  PassPtr pass = ContextRegistry::get().findPass(contextId, passId);
  bool firstContact = false;
  if (!pass) {
    auto fresh = std::make_shared<PassState>(
        contextId, passId, /*isRoot=*/false, smart ? Mode::kSmart : Mode::kFast, retainGraph);
    fresh->context = ctx;
    fresh->entry = entry;
    fresh->reached = std::move(reached);
    fresh->hookArgs = std::move(hookArgs);
    // Hold the new pass's lock while it is registered and its dependencies are
    // computed: a concurrent message for the same pass waits for them in deliver().
    std::unique_lock<std::mutex> lock(fresh->mu);
    pass = ContextRegistry::get().insertPass(fresh);
    if (pass == fresh) {
      firstContact = true;
      {
        std::lock_guard<std::mutex> entryLock(entry->mu);
        entry->commitEarlierPasses(passId);
      }
      computeDependencies(*fresh, nullptr);
    }
  }
  auto answer = firstContact ? pass->completion : completedFuture();
  if (deliver(pass, messageId, std::move(grads))) {
    // The work runs right here, on the RPC thread that brought it, unless another
    // thread is running this pass's tasks already (then it picks them up): no thread
    // hand-over on the latency path, and nothing in it waits for another worker
    // (gradients for peers go out as asynchronous RPCs, answered in callbacks). The
    // price: this message is answered after the work, which can delay the end of the
    // sender's part of the pass by as much.
    drain(pass);
  }
  settle(pass);
  return answer;
}

std::vector<int64_t> Engine::reachability(int64_t contextId) {
  // A worker that a caller knows in a context but that never made it here (a native call that
  // failed before it recorded anything: rpc/recorded_call.h) holds no send function of it, which
  // is what an empty table says. A send function the walk needs here is then reported missing.
  ContextPtr ctx;
  try {
    ctx = DistAutogradContainer::getInstance().retrieveContext(contextId);
  } catch (const c10::Error&) {
    return {};
  }
  return flattenTable(computeReachability(ctx, {}));
}

std::string Engine::abortPass(int64_t contextId, int64_t passId) {
  if (EntryPtr entry = ContextRegistry::get().find(contextId)) {
    // Also when this worker's part of the pass ended well: its gradients go too.
    std::lock_guard<std::mutex> lock(entry->mu);
    entry->abortedPasses.insert(passId);
    entry->discardPass(passId);
  }
  PassPtr pass = ContextRegistry::get().findPass(contextId, passId);
  if (!pass) {
    return "";
  }
  std::string state;
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    state = describeLocked(*pass);
    failLocked(*pass, passError(contextId, "aborted because the pass failed on another worker"));
  }
  settle(pass);
  return state;
}

void Engine::abortPassesOf(int64_t workerId) {
  for (const auto& pass : ContextRegistry::get().passesOf(workerId)) {
    {
      std::lock_guard<std::mutex> lock(pass->mu);
      failLocked(
          *pass,
          passError(pass->contextId, "aborted because " + workerLabel(workerId) + " failed"));
    }
    settle(pass);
  }
}

c10::Dict<at::Tensor, at::Tensor> Engine::getGradients(int64_t contextId) {
  ContextPtr ctx = retrieveContext(contextId);  // raises for an unknown id
  return contextGradients(ctx, ContextRegistry::get().find(contextId)).copy();
}

// ---------------------------------------------------------------------------
// Execution
// ---------------------------------------------------------------------------

bool Engine::claimDrain(PassState& pass) {
  if (pass.draining) {
    return false;  // the running drainer picks the task up
  }
  pass.draining = true;
  return true;
}

void Engine::drain(const PassPtr& pass) {
  // Tasks may run on an RPC thread, which torch did not set up: give it the process's
  // intra-op thread count (torch.set_num_threads), as torch does for its own threads.
  static thread_local bool threadReady = false;
  if (!threadReady) {
    at::init_num_threads();
    threadReady = true;
  }
  while (true) {
    std::unique_ptr<ReadyTask> task;
    {
      std::lock_guard<std::mutex> lock(pass->mu);
      if (pass->finished || pass->ready.empty()) {
        // Tasks are queued under this lock by threads that see `draining` set, so none
        // is left behind: whoever queues the next one drains it.
        pass->draining = false;
        break;
      }
      task = pass->popReady();
      pass->running = task->fn;
    }
    std::string error;
    try {
      std::optional<at::ThreadLocalStateGuard> threadLocals;
      if (pass->threadLocals.has_value()) {
        threadLocals.emplace(*pass->threadLocals);
      }
      if (hasHooks(*task->fn)) {
        keepPythonErrorsOnThisThread();  // a Python hook's error keeps its message
      }
      execute(pass, *task);
    } catch (const std::exception& e) {
      // torch's contract: "Error on Node <n>: " and the exception's own message; then
      // what raised it, where. On the worker that called backward, a Python exception
      // is kept for backward to chain (python_errors.h).
      const RaisedError raised =
          describeException(e, pass->isRoot ? std::optional<int64_t>(pass->contextId) : std::nullopt);
      error = passError(
          pass->contextId,
          raised.message,
          raised.type + " raised" + (raised.raisedBy.empty() ? "" : " by " + raised.raisedBy) + " while running " +
              task->fn->name());
    }
    task.reset();  // drop the task's tensors before the pass may end
    std::lock_guard<std::mutex> lock(pass->mu);
    pass->running.reset();
    --pass->outstandingTasks;
    if (!error.empty()) {
      failLocked(*pass, error);
    } else {
      maybeFinishLocked(*pass);
    }
  }
  if (!pass->isRoot) {
    settle(pass);
  }
}

void Engine::execute(const PassPtr& pass, ReadyTask& task) {
  // The backward pass itself is not recorded (create_graph is not supported).
  at::AutoGradMode gradMode(false);
  Node& fn = *task.fn;

  if (task.isSend) {
    NodeCallRecord record(fn, task.arrived);
    validateGradients(fn, task.arrived);
    forwardOutputs(pass, fn, std::move(task.arrived));
    return;
  }

  if (task.restHalf) {
    c10::OptionalStreamGuard streamGuard{fn.stream()};
    variable_list outputs;
    {
      std::lock_guard<std::mutex> graphLock(pass->entry->graphMu);
      outputs = callFunctionMasked(fn, std::move(task.arrived), task.outputMask, !pass->keepGraph);
    }
    forwardOutputs(pass, fn, std::move(outputs), &task.outputMask);
    return;
  }

  auto recv = pass->recvMessageIds.find(&fn);
  if (recv != pass->recvMessageIds.end()) {
    // The gradients of tensors that came in by RPC go back to their sender. Torch's
    // RecvRpcBackward::apply would send them through torch's own engine, so the
    // node is not called: its hooks run here and the gradients go out through ours.
    variable_list grads = callPreHooks(fn, takeInputs(std::move(task.inputs)));
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) {
        grads[i] = fn.input_metadata(i).zeros_like();
      }
    }
    NodeCallRecord record(fn, grads);
    sendToPeer(pass, recv->second, std::move(grads));
    return;
  }

  if (const at::Tensor* leaf = accumulatedLeaf(fn)) {
    accumulateLeaf(fn, std::move(task.inputs), [&](at::Tensor&& grad, size_t expectedRefs) {
      {
        std::lock_guard<std::mutex> lock(pass->mu);
        pass->leafGradients.push_back(grad);  // one more reference, counted below
      }
      ContextRegistry::accumulate(*pass->entry, pass->passId, *leaf, std::move(grad), expectedRefs + 1);
    });
    return;
  }

  if (runPeerOutputsFirst(pass, task)) {
    return;
  }
  c10::OptionalStreamGuard streamGuard{fn.stream()};
  variable_list outputs = callFunction(fn, std::move(task.inputs), pass->keepGraph);
  forwardOutputs(pass, fn, std::move(outputs));
}

bool Engine::runPeerOutputsFirst(const PassPtr& pass, ReadyTask& task) {
  // A worker downstream waits for the gradients that go towards a recv function;
  // the outputs that only end in this worker's leaves can wait. For a node with
  // both (a Linear whose input came by RPC: the input's gradient goes back, the
  // weight's stays), computing the first, sending it, and only then the rest lets
  // the next worker start while this one finishes. Walks of the graph wait while
  // edges are hidden (ContextEntry::graphMu). Running the node itself is not locked:
  // only when the graph is not kept, so that no other pass can run it meanwhile (a
  // second pass through its saved tensors needs retain_graph=True on this one).
  Node& fn = *task.fn;
  if (pass->keepGraph || pass->leadsToPeer.count(&fn) == 0 || !canComputeOutputsSeparately(fn)) {
    return false;
  }
  const auto& edges = fn.next_edges();
  std::vector<bool> toPeers(edges.size(), false), rest(edges.size(), false);
  bool anyToPeers = false, anyRest = false;
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!edges[i].is_valid()) {
      continue;
    }
    if (pass->leadsToPeer.count(edges[i].function.get()) != 0) {
      toPeers[i] = anyToPeers = true;
    } else {
      rest[i] = anyRest = true;
    }
  }
  if (!anyToPeers || !anyRest) {
    return false;
  }
  splitNodes_.fetch_add(1);
  variable_list inputs = callPreHooks(fn, takeInputs(std::move(task.inputs)));
  {
    c10::OptionalStreamGuard streamGuard{fn.stream()};
    variable_list outputs;
    {
      std::lock_guard<std::mutex> graphLock(pass->entry->graphMu);
      outputs = callFunctionMasked(fn, inputs, toPeers, /*releaseVariables=*/false);
    }
    forwardOutputs(pass, fn, std::move(outputs), &toPeers);
  }
  auto restTask = std::make_unique<ReadyTask>(ReadyTask{task.fn, InputBuffer(0), std::move(inputs), false});
  restTask->restHalf = true;
  restTask->outputMask = std::move(rest);
  std::lock_guard<std::mutex> lock(pass->mu);
  if (!pass->finished) {
    pass->pushReady(std::move(restTask));
  }
  return true;
}

void Engine::forwardOutputs(const PassPtr& pass, Node& fn, variable_list&& outputs, const std::vector<bool>* only) {
  const auto producerStream = fn.stream();
  std::lock_guard<std::mutex> lock(pass->mu);
  if (pass->finished) {
    return;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto& next = fn.next_edge(i);
    if (!next.is_valid() || (only != nullptr && !(*only)[i])) {
      continue;
    }
    Node* nextFn = next.function.get();
    auto dep = pass->dependencies.find(nextFn);
    TORCH_CHECK(dep != pass->dependencies.end(), "dependency not found for ", nextFn->name());
    const bool isReady = --dep->second == 0;
    if (isReady) {
      pass->dependencies.erase(dep);
    }
    auto buffered = pass->notReady.find(nextFn);
    if (buffered == pass->notReady.end()) {
      buffered = pass->notReady.emplace(nextFn, InputBuffer(nextFn->num_inputs())).first;
    }
    addInput(buffered->second, next.input_nr, std::move(outputs[i]), producerStream, nextFn);
    if (isReady) {
      auto task = std::make_unique<ReadyTask>(ReadyTask{next.function, std::move(buffered->second), {}, false});
      pass->notReady.erase(buffered);
      pass->pushReady(std::move(task));
    }
  }
}

void Engine::sendToPeer(const PassPtr& pass, int64_t messageId, variable_list&& grads) {
  const int64_t dst = workerIdOf(messageId);
  if (dst == selfWorkerId()) {
    // An RPC this worker made to itself: its send function is in this same pass,
    // whose drainer is the caller.
    deliver(pass, messageId, std::move(grads));
    return;
  }
  // The worker that called backward (its id is in the pass id) always knows the pass,
  // so a message to it is never its first contact and its answer carries nothing this
  // worker's part must wait for: only an error, which fails the pass. Other answers are
  // awaited (see the first-contact rule in engine.h).
  const bool awaitAnswer = dst != workerIdOf(pass->passId);
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    if (pass->finished) {
      return;
    }
    if (awaitAnswer) {
      ++pass->pendingRpcs;
      pass->countRpcTo(dst, 1);
    }
  }
  c10::intrusive_ptr<Future> answer;
  try {
    answer = sendGradients(
        pass->contextId, pass->passId, messageId, std::move(grads), pass->keepGraph, pass->mode == Mode::kSmart,
        pass->reached, pass->hookArgs);
  } catch (...) {
    std::lock_guard<std::mutex> lock(pass->mu);
    if (awaitAnswer) {
      --pass->pendingRpcs;
      pass->countRpcTo(dst, -1);
    }
    throw;
  }
  // The agent writes the message from its own I/O thread, which the kernel tends to
  // wake on this core; this thread may go on computing (the rest of a split node,
  // see runPeerOutputsFirst) and would hold the message back for milliseconds.
  // Give the core up once, so that the message leaves now.
  std::this_thread::yield();
  answer->addCallback([this, pass, dst, awaitAnswer](Future& done) {
    {
      std::lock_guard<std::mutex> lock(pass->mu);
      if (done.hasError()) {
        // The peer's own pass error, relayed as it is; else the transport's (or the RPC
        // timeout's) text, after torch's prefix.
        const std::string text = done.tryRetrieveErrorMessage();
        std::string error = findPassError(text).value_or(
            passError(pass->contextId, text, "sending gradients to " + workerLabel(dst) + " failed"));
        if (!pass->finished && isRpcTimeout(done)) {
          // The root reports what the pass still waited for (timeoutReport); the
          // message still counts as unanswered here.
          pass->timedOut = true;
          pass->stateAtTimeout = describeLocked(*pass);
        }
        if (awaitAnswer) {
          --pass->pendingRpcs;
          pass->countRpcTo(dst, -1);
        }
        failLocked(*pass, error);
      } else {
        if (awaitAnswer) {
          --pass->pendingRpcs;
          pass->countRpcTo(dst, -1);
          // the part-end answers the peer gathered, if this was its first contact
          // (part_end.h); an answer of another form brings none
          if (done.value().isIntList()) {
            const auto received = done.value().toIntVector();
            pass->partEndAnswers.insert(pass->partEndAnswers.end(), received.begin(), received.end());
          }
        }
        maybeFinishLocked(*pass);
      }
    }
    settle(pass);
  });
}

bool Engine::deliver(const PassPtr& pass, int64_t messageId, variable_list&& grads) {
  std::lock_guard<std::mutex> lock(pass->mu);
  if (pass->finished) {
    return false;  // a failed pass ignores late gradients
  }
  auto send = pass->pendingSends.find(messageId);
  if (send == pass->pendingSends.end()) {
    failLocked(
        *pass,
        passError(
            pass->contextId,
            "received gradients for send function " + std::to_string(messageId) +
                ", which this pass does not expect (unknown, not reached, or it received them already)"));
    return false;
  }
  auto task = std::make_unique<ReadyTask>(ReadyTask{send->second, InputBuffer(0), std::move(grads), true});
  pass->pendingSends.erase(send);
  pass->pushReady(std::move(task));
  return claimDrain(*pass);
}

// ---------------------------------------------------------------------------
// Ending a pass
// ---------------------------------------------------------------------------

void Engine::maybeFinishLocked(PassState& pass) {
  if (pass.finished || !pass.quiescent()) {
    return;
  }
  pass.finished = true;
  pass.dependencies.clear();
  pass.notReady.clear();
  pass.leafGradients.clear();
  if (pass.ownerWaiting) {
    pass.cv.notify_one();
  }
}

void Engine::failLocked(PassState& pass, const std::string& error) {
  if (pass.finished) {
    return;
  }
  pass.finished = true;
  pass.error = error;
  // Drop every reference into the graph held for this pass.
  pass.ready.clear();
  pass.notReady.clear();
  pass.dependencies.clear();
  pass.pendingSends.clear();
  pass.leafGradients.clear();
  if (pass.entry) {
    std::lock_guard<std::mutex> lock(pass.entry->mu);
    pass.entry->abortedPasses.insert(pass.passId);
    pass.entry->discardPass(pass.passId);
  }
  if (pass.ownerWaiting) {
    pass.cv.notify_one();
  }
}

void Engine::settle(const PassPtr& pass) {
  std::string error;
  // The context (and its graph) may go once the pass is over: with this reference,
  // when settle returns.
  ContextPtr ctx;
  std::vector<int64_t> received;
  {
    std::lock_guard<std::mutex> lock(pass->mu);
    if (!pass->finished || pass->settled) {
      return;
    }
    pass->settled = true;
    error = pass->error;
    ctx = std::move(pass->context);
    if (!pass->isRoot) {
      received = std::move(pass->partEndAnswers);  // the root reads its own in backward()
    }
  }
  ContextRegistry::get().erasePass(pass->contextId, pass->passId);
  if (error.empty()) {
    // This worker's part ended: its gradients are final for the pass; the part-end hook
    // runs now, and its answer goes back with those this worker gathered (part_end.h).
    std::vector<int64_t> report;
    if (!pass->isRoot && pass->entry) {
      {
        std::lock_guard<std::mutex> lock(pass->entry->mu);
        pass->entry->publishLocked();  // torch's get_gradients sees them too
      }
      const auto own = runPartEndHook(pass->contextId, pass->hookArgs);
      report = {selfWorkerId(), own[0], own[1]};
      report.insert(report.end(), received.begin(), received.end());
    }
    pass->completion->markCompleted(c10::IValue(c10::List<int64_t>(std::move(report))));
  } else {
    pass->completion->setError(std::make_exception_ptr(std::runtime_error(error)));
  }
}

}  // namespace gilfree_rpc
