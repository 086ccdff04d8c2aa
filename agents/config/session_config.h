// agents/config/session_config.h: a multi-agent session as a YAML file describes it
// (configs/README.md has every key): the model, its adapters, the cache, the agents, their
// tools, the workflow and the output. Plain structs without torch types; the loader
// (load_session_config.h) fills them, every default in place, every path resolved.
//
// Defaults equal those of the sessions API, which this torch-free library cannot include:
// RuntimeOptions and SessionOptions (agents/session_types.h), GenerateOptions (same file)
// and runtime::SamplingOptions (runtime/sampler.h). A change there changes them here too
// (tests/agents/config/model/defaults_test.cpp compares them, with torch).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/agents/config/config_error.h"

namespace lorakv::agents::config {

// Where each key of the file was written, by key path ("agents.planner.adapter",
// "workflow.tasks[1].agent"), so checks after loading can point at the YAML.
class ConfigMarks {
 public:
  void set(const std::string& key_path, SourceMark mark) { marks_[key_path] = mark; }
  // The mark of `key_path`, else of its nearest written parent ("agents.x.adapter" falls
  // back to "agents.x", then "agents"); line 0 when none was written.
  SourceMark at(const std::string& key_path) const;
  bool has(const std::string& key_path) const { return marks_.count(key_path) != 0; }

 private:
  std::map<std::string, SourceMark> marks_;
};

struct ModelSection {
  std::string path;               // a GGUF file or an HF checkpoint directory (resolved, absolute)
  std::string dtype = "float32";  // activations: float32 | bfloat16 (RuntimeOptions::dtype)
  int threads = 0;                // libtorch's intra-op threads; 0: its default
};

struct AdapterSection {
  std::string name;  // the key under `adapters`: what agents name
  std::string path;  // a PEFT directory (adapter_config.json) or a GGUF LoRA file (resolved)
};

// The values of `cache.mode` and `cache.writer` (runtime/sharing_mode.h's names).
const std::vector<std::string>& cache_mode_names();    // full, full_shared, base_shared, base_lr_shared
const std::vector<std::string>& cache_writer_names();  // first, base, author

struct CacheSection {
  std::string mode = "full";    // SessionOptions::mode
  std::string writer = "first"; // SessionOptions::writer
  int64_t block_size = 16;
  int64_t pool_bytes = int64_t{512} << 20;  // RuntimeOptions::kv_pool_bytes
  std::string kv_dtype;        // RuntimeOptions::kv_dtype; empty: the model's dtype
  std::string residual_dtype;  // RuntimeOptions::residual_dtype; empty: the model's dtype
  bool rerotate = false;       // RuntimeOptions::rerotate
  bool per_head_token_sets = false;  // RuntimeOptions::per_head_token_sets
  double residual_rows_per_base_row = 2.0;
  int64_t prefill_chunk = 512;
  int64_t step_token_budget = 512;  // 0: no limit
  // `cache.eviction`: the session's token budget and its policy (docs/eviction.md).
  cache::eviction::EvictionConfig eviction;
};

struct SamplingSection {  // runtime::SamplingOptions
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: all
  double top_p = 1.0;        // 1: all
  double repetition_penalty = 1.0;
  uint64_t seed = 0;
};

struct AgentSection {
  std::string name;     // the key under `agents`: its turn name (the ChatML role it writes)
  std::string adapter;  // a key of `adapters`; empty: the base model
  std::string instruction;           // `instruction` as written
  std::string role, goal, backstory; // CrewAI-style; refused together with `instruction`
  int64_t max_tokens = 256;          // GenerateOptions::max_tokens
  SamplingSection sampling;
  std::vector<std::string> stop;
  std::vector<std::string> allowed_prefixes;

  // The private system turn the agent runs before its header: `instruction`, or, from
  // role/goal/backstory, CrewAI's layout
  //   "You are {role}. {backstory}\nYour personal goal is: {goal}"
  // with each missing part and its separator left out. Empty: no private turn.
  std::string private_instruction() const;
};

// One entry of a lookup tool: `Lookup[name]` returns `text` exactly as stored.
struct LookupDocument {
  std::string name;
  std::string text;
};

const std::vector<std::string>& tool_type_names();  // lookup, calculator

struct ToolSection {
  std::string name;         // the key under `tools`; the action is it capitalised (lookup: Lookup[...])
  std::string type;         // lookup | calculator
  std::string description;
  // lookup: `documents` as written, `documents_file` resolved (empty: none), and `entries`,
  // every document by name (the inline ones first, then the file's).
  std::vector<std::string> documents;
  std::string documents_file;
  std::vector<LookupDocument> entries;
  int64_t timeout_ms = 1000;  // calculator: how long one calculation may take
};

// One CrewAI-style task of a pipeline.
struct TaskSection {
  std::string name;
  std::string description;
  std::string expected_output;       // optional
  std::string agent;                 // a key of `agents`
  std::vector<std::string> context;  // names of earlier tasks whose outputs it reads
};

const std::vector<std::string>& workflow_type_names();  // react, pipeline, round_robin

struct WorkflowSection {
  std::string type;    // react | pipeline | round_robin
  std::string system;  // the shared system turn; empty: none
  std::string input;   // the user's turn when the command line gives none
  // react
  std::string planner, actor, reflector;  // agent names; reflector optional
  int64_t max_steps = 8;
  std::vector<std::string> tools;  // tool names; every tool when not written
  // round_robin
  std::vector<std::string> agents;
  int64_t rounds = 1;
  // pipeline
  std::vector<TaskSection> tasks;
};

struct OutputSection {
  std::string transcript;  // a JSON-lines file to write (resolved); empty: none
};

struct SessionConfig {
  std::string source;    // the file as named to the loader (errors name it so)
  std::string base_dir;  // relative paths in it resolve against this folder
  ModelSection model;
  std::vector<AdapterSection> adapters;  // in file order
  CacheSection cache;
  std::vector<AgentSection> agents;      // in file order
  std::vector<ToolSection> tools;        // in file order
  WorkflowSection workflow;
  OutputSection output;
  ConfigMarks marks;

  const AdapterSection* find_adapter(const std::string& name) const;
  const AgentSection* find_agent(const std::string& name) const;
  const ToolSection* find_tool(const std::string& name) const;

  // A ConfigFileError at the YAML place of `key_path` (or its nearest written parent), for
  // checks after loading: the model-aware check, the runner.
  ConfigFileError error_at(const std::string& key_path, const std::string& message, const std::string& hint = "") const;
};

}  // namespace lorakv::agents::config
