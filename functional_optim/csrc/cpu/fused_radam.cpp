// Fused RAdam step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.radam's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad
//   RAdamW: p *= 1 - lr * wd          RAdam: g += wd * p
//   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
//   rho_t > 5: p += -((m / bc1) * lr * (sqrt(bc2) / (sqrt(v) + eps)) * rect)
//   else:      p += -((m / bc1) * lr)
// Per parameter (once, from its own step t): bc1 = 1 - beta1^t, bc2 = 1 - beta2^t,
//   rho_inf = 2 / (1 - beta2) - 1, rho_t = rho_inf - 2 t beta2^t / bc2,
//   rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct RadamScalars {
  double bc1;
  double bc2Sqrt;
  double rect;
  bool rectified;
};

void radamKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
    at::TensorList steps, double lr, double beta1, double beta2, double weightDecay, double eps,
    bool decoupledWeightDecay, bool maximize) {
  const char* op = "radam_";
  checkTensorLists(op, params, {{"grads", grads}, {"exp_avgs", expAvgs}, {"exp_avg_sqs", expAvgSqs}});
  const std::vector<double> stepValues = startStep(op, params, steps);
  std::vector<RadamScalars> scalars;
  for (const double step : stepValues) {
    const double bc1 = 1 - std::pow(beta1, step);
    const double bc2 = 1 - std::pow(beta2, step);
    const double rhoInf = 2 / (1 - beta2) - 1;
    const double rhoT = rhoInf - 2 * step * std::pow(beta2, step) / bc2;
    const bool rectified = rhoT > 5.0;
    const double rect =
        rectified ? std::pow((rhoT - 4) * (rhoT - 2) * rhoInf / ((rhoInf - 4) * (rhoInf - 2) * rhoT), 0.5) : 0.0;
    scalars.push_back({bc1, std::pow(bc2, 0.5), rect, rectified});
  }
  forEachElement<4>(op, {params, grads, expAvgs, expAvgSqs}, scalars, [=](const RadamScalars& s, auto& x) {
    using V = vec_of<decltype(x)>;
    V& p = x[0];
    const V g = decayedGradient(p, x[1], maximize, lr, weightDecay, decoupledWeightDecay);
    adamMoments(x[2], x[3], g, beta1, beta2);
    const V corrected = x[2] / cst<V>(s.bc1) * cst<V>(lr);
    if (s.rectified) {
      const V adaptive = cst<V>(s.bc2Sqrt) / (vsqrt(x[3]) + cst<V>(eps));
      p = p + cst<V>(-1) * (corrected * adaptive * cst<V>(s.rect));
    } else {
      p = p + cst<V>(-1) * corrected;
    }
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(radam_, radamKernel)

}  // namespace gilfree_optim
