// Shared machinery of the fused CPU optimizer steps (ops gilfree_optim::*_, schemas in
// ops.cpp), the part that does not depend on the CPU's vector instructions:
//   * argument checks (lists, dtypes, devices, shapes, layouts), run before anything is
//     mutated, with errors that name the op, the list and the index;
//   * step counters: each parameter's own `step` tensor is incremented and its value handed
//     to the op, which computes its per-tensor scalars (bias corrections...) once per tensor;
//   * the choice among the builds of each kernel: the files under cpu/ hold the per-element
//     math and are compiled once per vector instruction set (DEFAULT: the compiler's baseline;
//     AVX2: -mavx2 -mfma; AVX512: -mavx512f/bw/vl/dq), as ATen compiles its native/cpu/
//     kernels; each build puts its kernel in a table (cpu/fused_loop.h) and the op calls the
//     best one this CPU runs (selectedIsa()).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/irange.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gilfree_optim {

// ---------------------------------------------------------------------------------------
// Checks (run by the CPU kernel and the meta kernel before anything is mutated).

struct NamedList {
  const char* name;
  at::TensorList tensors;
};

// State that exists only when an option is on (amsgrad's max_exp_avg_sqs...): when `on`,
// one tensor per parameter, checked like the others; when off, ignored (may be empty).
struct OptionalList {
  const char* name;
  at::TensorList tensors;
  bool on;
  const char* option;  // how the error names the option, e.g. "amsgrad=True"
};

// The dtypes of the fused kernels, ours and torch's (float32, float64, bfloat16, float16):
// the one list of them (the op fused_dtype gives it to functional_optim's Python).
bool fusedDtype(at::ScalarType dtype);

// `params` and every list of `others` (gradients and state, one tensor per parameter):
// same length; each tensor dense and strided, with the parameter's dtype, device and
// shape; parameters and state non-overlapping and dense with the parameter's strides
// (gradients may have other strides: they are copied). Floating dtypes only.
void checkTensorLists(
    const char* op,
    at::TensorList params,
    std::initializer_list<NamedList> others,
    std::initializer_list<OptionalList> optional = {});

// `steps`: one 0-dim (or 1-element) float32/float64 counter per parameter, on the CPU
// (or meta, for the meta kernel).
void checkSteps(const char* op, at::TensorList params, at::TensorList steps, const char* name = "state_steps");

// `scalars`: one 1-element floating-point tensor per parameter (float32, float64, bfloat16 or
// float16), on the CPU (or meta).
void checkScalars(const char* op, at::TensorList params, at::TensorList scalars, const char* name);

// Whether the op runs on the meta device (some parameter is a meta tensor): its kernel then
// only checks its arguments (the CPU and Meta kernels are one function).
bool isMeta(at::TensorList params);

// The last part of every op's checks, then its step counters: checks `steps` (when given);
// on the CPU, raises unless every parameter is on the CPU, adds 1 to each counter (in its
// own dtype, as torch's `step += 1`) and returns the new values (one per parameter, or none
// without `steps`). On meta: returns none (forEachElement then does nothing).
std::vector<double> startStep(const char* op, at::TensorList params, std::optional<at::TensorList> steps = std::nullopt);

// `step += 1` in place for a one-element float32/float64 CPU counter, in its own dtype (as
// torch's `step += 1`); returns the new value. The caller has checked the counter.
double incrementStep(const at::Tensor& step);

// ---------------------------------------------------------------------------------------
// One kernel, several builds.

// The instruction sets the files under cpu/ are compiled for (index into KernelTable).
enum Isa : int { kIsaDefault = 0, kIsaAvx2 = 1, kIsaAvx512 = 2, kNumIsas = 3 };

// The instruction set ATen's own CPU kernels run with: the best this CPU supports, or a
// lower one named by ATEN_CPU_CAPABILITY (default, avx2, avx512). Read once per process.
Isa selectedIsa();
// Called by each build of the kernels when the library loads.
void addBuild(Isa isa);
// The build the fused kernels run: the best one linked in that is not above selectedIsa().
// Fixed at the first call (after the library has loaded).
Isa activeIsa();
// Its name: "DEFAULT", "AVX2" or "AVX512".
const char* isaName(Isa isa);

// The builds of kernel `Op` (a tag type, one per op) with signature `Fn`, one slot per
// instruction set, filled at library load (a constant-initialized array: no code, so one
// copy whatever the flags of the objects that name it).
template <class Op, class Fn>
inline Fn* kernelTable[kNumIsas] = {};

// The CPU kernel registered for `Op`: calls the active build (every build holds every op).
template <class Op, class Fn>
struct IsaDispatch;
template <class Op, class R, class... A>
struct IsaDispatch<Op, R(A...)> {
  static R call(A... args) {
    static R (*const fn)(A...) = kernelTable<Op, R(A...)>[activeIsa()];
    return fn(std::forward<A>(args)...);
  }
};

// ---------------------------------------------------------------------------------------
// Kernels without an op of their own, which a group step (steps/) calls through
// IsaDispatch<Tag, Fn>::call: each build of their file puts them in kernelTable.
// Muon's element-wise passes around its Newton-Schulz iteration (cpu/fused_muon.cpp, called
// by steps/muon.cpp), each one pass over float32 CPU tensors of one shape, contiguous,
// computed as torch.optim's ATen ops compute them, so to the same bits:
//   MuonMomentum(grad, buf, out, momentum, nesterov): buf = lerp(buf, grad, 1 - momentum);
//     out (bfloat16) = bfloat16(nesterov ? lerp(grad, buf, momentum) : buf)
//   MuonUpdate(param, update, decay, alpha): param = param * decay + alpha * update
//     (update: bfloat16)
struct MuonMomentumKernel;
using MuonMomentumFn = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, bool);
struct MuonUpdateKernel;
using MuonUpdateFn = void(const at::Tensor&, const at::Tensor&, double, double);
}  // namespace gilfree_optim
