// Kernels of the engine's ops (schemas in ops.cpp). They hold no tensors of their
// own and need no autograd, so one CompositeImplicitAutograd kernel serves every
// backend; the ops that return a Future are boxed kernels.
#include "compat.h"
#include "debug_counters.h"
#include "engine/context_registry.h"
#include "engine/engine.h"
#include "engine/gradients.h"
#include "engine/peer_watch.h"
#include "rpc/transport.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace gilfree_rpc {
namespace {

Mode parseMode(const std::string& mode) {
  if (mode == "smart") {
    return Mode::kSmart;
  }
  // the one check of the mode, for every caller (plugin.autograd.backward, backward_and_step):
  // ValueError, as Python raises for an argument of the right type and a wrong value; checked
  // before the pass starts (nothing runs)
  TORCH_CHECK_VALUE(mode == "fast", "mode must be \"smart\" or \"fast\", got \"", mode, "\"");
  return Mode::kFast;
}

void backwardKernel(
    int64_t contextId,
    const std::vector<at::Tensor>& roots,
    bool retainGraph,
    std::string mode,
    std::vector<int64_t> hookArgs) {
  Engine::get().backward(contextId, roots, retainGraph, parseMode(mode), std::move(hookArgs));
}

c10::Dict<at::Tensor, at::Tensor> getGradientsKernel(int64_t contextId) {
  return Engine::get().getGradients(contextId);
}

// _receive_gradients(int context_id, int pass_id, int autograd_message_id,
//                    Tensor[] grads, bool retain_graph, bool smart, int[] reached, int[] hook_args)
void receiveGradientsKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 8);
  const int64_t contextId = args[0].toInt();
  const int64_t passId = args[1].toInt();
  const int64_t messageId = args[2].toInt();
  auto grads = args[3].toTensorVector();
  const bool retainGraph = args[4].toBool();
  const bool smart = args[5].toBool();
  auto reached = args[6].toIntVector();
  auto hookArgs = args[7].toIntVector();
  torch::jit::drop(*stack, 8);
  // Now `grads` and the request message hold the tensors; the message's references go
  // (compat.h), so that a leaf keeps a gradient that arrives here where torch's would.
  dropMessageReferences(grads);
  auto answer = Engine::get().receiveGradients(
      contextId, passId, messageId, std::move(grads), retainGraph, smart, std::move(reached), std::move(hookArgs));
  torch::jit::push(*stack, std::move(answer));
}

std::vector<int64_t> reachabilityKernel(int64_t contextId) {
  return Engine::get().reachability(contextId);
}

std::string abortPassKernel(int64_t contextId, int64_t passId) {
  return Engine::get().abortPass(contextId, passId);
}

void releaseContextKernel(int64_t contextId) {
  ContextRegistry::get().release(contextId);
}

// The engine's counters in plugin.debug_info() (debug_counters.h).
const DebugCounters kEngineCounters("engine", [] {
  Counters counters;
  for (const auto& [key, value] : ContextRegistry::get().debugInfo()) {
    counters.emplace_back(key, value);
  }
  counters.emplace_back("num_split_nodes", Engine::get().numSplitNodes());
  counters.emplace_back("num_failed_workers", numFailedPeers());
  return counters;
});

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("backward", TORCH_FN(backwardKernel));
  m.impl("get_gradients", TORCH_FN(getGradientsKernel));
  m.impl("_receive_gradients", torch::CppFunction::makeFromBoxedFunction<&receiveGradientsKernel>());
  m.impl("_reachability", TORCH_FN(reachabilityKernel));
  m.impl("_abort_pass", TORCH_FN(abortPassKernel));
  m.impl("_release_context", TORCH_FN(releaseContextKernel));
  m.impl("gradients_for", TORCH_FN(gradientsFor));  // gradients.h
}

}  // namespace gilfree_rpc
