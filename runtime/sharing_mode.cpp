// runtime/sharing_mode.cpp: mode names and the check of which adapters a mode can serve.
#include "lorakv/runtime/sharing_mode.h"

#include "lorakv/common/errors.h"
#include "lorakv/kernels/lora_attention.h"

namespace lorakv::runtime {

const char* sharing_mode_name(SharingMode mode) {
  switch (mode) {
    case SharingMode::kFull: return "full";
    case SharingMode::kFullShared: return "full_shared";
    case SharingMode::kBaseShared: return "base_shared";
    case SharingMode::kBaseLrShared: return "base_lr_shared";
  }
  return "?";
}

const char* shared_writer_name(SharedWriter writer) {
  switch (writer) {
    case SharedWriter::kFirst: return "first";
    case SharedWriter::kBase: return "base";
    case SharedWriter::kAuthor: return "author";
  }
  return "?";
}

std::optional<SharingMode> parse_sharing_mode(const std::string& text) {
  for (SharingMode m : {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    if (text == sharing_mode_name(m)) return m;
  }
  return std::nullopt;
}

std::optional<SharedWriter> parse_shared_writer(const std::string& text) {
  for (SharedWriter w : {SharedWriter::kFirst, SharedWriter::kBase, SharedWriter::kAuthor}) {
    if (text == shared_writer_name(w)) return w;
  }
  return std::nullopt;
}

bool mode_keeps_residuals(SharingMode mode) {
  return mode == SharingMode::kBaseShared || mode == SharingMode::kBaseLrShared;
}

namespace {

std::string where(const adapters::LoraModule& m) {
  return std::string(adapters::module_name(m.module)) + " at layer " + std::to_string(m.layer);
}

}  // namespace

void check_reader(SharingMode mode, const adapters::Adapter* adapter, const std::vector<const adapters::Adapter*>& others) {
  // An activated LoRA reads the base rows as they are and keeps no residual rows: nothing to serve.
  if (adapter == nullptr || adapter->activated() || !mode_keeps_residuals(mode)) return;
  const std::string mode_name = sharing_mode_name(mode);
  for (const adapters::LoraModule& m : adapter->modules()) {
    if (m.module != adapters::ModuleId::kK && m.module != adapters::ModuleId::kV) continue;
    if (m.rank > kernels::kMaxLoraAttentionRank) {
      throw ConfigError("mode " + mode_name + " keeps " + where(m) + " of adapter '" + adapter->name() +
                            "' as residual rows, and its rank is above the fused attention's limit",
                        {adapter->source(), adapters::module_name(m.module),
                         "rank <= " + std::to_string(kernels::kMaxLoraAttentionRank), std::to_string(m.rank),
                         "use mode full or full_shared for this adapter"});
    }
  }
  if (mode != SharingMode::kBaseLrShared) return;
  // One C stream per module serves every reader: readers that adapt k (or v) at all must
  // adapt it at the same layers with a byte-equal A.
  for (adapters::ModuleId module : {adapters::ModuleId::kK, adapters::ModuleId::kV}) {
    for (const adapters::Adapter* other : others) {
      if (other == nullptr || other->activated()) continue;
      for (int64_t layer = 0; layer < adapter->base_shape().num_layers; ++layer) {
        const adapters::LoraModule* mine = adapter->find(layer, module);
        const adapters::LoraModule* theirs = other->find(layer, module);
        const bool adapts_mine = mine != nullptr, adapts_theirs = theirs != nullptr;
        if (!adapts_mine && !adapts_theirs) continue;
        if (adapts_mine && adapts_theirs && mine->a_hash == theirs->a_hash) continue;
        bool uses_module = false, other_uses = false;
        for (int64_t l = 0; l < adapter->base_shape().num_layers; ++l) {
          uses_module = uses_module || adapter->find(l, module) != nullptr;
          other_uses = other_uses || other->find(l, module) != nullptr;
        }
        if (!uses_module || !other_uses) break;  // one of them does not read this stream
        const std::string at = std::string(adapters::module_name(module)) + " at layer " + std::to_string(layer);
        throw ConfigError("mode base_lr_shared keeps one residual C = X A per module for all readers, but adapter '" +
                              adapter->name() + "' and adapter '" + other->name() + "' differ in A on " + at,
                          {adapter->source(), adapters::module_name(module), "the same A as '" + other->name() + "'",
                           adapts_mine && adapts_theirs ? "a different A" : "adapted by only one of them",
                           "train the readers of one context with a shared A on k_proj and v_proj, or use base_shared"});
      }
    }
  }
}

}  // namespace lorakv::runtime
