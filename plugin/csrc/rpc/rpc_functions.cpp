#include "rpc/rpc_functions.h"

#include "compat.h"
#include "rpc/worker_error.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <iterator>
#include <mutex>

namespace gilfree_rpc {
namespace {

struct RpcOp {
  const char* name;  // an op of the gilfree_rpc namespace (schema in ops.cpp)
  bool async;        // it returns a Future: called with async execution
};

// Every op another worker calls by RPC.
constexpr RpcOp kRpcOps[] = {
    // the engine (engine.h)
    {"_receive_gradients", true},
    {"_reachability", false},
    {"_abort_pass", false},
    // the native local optimizers' steps (local_optimizer.h; their values and state are read
    // and changed by Python functions on the owner: plugin/optim/_local.py)
    {"_optimizer_step", false},
    {"_optimizer_prepare", false},
    {"_optimizer_commit", false},
    {"_optimizer_drop", false},
    // embedding-bag lookups (remote_lookup.h)
    {"_lookup_bags", false},
    // remote modules' forward (nn/remote_module.h)
    {"_remote_forward", false},
    // gradient clipping (gradient_clipping.cpp)
    {"_gradient_norms", false},
    {"_scale_gradients", false},
};

const RpcOp* find(const std::string& op) {
  auto it = std::find_if(std::begin(kRpcOps), std::end(kRpcOps), [&](const RpcOp& known) { return op == known.name; });
  return it == std::end(kRpcOps) ? nullptr : it;
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

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  // what a failed RPC's future failed of (timeout, unreachable peer, error)
  m.impl("_failure_kind", torch::CppFunction::makeFromBoxedFunction<&failureKindKernel>());
  // RPCs sent with no current distributed autograd context (the distributed optimizer's steps;
  // see compat.h)
  m.impl("_swap_current_context", TORCH_FN(swapCurrentContext));
  // the error contract's one reader (worker_error.h)
  m.impl("_error_parts", [](const std::string& text) {
    c10::Dict<std::string, std::string> parts;
    for (const auto& [key, value] : errorParts(text)) {
      parts.insert(key, value);
    }
    return parts;
  });
}

c10::QualifiedName rpcFunctionName(const std::string& op) {
  return c10::QualifiedName("gilfree_rpc." + op);
}

bool isRpcFunctionOp(const std::string& op) {
  return find(op) != nullptr;
}

bool isAsyncRpcFunctionOp(const std::string& op) {
  const RpcOp* known = find(op);
  return known != nullptr && known->async;
}

void defineRpcFunctions() {
  static std::once_flag defined;
  std::call_once(defined, [] {
    for (const auto& op : kRpcOps) {
      addOpFunction(rpcFunctionName(op.name), c10::OperatorName(std::string("gilfree_rpc::") + op.name, ""));
    }
  });
}

}  // namespace gilfree_rpc
