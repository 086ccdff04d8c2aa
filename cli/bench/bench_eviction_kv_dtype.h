// cli/bench/bench_eviction_kv_dtype.h: the kv_dtype part of `lorakv bench eviction`: the shared
// base stored as float32, bfloat16 and int8 (a float32 scale per token and KV head, rows
// Hadamard-rotated). Per dtype: perplexity with the full cache and with a policy at a
// budget, the logits' KL and top-1 agreement against the float32 cache (the same windows,
// engines run side by side chunk by chunk), retrieval with the full cache and with the
// policy; then the composed figure: N agents on one trajectory in base_lr_shared, with int8
// and the budget, against N full float32 caches.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/cli/bench/bench_eviction_retrieval.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/llama_model.h"

namespace lorakv::cli {

struct KvDtypeBenchOptions {
  std::string model_path;
  std::string assets_dir = "assets";  // the composed figure's role adapters
  std::string out_dir;
  std::vector<std::pair<int64_t, int64_t>> windows;  // perplexity windows [begin, end) of the text
  int64_t chunk = 256;
  std::string policy = "snapkv";  // the best policy at 1/4 by perplexity in the default grid
  double budget = 0.25;
  RetrievalGrid retrieval;
  bool run_retrieval = true;
  int64_t composed_agents = 8;
  int64_t composed_tokens = 4096;
};

// Writes eviction_kv_dtype.csv (and per dtype kv_dtype_<name>/eviction_retrieval.csv, and
// eviction_composed.csv) under o.out_dir and prints the tables to `out`.
void run_kv_dtype_part(const runtime::LlamaModel& model, const formats::BpeTokenizer& tokenizer,
                       const std::vector<int32_t>& tokens, const KvDtypeBenchOptions& o, std::ostream& out);

}  // namespace lorakv::cli
