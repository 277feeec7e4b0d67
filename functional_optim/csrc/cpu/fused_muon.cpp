// Muon's element-wise passes (declared in fused_optim.h; steps/muon.cpp calls them): the
// ATen ops torch.optim's Muon runs around its Newton-Schulz iteration (torch/optim/_muon.py,
// torch 2.13), two passes where torch's eager step makes six:
//   momentum: buf.lerp_(grad, 1 - momentum); u = nesterov ? grad.lerp(buf, momentum) : buf;
//             x = u.bfloat16()
//   update:   param.mul_(decay); param.add_(update, alpha=alpha)   (update: bfloat16)
// with ATen's arithmetic, so the same bits: lerp's and add's fused multiply-adds (atenFmadd
// below) and float -> bfloat16 rounded to nearest even (at::vec::convert's). Unlike the
// fused optimizer kernels (fused_loop.h: no FMA, every build DEFAULT's bits), these round
// as ATen's build for the CPU rounds, so each build gives a different last bit where ATen's
// builds do (tests/functional_optim/test_muon_passes.py: torch's eager Muon's bits under each
// ATEN_CPU_CAPABILITY).
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

// a * b + c as ATen's CPU kernels compute it: rounded once (a fused multiply-add,
// at::vec::fmadd's) in the AVX2 and AVX512 builds; twice in the DEFAULT build, whose
// baseline instruction set has none (checked against torch 2.13's lerp_ and add_(alpha=) on
// float32: the same bits, vector loop and scalar tail alike).
template <class V>
inline V atenFmadd(const V& a, const V& b, const V& c) {
  if constexpr (kIsScalar<V>) {
#if defined(CPU_CAPABILITY_DEFAULT)
    return a * b + c;
#else
    return std::fma(a, b, c);
#endif
  } else {
    return at::vec::fmadd(a, b, c);
  }
}

// torch.lerp(self, end, weight), scalar weight, as ATen's CPU kernel (lerp_vec): fmadd(weight,
// end - self, self) for |weight| < 0.5, else fmadd(weight - 1, end - self, end).
template <class V>
inline V atenLerp(const V& self, const V& end, double weight) {
  const float w = static_cast<float>(weight);
  if (std::abs(w) < 0.5f) {
    return atenFmadd(V(w), end - self, self);
  }
  return atenFmadd(V(w - 1.0f), end - self, end);
}

// fn<V>(j) for j in [0, n): vectors of Vectorized<float> then a scalar tail (in the DEFAULT
// build, a plain loop the compiler vectorizes with its baseline instructions).
template <class Fn>
inline void overElements(int64_t n, const Fn& fn) {
  int64_t j = 0;
#if !defined(CPU_CAPABILITY_DEFAULT)
  using V = Vectorized<float>;
  for (; j + V::size() <= n; j += V::size()) {
    fn(V(), j);
  }
#endif
  for (; j < n; ++j) {
    fn(0.0f, j);
  }
}

// Blocks of kBlock elements of [0, numel), in parallel (grain: ATen's element-wise ops').
template <class Fn>
inline void overBlocks(int64_t numel, const Fn& fn) {
  at::parallel_for(0, numel, at::internal::GRAIN_SIZE, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; j += kBlock) {
      fn(j, std::min(kBlock, end - j));
    }
  });
}

void muonMomentum(const at::Tensor& grad, const at::Tensor& buf, const at::Tensor& out, double momentum, bool nesterov) {
  const float* g = grad.data_ptr<float>();
  float* b = buf.data_ptr<float>();
  at::BFloat16* x = out.data_ptr<at::BFloat16>();
  overBlocks(buf.numel(), [&](int64_t start, int64_t len) {
    alignas(64) float u[kBlock];
    overElements(len, [&](auto tag, int64_t j) {
      using V = decltype(tag);
      const V gv = loadAt<V>(g + start + j);
      const V bv = atenLerp(loadAt<V>(b + start + j), gv, 1 - momentum);
      storeAt(bv, b + start + j);
      storeAt(nesterov ? atenLerp(gv, bv, momentum) : bv, u + j);
    });
    at::vec::convert(u, x + start, len);
  });
}

void muonUpdate(const at::Tensor& param, const at::Tensor& update, double decay, double alpha) {
  float* p = param.data_ptr<float>();
  const at::BFloat16* d = update.data_ptr<at::BFloat16>();
  overBlocks(param.numel(), [&](int64_t start, int64_t len) {
    alignas(64) float u[kBlock];
    at::vec::convert(d + start, u, len);
    overElements(len, [&](auto tag, int64_t j) {
      using V = decltype(tag);
      const V scaled = loadAt<V>(p + start + j) * cst<V>(decay);  // param.mul_(decay), rounded
      storeAt(atenFmadd(loadAt<V>(u + j), cst<V>(alpha), scaled), p + start + j);
    });
  });
}

}  // namespace

[[maybe_unused]] static const bool momentumAdded = addKernel<MuonMomentumKernel>(&muonMomentum);
[[maybe_unused]] static const bool updateAdded = addKernel<MuonUpdateKernel>(&muonUpdate);

}  // namespace CPU_CAPABILITY
}  // namespace gilfree_optim
