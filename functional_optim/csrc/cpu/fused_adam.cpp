// Fused Adam and AdamW steps (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adam's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad
//   AdamW: p *= 1 - lr * wd          Adam: g += wd * p
//   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
//   amsgrad: vmax = max(vmax, v) and vmax replaces v below
//   p += -(lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step from each parameter's own step.
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct AdamScalars {
  double stepSize;
  double bc2Sqrt;
};

template <bool kDecoupled>
void adamKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
    at::TensorList maxExpAvgSqs, at::TensorList steps, double lr, double beta1, double beta2,
    double weightDecay, double eps, bool amsgrad, bool maximize) {
  const char* op = kDecoupled ? "adamw_" : "adam_";
  checkTensorLists(
      op, params, {{"grads", grads}, {"exp_avgs", expAvgs}, {"exp_avg_sqs", expAvgSqs}},
      {{"max_exp_avg_sqs", maxExpAvgSqs, amsgrad, "amsgrad=True"}});
  const std::vector<double> stepValues = startStep(op, params, steps);
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
      using V = vec_of<decltype(x)>;
      V& p = x[0];
      const V g = decayedGradient(p, x[1], maximize, lr, weightDecay, kDecoupled);
      V& m = x[2];
      V& v = x[3];
      adamMoments(m, v, g, beta1, beta2);
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

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(adam_, adamKernel<false>)
GILFREE_FUSED_OP(adamw_, adamKernel<true>)

}  // namespace gilfree_optim
