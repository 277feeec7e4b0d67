// The check every step makes of its gradients, written once, with two faces (schemas in
// ops.cpp): gradient_error answers the first failure as (its Python exception type, its
// message), for a caller that raises it itself (TorchScript code, which then raises the type
// it names; the plugin's native local optimizers, through group_step_ops.h); check_gradients
// raises it (eager Python and torch.compile). functional_optim's Python calls them for every
// implementation of every class (_validation.check_gradients). Its messages are functional_optim's (describe(): "shape [4, 5], dtype
// torch.float32, device cpu"), torch's for a sparse or dense gradient an optimizer refuses.
// Beside it, check_param_count: the check of an optimizer's parameter count; dtype_name and
// describe_tensor: the descriptions of its messages, for the Python messages that name a
// tensor or a dtype.
#include "group_step_ops.h"

#include <torch/library.h>

#include <sstream>
#include <tuple>

namespace gilfree_optim {
namespace {

// torch's Python names of the dtypes ("torch.float32"), as str(dtype) prints them.
std::string dtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    default: return std::string("dtype ") + c10::toString(dtype);
  }
}

// "shape [4, 5], dtype torch.float32, device cpu" (", sparse" for a sparse COO tensor).
std::string describe(const at::Tensor& t) {
  std::ostringstream out;
  out << "shape ";
  if (t.is_nested()) {
    out << "(nested)";
  } else {
    out << "[";
    for (size_t i = 0; i < t.sizes().size(); ++i) {
      out << (i ? ", " : "") << t.sizes()[i];
    }
    out << "]";
  }
  out << ", dtype " << dtypeName(t.scalar_type()) << ", device " << t.device().str() << (t.is_sparse() ? ", sparse" : "");
  return out.str();
}

GradientErrorFn gradientErrorKernel;
CheckGradientsFn checkGradientsKernel;

// The first gradient that fails the check, as (its Python exception type, the message); ("", "")
// when every one passes.
std::tuple<std::string, std::string> gradientErrorKernel(
    at::TensorList params,
    const c10::List<std::optional<at::Tensor>>& gradients,
    const std::vector<int64_t>& offsets,
    const std::vector<std::optional<std::string>>& sparseErrors,
    const std::optional<std::string>& denseError,
    int64_t firstIndex) {
  const int64_t n = static_cast<int64_t>(params.size());
  std::ostringstream message;
  bool offsetsFit = offsets.size() == sparseErrors.size() + 1 && !offsets.empty() && offsets.front() == 0 &&
      offsets.back() == n;
  for (size_t g = 0; offsetsFit && g + 1 < offsets.size(); ++g) {
    offsetsFit = offsets[g] <= offsets[g + 1];
  }
  if (!offsetsFit) {
    message << "gilfree_optim::check_gradients: offsets must run from 0 to the number of parameters (" << n
            << ") without decreasing, one more than the sparse-gradient rules (" << sparseErrors.size() << ")";
    return {"ValueError", message.str()};
  }
  if (static_cast<int64_t>(gradients.size()) != n) {
    message << "step: expected " << n << " gradients (one per parameter, None to skip one); got " << gradients.size();
    return {"ValueError", message.str()};
  }
  for (size_t g = 0; g + 1 < offsets.size(); ++g) {
    for (int64_t i = offsets[g]; i < offsets[g + 1]; ++i) {
      const std::optional<at::Tensor> grad = gradients.get(i);
      if (!grad.has_value() || !grad->defined()) {
        continue;
      }
      if (!gradientFits(params[i], *grad)) {
        message << "gradients[" << firstIndex + i << "]: expected " << describe(params[i]) << " (like its parameter); got "
                << describe(*grad);
        return {"ValueError", message.str()};
      }
      if (grad->is_sparse() && sparseErrors[g].has_value()) {
        return {"RuntimeError", *sparseErrors[g]};
      }
      if (!grad->is_sparse() && denseError.has_value()) {
        return {"RuntimeError", *denseError};
      }
    }
  }
  return {"", ""};
}

void checkGradientsKernel(
    at::TensorList params,
    const c10::List<std::optional<at::Tensor>>& gradients,
    const std::vector<int64_t>& offsets,
    const std::vector<std::optional<std::string>>& sparseErrors,
    const std::optional<std::string>& denseError,
    int64_t firstIndex) {
  const auto [kind, message] = gradientErrorKernel(params, gradients, offsets, sparseErrors, denseError, firstIndex);
  TORCH_CHECK_VALUE(kind != "ValueError", message);
  TORCH_CHECK(kind.empty(), message);
}

// The ops dtype_name and describe_tensor: the names above, for functional_optim's Python
// messages (its one table of them).
std::string dtypeNameKernel(at::ScalarType dtype) {
  return dtypeName(dtype);
}

std::string describeTensorKernel(const at::Tensor& t) {
  return describe(t);
}

// The one check of an optimizer's parameter count, torch.optim's message (every optimizer of
// functional_optim, eager and TorchScript, and the plugin's native local optimizers make it):
// param_count_error answers the message ("" when `count` passes), check_param_count raises it.
std::string paramCountErrorKernel(int64_t count) {
  return count > 0 ? "" : "optimizer got an empty parameter list";
}

void checkParamCountKernel(int64_t count) {
  const auto message = paramCountErrorKernel(count);
  TORCH_CHECK_VALUE(message.empty(), message);
}

}  // namespace

// It reads only the tensors' metadata: one kernel for every dispatch key (meta and fake
// tensors included).
TORCH_LIBRARY_IMPL(gilfree_optim, CompositeImplicitAutograd, m) {
  m.impl("check_gradients", TORCH_FN(checkGradientsKernel));
  m.impl("gradient_error", TORCH_FN(gradientErrorKernel));
  m.impl("check_param_count", TORCH_FN(checkParamCountKernel));
  m.impl("param_count_error", TORCH_FN(paramCountErrorKernel));
  m.impl("dtype_name", TORCH_FN(dtypeNameKernel));
  m.impl("describe_tensor", TORCH_FN(describeTensorKernel));
}

}  // namespace gilfree_optim
