// Embedding-bag lookups served natively by RPC (plugin/embedding.py): the forward pass of a
// parameter server's embedding tables with no Python on the owner.
//
// An owner shares an nn.EmbeddingBag's weight under a handle (registerTable). A caller sends
// lookupBags by RPC (rpc_functions.h): the owner computes each table's bags on its RPC
// thread, without its GIL, concatenates them, and, inside a distributed autograd context,
// records a send function for the result, as torch's RPC records one for an RPC's answer
// (an autograd_message_id made by the owner, so the engine routes the gradient back to it).
// The caller records the matching recv function on the answer (recordLookupAnswer). The
// backward pass then runs through the owner's embedding_bag backward, whose weight
// gradient is sparse (sparse=true), like nn.EmbeddingBag(sparse=True)'s.
//
// torch internals relied on: compat.h's recordSendFunction and recordRecvFunction (torch's
// RPC layer's own recording of a message with autograd metadata). The owner's context knows no
// worker (it sent no message with autograd metadata), so releasing it sends nothing back;
// the caller's context knows the owner, so the caller's release reaches it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace dist_engine {

// Shares `weight` (2-D, the table) for lookups with the embedding-bag mode `mode` (0 sum or
// 1 mean, as at::embedding_bag; torch has no sparse gradient for max); returns its handle (unique in the process, never
// reused). The registry holds the tensor until unregisterTable.
int64_t registerTable(const at::Tensor& weight, int64_t mode);
// Forgets a handle; whether it was registered.
bool unregisterTable(int64_t handle);

// RPC handler: the bags of each table `handles[i]` for (indices[i], offsets[i]) (1-D int64,
// nn.EmbeddingBag's input and offsets), concatenated along dim 1: float B x (sum of the
// tables' widths), B = offsets[i].size(0) for every i. With contextId >= 0 and grad
// enabled, records a send function in that context and returns its autograd_message_id
// (else -1). Raises RuntimeError naming the argument for an unknown handle or bad shapes.
std::tuple<at::Tensor, int64_t> lookupBags(
    int64_t contextId,
    const std::vector<int64_t>& handles,
    const std::vector<at::Tensor>& indices,
    const std::vector<at::Tensor>& offsets);

// On the caller: records the recv function of answer `rows` from worker `fromWorker` with
// `messageId` in context `contextId` (nothing when messageId is -1); returns rows, now part
// of the context's graph.
at::Tensor recordLookupAnswer(int64_t contextId, int64_t messageId, int64_t fromWorker, at::Tensor rows);

}  // namespace dist_engine
