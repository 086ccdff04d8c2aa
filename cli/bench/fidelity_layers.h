// cli/bench/fidelity_layers.h: where along the layers a shared mode's rows part from a
// reader's own. Per layer, the K and V rows a reader attends over in a shared mode (the
// shared rows, plus its residual term in base_shared and base_lr_shared) against the rows
// it would hold in `full`; and the swap ablation: the mode's rows with a band of layers
// replaced by the reader's own `full` rows, its turn run over them again, to see how much
// of the mode's KL each band recovers (whether recomputing a few layers per reader could
// help). Both work on rows exported from the replays' engines (Engine::export_context) and,
// for the swap, imported into a fresh engine (Engine::import_context), which attends over
// imported rows exactly as over the rows it wrote.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "lorakv/cli/bench/role_turn_replay.h"

namespace lorakv::cli {

// Per layer: float32 [context tokens, kv_heads, head_dim], keys after RoPE.
struct LayerRows {
  std::vector<at::Tensor> k, v;
};

// The rows `reader` attends over in a shared mode's exported rows: the shared K/V, plus
// R_p C_k B_k and C_v B_v of its residual streams (its own in base_shared, the group's in
// base_lr_shared), as the fused kernel forms them.
LayerRows rows_reader_sees(const runtime::SequenceRows& shared, const adapters::Adapter* reader,
                           const runtime::LlamaModel& model);
// A `full` reader's own exported rows as float32.
LayerRows own_rows(const runtime::SequenceRows& own);

// Squared Frobenius norms per layer, summed over the turns added: of (seen - own) and of own.
struct LayerRowError {
  std::vector<double> k_diff, k_own, v_diff, v_own;
  void add(const LayerRows& seen, const LayerRows& own);
  // sqrt(diff / own) of layer l: the relative error of the rows the reader sees.
  double k_relative(size_t layer) const;
  double v_relative(size_t layer) const;
};

// A shared mode's rows with layers [first, last) replaced by a reader's own `full` rows,
// every residual stream zeroed there (so that reader reads exactly its own rows there).
// Throws InvalidArgumentError for a band outside 0 <= first <= last <= layers, for mode rows
// without shared rows, and for own rows of other tokens or of another number of layers.
runtime::ContextRows with_own_layers(const runtime::ContextRows& mode_rows, const runtime::SequenceRows& own,
                                     int64_t first, int64_t last);

// Replay options (role_turn_replay.h) that keep, before each role turn of a `full` replay,
// the turn reader's own rows, appended to `own` in turn order (own[turn.index]): what the
// probes compare a mode's rows with. `own` must outlive the replay.
ReplayOptions keep_own_rows(std::vector<runtime::SequenceRows>& own);

// The context's rows with every reader's own rows, in reader order: import_context takes
// back the readers export names, so turn_over_rows can import them with every reader.
runtime::ContextRows export_every_reader(const runtime::Engine& engine, runtime::ContextId ctx);

// The turn's text logits (float32 [text tokens + 1, vocab]) of reader turn.reader over
// `rows`, imported into a fresh engine with `readers`.
at::Tensor turn_over_rows(const runtime::LlamaModel& model, const runtime::ContextRows& rows,
                          const std::vector<AdapterPtr>& readers, const RoleTurnInfo& turn);

}  // namespace lorakv::cli
