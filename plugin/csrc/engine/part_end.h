// What a worker does when its part of a backward pass ends: one hook, registered by a
// client of the engine.
//
// A worker's part of a pass ends when every gradient it expects has arrived and been
// accumulated, so its gradients in the context are final for the pass (engine.h); the
// root's part ends last, once the pass ended everywhere. The engine then calls the
// registered hook on that worker with the pass's hook arguments (the int list the caller of
// backward gave, forwarded with every gradient message of the pass) and sends the hook's
// answer, two int64 words, back to the root through the first-contact answers. The root
// keeps every reached worker's answers with the context until its next pass there starts
// (partEndAnswers). The engine reads neither the arguments nor the answers: what they mean
// is the registrant's.
//
// The hook arguments come from another worker: the hook validates them.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

namespace gilfree_rpc {

using PartEndAnswer = std::array<int64_t, 2>;
// Runs on the thread that ended the worker's part, holding no engine lock; must not throw
// (an exception is answered as {0, 0}).
using PartEndHook = std::function<PartEndAnswer(int64_t contextId, const std::vector<int64_t>& hookArgs)>;

// Registers the hook (replacing any earlier one); without one the answer is {0, 0}.
void setPartEndHook(PartEndHook hook);

// Runs the registered hook (the engine calls it; {0, 0} without a hook or when it throws).
PartEndAnswer runPartEndHook(int64_t contextId, const std::vector<int64_t>& hookArgs);

// Worker id -> the answers it sent (one per part of the pass it ran: usually one).
using PartEndAnswers = std::unordered_map<int64_t, std::vector<PartEndAnswer>>;

// On the root: the answers of every worker the latest pass of the context reached, when
// that pass ended everywhere (empty when it failed) and no pass of the context runs from
// here now; nullopt while one runs, or for a context the engine does not know here.
std::optional<PartEndAnswers> partEndAnswers(int64_t contextId);

}  // namespace gilfree_rpc
