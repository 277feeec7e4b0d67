// Differences between the torch versions the library builds against (2.11 and newer).
//
// torch 2.13 holds autograd nodes in c10::intrusive_ptr (Edge::function, the send
// and recv function maps of a DistAutogradContext); torch 2.11 holds them in
// std::shared_ptr. The engine only needs "an owning pointer to a Node", so it names
// the type the installed torch uses and builds nodes through makeNode.
#pragma once

#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace dist_engine {

using NodePtr = decltype(std::declval<torch::autograd::Edge>().function);

template <class T, class... Args>
NodePtr makeNode(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace dist_engine
