// The owners' part of gradient clipping by total norm (plugin/optim/_clip.py), as two ops
// that the caller calls on every owner by RPC (rpc_functions.h): the norm of each
// parameter's gradient in a context, and scaling those gradients in place. torch's
// torch.nn.utils.clip_grad_norm_ computes the same norms, with torch._foreach_norm per
// device and dtype (torch/nn/utils/clip_grad.py).
#include "compat.h"
#include "engine/gradients.h"
#include "rpc/worker_error.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <string>

namespace gilfree_rpc {
namespace {

struct PresentGradients {
  std::vector<at::Tensor> grads;
  std::vector<int64_t> positions;  // in the op's parameter list
};

// `params`: an RRef(Tensor)[] argument (boxed: an unboxed kernel cannot take RRefs).
PresentGradients presentGradients(int64_t contextId, const c10::IValue& params) {
  const auto& list = params.toListRef();
  std::vector<at::Tensor> tensors;
  tensors.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    tensors.push_back(ownedTensor(list[i].toRRef(), "params[" + std::to_string(i) + "]"));
  }
  PresentGradients present;
  auto grads = gradientsFor(contextId, tensors);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].has_value()) {
      present.grads.push_back(*grads[i]);
      present.positions.push_back(static_cast<int64_t>(i));
    }
  }
  return present;
}

// (norms, positions): the norm of each present gradient (0-dim, its dtype, on the CPU),
// stacked, and the positions in `params` of the parameters that have one. No gradient: an
// empty float64 tensor.
std::tuple<at::Tensor, std::vector<int64_t>> gradientNorms(int64_t contextId, const c10::IValue& params, double normType) {
  auto present = presentGradients(contextId, params);
  const auto& grads = present.grads;
  if (grads.empty()) {
    return {at::zeros({0}, at::kDouble), present.positions};
  }
  std::vector<at::Tensor> norms(grads.size());
  std::vector<bool> done(grads.size(), false);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (done[i]) {
      continue;
    }
    std::vector<at::Tensor> group;
    std::vector<size_t> where;
    for (size_t j = i; j < grads.size(); ++j) {
      if (!done[j] && grads[j].device() == grads[i].device() && grads[j].dtype() == grads[i].dtype()) {
        group.push_back(grads[j]);
        where.push_back(j);
        done[j] = true;
      }
    }
    auto groupNorms = at::_foreach_norm(group, normType);
    for (size_t k = 0; k < where.size(); ++k) {
      norms[where[k]] = groupNorms[k].to(at::kCPU);
    }
  }
  return {at::stack(norms), present.positions};
}

// _gradient_norms(int context_id, RRef(Tensor)[] params, float norm_type) -> (Tensor, int[])
void gradientNormsKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const double normType = torch::jit::pop(*stack).toDouble();
  const c10::IValue params = torch::jit::pop(*stack);
  const int64_t contextId = torch::jit::pop(*stack).toInt();
  auto [norms, positions] = gradientNorms(contextId, params, normType);
  torch::jit::push(*stack, std::move(norms), c10::IValue(positions));
}

// _scale_gradients(int context_id, RRef(Tensor)[] params, Tensor coefficient) -> (): the
// present gradients of `params` in the context, multiplied by `coefficient` in place. The
// coefficient comes from another worker: it must be what clip_grad_norm_ sends (a 0-dim real
// floating-point tensor), checked before any gradient changes, so that a bad one neither scales
// some gradients and fails on others nor scales them elementwise by broadcasting.
void scaleGradientsKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const at::Tensor coefficient = torch::jit::pop(*stack).toTensor();
  const c10::IValue params = torch::jit::pop(*stack);
  const int64_t contextId = torch::jit::pop(*stack).toInt();
  TORCH_CHECK_VALUE(
      coefficient.defined() && coefficient.layout() == at::kStrided && coefficient.dim() == 0 &&
          at::isFloatingType(coefficient.scalar_type()),
      "_scale_gradients: coefficient must be a dense 0-dim floating-point tensor (the clip coefficient), "
      "got ",
      coefficient.defined() ? coefficient.toString() + " of shape " + c10::str(coefficient.sizes()) : "an undefined tensor");
  for (auto& grad : presentGradients(contextId, params).grads) {
    grad.mul_(coefficient.to(grad.device()));
  }
}

// A boxed kernel whose c10 errors leave with the trailer, naming the op.
template <void (*Kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
void trailed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string where = "in " + op.schema().name();
  withTrailer(where.c_str(), [&] { Kernel(op, stack); });
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  // answered as RPC functions: their errors leave with the trailer (rpc/worker_error.h)
  m.impl("_gradient_norms", torch::CppFunction::makeFromBoxedFunction<&trailed<&gradientNormsKernel>>());
  m.impl("_scale_gradients", torch::CppFunction::makeFromBoxedFunction<&trailed<&scaleGradientsKernel>>());
}

}  // namespace gilfree_rpc
