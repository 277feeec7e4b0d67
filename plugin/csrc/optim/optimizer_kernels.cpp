// Kernels for the distributed optimizer's local step (schemas in ops.cpp).
#include "compat.h"
#include "engine/context_registry.h"
#include "engine/gradients.h"
#include "optim/local_optimizer.h"
#include "optim/pass_end.h"
#include "optim/prepared_steps.h"
#include "optim/step_lock.h"
#include "optim/step_status.h"
#include "rpc/transport.h"

#include <torch/csrc/distributed/autograd/context/container.h>
#include <torch/csrc/distributed/rpc/rpc_agent.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <optional>

namespace gilfree_rpc {
namespace {

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

c10::Dict<std::string, int64_t> stepStatusesKernel() {
  c10::Dict<std::string, int64_t> table;
  for (const auto& [name, status] : kStepStatuses) {
    table.insert(name, status);
  }
  return table;
}

c10::Dict<std::string, int64_t> optimizerDebugInfoKernel() {
  c10::Dict<std::string, int64_t> info;
  info.insert("num_param_locks", numParamLocks());
  info.insert("num_prepared_steps", numParkedSteps());
  return info;
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("gradients_for", TORCH_FN(gradientsFor));  // engine/gradients.h
  m.impl("_checked_versions", TORCH_FN(checkedVersions));  // pass_end.h
  m.impl("_step_outcomes", TORCH_FN(stepOutcomes));
  // steps parked for no particular local optimizer (owner -1: prepared_steps.h)
  m.impl("_park_step", [](const c10::List<std::optional<at::Tensor>>& gradients, int64_t leaseMs) {
    return parkStep(Gradients(gradients.begin(), gradients.end()), leaseMs);
  });
  m.impl("_take_step", [](int64_t token) { return takeStep(token); });
  m.impl("_drop_step", [](int64_t token) { return dropStep(token); });
  m.impl("_wall_clock_ms", TORCH_FN(wallClockMs));
  m.impl("_failure_kind", torch::CppFunction::makeFromBoxedFunction<&failureKindKernel>());
  m.impl("_optimizer_debug_info", TORCH_FN(optimizerDebugInfoKernel));
  m.impl("_step_statuses", TORCH_FN(stepStatusesKernel));
  // the optimizer sends its step RPCs with no current context (see compat.h)
  m.impl("_swap_current_context", TORCH_FN(swapCurrentContext));
}

}  // namespace gilfree_rpc
