#include "worker_error.h"

#include <torch/csrc/distributed/rpc/rpc_agent.h>

namespace dist_engine {

namespace rpc = torch::distributed::rpc;

namespace {
// torch's distributed engine starts its errors with "Error on Node <worker id>: "
// (torch/csrc/distributed/autograd/engine/dist_engine.cpp); ours do too, then name the
// worker: "Error on Node 2: worker 'w2' (id 2) <where>: <what>".
constexpr const char* kMarker = "Error on Node ";
constexpr const char* kAfterId = ": worker '";

// This process's worker id, or -1 before RPC starts.
int64_t thisWorkerId() {
  if (rpc::RpcAgent::isCurrentRpcAgentSet()) {
    return rpc::RpcAgent::getCurrentRpcAgent()->getWorkerInfo().id_;
  }
  return -1;
}

// Whether `text` at `pos` holds one of our messages: the marker, digits, then kAfterId
// (not a torch message that happens to start the same way).
bool isWorkerErrorAt(const std::string& text, size_t pos) {
  size_t i = pos + std::char_traits<char>::length(kMarker);
  size_t digits = i;
  if (i < text.size() && text[i] == '-') {
    ++i;
  }
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    ++i;
  }
  return i > digits && text.compare(i, std::char_traits<char>::length(kAfterId), kAfterId) == 0;
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

std::string extractWorkerError(const std::string& text, const std::string& fallbackPrefix) {
  auto pos = text.rfind(kMarker);
  while (pos != std::string::npos && !isWorkerErrorAt(text, pos)) {
    pos = pos == 0 ? std::string::npos : text.rfind(kMarker, pos - 1);
  }
  if (pos == std::string::npos) {
    return fallbackPrefix + text;
  }
  std::string inner = text.substr(pos);
  // TorchScript appends its own traceback after the message; the message ends at
  // the first blank line.
  auto end = inner.find("\n\n");
  if (end != std::string::npos) {
    inner.resize(end);
  }
  return inner;
}

}  // namespace dist_engine
