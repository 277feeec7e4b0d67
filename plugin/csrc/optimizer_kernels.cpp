// Kernels for the distributed optimizer's local step (schemas in ops.cpp).
#include "compat.h"
#include "context_registry.h"
#include "gradient_check.h"
#include "prepared_steps.h"
#include "step_exchange.h"
#include "step_lock.h"
#include "transport.h"

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

// Each parameter's gradient in `grads`, or None.
std::vector<std::optional<at::Tensor>> gradientsOf(const GradientDict& grads, const std::vector<at::Tensor>& params) {
  std::vector<std::optional<at::Tensor>> result(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = grads.find(params[i]);
    if (it != grads.end()) {
      result[i] = it->value();
    }
  }
  return result;
}

// The gradient of each parameter in the context, or None. The plugin engine's
// gradients when its backward reached this worker in the context, otherwise those
// of torch's distributed autograd (a backward run by torch's engine). A context this
// worker does not know gives no gradients (no backward pass of it reached this
// worker): the caller checks that the context exists on its side, and sends its step
// while the context is open there, so an owner cannot have released it already.
// Only retrieves: never creates a context.
std::vector<std::optional<at::Tensor>> gradientsForKernel(int64_t contextId, const std::vector<at::Tensor>& params) {
  auto& container = torch::distributed::autograd::DistAutogradContainer::getInstance();
  torch::distributed::autograd::ContextPtr ctx;
  try {
    ctx = container.retrieveContext(contextId);
  } catch (const c10::Error&) {
    return std::vector<std::optional<at::Tensor>>(params.size());  // unknown here: every parameter is skipped
  }
  return gradientsOf(gradientsForStep(ctx, ContextRegistry::get().find(contextId)), params);
}

// See gradient_check.h.
std::vector<int64_t> checkedVersionsKernel(int64_t contextId, const std::vector<int64_t>& workers) {
  return gradientsCheckedInBackward(contextId, workers);
}

// As gradients_for, from the engine's gradients as the backward pass checked them.
std::vector<std::optional<at::Tensor>> checkedGradientsForKernel(
    int64_t contextId,
    const std::vector<at::Tensor>& params,
    int64_t version) {
  return gradientsOf(checkedGradientsForStep(contextId, version), params);
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

// Boxed: a plain kernel cannot take or return a Future. Pops the future, pushes a
// future of its outcome; the callback runs on the thread that completes `future`.
void errorOfKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto future = torch::jit::pop(*stack).toFuture();
  auto outcome = c10::make_intrusive<c10::ivalue::Future>(c10::OptionalType::create(c10::StringType::get()));
  future->addCallback([outcome](c10::ivalue::Future& done) {
    if (done.hasError()) {
      outcome->markCompleted(c10::IValue(done.tryRetrieveErrorMessage()));
    } else {
      outcome->markCompleted(c10::IValue());
    }
  });
  torch::jit::push(*stack, outcome);
}

// Boxed (it returns a Future). The reply's value, or the peer's error, completes it.
void callScriptKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  namespace rpc = torch::distributed::rpc;
  double timeoutSeconds = torch::jit::pop(*stack).toDouble();
  auto args = torch::jit::pop(*stack);
  std::string function = torch::jit::pop(*stack).toStringRef();
  std::string worker = torch::jit::pop(*stack).toStringRef();
  TORCH_CHECK(args.isTuple(), "_call_script: args must be a tuple");
  TORCH_CHECK(rpc::RpcAgent::isCurrentRpcAgentSet(), "_call_script: RPC is not initialized");
  auto workerId = rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo(worker).id_;
  std::vector<c10::IValue> values(args.toTupleRef().elements().begin(), args.toTupleRef().elements().end());
  auto result = dist_engine::callScript(
      workerId, c10::QualifiedName(function), std::move(values), /*asyncExecution=*/false, c10::AnyType::get(),
      timeoutSeconds > 0 ? static_cast<float>(timeoutSeconds) : dist_engine::kAgentTimeout);
  torch::jit::push(*stack, result);
}

Verdict verdictOf(const c10::IValue& value) {
  return value.isNone() ? Verdict() : Verdict(value.toStringRef());
}

// Boxed (it returns a Future): see step_exchange.h.
void exchangeVerdictsKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  double timeoutSeconds = torch::jit::pop(*stack).toDouble();
  Verdict verdict = verdictOf(torch::jit::pop(*stack));
  std::string handler = torch::jit::pop(*stack).toStringRef();
  auto peers = torch::jit::pop(*stack).to<std::vector<std::string>>();
  int64_t key = torch::jit::pop(*stack).toInt();
  torch::jit::push(*stack, exchangeVerdicts(key, peers, handler, std::move(verdict), timeoutSeconds));
}

void receiveVerdictKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  Verdict verdict = verdictOf(torch::jit::pop(*stack));
  std::string sender = torch::jit::pop(*stack).toStringRef();
  int64_t key = torch::jit::pop(*stack).toInt();
  torch::jit::push(*stack, receiveVerdict(key, sender, std::move(verdict)));
}

int64_t wallClockMsKernel() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

c10::Dict<std::string, int64_t> optimizerDebugInfoKernel() {
  c10::Dict<std::string, int64_t> info;
  info.insert("num_param_locks", numParamLocks());
  info.insert("num_prepared_steps", numParkedSteps());
  info.insert("num_step_exchanges", numStepExchanges());
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
  m.impl("_checked_gradients_for", TORCH_FN(checkedGradientsForKernel));
  m.impl("_park_step", TORCH_FN(parkStepKernel));
  m.impl("_take_step", TORCH_FN(takeStepKernel));
  m.impl("_drop_step", TORCH_FN(dropStepKernel));
  m.impl("_error_of", torch::CppFunction::makeFromBoxedFunction<&errorOfKernel>());
  m.impl("_wall_clock_ms", TORCH_FN(wallClockMsKernel));
  m.impl("_call_script", torch::CppFunction::makeFromBoxedFunction<&callScriptKernel>());
  m.impl("_exchange_verdicts", torch::CppFunction::makeFromBoxedFunction<&exchangeVerdictsKernel>());
  m.impl("_receive_verdict", torch::CppFunction::makeFromBoxedFunction<&receiveVerdictKernel>());
  m.impl("_optimizer_debug_info", TORCH_FN(optimizerDebugInfoKernel));
  m.impl("_swap_current_context", TORCH_FN(swapCurrentContextKernel));
}

}  // namespace dist_engine
