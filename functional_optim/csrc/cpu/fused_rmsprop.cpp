// Fused RMSprop step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.rmsprop's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   sq = sq * alpha + (1 - alpha) * g * g
//   centered: gavg = lerp(gavg, g, 1 - alpha);  avg = sqrt(sq - gavg * gavg) + eps
//   else:     avg = sqrt(sq) + eps
//   momentum > 0: buf = buf * momentum + g / avg;  p += -lr * buf
//   else:         p += -lr * g / avg
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

void rmspropKernel(
    at::TensorList params, at::TensorList grads, at::TensorList squareAvgs, at::TensorList gradAvgs,
    at::TensorList momentumBuffers, at::TensorList steps, double lr, double alpha, double eps,
    double weightDecay, double momentum, bool centered, bool maximize) {
  const char* op = "rmsprop_";
  checkTensorLists(
      op, params, {{"grads", grads}, {"square_avgs", squareAvgs}},
      {{"grad_avgs", gradAvgs, centered, "centered=True"},
       {"momentum_buffers", momentumBuffers, momentum > 0, "momentum > 0"}});
  startStep(op, params, steps);
  // Streams: p, g, sq, then gavg (centered) and buf (momentum) where present.
  auto run = [&](auto isCentered, auto hasMomentum) {
    constexpr bool kCentered = decltype(isCentered)::value;
    constexpr bool kMomentum = decltype(hasMomentum)::value;
    constexpr int kBuf = kCentered ? 4 : 3;
    constexpr int K = 3 + kCentered + kMomentum;
    auto body = [=](const NoScalars&, auto& x) {
      using V = vec_of<decltype(x)>;
      const V g = gradient(x[1], x[0], maximize, weightDecay);
      V& sq = x[2];
      sq = sq * cst<V>(alpha) + cst<V>(1 - alpha) * g * g;
      V avg;
      if constexpr (kCentered) {
        V& gavg = x[3];
        gavg = lerp(gavg, g, 1 - alpha);
        avg = vsqrt(sq + cst<V>(-1) * gavg * gavg);
      } else {
        avg = vsqrt(sq);
      }
      avg = avg + cst<V>(eps);
      if constexpr (kMomentum) {
        V& buf = x[kBuf];
        buf = buf * cst<V>(momentum) + cst<V>(1) * (g / avg);
        x[0] = x[0] + cst<V>(-lr) * buf;
      } else {
        x[0] = x[0] + cst<V>(-lr) * (g / avg);
      }
    };
    std::array<at::TensorList, K> lists;
    lists[0] = params;
    lists[1] = grads;
    lists[2] = squareAvgs;
    if constexpr (kCentered) {
      lists[3] = gradAvgs;
    }
    if constexpr (kMomentum) {
      lists[kBuf] = momentumBuffers;
    }
    forEachElement<K>(op, lists, body);
  };
  if (centered) {
    momentum > 0 ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
  } else {
    momentum > 0 ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
  }
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(rmsprop_, rmspropKernel)

}  // namespace gilfree_optim
