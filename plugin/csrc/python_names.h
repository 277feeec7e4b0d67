// How Python names torch's types, for the messages of errors that reach Python users:
// "torch.float32", "torch.sparse_coo". One place for every room's messages.
#pragma once

#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace gilfree_rpc {

// A dtype as Python prints it: "torch.float32", "torch.int64".
inline std::string dtypeName(at::ScalarType dtype) {
  return "torch." + std::string(c10::getDtypeNames(dtype).first);
}

// A layout as Python prints it: "torch.strided", "torch.sparse_coo".
inline std::string layoutName(at::Layout layout) {
  switch (layout) {
    case at::kStrided: return "torch.strided";
    case at::kSparse: return "torch.sparse_coo";
    case at::kSparseCsr: return "torch.sparse_csr";
    case at::kSparseCsc: return "torch.sparse_csc";
    case at::kSparseBsr: return "torch.sparse_bsr";
    case at::kSparseBsc: return "torch.sparse_bsc";
    case at::kMkldnn: return "torch._mkldnn";
    case at::kJagged: return "torch.jagged";
    default: return "layout " + std::to_string(static_cast<int>(layout));
  }
}

}  // namespace gilfree_rpc
