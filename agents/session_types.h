// agents/session_types.h: the plain structs of the sessions API: what a runtime, a session,
// an agent and a generation are created with, and what they report.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lorakv/runtime/driver_stats.h"
#include "lorakv/runtime/reply_decoder.h"
#include "lorakv/runtime/sharing_mode.h"

namespace lorakv::agents {

struct RuntimeOptions {
  std::string model;               // a GGUF file, or a Hugging Face checkpoint directory
  std::string dtype = "float32";   // activations: float32 or bfloat16
  int threads = 0;                 // libtorch's intra-op threads; 0: its default
  // The KV pools' capacity over every session, in bytes. Work that does not fit waits
  // until other work frees rows; a session that cannot fit even alone is refused.
  int64_t kv_pool_bytes = int64_t{512} << 20;
  double residual_rows_per_base_row = 2.0;  // residual pools' size against the base pool's
  int64_t block_size = 16;                  // token rows per cache block
  // Element type of the shared base K/V rows and private rows: float32, bfloat16 or int8 (a
  // float32 scale per row and KV head beside them); empty: the activations' dtype.
  std::string kv_dtype;
  // Element type of residual rows (C = X A): float32 or bfloat16; empty: the activations' dtype.
  std::string residual_dtype;
  // Endless streaming (runtime::EngineOptions::rerotate): keys stored before RoPE and rotated
  // to their index among the rows kept, so a streaming_llm session with a token budget runs
  // past the model's context. Its sessions save as format version 4 and restore only into a
  // rerotating runtime.
  bool rerotate = false;
  // Each KV head keeps its own token set (runtime::EngineOptions::per_head_token_sets): what
  // the per-head policy adakv needs; false: one token set per layer.
  bool per_head_token_sets = false;
  int64_t prefill_chunk = 512;              // most context tokens one agent processes in one step
  // Most tokens one engine step runs over every session. Decoding goes first; appended text
  // is processed in chunks with what is left, so a long append does not stall decoding.
  int64_t step_token_budget = 512;
  // Generate calls waiting for room in the pools (admission): past this many a new call is
  // refused at once, and a call that waited this long is refused (both OverloadedError).
  int64_t max_waiting_calls = 1024;
  std::chrono::milliseconds max_admission_wait{std::chrono::seconds(120)};  // 0: no limit
};

struct SessionOptions {
  runtime::SharingMode mode = runtime::SharingMode::kFull;  // docs/sharing_modes.md
  runtime::SharedWriter writer = runtime::SharedWriter::kFirst;
  // The trajectory's token budget and the policy that keeps it (docs/eviction.md): after
  // every step the shared rows (each agent's own rows in `full`) are evicted down to it.
  // An agent's instruction and its reply in progress are never evicted. A saved session
  // keeps the policy, the kept rows and their scores (docs/sessions.md, "Save and restore").
  cache::eviction::EvictionConfig eviction;
  int32_t priority = 0;               // higher goes first when a step's budget is short
  int64_t max_tokens_per_step = 0;    // this session's tokens in one engine step; 0: no cap
  // Admission (agents/admission.cpp). With reserve_tokens > 0 (the most tokens the
  // trajectory will hold, replies included) the session runs only once the pools can hold
  // its rows for that many tokens in its mode (every agent's own rows in `full`, one shared
  // set plus residual streams in the others) and one reply of reserve_reply_tokens per
  // agent (instruction, header and reply), beside every other session's reservation; agents
  // added later grow it without waiting. 0: the reservation grows with each generate call
  // to the trajectory plus the call's replies (max_tokens each). Either way a call waits,
  // first come first served, until its reservation fits (its timeout counts, cancel ends
  // it; RuntimeOptions bounds the wait); one that cannot fit even alone is refused
  // (SessionCapacityError). A reservation is held until close, so others' work never takes
  // the rows an admitted session reserved.
  int64_t reserve_tokens = 0;
  int64_t reserve_reply_tokens = 256;
};

struct AgentOptions {
  std::string name;         // its turn name: the ChatML role of its replies (planner, actor...)
  std::string adapter;      // a loaded adapter's name; empty: the base model
  // Private: a system turn present only while this agent generates, never seen by the others
  // and never part of the trajectory.
  std::string instruction;
};

// One reply's options: the rules every reply decodes by (runtime/reply_decoder.h:
// max_tokens (256), sampling (greedy), stop_strings, stop_token_ids, allowed_prefixes,
// logprobs and top_logprobs), and the caller's hooks.
struct GenerateOptions : runtime::ReplyRules {
  // Called on the engine thread with each new piece of the reply: valid UTF-8 (a character
  // split between tokens comes whole; a cut or ill-formed one as U+FFFD), never part of a
  // stop string. Return false to end the reply there (it is kept). It must not call a
  // session method that waits (DeadlockError), and a slow one stalls every session: a
  // request handle (agents/request.h) reads its events on the caller's thread instead.
  std::function<bool(const std::string& text)> on_text;
  std::chrono::milliseconds timeout{0};  // 0: none; past it the reply ends as kDeadline
};

enum class ReplyEnd {
  kEndOfTurn,   // the agent wrote an end token (<|im_end|>, <|endoftext|>) or a stop id
  kStopString,  // one of GenerateOptions::stop
  kLength,      // max_tokens, or the model's context
  kCallback,    // on_text returned false
  kCancelled,   // Session::cancel, remove_agent or close: nothing was appended
  kDeadline,    // GenerateOptions::timeout passed: nothing was appended
  kStalled,     // a request's reader left its events untaken for stall_timeout (agents/request.h)
};
const char* reply_end_name(ReplyEnd end);

struct Reply {
  std::string agent;
  std::string text;             // what was streamed: stop strings and end tokens excluded
  std::vector<int32_t> tokens;  // generated ids, a final end token included
  // With GenerateOptions::logprobs, per token: its log-probability under the model, and the
  // best other token's (their difference is the token's margin over the runner-up).
  std::vector<double> logprobs, runner_up_logprobs;
  // With top_logprobs > 0, per token: the likeliest tokens, likeliest first.
  std::vector<std::vector<runtime::TokenLogprob>> top_logprobs;
  ReplyEnd end = ReplyEnd::kEndOfTurn;
  bool appended = false;        // the turn is now part of the trajectory
  double time_to_first_token_s = 0;  // from the call to the first token
  double decode_seconds = 0;         // from the first token to the last
};

struct SessionStats {
  int64_t trajectory_tokens = 0;
  int64_t tokens_processed = 0;   // rows run for the session's agents (context, private, generated)
  int64_t tokens_generated = 0;
  int64_t prefix_hit_tokens = 0;  // context tokens whose rows were found in the cache
  int64_t deferred_for_rows = 0;  // times a step could not take its work for lack of free rows
  int64_t replies = 0;
  // KV bytes the session's rows hold, by component (whole blocks; a block shared with another
  // session by prefix counts in each).
  int64_t shared_kv_bytes = 0, own_kv_bytes = 0, residual_kv_bytes = 0, private_kv_bytes = 0;
  double last_time_to_first_token_s = 0;
  double decode_tokens_per_second = 0;  // generated tokens over decode time, every reply so far
};

struct RuntimeStats {
  int64_t sessions = 0;
  // Sessions holding a reservation (agents/admission.cpp): now, and the most at once so
  // far; waiting_calls: generate calls (and request replies) waiting for room now.
  int64_t admitted_sessions = 0, waiting_calls = 0, peak_admitted_sessions = 0;
  int64_t kv_bytes_in_use = 0, kv_bytes_peak = 0, kv_bytes_capacity = 0;
  // kv_bytes_in_use by component: shared base K and V rows (and every private and `full`
  // row, which the base pool holds too), residual rows (C = X A); and the bytes of released
  // blocks the prefix index still finds (reusable, reclaimed at once when rows are short).
  int64_t kv_base_bytes = 0, kv_residual_bytes = 0, kv_cached_bytes = 0;
  // Bytes one token row takes in the base pool (every layer's K and V): kv_pool_bytes over
  // it is how many token rows the base pool holds.
  int64_t base_row_bytes = 0;
  int64_t adapter_bytes = 0;  // every loaded adapter
  // The engine thread's steps so far: steps, tokens, prefix hits, deferred work, rows
  // evicted (base rows every session's eviction dropped) and host time per phase.
  runtime::DriverStats driver;
  // Reply tokens committed without adopting their private rows, which the context's writer
  // then processes again (runtime::Engine::committed_tokens_processed_again).
  int64_t committed_tokens_processed_again = 0;
  int64_t replies_in_flight = 0;  // generating now (a reply paused by its request's reader included)
  int64_t open_requests = 0;      // request handles not yet over (agents/request.h)
  std::string kv_dtype;       // the base pool's element type: float32, bfloat16 or int8
};

}  // namespace lorakv::agents
