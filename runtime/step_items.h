// runtime/step_items.h: the forward items one engine step runs (internal to
// runtime/engine_step.cpp, which plans and reserves them, and runtime/paged_attention.cpp,
// which runs them).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "lorakv/cache/cache_manager.h"
#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/llama_model.h"

namespace lorakv::runtime {

constexpr size_t kNoWork = std::numeric_limits<size_t>::max();

// Residual rows an item fills: positions [from, item end) of `stream`.
struct Fill {
  const ReaderStream* stream = nullptr;
  int64_t from = 0;
};

// One forward row range: a reader (or the base model, adapter null) running tokens
// [start, end) of its context or of its private rows.
struct Item {
  size_t work = kNoWork;  // the work entry it answers; kNoWork: the base writer's own item
  const adapters::Adapter* adapter = nullptr;
  AdapterIdentity writer;
  bool kv_lora_in_rows = true;
  bool activation_applied = false;  // an aLoRA adapter's adapted span (SequenceInput)
  std::vector<int32_t> tokens;
  int64_t start = 0, end = 0;
  // Rows written: base rows of positions [base_from, end) into write_seq, and `fills`.
  SeqId write_seq;
  int64_t base_from = 0;
  std::vector<Fill> fills;
  std::optional<cache::AppendSlots> slots;
  // Rows read: write_seq's or read_seq's rows below read_limit, the residual streams
  // `reads` with the reader's B, then private_seq's rows.
  SeqId read_seq;
  int64_t read_limit = 0;
  std::vector<const ReaderStream*> reads;
  SeqId private_seq;
  bool all_logits = false;
  // Writer author's fast form (ReaderState::author_rows): the private item's rows again in
  // the shared layout, into `author_rows`: base rows without the adapter's k/v update for
  // [start, end), and C rows of `author_fills` for the same positions.
  SeqId author_rows;
  std::vector<const ReaderStream*> author_fills;
  std::optional<cache::AppendSlots> author_slots;
};

// Runs the admitted items as one forward pass (layer by layer through the fused kernel on
// the paged cache) and fills their outputs and the step's host times in `result`.
// A sequence whose rows a scoring policy governs: its observation window (0: every
// scoring query's mass accumulates, H2O; > 0: the newest `window` queries of a step that
// writes rows, SnapKV) and whose queries score (EvictionConfig::scoring).
struct ScoredSeq {
  enum class Readers : uint8_t { kSum, kMax, kWriter };
  SeqId seq;
  int64_t window = 0;
  Readers readers = Readers::kSum;
};

// A sequence whose rows capkv governs and this step writes: the writer's queries at positions
// >= sinks, before RoPE, summed per layer and query head into step_sum, then into `anchor`
// when the step commits (StepEffects).
struct AnchoredSeq {
  SeqId seq;
  int64_t sinks = 0;
  QueryAnchor* anchor = nullptr;
  at::Tensor step_sum;     // float32 [layers, heads, head_dim]; undefined until a query is added
  int64_t step_count = 0;  // queries added (counted at layer 0)
};

// What a step's forward leaves for after its commit. capkv's anchors with the step's queries
// added: computed before the commit (out of place), moved in after it, where nothing may
// fail. The mass kept for the loss bound, which the engine keeps for the eviction after the
// step (Engine::evict).
struct StepEffects {
  std::vector<std::pair<QueryAnchor*, QueryAnchor>> anchors;  // (the anchor, its value after the step)
  std::vector<StepMass> mass;
};

// The kernel also returns each shared row's attention mass, summed over readers, and adds
// it to the row's score, for every read of a sequence a scoring policy governs; and each
// reader's mass on the sequences whose contexts ask for the loss bound, into `effects`
// (with capkv's anchors), which the step applies once it commits.
void run_items(const LlamaModel& model, cache::PagedKvCache& cache, Engine::State& st, std::vector<Item>& items,
               StepResult& result, StepEffects& effects);

}  // namespace lorakv::runtime
