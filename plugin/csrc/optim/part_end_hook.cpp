#include "optim/part_end_hook.h"

#include "engine/gradients.h"
#include "engine/part_end.h"
#include "rpc/transport.h"

#include "functional_optim/csrc/group_step_ops.h"

#include <unordered_set>

namespace gilfree_rpc {
namespace {

// kGradientsFit (| kSomeSparse) when the engine holds gradients of the context here and
// every one fits its leaf (functional_optim's rule, the one its check_gradients applies:
// gradientFits); 0 otherwise. The dicts are not summed: a sum of gradients that each fit their
// leaf fits it too (a sparse and a dense one sum to a dense one).
int64_t finding(const StoredGradients& stored) {
  bool any = false, fits = true, sparse = false;
  for (const auto& dict : stored.dicts) {
    for (const auto& item : dict) {
      fits = fits && gilfree_optim::gradientFits(item.key(), item.value());
      sparse = sparse || (item.value().defined() && item.value().is_sparse());
      any = true;
    }
  }
  return any && fits ? (kGradientsFit | (sparse ? kSomeSparse : 0)) : 0;
}

// The step asked of this worker in `args` (see part_end_hook.h): its status + 1, or 0.
int64_t stepHere(int64_t contextId, const std::vector<int64_t>& args) {
  if (args.empty()) {
    return 0;
  }
  const int64_t self = selfWorkerId();
  std::unordered_set<int64_t> workers;
  int64_t handle = -1;
  bool wellFormed = args.size() % 2 == 1;
  for (size_t i = 1; wellFormed && i + 1 < args.size(); i += 2) {
    wellFormed = workers.insert(args[i]).second && args[i + 1] >= 0;
    handle = args[i] == self ? args[i + 1] : handle;
  }
  if (!wellFormed) {
    return kRefused + 1;
  }
  if (handle < 0) {
    return 0;
  }
  try {
    return NativeLocalOptimizer::find(handle)->step(contextId, -1, args[0]) + 1;
  } catch (const std::exception&) {
    // Nothing changed here (the optimizer checks before it applies); the caller asks this
    // owner for the reason on the usual path (DistributedOptimizer.backward_and_step).
    return kRefused + 1;
  }
}

PartEndAnswer optimizerPartEnd(int64_t contextId, const std::vector<int64_t>& args) {
  const int64_t step = stepHere(contextId, args);
  const auto stored = storedGradients(contextId);
  return {(stored ? finding(*stored) : 0) | (step << 4), stored ? stored->version : -1};
}

[[maybe_unused]] const bool hookRegistered = (setPartEndHook(&optimizerPartEnd), true);

}  // namespace

std::vector<int64_t> checkedVersions(int64_t contextId, const std::vector<int64_t>& workers, bool acceptSparse) {
  const auto answers = partEndAnswers(contextId);
  if (!answers) {
    return {};
  }
  std::vector<int64_t> versions;
  for (int64_t worker : workers) {
    auto it = answers->find(worker);
    if (it == answers->end() || it->second.size() != 1) {
      return {};  // not reached, or reached twice: not vouched for
    }
    const int64_t found = it->second[0][0];
    if ((found & kGradientsFit) == 0 || ((found & kSomeSparse) != 0 && !acceptSparse)) {
      return {};
    }
    versions.push_back(it->second[0][1]);
  }
  return versions;
}

std::vector<int64_t> stepOutcomes(int64_t contextId, const std::vector<int64_t>& workers) {
  std::vector<int64_t> outcomes(workers.size(), kNotReached);
  const auto answers = partEndAnswers(contextId);
  if (!answers) {
    return outcomes;
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    auto it = answers->find(workers[i]);
    if (it == answers->end()) {
      continue;
    }
    for (const auto& answer : it->second) {
      const int64_t step = answer[0] >> 4;
      if (step == 0) {
        continue;
      }
      // worst first: refused, late, applied
      const int64_t status = step - 1;
      if (outcomes[i] == kNotReached || status == kRefused || (status == kLate && outcomes[i] == kApplied)) {
        outcomes[i] = status;
      }
    }
  }
  return outcomes;
}

}  // namespace gilfree_rpc
