#include "rpc/worker_error.h"

#include "compat.h"

#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <cctype>
#include <regex>
#include <vector>

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

// The where of a backward pass's errors, before the context id.
constexpr const char* kPassWhere = "in the backward pass of context ";

// A trailer (errorTrailer's form) in a text: where it starts (its blank) and ends (after its
// bracket), and its parts.
struct Trailer {
  size_t start = 0;
  size_t end = 0;
  std::string origin;
  std::string worker;
  std::string workerId;
  std::string where;
  bool atEnd = false;  // nothing but blank space after it
};

// Every trailer in `text`, in order: " [<origin> on worker '<name>' (id <n>), <where>]" at the
// end of a line (origin and where hold no brackets).
std::vector<Trailer> trailers(const std::string& text) {
  static const std::regex form(
      R"( \[(?:([^\[\]\n]*) )?on worker '([^'\n]*)' \(id (-?[0-9]+)\), ([^\[\]\n]*)\](?=\n|$))");
  std::vector<Trailer> found;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), form); it != std::sregex_iterator(); ++it) {
    Trailer t;
    t.start = static_cast<size_t>(it->position(0));
    t.end = t.start + static_cast<size_t>(it->length(0));
    t.origin = (*it)[1].matched ? it->str(1) : "";
    t.worker = it->str(2);
    t.workerId = it->str(3);
    t.where = it->str(4);
    t.atEnd = text.find_first_not_of(" \t\r\n", t.end) == std::string::npos;
    found.push_back(std::move(t));
  }
  return found;
}

std::optional<Trailer> lastTrailer(const std::string& text) {
  auto all = trailers(text);
  if (all.empty()) {
    return std::nullopt;
  }
  return all.back();
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

std::string errorTrailer(const std::string& origin, const std::string& where) {
  return " [" + (origin.empty() ? "" : origin + " ") + "on " + thisWorkerLabel() + ", " + where + "]";
}

std::string passError(int64_t contextId, const std::string& what, const std::string& origin) {
  std::string text = what;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.pop_back();
  }
  return kMarker + std::to_string(thisWorkerId()) + ": " + text +
      errorTrailer(origin, kPassWhere + std::to_string(contextId));
}

void rethrowWithTrailer(const c10::Error& error, const std::string& where) {
  const std::string& message = error.msg();
  const auto found = lastTrailer(message);
  if (found.has_value() && found->atEnd) {
    throw;  // raised further on, with its trailer
  }
  const std::string name = pythonTypeOf(error);  // compat.h: torch's own mapping
  std::string text = message;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.pop_back();
  }
  text += errorTrailer(name + " raised", where);
  if (name == "IndexError") {
    throw c10::IndexError(std::move(text), error.backtrace());
  }
  if (name == "ValueError") {
    throw c10::ValueError(std::move(text), error.backtrace());
  }
  if (name == "TypeError") {
    throw c10::TypeError(std::move(text), error.backtrace());
  }
  if (name == "NotImplementedError") {
    throw c10::NotImplementedError(std::move(text), error.backtrace());
  }
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) {
    throw c10::OutOfMemoryError(std::move(text), error.backtrace());
  }
  throw c10::Error(std::move(text), error.backtrace());
}

std::map<std::string, std::string> errorParts(const std::string& text) {
  std::map<std::string, std::string> parts;
  const auto found = lastTrailer(text);
  if (!found.has_value()) {
    return parts;
  }
  const Trailer& t = *found;
  parts["message"] = text.substr(0, t.start);
  parts["origin"] = t.origin;
  static const std::regex raised(R"(^([A-Za-z_][A-Za-z0-9_.:<>]*) raised\b)");
  std::smatch type;
  parts["type"] = std::regex_search(t.origin, type, raised) ? type.str(1) : "";
  parts["worker"] = t.worker;
  parts["worker_id"] = t.workerId;
  parts["where"] = t.where;
  parts["at_end"] = t.atEnd ? "1" : "0";
  static const std::regex node(R"(^Error on Node (-?[0-9]+): )");
  std::smatch prefix;
  if (std::regex_search(parts["message"], prefix, node)) {
    parts["node"] = prefix.str(1);
    parts["what"] = parts["message"].substr(static_cast<size_t>(prefix.length(0)));
  }
  if (t.where.rfind(kPassWhere, 0) == 0) {
    const std::string id = t.where.substr(std::string(kPassWhere).size());
    static const std::regex number(R"(^-?[0-9]+$)");
    if (std::regex_match(id, number)) {
      parts["context_id"] = id;
    }
  }
  return parts;
}

std::optional<std::string> findPassError(const std::string& text) {
  // The last trailer of passError's form, at the end of a line.
  std::optional<Trailer> last;
  for (const auto& t : trailers(text)) {
    if (t.where.rfind(kPassWhere, 0) == 0) {
      last = t;
    }
  }
  if (!last.has_value()) {
    return std::nullopt;
  }
  // Its start: the first "Error on Node <n>: " of that worker before it (an RPC layer may
  // have put words in front; the original message itself may hold such a marker too).
  const std::string marker = kMarker + last->workerId + ": ";
  const size_t start = text.find(marker);
  if (start == std::string::npos || start > last->start) {
    return std::nullopt;
  }
  return text.substr(start, last->end - start);
}

}  // namespace gilfree_rpc
