#include "step_exchange.h"

#include "transport.h"

#include <torch/csrc/distributed/rpc/rpc_agent.h>

#include <c10/util/Exception.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <deque>
#include <utility>

namespace dist_engine {
namespace {

namespace rpc = torch::distributed::rpc;
using c10::ivalue::Future;
using Clock = std::chrono::steady_clock;

struct Exchange {
  // This owner's verdict, once given (a withdrawal replaces an acceptance).
  std::optional<Verdict> local;
  // The peers, known once this owner gave its verdict.
  std::vector<std::string> expected;
  // Peers' verdicts (from their calls or from the answers to ours), first one kept.
  std::unordered_map<std::string, Verdict> received;
  // Peers' calls waiting for this owner's verdict.
  std::vector<c10::intrusive_ptr<Future>> waiting;
  // This owner's wait for the peers (null until it gave its verdict).
  c10::intrusive_ptr<Future> outcome;
  bool decided = false;
  Clock::time_point expires;
};

// An exchange is forgotten once decided with every peer's verdict in, but a peer's call
// may still be on its way (sent when this owner's call to it was): the verdicts of the
// last kFinished exchanges answer such late calls at once.
constexpr size_t kFinished = 4096;

struct Table {
  std::mutex mu;
  std::unordered_map<int64_t, Exchange> exchanges;
  std::unordered_map<int64_t, Verdict> finished;
  std::deque<int64_t> finishedOrder;
};

Table& table() {
  static auto* t = new Table();  // leaky: RPC threads may call in while the process exits
  return *t;
}

c10::TypePtr verdictType() {
  return c10::OptionalType::create(c10::StringType::get());
}

c10::IValue toIValue(const Verdict& verdict) {
  return verdict ? c10::IValue(*verdict) : c10::IValue();
}

// Completing a future runs its callbacks inline (a TorchScript continuation, a callback
// that records a verdict here): completions decided under the table's mutex run after
// it is released.
struct Completions {
  std::vector<std::pair<c10::intrusive_ptr<Future>, c10::IValue>> values;
  std::vector<std::pair<c10::intrusive_ptr<Future>, std::string>> errors;

  void run() {
    for (auto& [future, value] : values) {
      future->markCompleted(std::move(value));
    }
    for (auto& [future, message] : errors) {
      future->setError(std::make_exception_ptr(std::runtime_error(message)));
    }
  }
};

std::shared_ptr<rpc::RpcAgent> agent() {
  TORCH_CHECK(rpc::RpcAgent::isCurrentRpcAgentSet(), "step exchange: RPC is not initialized");
  return rpc::RpcAgent::getCurrentRpcAgent();
}

std::string selfName() {
  return agent()->getWorkerInfo().name_;
}

std::chrono::milliseconds lease() {
  const float timeout = agent()->getRpcTimeout().count() / 1000.0f;
  return std::chrono::milliseconds(0 < timeout && timeout < 300 ? static_cast<int64_t>(2000 * timeout) : 600'000);
}

Exchange& findOrAdd(Table& t, int64_t key, Clock::time_point now) {
  auto [it, added] = t.exchanges.try_emplace(key);
  if (added) {
    it->second.expires = now + lease();
  }
  return it->second;
}

// Decides this owner's wait once it can: a peer's rejection or failure, or every peer's
// acceptance. Having decided on a peer's failure, this owner withdraws its acceptance.
void decideLocked(Exchange& e, const std::string& self, Completions& out) {
  if (!e.local || e.decided) {
    return;
  }
  size_t accepted = 0;
  for (const auto& peer : e.expected) {
    auto it = e.received.find(peer);
    if (it == e.received.end()) {
      continue;
    }
    if (it->second) {
      e.decided = true;
      out.values.emplace_back(e.outcome, c10::IValue(*it->second));
      if (!e.local->has_value()) {
        e.local = Verdict("owner '" + self + "' withdrew from the step: " + *it->second);
      }
      return;
    }
    ++accepted;
  }
  if (accepted == e.expected.size()) {
    e.decided = true;
    out.values.emplace_back(e.outcome, c10::IValue());
  }
}

// Moves the exchange to the finished ones once decided with every peer's verdict in.
void finishIfDoneLocked(Table& t, int64_t key) {
  auto it = t.exchanges.find(key);
  if (it == t.exchanges.end()) {
    return;
  }
  const Exchange& e = it->second;
  if (!e.decided || !e.waiting.empty()) {
    return;
  }
  for (const auto& peer : e.expected) {
    if (e.received.count(peer) == 0) {
      return;
    }
  }
  if (t.finished.emplace(key, *e.local).second) {
    t.finishedOrder.push_back(key);
    if (t.finishedOrder.size() > kFinished) {
      t.finished.erase(t.finishedOrder.front());
      t.finishedOrder.pop_front();
    }
  }
  t.exchanges.erase(it);
}

void sweepLocked(Table& t, Clock::time_point now, const std::string& self, Completions& out) {
  for (auto it = t.exchanges.begin(); it != t.exchanges.end();) {
    Exchange& e = it->second;
    if (e.expires > now) {
      ++it;
      continue;
    }
    for (auto& call : e.waiting) {
      out.errors.emplace_back(
          call, "the optimizer step did not reach owner '" + self + "' within its lease; nothing was applied there");
    }
    if (e.outcome && !e.decided) {
      out.values.emplace_back(e.outcome, c10::IValue("the step's peers did not all answer owner '" + self + "' within its lease"));
    }
    it = t.exchanges.erase(it);
  }
}

// A peer's verdict reached this owner (by its call or by the answer to ours).
void record(int64_t key, const std::string& peer, Verdict verdict) {
  auto& t = table();
  Completions out;
  {
    std::lock_guard<std::mutex> guard(t.mu);
    auto it = t.exchanges.find(key);
    if (it == t.exchanges.end()) {
      return;  // already forgotten: its outcome was decided
    }
    it->second.received.try_emplace(peer, std::move(verdict));
    decideLocked(it->second, selfName(), out);
    finishIfDoneLocked(t, key);
  }
  out.run();
}

}  // namespace

c10::intrusive_ptr<Future> exchangeVerdicts(
    int64_t key,
    const std::vector<std::string>& peers,
    const std::string& handler,
    Verdict verdict,
    double timeoutSeconds) {
  auto& t = table();
  const std::string self = selfName();
  auto outcome = c10::make_intrusive<Future>(verdictType());
  Completions out;
  std::vector<std::string> toCall;
  {
    std::lock_guard<std::mutex> guard(t.mu);
    auto now = Clock::now();
    sweepLocked(t, now, self, out);
    Exchange& e = findOrAdd(t, key, now);
    TORCH_CHECK(!e.local.has_value(), "step exchange: owner '", self, "' already gave its verdict of step ", key);
    e.local = verdict;
    e.expected = peers;
    e.outcome = outcome;
    for (auto& call : e.waiting) {
      out.values.emplace_back(call, toIValue(verdict));
    }
    e.waiting.clear();
    if (verdict) {
      e.decided = true;  // this owner applies nothing: its wait is moot
      out.values.emplace_back(outcome, c10::IValue(*verdict));
    } else {
      decideLocked(e, self, out);
    }
    // a peer whose call is waiting has its answer now: only the others are called
    for (const auto& peer : peers) {
      if (e.received.count(peer) == 0) {
        toCall.push_back(peer);
      }
    }
    finishIfDoneLocked(t, key);
  }
  out.run();
  const float timeout = timeoutSeconds > 0 ? static_cast<float>(timeoutSeconds) : kAgentTimeout;
  for (const auto& peer : toCall) {
    c10::intrusive_ptr<Future> answer;
    try {
      answer = callScript(
          agent()->getWorkerInfo(peer).id_, c10::QualifiedName(handler), {key, self, toIValue(verdict)},
          /*asyncExecution=*/true, verdictType(), timeout);
    } catch (const std::exception& e) {
      record(key, peer, Verdict("owner '" + peer + "' could not be called: " + e.what()));
      continue;
    }
    answer->addCallback([key, peer](Future& done) {
      if (done.hasError()) {
        record(key, peer, Verdict("owner '" + peer + "' did not answer: " + done.tryRetrieveErrorMessage()));
      } else {
        const auto& value = done.value();
        record(key, peer, value.isNone() ? Verdict() : Verdict(value.toStringRef()));
      }
    });
  }
  return outcome;
}

c10::intrusive_ptr<Future> receiveVerdict(int64_t key, const std::string& sender, Verdict verdict) {
  auto& t = table();
  const std::string self = selfName();
  auto answer = c10::make_intrusive<Future>(verdictType());
  Completions out;
  {
    std::lock_guard<std::mutex> guard(t.mu);
    auto now = Clock::now();
    sweepLocked(t, now, self, out);
    auto done = t.finished.find(key);
    if (done != t.finished.end()) {
      out.values.emplace_back(answer, toIValue(done->second));  // a late call
    } else {
      Exchange& e = findOrAdd(t, key, now);
      e.received.try_emplace(sender, std::move(verdict));
      if (e.local) {
        out.values.emplace_back(answer, toIValue(*e.local));
      } else {
        e.waiting.push_back(answer);
      }
      decideLocked(e, self, out);
      finishIfDoneLocked(t, key);
    }
  }
  out.run();
  return answer;
}

int64_t numStepExchanges() {
  auto& t = table();
  Completions out;
  int64_t n;
  {
    std::lock_guard<std::mutex> guard(t.mu);
    sweepLocked(t, Clock::now(), rpc::RpcAgent::isCurrentRpcAgentSet() ? selfName() : "?", out);
    n = static_cast<int64_t>(t.exchanges.size());
  }
  out.run();
  return n;
}

bool RejectOnExit::exit(const c10::IValue&, const c10::IValue&, const c10::IValue&) {
  if (!accepted) {
    accepted = true;  // once
    exchangeVerdicts(
        key, peers, handler,
        Verdict("owner '" + selfName() + "' rejected its gradients (its own error says why)"), timeoutSeconds);
  }
  return false;
}

}  // namespace dist_engine
