// functional_optim's ops for C++ in another library (the plugin's native local optimizers):
// one typed entry point per op, the one way from C++ to functional_optim's group steps.
//
// Each entry point looks its op's dispatcher handle up once (at its first call) and types it
// with the kernel's own C++ signature, declared here and registered with exactly that type
// (group_step.cpp): the dispatcher checks the signature when the handle is typed, so a caller
// cannot pass what the kernel does not take, and no call goes by a name string after the
// first. Header only: a library that includes it links nothing of functional_optim's; the op
// library must be loaded first (importing functional_optim loads it), or the first call
// raises, saying so. Schemas and contracts: ops.cpp.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_optim {

// The kernels' C++ signatures (the ops' schemas in C++ types).
using StateKeysFn = std::vector<std::string>(
    const std::string&, int64_t, const std::vector<std::string>&, const std::vector<double>&);
using NewStateFn = std::vector<at::Tensor>(
    const std::string&, at::TensorList, at::TensorList, const std::vector<std::string>&, const std::vector<double>&);
using GroupStepFn = void(
    const std::string&, at::TensorList, at::TensorList, at::TensorList, c10::List<bool>,
    const std::vector<std::string>&, const std::vector<double>&, const std::vector<std::string>&, at::TensorList);
using CheckGradientsFn = void(
    at::TensorList, const c10::List<std::optional<at::Tensor>>&, const std::vector<int64_t>&,
    const std::vector<std::optional<std::string>>&, const std::optional<std::string>&, int64_t);
using CheckParamCountFn = void(int64_t);
using GradientErrorFn = std::tuple<std::string, std::string>(
    at::TensorList, const c10::List<std::optional<at::Tensor>>&, const std::vector<int64_t>&,
    const std::vector<std::optional<std::string>>&, const std::optional<std::string>&, int64_t);

namespace detail {

template <typename Fn>
c10::TypedOperatorHandle<Fn> typedOp(const char* name) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
  TORCH_CHECK(
      handle.has_value(), "the op ", name,
      " is not registered: functional_optim's op library is not loaded (import functional_optim first)");
  return handle->typed<Fn>();
}

}  // namespace detail

// Whether `grad` can be the gradient of `param`: a dense (strided, not nested) or sparse COO
// tensor with the parameter's shape, dtype and device. The rule of checkGradients (which
// adds each group's rule for sparse gradients), and of any code that vouches for gradients
// before a step checks them (the plugin's part-end check).
inline bool gradientFits(const at::Tensor& param, const at::Tensor& grad) {
  return grad.defined() && (grad.layout() == c10::kStrided || grad.layout() == c10::kSparse) && !grad.is_nested() &&
      grad.scalar_type() == param.scalar_type() && grad.device() == param.device() &&
      grad.sizes().equals(param.sizes());
}

// gilfree_optim::state_keys: torch.optim's state keys of a parameter of `dim` dimensions.
inline std::vector<std::string> stateKeys(
    const std::string& optimizer, int64_t dim, const std::vector<std::string>& names, const std::vector<double>& values) {
  static const auto op = detail::typedOp<StateKeysFn>("gilfree_optim::state_keys");
  return op.call(optimizer, dim, names, values);
}

// gilfree_optim::new_state: the state of each of `params` at its first step, parameter after
// parameter, each in the order of its keys.
inline std::vector<at::Tensor> newState(
    const std::string& optimizer, at::TensorList params, at::TensorList grads, const std::vector<std::string>& names,
    const std::vector<double>& values) {
  static const auto op = detail::typedOp<NewStateFn>("gilfree_optim::new_state");
  return op.call(optimizer, params, grads, names, values);
}

// gilfree_optim::group_step: one step of one parameter group, in place.
inline void groupStep(
    const std::string& optimizer, at::TensorList params, at::TensorList grads, at::TensorList state,
    c10::List<bool> fresh, const std::vector<std::string>& names, const std::vector<double>& values,
    const std::vector<std::string>& tensorNames, at::TensorList tensorValues) {
  static const auto op = detail::typedOp<GroupStepFn>("gilfree_optim::group_step");
  op.call(optimizer, params, grads, state, std::move(fresh), names, values, tensorNames, tensorValues);
}

// gilfree_optim::check_gradients: the check every step makes of its gradients (see ops.cpp):
// raises the first failure, typed (c10::ValueError, or c10::Error: RuntimeError, as torch.optim
// raises them), with functional_optim's message; returns when every gradient passes.
inline void checkGradients(
    at::TensorList params, const c10::List<std::optional<at::Tensor>>& gradients, const std::vector<int64_t>& offsets,
    const std::vector<std::optional<std::string>>& sparseErrors, const std::optional<std::string>& denseError,
    int64_t firstIndex = 0) {
  static const auto op = detail::typedOp<CheckGradientsFn>("gilfree_optim::check_gradients");
  op.call(params, gradients, offsets, sparseErrors, denseError, firstIndex);
}

// gilfree_optim::check_param_count: the check of an optimizer's number of parameters that
// every functional_optim optimizer makes: raises c10::ValueError("optimizer got an empty
// parameter list"), torch's, when `count` is 0.
inline void checkParamCount(int64_t count) {
  static const auto op = detail::typedOp<CheckParamCountFn>("gilfree_optim::check_param_count");
  op.call(count);
}

}  // namespace gilfree_optim
