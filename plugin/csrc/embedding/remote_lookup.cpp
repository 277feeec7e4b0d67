#include "embedding/remote_lookup.h"

#include "compat.h"

#include <ATen/ATen.h>
#include <torch/library.h>
#include <torch/csrc/distributed/autograd/context/container.h>

#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace dist_engine {
namespace {

namespace dist_autograd = torch::distributed::autograd;

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
  TORCH_CHECK(it != tables().end(), "lookup_bags: handles[", i, "] = ", handle, " is not a shared table on this worker");
  return it->second;
}

}  // namespace

int64_t registerTable(const at::Tensor& weight, int64_t mode) {
  TORCH_CHECK(weight.dim() == 2, "share_embedding_bag: the weight must be 2-D, got ", weight.dim(), "-D");
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
  TORCH_CHECK(!handles.empty(), "lookup_bags: handles is empty");
  TORCH_CHECK(
      indices.size() == handles.size() && offsets.size() == handles.size(),
      "lookup_bags: expected one indices and one offsets tensor per handle (", handles.size(), "), got ",
      indices.size(), " and ", offsets.size());
  const bool record = contextId >= 0 && at::GradMode::is_enabled();
  std::vector<at::Tensor> parts;
  parts.reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    const Table table = tableOf(handles[i], i);
    TORCH_CHECK(
        indices[i].dim() == 1 && indices[i].scalar_type() == at::kLong,
        "lookup_bags: indices[", i, "] must be a 1-D int64 tensor, got ", indices[i].dim(), "-D ",
        indices[i].scalar_type());
    TORCH_CHECK(
        offsets[i].dim() == 1 && offsets[i].scalar_type() == at::kLong,
        "lookup_bags: offsets[", i, "] must be a 1-D int64 tensor, got ", offsets[i].dim(), "-D ",
        offsets[i].scalar_type());
    TORCH_CHECK(
        i == 0 || offsets[i].size(0) == offsets[0].size(0),
        "lookup_bags: offsets[", i, "] has ", offsets[i].size(0), " bags, offsets[0] ", offsets[0].size(0));
    at::AutoGradMode gradMode(record);
    parts.push_back(std::get<0>(at::embedding_bag(
        table.weight, indices[i], offsets[i], /*scale_grad_by_freq=*/false, table.mode, /*sparse=*/true)));
  }
  at::Tensor rows = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  if (!record || !rows.requires_grad()) {
    return {rows.detach(), -1};
  }
  auto& container = dist_autograd::DistAutogradContainer::getInstance();
  auto ctx = container.getOrCreateContext(contextId);
  const int64_t messageId = container.newAutogradMessageId();
  std::vector<at::Tensor> sent{rows};
  recordSendFunction(ctx, messageId, sent);
  return {rows, messageId};
}

at::Tensor recordLookupAnswer(int64_t contextId, int64_t messageId, int64_t fromWorker, at::Tensor rows) {
  if (messageId < 0) {
    return rows;
  }
  if (!rows.requires_grad()) {
    rows.set_requires_grad(true);  // a leaf, as it came off the wire
  }
  std::vector<at::Tensor> received{rows};
  recordRecvFunction(contextId, messageId, fromWorker, received);  // the context's release then reaches the owner
  return received[0];
}

}  // namespace dist_engine

// Kernels (schemas in ops.cpp).
TORCH_LIBRARY_IMPL(dist_engine, CompositeImplicitAutograd, m) {
  m.impl("_share_table", TORCH_FN(dist_engine::registerTable));
  m.impl("_unshare_table", TORCH_FN(dist_engine::unregisterTable));
  m.impl("_lookup_bags", TORCH_FN(dist_engine::lookupBags));
  m.impl("_record_lookup_answer", TORCH_FN(dist_engine::recordLookupAnswer));
}
