// cli/bench/bench_eviction_streaming.h: the streaming part of `lorakv bench eviction`: one
// long session under a fixed token budget, to show that memory returns. Text is appended in
// chunks to one base_shared context read by several agents; after each chunk every agent
// decodes a few tokens (teacher-forced from the text that follows) as private rows and drops
// them. The pools are sized in bytes for the budget, so resident memory is bounded by
// construction; the part prints, every `report_every` tokens, the pools' bytes in use, the
// host metadata bytes and the process's resident memory, and writes eviction_streaming.csv.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "lorakv/runtime/llama_model.h"

namespace lorakv::cli {

struct EvictionStreamingOptions {
  int64_t total_tokens = 0;   // appended in all; 0 or more than the model takes: the model's context
  int64_t chunk = 256;        // tokens appended per step, evicted between
  int64_t readers = 3;        // agents reading the context (the base model each)
  int64_t decode_tokens = 8;  // per agent after each chunk, all agents in one step per token
  std::string policy = "streaming_llm";
  int64_t budget = 512;       // tokens per lane
  int64_t report_every = 1024;
  // Endless streaming (EngineOptions::rerotate): the session may run past the model's context,
  // the text cycling when it runs out; reader 0 then scores every token it processes
  // (perplexity per report window), and after the last chunk `final_decode` tokens are
  // decoded by reader 0, timed against a full cache of the kept length (blocks of 64 tokens,
  // the two sides alternating).
  bool rerotate = false;
  int64_t final_decode = 0;
};

// The resident set of this process in bytes (Linux /proc/self/status VmRSS; 0 elsewhere).
int64_t resident_bytes();

void run_eviction_streaming(const runtime::LlamaModel& model, const std::vector<int32_t>& tokens,
                            const EvictionStreamingOptions& o, const std::string& dir, std::ostream& out);

}  // namespace lorakv::cli
