// Fused NAdam step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.nadam's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad
//   NAdamW: p *= 1 - lr * wd          NAdam: g += wd * p
//   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
//   denom = sqrt(v / bc2) + eps
//   p += -(lr (1 - mu) / (1 - mu_product)) * g / denom
//   p += -(lr mu_next / (1 - mu_product mu_next)) * m / denom
// Per parameter (once, from its own step t and mu_product tensor):
//   mu = beta1 (1 - 0.5 * 0.96^(t momentum_decay)),  mu_next likewise at t + 1,
//   mu_product *= mu (in the tensor's dtype), bc2 = 1 - beta2^t.
#include "fused_loop.h"

#include <ATen/ScalarOps.h>

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct NadamScalars {
  double bc2;
  double gradStep;
  double avgStep;
};

void nadamKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
    at::TensorList muProducts, at::TensorList steps, double lr, double beta1, double beta2, double weightDecay,
    double momentumDecay, double eps, bool decoupledWeightDecay, bool maximize) {
  const char* op = "nadam_";
  checkTensorLists(op, params, {{"grads", grads}, {"exp_avgs", expAvgs}, {"exp_avg_sqs", expAvgSqs}});
  checkScalars(op, params, muProducts, "mu_products");
  const std::vector<double> stepValues = startStep(op, params, steps);
  std::vector<NadamScalars> scalars;
  for (const auto i : c10::irange(stepValues.size())) {
    const double step = stepValues[i];
    const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, step * momentumDecay));
    const double muNext = beta1 * (1.0 - 0.5 * std::pow(0.96, (step + 1) * momentumDecay));
    // mu_product.mul_(mu): in the tensor's dtype, with mu cast to it first; a bfloat16 or
    // float16 one (torch's load_state_dict casts it to such a parameter's dtype) as torch's
    // `mu_product *= mu` with a Python float: ATen's op on the wrapped number (float math,
    // rounded once), not mul_(Scalar), which would round mu to the tensor's dtype first
    const at::Tensor& mp = muProducts[i];
    if (mp.scalar_type() == at::kFloat) {
      *mp.data_ptr<float>() = *mp.data_ptr<float>() * static_cast<float>(mu);
    } else if (mp.scalar_type() == at::kDouble) {
      *mp.data_ptr<double>() = *mp.data_ptr<double>() * mu;
    } else {
      mp.mul_(at::native::wrapped_scalar_tensor(mu));
    }
    const double muProduct = mp.item<double>();
    const double muProductNext = muProduct * muNext;
    scalars.push_back(
        {1 - std::pow(beta2, step), (lr * (1.0 - mu) / (1.0 - muProduct)) * -1,
         (-lr * muNext) / (1.0 - muProductNext)});
  }
  forEachElement<4>(op, {params, grads, expAvgs, expAvgSqs}, scalars, [=](const NadamScalars& s, auto& x) {
    using V = vec_of<decltype(x)>;
    V& p = x[0];
    const V g = decayedGradient(p, x[1], maximize, lr, weightDecay, decoupledWeightDecay);
    adamMoments(x[2], x[3], g, beta1, beta2);
    const V denom = vsqrt(x[3] / cst<V>(s.bc2)) + cst<V>(eps);
    p = p + cst<V>(s.gradStep) * (g / denom);
    p = p + cst<V>(s.avgStep) * (x[2] / denom);
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(nadam_, nadamKernel)

}  // namespace gilfree_optim
