#include "worker_error.h"

#include <torch/csrc/distributed/rpc/rpc_agent.h>

namespace dist_engine {

namespace rpc = torch::distributed::rpc;

namespace {
constexpr const char* kMarker = "Error on worker '";
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
  return "Error on " + thisWorkerLabel() + " " + where + ": " + what;
}

std::string extractWorkerError(const std::string& text, const std::string& fallbackPrefix) {
  auto pos = text.rfind(kMarker);
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
