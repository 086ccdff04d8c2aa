// cli/bench/bench_eviction_retrieval.h: the retrieval part of `lorakv bench eviction`. A fact
// ("The access code for Ada Lindqvist is 4821.") sits at a chosen depth of a haystack of real
// prose (the perplexity part's Debian license texts); the haystack runs through the engine
// in chunks with eviction between them, so the cache is compressed before the question
// comes. The question and the answer then run as the reader's private rows (never evicted,
// and they add no context rows, so nothing is evicted after them): the teacher-forced
// log-probability of the answer's tokens, and whether greedy decoding reproduces them.
// Rows per (policy, budget) are appended to eviction_retrieval.csv; a rerun of the same grid
// skips the rows already there.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_types.h"
#include "lorakv/cache/eviction/eviction_config.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/llama_model.h"

namespace lorakv::cli {

// Who holds the code, and the code (4 digits, 1000..9999).
struct RetrievalFact {
  std::string name;
  std::string code;
};

// The fact of case `index` under `seed`: the same pair gives the same fact with every
// compiler (splitmix64; <random>'s distributions differ between standard libraries).
RetrievalFact make_fact(uint64_t seed, int64_t index);

// The texts of one case: the fact's line (inserted at a line start of the haystack), the
// question appended after the haystack, ending with the answer's prefix, and the answer.
struct RetrievalTexts {
  std::string fact;      // "The access code for Ada Lindqvist is 4821.\n"
  std::string question;  // "\nQuestion: What is the access code for Ada Lindqvist?\nAnswer: The access code for Ada Lindqvist is"
  std::string answer;    // " 4821"
};
RetrievalTexts retrieval_texts(const RetrievalFact& fact);

// Where the fact goes in a haystack of n = starts_line.size() tokens (starts_line[i]: token i
// begins a line): the line start nearest to depth * n, the earlier on a tie. 0 and n (the
// end) count as line starts, so depth 0 gives 0 and depth 1 gives n.
int64_t fact_position(const std::vector<bool>& starts_line, double depth);

// `filler` with `fact` inserted before filler[position] (position in [0, filler.size()]).
std::vector<int32_t> insert_fact(const std::vector<int32_t>& filler, const std::vector<int32_t>& fact, int64_t position);

// The cases of one (policy, budget) row. Case c is at depths[c % depths.size()], in filler
// window c / depths.size() of the text, so every depth sees the same windows.
struct RetrievalGrid {
  std::vector<double> depths{0.1, 0.5, 0.9};
  int64_t cases = 6;               // per (policy, budget)
  int64_t haystack_tokens = 2048;  // filler tokens around the fact
  uint64_t seed = 1;
  std::optional<cache::StorageDtype> kv_dtype;  // the cache's dtype; unset: the model's (float32)
  double depth_of(int64_t c) const { return depths[static_cast<size_t>(c) % depths.size()]; }
  int64_t windows() const;  // filler windows the cases use
  std::string depths_text() const;  // "0.1;0.5;0.9": one CSV field
};

// The grids --help names: the default, and --full's (100 cases over 5 depths).
RetrievalGrid default_retrieval_grid();
RetrievalGrid full_retrieval_grid();

// The retrieval flags, to merge into `bench eviction`'s: --cases, --depths, --haystack, --seed; --full.
const std::set<std::string>& retrieval_value_flags();
const std::set<std::string>& retrieval_bool_flags();

// The grid the flags ask for (--full's, or the default, with --cases, --depths, --haystack,
// --seed on top). Throws ConfigError naming the flag: a depth outside [0, 1] or not a
// number, an empty depth list, fewer than 1 case, a haystack under 64 tokens.
RetrievalGrid parse_retrieval_grid(const CliArgs& args);

// Whether `config`'s policy needs one token set per KV head (EngineOptions::
// per_head_token_sets): adakv spreads a layer's budget over its KV heads.
bool needs_per_head_lanes(const cache::eviction::EvictionConfig& config);

// The CSV: one row per (policy, budget, grid). A row's key is its first six fields.
std::string retrieval_csv_header();
std::string retrieval_row_key(const std::string& policy, const std::string& budget, const RetrievalGrid& grid);
// The keys of the complete rows `csv_path` holds (none when it does not exist).
std::set<std::string> finished_retrieval_rows(const std::string& csv_path);

// Runs the grid for every (budget label, config) of `configs` ("-" and a disabled config:
// the full cache), appending to <dir>/eviction_retrieval.csv and printing a line per row.
// `text` is the haystack source, tokenized by `tokenizer`. Throws ConfigError (naming
// --haystack) when the text is shorter than a haystack.
void run_retrieval_part(const runtime::LlamaModel& model, const formats::BpeTokenizer& tokenizer,
                        const std::vector<int32_t>& text,
                        const std::vector<std::pair<std::string, cache::eviction::EvictionConfig>>& configs,
                        const RetrievalGrid& grid, int64_t chunk, const std::string& dir, std::ostream& out);

// Draws <dir>/eviction.png with tools/plot_eviction.py when `python` is given and exists;
// otherwise prints the command that would.
void plot_eviction(const std::string& python, const std::string& dir, std::ostream& out);

}  // namespace lorakv::cli
