// Argument checks and step counters shared by the fused optimizer kernels (fused_optim.h).
#include "fused_optim.h"

#include <ATen/Version.h>

#include <algorithm>
#include <atomic>
#include <sstream>

namespace gilfree_optim {
namespace {

std::string where(const char* op, const char* list, size_t i) {
  std::ostringstream s;
  s << "gilfree_optim::" << op << ": " << list << "[" << i << "]";
  return s.str();
}

}  // namespace

bool fusedDtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

void checkTensorLists(
    const char* op,
    at::TensorList params,
    std::initializer_list<NamedList> others,
    std::initializer_list<OptionalList> optional) {
  for (const auto i : c10::irange(params.size())) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined(), where(op, "params", i), " is undefined");
    TORCH_CHECK(
        p.layout() == at::kStrided, where(op, "params", i), " has layout ", p.layout(),
        "; the fused step takes dense (strided) tensors");
    TORCH_CHECK(
        fusedDtype(p.scalar_type()), where(op, "params", i), " has dtype ", p.scalar_type(),
        "; the fused step takes float32, float64, bfloat16 and float16 tensors");
    TORCH_CHECK(
        p.is_non_overlapping_and_dense(), where(op, "params", i),
        " is not dense (a view with gaps or overlapping elements); the fused step updates "
        "dense tensors only");
  }
  auto checkList = [&](const NamedList& list) {
    TORCH_CHECK(
        list.tensors.size() == params.size(), "gilfree_optim::", op, ": ", list.name, " has ",
        list.tensors.size(), " tensors but params has ", params.size());
    const bool isGrad = std::string(list.name) == "grads";
    for (const auto i : c10::irange(params.size())) {
      const at::Tensor& p = params[i];
      const at::Tensor& t = list.tensors[i];
      TORCH_CHECK(t.defined(), where(op, list.name, i), " is undefined");
      TORCH_CHECK(
          t.layout() == at::kStrided, where(op, list.name, i), " has layout ", t.layout(),
          isGrad ? "; the fused step takes dense gradients (sparse gradients need the single-tensor path)"
                 : "; the fused step takes dense (strided) tensors");
      TORCH_CHECK(
          t.scalar_type() == p.scalar_type(), where(op, list.name, i), " has dtype ", t.scalar_type(),
          " but params[", i, "] has dtype ", p.scalar_type());
      TORCH_CHECK(
          t.device() == p.device(), where(op, list.name, i), " is on ", t.device(), " but params[", i,
          "] is on ", p.device());
      TORCH_CHECK(
          t.sizes() == p.sizes(), where(op, list.name, i), " has shape ", t.sizes(), " but params[", i,
          "] has shape ", p.sizes());
      if (!isGrad) {
        TORCH_CHECK(
            t.strides() == p.strides(), where(op, list.name, i), " has strides ", t.strides(),
            " but params[", i, "] has strides ", p.strides(), "; state must be laid out like its parameter");
      }
    }
  };
  for (const auto& list : others) {
    checkList(list);
  }
  for (const auto& list : optional) {
    if (list.on) {
      TORCH_CHECK(
          list.tensors.size() == params.size(), "gilfree_optim::", op, ": ", list.option, " needs one ",
          list.name, " tensor per parameter, got ", list.tensors.size(), " for ", params.size(), " parameters");
      checkList({list.name, list.tensors});
    }
  }
}

void checkSteps(const char* op, at::TensorList params, at::TensorList steps, const char* name) {
  TORCH_CHECK(
      steps.size() == params.size(), "gilfree_optim::", op, ": ", name, " has ", steps.size(),
      " tensors but params has ", params.size());
  for (const auto i : c10::irange(steps.size())) {
    const at::Tensor& s = steps[i];
    TORCH_CHECK(s.defined(), where(op, name, i), " is undefined");
    TORCH_CHECK(
        s.numel() == 1 && s.layout() == at::kStrided, where(op, name, i),
        " must be a one-element tensor (a step counter), got shape ", s.sizes());
    TORCH_CHECK(
        s.scalar_type() == at::kFloat || s.scalar_type() == at::kDouble, where(op, name, i),
        " has dtype ", s.scalar_type(), "; step counters are float32 or float64");
    TORCH_CHECK(
        s.device().is_cpu() || s.device().is_meta(), where(op, name, i), " is on ", s.device(),
        "; the fused CPU step keeps its counters on the CPU");
  }
}

void checkScalars(const char* op, at::TensorList params, at::TensorList scalars, const char* name) {
  TORCH_CHECK(
      scalars.size() == params.size(), "gilfree_optim::", op, ": ", name, " has ", scalars.size(),
      " tensors but params has ", params.size());
  for (const auto i : c10::irange(scalars.size())) {
    const at::Tensor& s = scalars[i];
    TORCH_CHECK(s.defined() && s.numel() == 1 && s.layout() == at::kStrided, where(op, name, i),
                " must be a one-element tensor");
    TORCH_CHECK(fusedDtype(s.scalar_type()), where(op, name, i), " has dtype ", s.scalar_type(),
                "; expected float32, float64, bfloat16 or float16");
    TORCH_CHECK(s.device().is_cpu() || s.device().is_meta(), where(op, name, i), " is on ", s.device(),
                "; the fused CPU step keeps it on the CPU");
  }
}

Isa selectedIsa() {
  // at::get_cpu_capability() (ATen/Version.h, checked on torch 2.13) names the instruction
  // set ATen's own CPU kernels were dispatched to: the best this CPU supports, lowered by
  // ATEN_CPU_CAPABILITY when that is set.
  static const Isa isa = [] {
    const std::string name = at::get_cpu_capability();
    return name == "AVX512" ? kIsaAvx512 : name == "AVX2" ? kIsaAvx2 : kIsaDefault;
  }();
  return isa;
}

namespace {
std::atomic<int> builtIsas{0};  // bit i: the build for Isa i is linked in
}  // namespace

void addBuild(Isa isa) {
  builtIsas.fetch_or(1 << isa);
}

Isa activeIsa() {
  static const Isa isa = [] {
    int i = selectedIsa();
    while (i > kIsaDefault && !(builtIsas.load() & (1 << i))) {
      --i;
    }
    return static_cast<Isa>(i);
  }();
  return isa;
}

const char* isaName(Isa isa) {
  return isa == kIsaAvx512 ? "AVX512" : isa == kIsaAvx2 ? "AVX2" : "DEFAULT";
}

bool isMeta(at::TensorList params) {
  return std::any_of(params.begin(), params.end(), [](const at::Tensor& p) { return p.is_meta(); });
}

std::vector<double> startStep(const char* op, at::TensorList params, std::optional<at::TensorList> steps) {
  if (steps) {
    checkSteps(op, params, *steps);
  }
  if (isMeta(params)) {
    return {};
  }
  for (const auto i : c10::irange(params.size())) {
    TORCH_CHECK(
        params[i].device().is_cpu(), where(op, "params", i), " is on ", params[i].device(),
        "; this fused kernel runs on the CPU only");
  }
  std::vector<double> values;
  for (const auto& s : steps.value_or(at::TensorList())) {
    values.push_back(incrementStep(s));
  }
  return values;
}

double incrementStep(const at::Tensor& step) {
  if (step.scalar_type() == at::kFloat) {
    float* p = step.data_ptr<float>();
    *p = *p + 1.0f;
    return static_cast<double>(*p);
  }
  double* p = step.data_ptr<double>();
  *p = *p + 1.0;
  return *p;
}

}  // namespace gilfree_optim

// The build the fused kernels run ("DEFAULT", "AVX2", "AVX512"): read by the tests through
// ctypes, to check each build against DEFAULT (no op: the ops' schemas stay those of the
// optimizers).
extern "C" __attribute__((visibility("default"))) const char* gilfree_optim_active_isa() {
  return gilfree_optim::isaName(gilfree_optim::activeIsa());
}
