// The admission check of a remote module's untrusted inputs: ForwardProgram::checkInputs
// (program.h), run on everything a caller (another worker) sends before any instruction runs:
// their number; each one defined, dense (strided, not nested: a jagged tensor, a Python subclass,
// reaches this kernel through its __torch_dispatch__ and is refused here), on the CPU or the
// program's device, of the example's dtype and number of dimensions, inside its storage and
// without self-overlap; each dimension the export's size for it: a fixed number, or a symbol
// a * s + b with s in the range torch.export allows, one value for all the dimensions that share
// s. Nothing is read from the inputs' data.
#include "nn/program.h"

#include "python_names.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace gilfree_rpc::nn {
namespace {

// An input's memory, checked before any operator reads it: its elements lie inside its storage
// (sizes, strides and offset came from another worker), and no two of them share memory (an
// expanded tensor, stride 0: a few bytes sent would stand for any number of rows to compute).
void checkMemory(const std::string& prefix, const std::string& name, const at::Tensor& t) {
  if (t.numel() == 0) {
    return;
  }
  int64_t last = t.storage_offset();  // the index of its last element in the storage
  bool overflow = last < 0;
  for (int64_t d = 0; d < t.dim() && !overflow; ++d) {
    int64_t span = 0;
    overflow = t.stride(d) < 0 || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span) ||
        __builtin_add_overflow(last, span, &last);
  }
  int64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(last + 1, static_cast<int64_t>(t.element_size()), &bytes);
  TORCH_CHECK_VALUE(
      !overflow && t.has_storage() && bytes <= static_cast<int64_t>(t.storage().nbytes()), prefix,
      name, " reaches outside its storage (shape ", t.sizes(), ", strides ", t.strides(), ", offset ",
      t.storage_offset(), ")");
  TORCH_CHECK_VALUE(
      at::has_internal_overlap(t) != at::MemOverlap::Yes, prefix, name,
      " overlaps itself (an expanded tensor, with stride 0: strides ", t.strides(),
      "); send one whose elements each have their own memory (.contiguous())");
}

}  // namespace

void ForwardProgram::checkInputs(const std::string& prefix, const std::vector<at::Tensor>& inputs) const {
  checkBuilt();
  TORCH_CHECK_VALUE(
      inputs.size() == inputs_.size(), prefix, "expected ", inputs_.size(),
      " input tensors (the forward's tensor inputs, flattened), got ", inputs.size());
  std::vector<int64_t> values(symbolRanges_.size(), -1);
  std::vector<std::string> setBy(symbolRanges_.size());
  for (const bool derived : {false, true}) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = inputs[i];
      const InputSpec& spec = inputs_[i];
      const std::string name = "input " + spec.name + " (inputs[" + std::to_string(i) + "])";
      if (!derived) {
        TORCH_CHECK_VALUE(t.defined(), prefix, name, " is undefined");
        TORCH_CHECK_VALUE(
            t.layout() == at::kStrided && !t.is_nested(), prefix, name,
            " must be a dense (strided) tensor, got layout ", layoutName(t.layout()),
            t.is_nested() ? " (a nested tensor)" : "");
        TORCH_CHECK_VALUE(
            t.device().is_cpu() || t.device() == device_, prefix, name, " must be on the CPU or on ",
            device_, ", got ", t.device());
        TORCH_CHECK_VALUE(
            t.scalar_type() == spec.dtype, prefix, name, " must have dtype ", dtypeName(spec.dtype),
            " (the example's), got ", dtypeName(t.scalar_type()));
        TORCH_CHECK_VALUE(
            t.dim() == static_cast<int64_t>(spec.symbols.size()), prefix, name, " must have ",
            spec.symbols.size(), " dimensions (the example's), got ", t.dim(), " (shape ", t.sizes(), ")");
        checkMemory(prefix, name, t);
      }
      for (size_t d = 0; d < spec.symbols.size(); ++d) {
        const int64_t size = t.size(static_cast<int64_t>(d));
        const int64_t s = spec.symbols[d];
        if (s == -1) {
          TORCH_CHECK_VALUE(
              derived || size == spec.offsets[d], prefix, name, " dimension ", d, " must have size ",
              spec.offsets[d], " (fixed when the module was exported), got ", size, " (shape ", t.sizes(), ")");
          continue;
        }
        const bool plain = spec.scales[d] == 1 && spec.offsets[d] == 0;
        if (plain == derived) {
          continue;  // plain dimensions first: they give the symbols' values
        }
        const std::string form = plain ? std::string("s") + std::to_string(s)
                                       : std::to_string(spec.scales[d]) + "*s" + std::to_string(s) + " + " +
                std::to_string(spec.offsets[d]);
        if (values[s] == -1) {
          int64_t rest = 0;
          const bool overflow = __builtin_sub_overflow(size, spec.offsets[d], &rest);
          TORCH_CHECK_VALUE(
              !overflow && rest >= 0 && rest % spec.scales[d] == 0, prefix, name, " dimension ", d,
              " has size ", size, ", which is not of the form ", form, " the export gives it");
          values[s] = rest / spec.scales[d];
          setBy[s] = name + " dimension " + std::to_string(d);
          const auto [min, max] = symbolRanges_[s];
          TORCH_CHECK_VALUE(
              values[s] >= min && (max == -1 || values[s] <= max), prefix, name, " dimension ", d,
              " has size ", size, ", outside the range torch.export allows for it (s", s, " in [", min, ", ",
              max == -1 ? std::string("inf") : std::to_string(max), "], size ", form, ")");
          continue;
        }
        int64_t expected = 0;
        const bool overflow = __builtin_mul_overflow(spec.scales[d], values[s], &expected) ||
            __builtin_add_overflow(expected, spec.offsets[d], &expected);
        TORCH_CHECK_VALUE(
            !overflow && size == expected, prefix, name, " dimension ", d,
            " has size ", size, ", but ", setBy[s], " gives s", s, " = ", values[s], " and the export ties them (",
            name, " dimension ", d, " is ", form, ")");
      }
    }
  }
}


}  // namespace gilfree_rpc::nn
