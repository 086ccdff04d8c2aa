// cli/bench/role_turn_replay.h: teacher-forced replays of held-out agentic QA trajectories,
// turn by turn (the fidelity part of `lorakv bench memory`, and the eviction bench's agents).
// Three role readers share one context: each role turn runs as its reader's private tokens
// (header, text, <|im_end|>) after the context, then is committed; other turns are appended
// as text. The per-turn form keeps each role turn's logits with its role and ordinal, and
// lets a caller look at the engine just before each role turn runs (to export the rows the
// reader is about to read).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lorakv/cli/bench/bench_memory.h"

namespace lorakv::cli {

// One role turn of a replay.
struct RoleTurnInfo {
  int64_t index = 0;   // among the replay's role turns, from 0
  int32_t reader = 0;  // planner 0, actor 1, reflector 2
  std::string role;
  int64_t ordinal = 0;            // the role's k-th turn in its trajectory, from 1
  std::vector<int32_t> tokens;    // the reader's private tokens: header, text, <|im_end|>
  int64_t header_tokens = 0;
};

// A role turn's logits: float32 [text tokens + 1, vocab], the rows predicting the text and
// its <|im_end|>.
struct TurnLogits {
  std::string role;
  int64_t ordinal = 0;
  at::Tensor logits;
};

// Called after the turn's reader has processed the context, before its turn runs.
using BeforeRoleTurn = std::function<void(const RoleTurnInfo&, runtime::Engine&, runtime::ContextId)>;

struct ReplayOptions {
  bool per_head_token_sets = false;  // the engine keeps a token set per KV head (adakv)
  // The other readers run each role turn as their own private tokens in the same step (then
  // drop it); only the role's logits are kept.
  bool every_agent_reads = false;
  BeforeRoleTurn before_turn;  // may be empty
};

// Every role turn's logits, in order, of one replay of `trajectories` as one context in
// `mode`, read by `readers` (planner, actor, reflector).
std::vector<TurnLogits> replay_turns(BenchWorkload& w, const std::vector<AdapterPtr>& readers,
                                     runtime::ContextOptions mode,
                                     const std::vector<const BenchTrajectory*>& trajectories,
                                     const ReplayOptions& options = {});

// Runs `turn` as the private tokens of `reader` (and `along` as other readers' private
// tokens in the same steps, dropped after); the rows predicting the text (TurnLogits::logits).
at::Tensor run_role_turn(runtime::Engine& engine, runtime::ReaderRef reader, const RoleTurnInfo& turn,
                         const std::vector<runtime::ReaderRef>& along = {});

}  // namespace lorakv::cli
