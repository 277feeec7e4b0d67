// Fused CPU steps for sparse (COO) gradients: SparseAdam, Adagrad's and SGD's sparse paths
// (schemas in ops.cpp; machinery in fused_optim.h).
//
// Each op touches only the rows a gradient holds: it coalesces the gradient once (at::Tensor::
// coalesce, the call torch.optim makes, so duplicate indices are summed in torch's order),
// then loops over the coalesced entries with at::parallel_for, each entry one contiguous
// block of the parameter and of its state (the parameter is contiguous; its leading
// `sparse_dim` dimensions are the gradient's indices, the rest the block). The indices of a
// coalesced gradient are distinct, so no two threads write the same element.
//
// The per-element arithmetic is torch.optim's (torch 2.13) op by op, each intermediate
// rounded to the parameter's dtype as torch's tensor ops round it (bfloat16/float16: computed
// in float32, rounded after each op; a Python-float factor is cast to the math type first):
//
// sparse_adam_ (torch/optim/_functional.py, sparse_adam), with step counted here:
//   g = maximize ? -grad : grad
//   um = (g - m) * (1 - beta1);           m = m + um
//   uv = (g * g - v) * (1 - beta2);       v = v + uv
//   p = p + (-step_size) * ((um + m_old) / (sqrt(uv + v_old) + eps)),
//   step_size = lr * sqrt(1 - beta2^step) / (1 - beta1^step)
//   (a gradient without entries changes nothing but its step counter, as torch's)
// sparse_adagrad_ (torch/optim/adagrad.py, _single_tensor_adagrad's sparse branch):
//   s = s + g * g;   p = p + (-clr) * (g / (sqrt(s) + eps)),   clr = lr / (1 + (step - 1) * lr_decay)
// sparse_sgd_ (torch/optim/sgd.py without momentum and weight decay):
//   p = p + (-lr) * g
//
// Where the parameters can differ from torch's in the last bits: the square roots here are
// IEEE (correctly rounded) while torch's CPU sqrt of a float32 tensor is not always (observed
// on torch 2.13, ATEN_CPU_CAPABILITY avx512 and default; ATen takes it from MKL's vector math
// where MKL is built in); torch adds a scaled sparse update into the dense parameter with
// cpublas::axpy (BLAS), which may fuse the multiply and the add (sparse_adagrad_,
// sparse_sgd_; sparse_adam_'s factor there is 1, exact either way). SGD's sparse path, as
// torch's, does not coalesce: an uncoalesced gradient's entries are added one by one in their
// order. The state (moments, sums) involves neither and equals torch's.
#include "fused_loop.h"

#include <ATen/OpMathType.h>

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

// The checks of a sparse op, before anything changes: `params` dense, contiguous, floating,
// with `state` lists alike (checkTensorLists); each gradient a sparse COO tensor with its
// parameter's shape, dtype and device.
void checkSparse(const char* op, at::TensorList params, at::TensorList grads, std::initializer_list<NamedList> state) {
  TORCH_CHECK(
      grads.size() == params.size(), "gilfree_optim::", op, ": expected ", params.size(), " grads (one per parameter), got ",
      grads.size());
  checkTensorLists(op, params, state);
  for (const auto i : c10::irange(params.size())) {
    const auto& p = params[i];
    const auto& g = grads[i];
    TORCH_CHECK(
        p.is_contiguous(), "gilfree_optim::", op, ": params[", i, "] must be contiguous (sparse steps address rows)");
    TORCH_CHECK(
        g.layout() == at::kSparse, "gilfree_optim::", op, ": grads[", i, "] must be a sparse COO tensor, got layout ",
        g.layout());
    TORCH_CHECK(
        g.scalar_type() == p.scalar_type() && g.device() == p.device() && g.sizes() == p.sizes(), "gilfree_optim::", op,
        ": grads[", i, "] has dtype ", g.scalar_type(), ", device ", g.device(), ", shape ", g.sizes(),
        "; its parameter has ", p.scalar_type(), ", ", p.device(), ", ", p.sizes());
  }
}

// Calls `body(offset, values)` for each entry of the sparse `grad`: `offset` is the entry's
// first element in the (contiguous) parameter, `values` its `block` values. A coalesced
// gradient's entries are distinct rows, taken in parallel; with `inOrder` the entries are
// taken one after the other on this thread, in their order (duplicate rows allowed).
template <class T, class Body>
void forEachRow(
    const at::Tensor& param, const at::Tensor& grad, const at::Tensor& values, const Body& body,
    bool inOrder = false) {
  const int64_t nnz = grad._nnz();
  if (nnz == 0) {
    return;
  }
  const int64_t sparseDim = grad.sparse_dim();
  const at::Tensor indices = grad._indices().contiguous();
  const int64_t* idx = indices.data_ptr<int64_t>();
  const T* val = values.data_ptr<T>();
  const int64_t block = values.numel() / nnz;
  std::vector<int64_t> strides(param.strides().begin(), param.strides().begin() + sparseDim);
  // Threads only for steps of more than 256K elements (1 MiB of float32 rows): below that,
  // waking the pool costs more than the rows (1,000 rows of 64 ran slower on 2 threads than on 1).
  const int64_t grain = std::max<int64_t>(1, 262144 / std::max<int64_t>(block, 1));
  auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t offset = 0;
      for (int64_t d = 0; d < sparseDim; ++d) {
        offset += idx[d * nnz + k] * strides[d];
      }
      body(offset, val + k * block, block);
    }
  };
  if (inOrder) {
    rows(0, nnz);
  } else {
    at::parallel_for(0, nnz, grain, rows);
  }
}

// `grad` coalesced, its values contiguous.
std::pair<at::Tensor, at::Tensor> coalescedValues(const at::Tensor& grad) {
  at::Tensor c = grad.coalesce();
  return {c, c._values().contiguous()};
}

// The per-row loops, on restrict pointers and by-value constants so that the compiler
// vectorizes them (float32/float64; -ffp-contract=off keeps every product rounded apart).
template <class T, class M, bool kMaximize>
void adamRow(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict g, int64_t n, M oneMinusBeta1,
             M oneMinusBeta2, M eps, M minusStepSize) {
  for (int64_t j = 0; j < n; ++j) {
    const M gj = kMaximize ? -static_cast<M>(g[j]) : static_cast<M>(g[j]);
    const M mOld = static_cast<M>(m[j]), vOld = static_cast<M>(v[j]);
    const M um = static_cast<M>(static_cast<T>(static_cast<M>(static_cast<T>(gj - mOld)) * oneMinusBeta1));
    const M gg = static_cast<M>(static_cast<T>(gj * gj));
    const M uv = static_cast<M>(static_cast<T>(static_cast<M>(static_cast<T>(gg - vOld)) * oneMinusBeta2));
    m[j] = static_cast<T>(mOld + um);
    v[j] = static_cast<T>(vOld + uv);
    const M numer = static_cast<M>(static_cast<T>(um + mOld));
    const M root = static_cast<M>(static_cast<T>(std::sqrt(static_cast<M>(static_cast<T>(uv + vOld)))));
    const M denom = static_cast<M>(static_cast<T>(root + eps));
    const M update = static_cast<M>(static_cast<T>(minusStepSize * static_cast<M>(static_cast<T>(numer / denom))));
    p[j] = static_cast<T>(static_cast<M>(p[j]) + update);
  }
}

template <class T, class M, bool kMaximize>
void adagradRow(T* __restrict p, T* __restrict s, const T* __restrict g, int64_t n, M eps, M minusClr) {
  for (int64_t j = 0; j < n; ++j) {
    const M gj = kMaximize ? -static_cast<M>(g[j]) : static_cast<M>(g[j]);
    const M sNew = static_cast<M>(static_cast<T>(static_cast<M>(s[j]) + static_cast<M>(static_cast<T>(gj * gj))));
    s[j] = static_cast<T>(sNew);
    const M std = static_cast<M>(static_cast<T>(static_cast<M>(static_cast<T>(std::sqrt(sNew))) + eps));
    const M ratio = static_cast<M>(static_cast<T>(gj / std));
    p[j] = static_cast<T>(static_cast<M>(p[j]) + static_cast<M>(static_cast<T>(minusClr * ratio)));
  }
}

template <class T, class M, bool kMaximize>
void sgdRow(T* __restrict p, const T* __restrict g, int64_t n, M minusLr) {
  for (int64_t j = 0; j < n; ++j) {
    const M gj = kMaximize ? -static_cast<M>(g[j]) : static_cast<M>(g[j]);
    p[j] = static_cast<T>(static_cast<M>(p[j]) + static_cast<M>(static_cast<T>(minusLr * gj)));
  }
}

void sparseAdamKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expAvgSqs,
    at::TensorList steps, double lr, double beta1, double beta2, double eps, bool maximize) {
  const char* op = "sparse_adam_";
  checkSparse(op, params, grads, {{"exp_avgs", expAvgs}, {"exp_avg_sqs", expAvgSqs}});
  const std::vector<double> stepValues = startStep(op, params, steps);
  for (const auto i : c10::irange(stepValues.size())) {
    const double step = stepValues[i];
    const double stepSize = lr * std::sqrt(1 - std::pow(beta2, step)) / (1 - std::pow(beta1, step));
    auto [coalesced, values] = coalescedValues(grads[i]);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, params[i].scalar_type(), "gilfree_optim::sparse_step", [&] {
      using T = scalar_t;
      using M = at::opmath_type<T>;
      T* p = params[i].data_ptr<T>();
      T* m = expAvgs[i].data_ptr<T>();
      T* v = expAvgSqs[i].data_ptr<T>();
      const M oneMinusBeta1 = static_cast<M>(1 - beta1), oneMinusBeta2 = static_cast<M>(1 - beta2);
      const M epsM = static_cast<M>(eps), minusStepSize = static_cast<M>(-stepSize);
      forEachRow<T>(params[i], coalesced, values, [=](int64_t offset, const T* g, int64_t n) {
        if (maximize) {
          adamRow<T, M, true>(p + offset, m + offset, v + offset, g, n, oneMinusBeta1, oneMinusBeta2, epsM, minusStepSize);
        } else {
          adamRow<T, M, false>(p + offset, m + offset, v + offset, g, n, oneMinusBeta1, oneMinusBeta2, epsM, minusStepSize);
        }
      });
    });
  }
}

void sparseAdagradKernel(
    at::TensorList params, at::TensorList grads, at::TensorList stateSums, at::TensorList steps, double lr,
    double lrDecay, double eps, bool maximize) {
  const char* op = "sparse_adagrad_";
  checkSparse(op, params, grads, {{"state_sums", stateSums}});
  const std::vector<double> stepValues = startStep(op, params, steps);
  for (const auto i : c10::irange(stepValues.size())) {
    const double clr = lr / (1 + (stepValues[i] - 1) * lrDecay);
    auto [coalesced, values] = coalescedValues(grads[i]);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, params[i].scalar_type(), "gilfree_optim::sparse_step", [&] {
      using T = scalar_t;
      using M = at::opmath_type<T>;
      T* p = params[i].data_ptr<T>();
      T* s = stateSums[i].data_ptr<T>();
      const M epsM = static_cast<M>(eps), minusClr = static_cast<M>(-clr);
      forEachRow<T>(params[i], coalesced, values, [=](int64_t offset, const T* g, int64_t n) {
        if (maximize) {
          adagradRow<T, M, true>(p + offset, s + offset, g, n, epsM, minusClr);
        } else {
          adagradRow<T, M, false>(p + offset, s + offset, g, n, epsM, minusClr);
        }
      });
    });
  }
}

void sparseSgdKernel(at::TensorList params, at::TensorList grads, double lr, bool maximize) {
  const char* op = "sparse_sgd_";
  checkSparse(op, params, grads, {});
  if (isMeta(params)) {
    return;
  }
  startStep(op, params);
  for (const auto i : c10::irange(params.size())) {
    // SGD needs no coalescing: an uncoalesced gradient's entries are added one after the other,
    // in their order, on one thread (duplicate rows may follow each other), as torch adds them.
    const bool inOrder = !grads[i].is_coalesced();
    auto [coalesced, values] = inOrder ? std::pair<at::Tensor, at::Tensor>(grads[i], grads[i]._values().contiguous())
                                       : coalescedValues(grads[i]);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, params[i].scalar_type(), "gilfree_optim::sparse_step", [&] {
      using T = scalar_t;
      using M = at::opmath_type<T>;
      T* p = params[i].data_ptr<T>();
      const M minusLr = static_cast<M>(-lr);
      forEachRow<T>(params[i], coalesced, values, [=](int64_t offset, const T* g, int64_t n) {
        if (maximize) {
          sgdRow<T, M, true>(p + offset, g, n, minusLr);
        } else {
          sgdRow<T, M, false>(p + offset, g, n, minusLr);
        }
      }, inOrder);
    });
  }
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(sparse_adam_, sparseAdamKernel)
GILFREE_FUSED_OP(sparse_adagrad_, sparseAdagradKernel)
GILFREE_FUSED_OP(sparse_sgd_, sparseSgdKernel)

// The sparse gradients make the dispatcher pick the SparseCPU (SparseMeta) key: the same
// kernels serve it.
#if defined(CPU_CAPABILITY_DEFAULT)
#define GILFREE_SPARSE_KEY_(name, kernel) \
  m.impl(#name, TORCH_FN((IsaDispatch<name##Op, std::remove_pointer_t<decltype(&kernel)>>::call)))
TORCH_LIBRARY_IMPL(gilfree_optim, SparseCPU, m) {
  GILFREE_SPARSE_KEY_(sparse_adam_, sparseAdamKernel);
  GILFREE_SPARSE_KEY_(sparse_adagrad_, sparseAdagradKernel);
  GILFREE_SPARSE_KEY_(sparse_sgd_, sparseSgdKernel);
}
TORCH_LIBRARY_IMPL(gilfree_optim, SparseMeta, m) {
  m.impl("sparse_adam_", TORCH_FN(sparseAdamKernel));
  m.impl("sparse_adagrad_", TORCH_FN(sparseAdagradKernel));
  m.impl("sparse_sgd_", TORCH_FN(sparseSgdKernel));
}
#endif

}  // namespace gilfree_optim
