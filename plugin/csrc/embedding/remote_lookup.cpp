#include "embedding/remote_lookup.h"

#include "python_names.h"
#include "rpc/recorded_call.h"
#include "rpc/worker_error.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace gilfree_rpc {
namespace {

struct Table {
  at::Tensor weight;
  int64_t mode;
};

std::mutex tablesMu;
std::unordered_map<int64_t, Table>& tables() {
  static auto* registry = new std::unordered_map<int64_t, Table>();  // leaky: RPC threads outlive statics
  return *registry;
}
std::atomic<int64_t> nextHandle{0};

Table tableOf(int64_t handle, size_t i) {
  std::lock_guard<std::mutex> lock(tablesMu);
  auto it = tables().find(handle);
  TORCH_CHECK(
      it != tables().end(), "lookup_bags: handles[", i, "] = ", handle,
      " is not a shared table on this worker (never shared, or unshared)");
  return it->second;
}

// torch's legacy name of a CPU tensor type, as its argument checks print it: "torch.LongTensor".
std::string tensorTypeName(const at::Tensor& t) {
  return std::string("torch.") + c10::toString(t.scalar_type()) + "Tensor";
}

// The checks of table i's rows and offsets, in this order: each tensor defined, dense and on
// the CPU; 1-D; of the dtypes the lookup takes; as many bags as table 0 (`numBags`); offsets
// that start at 0, never decrease and end within the rows (bag k is rows[offsets[k] :
// offsets[k + 1]], the last one up to the end); every row in [0, numEmbeddings) (numEmbeddings
// -1: not known, only rows < 0 are refused). Reads each value once; names the first offending
// position. `prefix` leads every message ("lookup_bags: " on the owner), `rowsName` names the
// rows' argument ("indices" on the owner). After them, torch's text where nn.EmbeddingBag
// checks the same (F.embedding_bag's ValueErrors, typed: by RPC the error trailer carries the
// type, rpc/worker_error.h; ATen's checkScalarTypes for the dtypes; embedding_bag's offsets[0], offsets[-1] and
// index checks); torch does not check that offsets never decrease (it reads outside the
// rows, or crashes, when they do).
void checkTable(
    const std::string& prefix,
    const char* rowsName,
    size_t i,
    const at::Tensor& indices,
    const at::Tensor& offsets,
    int64_t numBags,
    int64_t numEmbeddings) {
  for (const bool isRows : {true, false}) {
    const at::Tensor& t = isRows ? indices : offsets;
    const char* arg = isRows ? rowsName : "offsets";
    TORCH_CHECK(t.defined(), prefix, arg, "[", i, "] is undefined");
    TORCH_CHECK(
        t.layout() == at::kStrided, prefix, arg, "[", i, "] must be a dense (strided) tensor, got layout ",
        layoutName(t.layout()));
    TORCH_CHECK(t.device().is_cpu(), prefix, arg, "[", i, "] must be on the CPU, got ", t.device());
  }
  TORCH_CHECK_VALUE(
      indices.dim() == 1, prefix, rowsName, "[", i,
      "]: input has to be a 1D Tensor (the bags' rows, with offsets), but got Tensor of dimension ", indices.dim());
  TORCH_CHECK_VALUE(
      offsets.dim() == 1, prefix, "offsets[", i,
      "]: offsets has to be a 1D Tensor, but got Tensor of dimension ", offsets.dim());
  TORCH_CHECK(
      indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt, prefix, rowsName, "[", i,
      "]: Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int; but got ",
      tensorTypeName(indices), " instead (while checking arguments for embedding_bag)");
  TORCH_CHECK(
      offsets.scalar_type() == at::kLong, prefix, "offsets[", i,
      "]: Expected tensor for argument #2 'offsets' to have scalar type Long; but got ", tensorTypeName(offsets),
      " instead (while checking arguments for embedding_bag)");
  TORCH_CHECK(
      offsets.size(0) == numBags, prefix, "offsets[", i, "] has ", offsets.size(0), " bags, offsets[0] ", numBags);
  const int64_t length = indices.size(0);
  const at::Tensor o = offsets.contiguous();
  const int64_t* bag = o.const_data_ptr<int64_t>();
  if (numBags > 0) {
    TORCH_CHECK(
        bag[0] == 0, prefix, "offsets[", i,
        "]: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
        "However, got ",
        bag[0]);
    bool decreases = false;  // one branch-free pass, then the first offender
    for (int64_t k = 1; k < numBags; ++k) {
      decreases |= bag[k] < bag[k - 1];
    }
    for (int64_t k = 1; decreases && k < numBags; ++k) {
      TORCH_CHECK(
          bag[k] >= bag[k - 1], prefix, "offsets[", i, "]: offsets have to be non-decreasing, but offsets[", k,
          "] = ", bag[k], " is less than offsets[", k - 1, "] = ", bag[k - 1]);
    }
    TORCH_CHECK(
        bag[numBags - 1] <= length, prefix, "offsets[", i, "]: offsets[-1] can not be greater than input's length ",
        length, " but got offsets[-1] of ", bag[numBags - 1]);
  }
  const std::string range = numEmbeddings < 0 ? "num_embeddings" : std::to_string(numEmbeddings);
  const at::Tensor rows = indices.contiguous();
  AT_DISPATCH_INDEX_TYPES(rows.scalar_type(), "lookup_bags", [&] {
    const index_t* row = rows.const_data_ptr<index_t>();
    // One branch-free pass (r | (last - r) is negative when r < 0 or r > last), then the
    // exact check finds the first offender.
    const int64_t last = (numEmbeddings < 0 ? std::numeric_limits<int64_t>::max() : numEmbeddings) - 1;
    int64_t signs = 0;
    for (int64_t k = 0; k < length; ++k) {
      const int64_t r = row[k];
      signs |= r | static_cast<int64_t>(static_cast<uint64_t>(last) - static_cast<uint64_t>(r));  // no overflow
    }
    const bool outside = signs < 0;
    for (int64_t k = 0; outside && k < length; ++k) {
      TORCH_CHECK(
          row[k] >= 0 && (numEmbeddings < 0 || static_cast<int64_t>(row[k]) < numEmbeddings), prefix, rowsName, "[",
          i, "]: Index ", k, " of input takes value ", static_cast<int64_t>(row[k]),
          " which is not in the valid range [0, ", range, ")");
    }
  });
}

// Table 0's number of bags (0 when its offsets are not 1-D: checkTable refuses them first).
int64_t numBagsOf(const at::Tensor& offsets0) {
  return offsets0.defined() && offsets0.dim() == 1 ? offsets0.size(0) : 0;
}

}  // namespace

void checkLookupRequest(
    const std::string& prefix,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& offsets) {
  TORCH_CHECK(
      inputs.size() == offsets.size() && !inputs.empty(), prefix,
      "expected as many inputs as offsets, at least one; got ", inputs.size(), " and ", offsets.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTable(prefix, "inputs", i, inputs[i], offsets[i], numBagsOf(offsets[0]), -1);
  }
}

int64_t registerTable(const at::Tensor& weight, int64_t mode) {
  TORCH_CHECK(weight.dim() == 2, "share_embedding_bag: the weight must be 2-D, got ", weight.dim(), "-D");
  TORCH_CHECK(
      weight.layout() == at::kStrided && weight.device().is_cpu() && at::isFloatingType(weight.scalar_type()),
      "share_embedding_bag: the weight must be a dense floating-point tensor on the CPU, got ", weight.toString(),
      " on ", weight.device());
  // max mode has no sparse gradient in torch (nn.functional.embedding_bag refuses it)
  TORCH_CHECK(mode == 0 || mode == 1, "share_embedding_bag: mode must be 0 (sum) or 1 (mean), got ", mode);
  const int64_t handle = nextHandle.fetch_add(1);
  std::lock_guard<std::mutex> lock(tablesMu);
  tables().emplace(handle, Table{weight, mode});
  return handle;
}

bool unregisterTable(int64_t handle) {
  std::lock_guard<std::mutex> lock(tablesMu);
  return tables().erase(handle) > 0;
}

std::tuple<at::Tensor, int64_t> lookupBags(
    int64_t contextId,
    const std::vector<int64_t>& handles,
    const std::vector<at::Tensor>& indices,
    const std::vector<at::Tensor>& offsets) {
  // Every check comes before any work: a refused request records nothing and changes nothing.
  TORCH_CHECK(!handles.empty(), "lookup_bags: handles is empty");
  TORCH_CHECK(
      indices.size() == handles.size() && offsets.size() == handles.size(),
      "lookup_bags: expected one indices and one offsets tensor per handle (", handles.size(), "), got ",
      indices.size(), " and ", offsets.size());
  checkCallerContextId("lookup_bags: ", contextId);
  std::vector<Table> found;
  found.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    found.push_back(tableOf(handles[i], i));
    checkTable("lookup_bags: ", "indices", i, indices[i], offsets[i], numBagsOf(offsets[0]), found[i].weight.size(0));
  }
  const bool record = contextId >= 0 && at::GradMode::is_enabled();
  std::vector<at::Tensor> parts;
  parts.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    at::AutoGradMode gradMode(record);
    parts.push_back(std::get<0>(at::embedding_bag(
        found[i].weight, indices[i], offsets[i], /*scale_grad_by_freq=*/false, found[i].mode, /*sparse=*/true)));
  }
  at::Tensor rows = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  HeldRequest none;  // the request brings nothing that requires grad
  const int64_t messageId = record ? recordCallee("lookup_bags: ", none, contextId, {rows}) : -1;
  return {messageId < 0 ? rows.detach() : rows, messageId};
}

}  // namespace gilfree_rpc

// Kernels (schemas in ops.cpp).
TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_share_table", TORCH_FN(gilfree_rpc::registerTable));
  m.impl("_unshare_table", TORCH_FN(gilfree_rpc::unregisterTable));
  // answered as an RPC function: its errors leave with the trailer (rpc/worker_error.h)
  m.impl("_lookup_bags", [](int64_t contextId, const std::vector<int64_t>& handles, const std::vector<at::Tensor>& indices,
                            const std::vector<at::Tensor>& offsets) {
    return gilfree_rpc::withTrailer("in gilfree_rpc::_lookup_bags", [&] {
      return gilfree_rpc::lookupBags(contextId, handles, indices, offsets);
    });
  });
  m.impl("_check_lookup", TORCH_FN(gilfree_rpc::checkLookupRequest));
}
