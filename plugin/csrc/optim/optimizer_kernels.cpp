// Kernels for the distributed optimizer's local step (schemas in ops.cpp).
#include "compat.h"
#include "engine/context_registry.h"
#include "engine/gradients.h"
#include "optim/pass_end.h"
#include "optim/prepared_steps.h"
#include "optim/step_lock.h"
#include "rpc/transport.h"

#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <chrono>
#include <optional>

namespace dist_engine {
namespace {

// See engine/gradients.h.
std::vector<std::optional<at::Tensor>> gradientsForKernel(int64_t contextId, const std::vector<at::Tensor>& params) {
  return gradientsFor(contextId, params);
}

// See pass_end.h.
std::vector<int64_t> checkedVersionsKernel(int64_t contextId, const std::vector<int64_t>& workers, bool acceptSparse) {
  return checkedVersions(contextId, workers, acceptSparse);
}

std::vector<int64_t> stepOutcomesKernel(int64_t contextId, const std::vector<int64_t>& workers) {
  return stepOutcomes(contextId, workers);
}

int64_t parkStepKernel(const c10::List<std::optional<at::Tensor>>& gradients, int64_t leaseMs) {
  Gradients held;
  held.reserve(gradients.size());
  for (const auto& g : gradients) {
    held.push_back(g);
  }
  return parkStep(std::move(held), leaseMs);
}

std::vector<std::optional<at::Tensor>> takeStepKernel(int64_t token) {
  return takeStep(token);
}

bool dropStepKernel(int64_t token) {
  return dropStep(token);
}

// Boxed: a plain kernel cannot take a Future.
void failureKindKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto future = torch::jit::pop(*stack).toFuture();
  std::string kind;
  if (!future->completed()) {
    kind = "pending";
  } else if (future->hasError()) {
    kind = isRpcTimeout(*future) ? "timeout" : isPeerUnreachable(*future) ? "unreachable" : "error";
  }
  torch::jit::push(*stack, std::move(kind));
}

int64_t wallClockMsKernel() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

c10::Dict<std::string, int64_t> optimizerDebugInfoKernel() {
  c10::Dict<std::string, int64_t> info;
  info.insert("num_param_locks", numParamLocks());
  info.insert("num_prepared_steps", numParkedSteps());
  return info;
}

// Sets this thread's current distributed autograd context (-1: none) and returns the
// previous one: the optimizer sends its step RPCs with none (see compat.h).
int64_t swapCurrentContextKernel(int64_t contextId) {
  return swapCurrentContext(contextId);
}

}  // namespace

TORCH_LIBRARY_IMPL(dist_engine, CompositeImplicitAutograd, m) {
  m.impl("gradients_for", TORCH_FN(gradientsForKernel));
  m.impl("_checked_versions", TORCH_FN(checkedVersionsKernel));
  m.impl("_step_outcomes", TORCH_FN(stepOutcomesKernel));
  m.impl("_park_step", TORCH_FN(parkStepKernel));
  m.impl("_take_step", TORCH_FN(takeStepKernel));
  m.impl("_drop_step", TORCH_FN(dropStepKernel));
  m.impl("_wall_clock_ms", TORCH_FN(wallClockMsKernel));
  m.impl("_failure_kind", torch::CppFunction::makeFromBoxedFunction<&failureKindKernel>());
  m.impl("_optimizer_debug_info", TORCH_FN(optimizerDebugInfoKernel));
  m.impl("_swap_current_context", TORCH_FN(swapCurrentContextKernel));
}

}  // namespace dist_engine
