// runtime/sharing_mode.h: how the readers (agents) of one context share its K/V rows, and
// who fills the shared rows. The math of each mode is in docs/sharing_modes.md; in short,
// per layer, for a token at position p with attention input X_w of its writer w and X_i of
// reader i, base weights W and reader i's LoRA factors A_i, B_i (scale folded in B):
//   full            each reader its own rows: K = R_p X_i (W_k + A_k,i B_k,i), V = X_i (W_v + A_v,i B_v,i)
//   full_shared     one row per token, the writer's full row: K = R_p X_w (W_k + A_k,w B_k,w), ...
//   base_shared     one base row K = R_p X_w W_k, V = X_w W_v, and per reader C_i = X_i A_i:
//                   reader i reads V = V_base + C_v,i B_v,i, K = K_base + R_p C_k,i B_k,i
//   base_lr_shared  one base row and one C = X_w A per shared-A group: reader i reads
//                   V = V_base + C_v B_v,i, K = K_base + R_p C_k B_k,i
// Writer `first`: the reader that first processes a token writes its shared rows; `base`:
// the base model without adapters processes every appended token and writes them;
// `author`: each agent's turn is written by its author, from the author's hidden states,
// and text no agent wrote (system, user, tool turns) by the base model.
// Torch-free.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/cache/eviction/eviction_config.h"

namespace lorakv::runtime {

enum class SharingMode { kFull, kFullShared, kBaseShared, kBaseLrShared };
enum class SharedWriter { kFirst, kBase, kAuthor };

const char* sharing_mode_name(SharingMode mode);  // "full", "full_shared", "base_shared", "base_lr_shared"
const char* shared_writer_name(SharedWriter writer);  // "first", "base", "author"
std::optional<SharingMode> parse_sharing_mode(const std::string& text);
std::optional<SharedWriter> parse_shared_writer(const std::string& text);

// Whether the shared rows are base rows with residual streams beside them.
bool mode_keeps_residuals(SharingMode mode);

struct ContextOptions {
  SharingMode mode = SharingMode::kFull;
  SharedWriter writer = SharedWriter::kFirst;
  // The context's token budget and the policy that keeps it (docs/eviction.md): after every
  // step, each sequence of shared rows (each reader's own rows in `full`) that holds more
  // live rows per lane than the budget is evicted down to it. Private rows are never evicted.
  cache::eviction::EvictionConfig eviction;
};

// Throws ConfigError when `mode` cannot serve `adapter` next to the context's other readers
// `others` (null entries: the base model): a rank above the fused kernel's limit on a cached
// module, or in base_lr_shared a v or k A that differs from another reader's. The message
// names the mode, the adapter and the module (and layer).
void check_reader(SharingMode mode, const adapters::Adapter* adapter,
                  const std::vector<const adapters::Adapter*>& others);

}  // namespace lorakv::runtime
