// Verdicts of one optimizer step exchanged between its owners (all or nothing, one
// validation round between the owners themselves).
//
// The caller sends the step to every owner at once, under a key unique to the step. Each
// owner reads and validates its gradients, then tells every other owner its verdict
// (accepted, or rejected with a reason), and applies its part only once every other
// owner accepted. A verdict travels as a call of the RPC handler (plugin/optim.py,
// `_receive_verdict`, async execution) on the peer: the handler records it and answers
// with the peer's own verdict once the peer has one. So each owner learns a peer's
// verdict from whichever comes first: the peer's call, or the answer to its own call
// (an owner that already has a peer's verdict answers that peer's waiting call and
// sends none itself). The answer's RPC timeout bounds the wait: a peer that is dead,
// frozen, or never received the step fails it, naming the peer.
//
// No lock is held while waiting. An exchange is finished once this owner's verdict is
// known and every peer's has arrived (each call this owner makes ends, at the latest,
// with its RPC timeout); the verdicts of the last 4096 finished exchanges answer calls
// that arrive later (crossing calls). An exchange whose step never reached this owner
// is forgotten after a lease (twice the agent's RPC timeout, 10 minutes if it is
// infinite), and the calls waiting on it fail. An owner that gave up waiting (a peer
// failed) withdraws: peers that ask later are answered with a rejection, so they do not
// apply either.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dist_engine {

// nullopt: accepted; a string: why this owner rejected the step (or withdrew).
using Verdict = std::optional<std::string>;

// Records this owner's verdict of step `key`, answers the peers' calls that waited for
// it, and calls `handler` (a TorchScript function's qualified name) on every peer in
// `peers` whose verdict has not arrived, with an RPC timeout of `timeoutSeconds` (<= 0:
// the agent's). The returned future (of str?) completes with None once every peer
// accepted, or with a message naming the first peer that rejected or failed. Raises if
// this owner already gave its verdict of `key`.
c10::intrusive_ptr<c10::ivalue::Future> exchangeVerdicts(
    int64_t key,
    const std::vector<std::string>& peers,
    const std::string& handler,
    Verdict verdict,
    double timeoutSeconds);

// The RPC handler's work: peer `sender` gives its verdict of step `key`. The returned
// future (of str?) completes with this owner's verdict once it has one.
c10::intrusive_ptr<c10::ivalue::Future> receiveVerdict(int64_t key, const std::string& sender, Verdict verdict);

// Exchanges in progress on this owner (expired ones are forgotten first).
int64_t numStepExchanges();

// torch.classes.dist_engine.RejectOnExit(key, peers, handler, timeout_s): for a
// TorchScript `with` around an owner's validation. Unless accept() was called in the
// body, __exit__ (which TorchScript calls also when the body raises) gives the
// rejection of step `key` to the peers, so they learn it at once; the owner's own error
// (the validation's, of its type) goes on to its caller.
struct RejectOnExit : torch::CustomClassHolder {
  RejectOnExit(int64_t key, std::vector<std::string> peers, std::string handler, double timeoutSeconds)
      : key(key), peers(std::move(peers)), handler(std::move(handler)), timeoutSeconds(timeoutSeconds) {}

  void enter() {}
  void accept() {
    accepted = true;
  }
  bool exit(const c10::IValue&, const c10::IValue&, const c10::IValue&);

  const int64_t key;
  const std::vector<std::string> peers;
  const std::string handler;
  const double timeoutSeconds;
  bool accepted = false;
};

}  // namespace dist_engine
