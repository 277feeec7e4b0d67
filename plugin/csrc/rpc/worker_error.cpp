#include "rpc/worker_error.h"

#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <cctype>
#include <regex>

namespace gilfree_rpc {

namespace rpc = torch::distributed::rpc;

namespace {
// torch's distributed engine starts its errors with "Error on Node <worker id>: "
// (torch/csrc/distributed/autograd/engine/dist_engine.cpp); ours do too.
constexpr const char* kMarker = "Error on Node ";

// This process's worker id, or -1 before RPC starts.
int64_t thisWorkerId() {
  if (rpc::RpcAgent::isCurrentRpcAgentSet()) {
    return rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo().id_;
  }
  return -1;
}

}  // namespace

std::string workerLabel(int64_t workerId) {
  if (rpc::RpcAgent::isCurrentRpcAgentSet()) {
    try {
      const auto& info = rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo(
          static_cast<rpc::worker_id_t>(workerId));
      return "worker '" + info.name_ + "' (id " + std::to_string(workerId) + ")";
    } catch (const std::exception&) {
      // Unknown id: fall through to the bare number.
    }
  }
  return "worker " + std::to_string(workerId);
}

std::string thisWorkerLabel() {
  if (rpc::RpcAgent::isCurrentRpcAgentSet()) {
    const auto& info = rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo();
    return "worker '" + info.name_ + "' (id " + std::to_string(info.id_) + ")";
  }
  return "worker ?";
}

std::string workerError(const std::string& where, const std::string& what) {
  return kMarker + std::to_string(thisWorkerId()) + ": " + thisWorkerLabel() + " " + where + ": " + what;
}

std::string passError(int64_t contextId, const std::string& what, const std::string& origin) {
  std::string text = what;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.pop_back();
  }
  return kMarker + std::to_string(thisWorkerId()) + ": " + text + " [" + (origin.empty() ? "" : origin + " ") + "on " +
      thisWorkerLabel() + ", in the backward pass of context " + std::to_string(contextId) + "]";
}

std::optional<std::string> findPassError(const std::string& text) {
  // The bracketed part that passError ends with: "[... on worker '<name>' (id <n>), in the
  // backward pass of context <id>]" (the origin holds no brackets), at the end of a line.
  static const std::regex trailer(
      R"(\[[^\[\]\n]*on worker '[^'\n]*' \(id (-?[0-9]+)\), in the backward pass of context -?[0-9]+\](?=\n|$))");
  std::smatch last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), trailer); it != std::sregex_iterator(); ++it) {
    last = *it;
  }
  if (last.empty()) {
    return std::nullopt;
  }
  const size_t trailerStart = static_cast<size_t>(last.position(0));
  const size_t end = trailerStart + static_cast<size_t>(last.length(0));
  // Its start: the first "Error on Node <n>: " of that worker before it (an RPC layer may
  // have put words in front; the original message itself may hold such a marker too).
  const std::string marker = kMarker + last.str(1) + ": ";
  const size_t start = text.find(marker);
  if (start == std::string::npos || start > trailerStart) {
    return std::nullopt;
  }
  return text.substr(start, end - start);
}

}  // namespace gilfree_rpc
