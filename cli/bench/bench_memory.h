// cli/bench/bench_memory.h: `lorakv bench memory`, the shared-cache benchmark: KV memory of N
// agents on one trajectory in every sharing mode against N full caches (measured from the
// pools, next to the closed form), the answers' cost against the exact per-agent baseline
// (teacher-forced KL and top-1 agreement with the trained role adapters), and time to first
// token of a joining agent and aggregate decode of 8 agents, as ratios against `full`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

struct BenchTurn {
  std::string role;  // system, user, planner, actor, tool, reflector
  std::string text;
};
struct BenchTrajectory {
  std::string id;
  std::vector<BenchTurn> turns;
};

struct MemoryBenchOptions {
  std::string model_path;
  std::string assets_dir;  // holds role_adapters/ and agentic_qa/
  std::string out_dir;
  std::string python;      // for the PNG; empty: none
  bool full_grid = false;  // false: --quick
  std::vector<int64_t> agents;  // N
  std::vector<int64_t> lengths;  // T
  int64_t fidelity_trajectories = 0;  // short fidelity contexts: one held-out trajectory each
  int64_t fidelity_long = 0;          // long ones: trajectories appended to about 2K tokens
  std::vector<std::string> fidelity_sets = {"all_linear", "qv_shared_a", "alora_twins"};
  // The swap ablation's mode (short contexts only; unset: none) and its band of layers.
  std::optional<runtime::ContextOptions> swap_mode;
  int64_t swap_band = 1;
  std::vector<int64_t> decode_lengths;
  int64_t repetitions = 3;
};

// The model, adapters and held-out text every part uses.
struct BenchWorkload {
  runtime::LoadedModel loaded;
  std::unique_ptr<adapters::AdapterRegistry> registry;
  std::vector<AdapterPtr> all_linear, shared_a;  // planner, actor, reflector
  std::vector<BenchTrajectory> held_out;          // the test split
  int32_t im_end = 0;

  const runtime::LlamaModel& model() const { return *loaded.model; }
  // The same model with dense float32 weights (loaded on first use): teacher-forced replays
  // run many short steps, where the block form would dequantise every weight per step.
  const runtime::LlamaModel& dense_model();
  std::string model_path;
  std::unique_ptr<runtime::LlamaModel> dense;
  std::vector<int32_t> encode(const std::string& text) const { return loaded.tokenizer->encode(text); }
  // The first `tokens` tokens of held-out trajectories rendered one after another.
  std::vector<int32_t> real_text(int64_t tokens) const;
  // n adapters with the shared A of the qv_shared_a set: the three trained ones, then
  // synthetic ones whose B are Gaussian with each (layer, module)'s mean trained norm.
  std::vector<AdapterPtr> shared_a_agents(int64_t n);
  // n activated LoRA (aLoRA) adapters: shared_a_agents(n)'s factors, each invoked by the turn
  // header "<|im_start|>{role}\n" (role empty: agent i by "<|im_start|>agent{i}\n"). Twins for
  // the cache's mechanics (memory, exactness, time), not adapters trained as aLoRA.
  std::vector<AdapterPtr> alora_agents(int64_t n, const std::string& role = "");
  // The all-linear role adapters' factors as aLoRA, each invoked by its role's turn header.
  std::vector<AdapterPtr> alora_roles();
};

BenchWorkload load_workload(const MemoryBenchOptions& o, std::ostream& log);

// Each part writes its CSV under o.out_dir and prints a table to `out`.
void run_memory_grid(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out);
void run_fidelity(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out);
void run_latency(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out);
// An aLoRA reply's base rows: the commit's batch pass against a base row in each decode step,
// and writer author's commit pass (bench_alora_reply.cpp), on each of o.decode_lengths.
void run_alora_reply(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out);

// Teacher-forced replays of held-out trajectories (bench_fidelity.cpp). The role turns'
// logits (float32 [tokens, vocab], rows predicting each text token) of one replay of
// `trajectories` as one context read by `readers` (planner, actor, reflector): each role
// turn runs as the role's private tokens after the shared context, then is committed.
// per_head_token_sets: the engine keeps a token set per KV head (adakv needs it).
// every_agent_reads: in the step of each role turn the other agents read the same turn as
// their own private tokens too (then drop it), so several agents' attention lands on the
// shared rows in one step; only the role's logits are returned.
at::Tensor replay_role_turns(BenchWorkload& w, const std::vector<AdapterPtr>& readers, runtime::ContextOptions mode,
                             const std::vector<const BenchTrajectory*>& trajectories, bool per_head_token_sets = false,
                             bool every_agent_reads = false);
// Held-out trajectories from the `first`-th on, appended until about `tokens` tokens.
std::vector<const BenchTrajectory*> long_trajectory(BenchWorkload& w, int64_t tokens, size_t first = 0);
// Per-token KL(reference || other) and top-1 agreement, accumulated.
struct Fidelity {
  double kl_sum = 0, kl_max = 0;
  int64_t agree = 0, tokens = 0;
};
void compare_logits(const at::Tensor& reference, const at::Tensor& other, Fidelity& f);

// Seconds since `start` of the benchmark (progress lines).
double bench_seconds();

}  // namespace lorakv::cli
