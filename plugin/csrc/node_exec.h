// Running one autograd node the way torch's local engine does: tensor pre-hooks,
// pre-hooks, the node itself, output validation and post-hooks.
#pragma once

#include "pass_state.h"

#include <functional>

namespace dist_engine {

// The gradients gathered in `buffer`. (InputBuffer::variables does the same but is
// not exported from libtorch; `buffer` is a public member.)
inline variable_list takeInputs(InputBuffer&& buffer) {
  return std::move(buffer.buffer);
}

// Tensor pre-hooks (hooks registered on the tensors this node computes the
// gradient of) and retains_grad hooks, then the node's own pre-hooks.
variable_list callPreHooks(Node& fn, variable_list inputs);

// Runs `fn` on `inputs` and returns its validated outputs (one per next edge:
// reduced to the input's shape, cast to its dtype; see validate_outputs). With
// keepGraph false the node's saved tensors are freed, as in torch.
variable_list callFunction(Node& fn, InputBuffer&& inputs, bool keepGraph);

// Casts and checks `grads` against `fn`'s next edges, as the local engine does
// with any node's outputs; used for gradients that arrive over RPC.
void validateGradients(Node& fn, variable_list& grads);

// Runs the hooks of an AccumulateGrad node around `store`, which receives the
// leaf's gradient (when it is defined) to keep in the context. `fn.apply` is not
// called, so `.grad` is left alone. Order as in torch: tensor pre-hooks,
// pre-hooks, store, post-hooks.
void accumulateLeaf(Node& fn, InputBuffer&& inputs, const std::function<void(at::Tensor&&)>& store);

}  // namespace dist_engine
