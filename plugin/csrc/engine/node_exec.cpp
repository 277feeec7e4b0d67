#include "engine/node_exec.h"

namespace gilfree_rpc {

namespace {

std::string describe(const Node& fn, const std::string& msg) {
  return "Function " + fn.name() + " returned an " + msg;
}

}  // namespace

variable_list callPreHooks(Node& fn, variable_list inputs) {
  for (const auto& hook : fn.tensor_pre_hooks()) {
    inputs = (*hook)(inputs);
  }
  for (const auto& [index, hook] : fn.retains_grad_hooks()) {
    inputs = (*hook)(inputs);
  }
  for (const auto& hook : fn.pre_hooks()) {
    inputs = (*hook)(inputs);
  }
  return inputs;
}

variable_list callFunction(Node& fn, InputBuffer&& buffer, bool keepGraph) {
  variable_list inputs = callPreHooks(fn, takeInputs(std::move(buffer)));
  if (!keepGraph) {
    fn.will_release_variables();
  }
  const bool hasPostHooks = !fn.post_hooks().empty();
  variable_list outputs;
  if (hasPostHooks) {
    // Post hooks see the inputs too, so keep a copy of them.
    variable_list inputsCopy = inputs;
    outputs = fn(std::move(inputsCopy));
  } else {
    outputs = fn(std::move(inputs));
  }
  validateOutputs(fn.next_edges(), outputs, [&](const std::string& msg) { return describe(fn, msg); });
  for (const auto& hook : fn.post_hooks()) {
    outputs = hasPostHooks ? (*hook)(outputs, inputs) : (*hook)(outputs, {});
  }
  if (!keepGraph) {
    fn.release_variables();
  }
  return outputs;
}

bool canComputeOutputsSeparately(const Node& fn) {
  // Custom functions (PyNode, CppNode) compute every output whatever the edges.
  return isGeneratedBackwardNode(fn) && fn.post_hooks().empty();
}

variable_list callFunctionMasked(Node& fn, variable_list inputs, const std::vector<bool>& compute, bool releaseVariables) {
  auto& edges = fn.next_edges();
  TORCH_INTERNAL_ASSERT(compute.size() == edges.size());
  // Hide the edges whose outputs are not wanted now; put them back whatever happens.
  struct HiddenEdges {
    torch::autograd::edge_list& edges;
    std::vector<std::pair<size_t, torch::autograd::Edge>> hidden;
    void restore() {
      for (auto& [index, edge] : hidden) {
        edges[index] = std::move(edge);
      }
      hidden.clear();
    }
    ~HiddenEdges() {
      restore();
    }
  } guard{edges, {}};
  for (size_t i = 0; i < edges.size(); ++i) {
    if (!compute[i] && edges[i].is_valid()) {
      guard.hidden.emplace_back(i, std::move(edges[i]));
      edges[i] = torch::autograd::Edge();
    }
  }
  if (releaseVariables) {
    fn.will_release_variables();
  }
  variable_list outputs = fn(std::move(inputs));
  guard.restore();
  for (size_t i = 0; i < outputs.size() && i < compute.size(); ++i) {
    if (!compute[i]) {
      outputs[i] = at::Tensor();
    }
  }
  validateOutputs(edges, outputs, [&](const std::string& msg) { return describe(fn, msg); });
  if (releaseVariables) {
    fn.release_variables();
  }
  return outputs;
}

void validateGradients(Node& fn, variable_list& grads) {
  const auto& edges = fn.next_edges();
  TORCH_CHECK(
      grads.size() == edges.size(),
      "received ", grads.size(), " gradients for ", fn.name(), ", which expects ", edges.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const auto& edge = edges[i];
    if (!edge.is_valid() || !grads[i].defined()) {
      continue;
    }
    // A gradient may come back on another device than its tensor was sent from
    // (a peer without a device map for it sends it through the CPU): bring it home.
    const auto& meta = edge.function->input_metadata(edge.input_nr);
    if (grads[i].device() != meta.device()) {
      grads[i] = grads[i].to(meta.device());
    }
  }
  validateOutputs(edges, grads, [&](const std::string& msg) { return describe(fn, msg); });
}

void accumulateLeaf(Node& fn, InputBuffer&& buffer, const std::function<void(at::Tensor&&, size_t)>& store) {
  variable_list inputs = callPreHooks(fn, takeInputs(std::move(buffer)));
  const bool hasPostHooks = !fn.post_hooks().empty();
  if (!inputs.empty() && inputs[0].defined()) {
    if (hasPostHooks) {
      // Post hooks see the stored tensor, as in torch (whose distributed engine does
      // not count them either when it decides to keep the gradient without a copy).
      at::Tensor shared = inputs[0];
      store(std::move(shared), 2);
    } else {
      store(std::move(inputs[0]), 1);
    }
  }
  for (const auto& hook : fn.post_hooks()) {
    (*hook)(variable_list(), inputs);
  }
}

NodeCallRecord::NodeCallRecord(const Node& fn, const variable_list& inputs) {
  auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::BACKWARD_FUNCTION);
  if (C10_LIKELY(!callbacks.has_value())) {
    return;
  }
  guard_.emplace(std::move(*callbacks));
  const auto sequenceNr = static_cast<int64_t>(fn.sequence_nr());
  if (guard_->needsInputs()) {
    std::vector<c10::IValue> values(inputs.begin(), inputs.end());
    guard_->before(fn.name(), c10::ArrayRef<const c10::IValue>(values.data(), values.size()), sequenceNr);
  } else {
    guard_->before(fn.name(), sequenceNr);
  }
}

}  // namespace gilfree_rpc
