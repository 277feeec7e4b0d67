// Embedding-bag lookups served natively by RPC (plugin/embedding.py): the forward pass of a
// parameter server's embedding tables with no Python on the owner.
//
// An owner shares an nn.EmbeddingBag's weight under a handle (registerTable). A caller sends
// lookupBags by RPC (rpc_functions.h): the owner checks the request, computes each table's
// bags on its RPC thread, without its GIL, concatenates them, and, inside a distributed
// autograd context, records the call as torch's RPC records one (rpc/recorded_call.h: a send
// function for the result on the owner, the matching recv function on the caller when the
// answer arrives). The backward pass then runs through the owner's embedding_bag backward,
// whose weight gradient is sparse (sparse=true), like nn.EmbeddingBag(sparse=True)'s.
//
// Untrusted input: a request comes from another worker, so every argument is checked before a
// table is read (the checks torch's embedding_bag makes, and those it does not: offsets that
// never decrease, rows within the table), and a bad one is answered with an error that names
// the argument, the position and the value; nothing is recorded for it.
//
// Contexts: the owner's context knows no worker (the request brings nothing that requires
// grad), so releasing it sends nothing back; the caller's context knows the owner once the
// answer is recorded, so the caller's release reaches it (and when the caller released its
// context before the answer arrived, recorded_call.h tells the owner to release its side).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_rpc {

// Shares `weight` (2-D, the table) for lookups with the embedding-bag mode `mode` (0 sum or
// 1 mean, as at::embedding_bag; torch has no sparse gradient for max); returns its handle (unique in the process, never
// reused). The registry holds the tensor until unregisterTable.
int64_t registerTable(const at::Tensor& weight, int64_t mode);
// Forgets a handle; whether it was registered.
bool unregisterTable(int64_t handle);

// RPC handler: the bags of each table `handles[i]` for (indices[i], offsets[i])
// (nn.EmbeddingBag's input and offsets: dense 1-D CPU tensors, indices int64 or int32 within
// [0, num_embeddings), offsets int64 starting at 0, non-decreasing, at most indices[i].size(0)),
// concatenated along dim 1: float B x (sum of the tables' widths), B = offsets[i].size(0) for
// every i. With contextId >= 0 (an id made by a worker of the group) and grad enabled, records
// a send function in that context and returns its autograd_message_id (else -1). Raises, before
// anything is read or recorded, naming the argument, the position and the value, for an
// unknown handle or any other broken rule (torch's text where embedding_bag checks the same;
// ValueError for a tensor that is not 1-D, as embedding_bag's).
std::tuple<at::Tensor, int64_t> lookupBags(
    int64_t contextId,
    const std::vector<int64_t>& handles,
    const std::vector<at::Tensor>& indices,
    const std::vector<at::Tensor>& offsets);

// On the caller, before sending: the owner's checks of a request but the handles' and the
// rows' upper bound (the caller does not know the tables), with the caller's names (`prefix`
// leads each message, the rows are `inputs`). Raises on the first broken rule.
void checkLookupRequest(
    const std::string& prefix,
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& offsets);

}  // namespace gilfree_rpc
