// Fused Adam and AdamW steps (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adam's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad
//   AdamW: p *= 1 - lr * wd          Adam: g += wd * p
//   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
//   amsgrad: vmax = max(vmax, v) and vmax replaces v below
//   p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step from each parameter's own step.
#include "fused_optim.h"

#include <torch/library.h>

namespace gilfree_optim {
namespace {

struct AdamScalars {
  double stepSize;
  double bc2Sqrt;
};

template <bool kMeta, bool kDecoupled>
void adamKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
    at::TensorList maxExpAvgSqs, at::TensorList steps, double lr, double beta1, double beta2,
    double weightDecay, double eps, bool amsgrad, bool maximize) {
  const char* op = kDecoupled ? "adamw_" : "adam_";
  checkTensorLists(
      op, params, {{"grads", grads}, {"exp_avgs", expAvgs}, {"exp_avg_sqs", expAvgSqs}},
      {{"max_exp_avg_sqs", amsgrad ? maxExpAvgSqs : at::TensorList()}});
  TORCH_CHECK(
      !amsgrad || maxExpAvgSqs.size() == params.size(), "gilfree_optim::", op,
      ": amsgrad=True needs one max_exp_avg_sqs tensor per parameter");
  checkSteps(op, params, steps);
  if constexpr (kMeta) {
    return;
  } else {
    checkCpu(op, params);
    const std::vector<double> stepValues = incrementSteps(steps);
    std::vector<AdamScalars> scalars;
    scalars.reserve(params.size());
    for (const double step : stepValues) {
      const double bc1 = 1 - std::pow(beta1, step);
      const double bc2 = 1 - std::pow(beta2, step);
      scalars.push_back({lr / bc1, std::sqrt(bc2)});
    }
    auto run = [&](auto hasMax) {
      constexpr bool kAmsgrad = decltype(hasMax)::value;
      constexpr int K = kAmsgrad ? 5 : 4;
      auto body = [=](const AdamScalars& s, auto& x) {
        using V = typename std::decay_t<decltype(x)>::value_type;
        V& p = x[0];
        V g = maximize ? V(0) - x[1] : x[1];
        V& m = x[2];
        V& v = x[3];
        if (weightDecay != 0) {
          if constexpr (kDecoupled) {
            p = p * cst<V>(1 - lr * weightDecay);
          } else {
            g = g + cst<V>(weightDecay) * p;
          }
        }
        m = lerp(m, g, 1 - beta1);
        v = v * cst<V>(beta2) + cst<V>(1 - beta2) * g * g;
        V denom;
        if constexpr (kAmsgrad) {
          x[4] = vmax(x[4], v);
          denom = vsqrt(x[4]) / cst<V>(s.bc2Sqrt) + cst<V>(eps);
        } else {
          denom = vsqrt(v) / cst<V>(s.bc2Sqrt) + cst<V>(eps);
        }
        p = p + cst<V>(-s.stepSize) * (m / denom);
      };
      if constexpr (kAmsgrad) {
        forEachElement<K>(op, {params, grads, expAvgs, expAvgSqs, maxExpAvgSqs}, scalars, body);
      } else {
        forEachElement<K>(op, {params, grads, expAvgs, expAvgSqs}, scalars, body);
      }
    };
    if (amsgrad) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_optim, CPU, m) {
  m.impl("adam_", TORCH_FN((adamKernel<false, false>)));
  m.impl("adamw_", TORCH_FN((adamKernel<false, true>)));
}

TORCH_LIBRARY_IMPL(gilfree_optim, Meta, m) {
  m.impl("adam_", TORCH_FN((adamKernel<true, false>)));
  m.impl("adamw_", TORCH_FN((adamKernel<true, true>)));
}

}  // namespace gilfree_optim
