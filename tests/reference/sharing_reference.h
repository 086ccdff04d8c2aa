// tests/reference/sharing_reference.h: the sharing modes' defined semantics in plain libtorch,
// for the engine's tests. Dense float32 tensors, one forward per processing event, ATen
// attention with a mask by position; no paging, no fused kernel, no step planning. It keeps,
// per layer, exactly the rows a mode defines (runtime/sharing_mode.h):
//   full            per reader: K = R(X_r W_k + X_r A_k B_k), V = X_r W_v + X_r A_v B_v
//   full_shared     one row per token from its writer, adapter output included
//   base_shared     base rows R X_w W_k, X_w W_v from the writer, C = X_r A per reader
//   base_lr_shared  base rows and one C = X_w A per module from the writer
// and what each reader attends over (the shared rows plus C B with its own B, then its
// private rows). The writer is the first processor (`first`), the base model (`base`), or
// each token's author (`author`: the committing reader for its reply, the base model for
// appended text), which runs its turn by itself, in order, before the reader goes on.
// Who processes what follows the engine's contract: a reader processes the context tokens
// its mode needs from it (full, base_shared: all of them; the others: the ones nobody wrote),
// private tokens are the reader's own full rows, and a commit appends them to the context
// (adopting the rows where they equal the context's: `commit`).
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <vector>

#include "lorakv/adapters/adapter.h"
#include "lorakv/runtime/llama_model.h"
#include "lorakv/runtime/sharing_mode.h"

namespace lorakv::reference {

class SharingReference {
 public:
  using SharingMode = runtime::SharingMode;
  using SharedWriter = runtime::SharedWriter;

  // `model` must hold dense weights (WeightForm::kFloat32 or kBFloat16 load).
  SharingReference(const runtime::LlamaModel& model, SharingMode mode, SharedWriter writer,
                   std::vector<const adapters::Adapter*> readers)
      : m_(model), c_(model.config()), mode_(mode), writer_(writer), readers_(std::move(readers)) {
    own_.resize(readers_.size());
    priv_.resize(readers_.size());
    priv_after_.assign(readers_.size(), 0);
    const at::Tensor i = at::arange(0, c_.head_dim, 2, at::kDouble) / static_cast<double>(c_.head_dim);
    inv_freq_ = at::pow(c_.rope_theta, i).reciprocal().to(at::kFloat);  // [D/2]
  }

  // `author`: the reader whose turn the tokens are, or kBaseActor for text.
  void append(const std::vector<int32_t>& tokens, int author = kBaseActor) {
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    authors_.insert(authors_.end(), tokens.size(), author);
  }

  // What the mode needs from `reader` of the context; returns its logits for the tokens it
  // ran itself ([0, vocab] when it ran none).
  at::Tensor process(int reader) {
    const int64_t n = static_cast<int64_t>(tokens_.size());
    if (mode_ == SharingMode::kFull) return run(reader, own_[static_cast<size_t>(reader)].len, n, Target::kContext);
    if (writer_ == SharedWriter::kAuthor) return process_by_authors(reader);
    if (writer_ == SharedWriter::kBase && shared_.len < n) run(kBaseActor, shared_.len, n, Target::kContext);
    int64_t start = writer_ == SharedWriter::kFirst ? shared_.len : n;
    if (mode_ == SharingMode::kBaseShared) {
      for (int module : kCached) {
        if (adapts(reader, module)) start = std::min(start, stream(reader, module).len);
      }
    }
    if (mode_ == SharingMode::kBaseLrShared && writer_ == SharedWriter::kFirst) {
      for (int module : kCached) {
        if (group_adapts(module)) start = std::min(start, stream(kGroup, module).len);
      }
    }
    if (start >= n) return at::empty({0, c_.vocab_size});
    return run(reader, start, n, Target::kContext);
  }

  // The reader's private tokens after the context; all their logits.
  at::Tensor run_private(int reader, const std::vector<int32_t>& tokens) {
    Rows& p = priv_[static_cast<size_t>(reader)];
    if (p.len == 0) priv_after_[static_cast<size_t>(reader)] = static_cast<int64_t>(tokens_.size());
    priv_tokens_[reader].insert(priv_tokens_[reader].end(), tokens.begin(), tokens.end());
    const int64_t start = priv_after_[static_cast<size_t>(reader)] + p.len;
    return run(reader, start, start + static_cast<int64_t>(tokens.size()), Target::kPrivate, tokens);
  }

  // The reply is appended to the context. Its private rows become the context's rows where
  // they equal what processing it would write (docs/sharing_modes.md, "Commit"): in `full`
  // (the committer's own rows) and in `full_shared` with writer `first`, when nothing was
  // appended since the reply began and those rows reach the context's end. Otherwise the
  // reply is processed again like any appended text: also with writer `author` in the
  // residual modes, whose adopted author rows the engine must make equal to that.
  void commit(int reader) {
    Rows& p = priv_[static_cast<size_t>(reader)];
    const auto n = static_cast<int64_t>(tokens_.size());
    Rows* target = nullptr;
    if (mode_ == SharingMode::kFull) target = &own_[static_cast<size_t>(reader)];
    if (mode_ == SharingMode::kFullShared && writer_ != SharedWriter::kBase) target = &shared_;
    if (target != nullptr && p.len > 0 && priv_after_[static_cast<size_t>(reader)] == n && target->len == n) {
      for (int64_t l = 0; l < c_.num_layers; ++l) grow(*target, l, p.k[static_cast<size_t>(l)], p.v[static_cast<size_t>(l)]);
      target->len += p.len;
    }
    append(priv_tokens_[reader], reader);
    priv_tokens_[reader].clear();
    p = Rows();
  }

 private:
  // Writer author: each run of tokens nobody wrote by its author (reader or base model),
  // which writes the shared rows and fills the C it fills (its own in base_shared, from
  // where it lags; the group's in base_lr_shared); then in base_shared the reader fills its
  // own C. The reader's logits: those of its own runs and of its own C's fill.
  at::Tensor process_by_authors(int reader) {
    const auto n = static_cast<int64_t>(tokens_.size());
    std::vector<at::Tensor> mine;
    int64_t pos = shared_.len;
    for (int module : kCached) {
      if (mode_ == SharingMode::kBaseLrShared && group_adapts(module)) pos = std::min(pos, stream(kGroup, module).len);
    }
    while (pos < n) {
      int64_t end = pos;
      while (end < n && authors_[static_cast<size_t>(end)] == authors_[static_cast<size_t>(pos)]) ++end;
      const int author = authors_[static_cast<size_t>(pos)];
      const int actor = author >= 0 && !readers_[static_cast<size_t>(author)]->activated() ? author : kBaseActor;
      int64_t start = pos;
      for (int module : kCached) {
        if (mode_ == SharingMode::kBaseShared && actor >= 0 && adapts(actor, module)) start = std::min(start, stream(actor, module).len);
        if (mode_ == SharingMode::kBaseLrShared && group_adapts(module)) start = std::min(start, stream(kGroup, module).len);
      }
      writing_ = true;
      const at::Tensor logits = run(actor, start, end, Target::kContext);
      writing_ = false;
      if (actor == reader) mine.push_back(logits);
      pos = end;
    }
    int64_t start = n;
    for (int module : kCached) {
      if (mode_ == SharingMode::kBaseShared && adapts(reader, module)) start = std::min(start, stream(reader, module).len);
    }
    if (start < n) mine.push_back(run(reader, start, n, Target::kContext));
    return mine.empty() ? at::empty({0, c_.vocab_size}) : at::cat(mine, 0);
  }

  // Whether `actor`'s context run writes the shared rows (and the group's C) nobody wrote yet.
  bool writes_shared(int actor) const { return actor == kBaseActor || writer_ == SharedWriter::kFirst || writing_; }

  static constexpr int kBaseActor = -1;
  static constexpr int kGroup = -2;
  static constexpr int kCached[2] = {static_cast<int>(adapters::ModuleId::kV), static_cast<int>(adapters::ModuleId::kK)};
  enum class Target { kContext, kPrivate };

  // Rows of one kind per layer, growing along positions 0.. (or the private positions).
  struct Rows {
    std::vector<at::Tensor> k, v;  // per layer [len, Hkv, D] (C streams: k holds [len, rank])
    int64_t len = 0;
  };

  const adapters::Adapter* adapter(int actor) const {
    return actor >= 0 ? readers_[static_cast<size_t>(actor)] : nullptr;
  }
  bool adapts(int actor, int module) const {
    const adapters::Adapter* a = adapter(actor);
    if (a == nullptr) return false;
    for (const adapters::LoraModule& m : a->modules()) {
      if (static_cast<int>(m.module) == module) return true;
    }
    return false;
  }
  bool group_adapts(int module) const {
    for (size_t r = 0; r < readers_.size(); ++r) {
      if (adapts(static_cast<int>(r), module)) return true;
    }
    return false;
  }
  // The A of the group's stream at a layer: any reader's (they are equal in base_lr_shared).
  const adapters::LoraModule* group_module(int64_t layer, int module) const {
    for (const adapters::Adapter* a : readers_) {
      if (a == nullptr) continue;
      if (const adapters::LoraModule* m = a->find(layer, static_cast<adapters::ModuleId>(module))) return m;
    }
    return nullptr;
  }
  // Readers with one adapter share its C rows (equal content: the cache keys them by the
  // adapter's identity), so a stream belongs to the first reader with that adapter.
  Rows& stream(int owner, int module) { return streams_[{canonical(owner), module}]; }
  int canonical(int owner) const {
    if (owner < 0) return owner;
    for (int r = 0; r < owner; ++r) {
      const adapters::Adapter *a = readers_[static_cast<size_t>(r)], *b = readers_[static_cast<size_t>(owner)];
      if (a != nullptr && b != nullptr && a->identity() == b->identity()) return r;
    }
    return owner;
  }

  static void grow(Rows& rows, int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    if (rows.k.size() <= static_cast<size_t>(layer)) {
      rows.k.resize(static_cast<size_t>(layer) + 1);
      rows.v.resize(static_cast<size_t>(layer) + 1);
    }
    auto cat = [](const at::Tensor& a, const at::Tensor& b) { return a.defined() ? at::cat({a, b}, 0) : b.clone(); };
    rows.k[static_cast<size_t>(layer)] = cat(rows.k[static_cast<size_t>(layer)], k);
    if (v.defined()) rows.v[static_cast<size_t>(layer)] = cat(rows.v[static_cast<size_t>(layer)], v);
  }

  at::Tensor lora(int actor, int64_t layer, adapters::ModuleId module, const at::Tensor& x) const {
    const adapters::Adapter* a = adapter(actor);
    const adapters::LoraModule* m = a ? a->find(layer, module) : nullptr;
    if (m == nullptr) return {};
    return at::matmul(at::matmul(x, m->a.t()), m->b.t());
  }
  static at::Tensor plus(const at::Tensor& base, const at::Tensor& delta) { return delta.defined() ? base + delta : base; }

  // HF rotate_half RoPE of x [T, heads, D] at `positions` (int64 [T]).
  at::Tensor rope(const at::Tensor& x, const at::Tensor& positions) const {
    const at::Tensor ang = at::outer(positions.to(at::kFloat), inv_freq_);  // [T, D/2]
    const at::Tensor cos = at::cat({ang.cos(), ang.cos()}, 1).unsqueeze(1), sin = at::cat({ang.sin(), ang.sin()}, 1).unsqueeze(1);
    const int64_t h = c_.head_dim / 2;
    const at::Tensor rotated = at::cat({-x.narrow(2, h, h), x.narrow(2, 0, h)}, 2);
    return x * cos + rotated * sin;
  }
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w) const {
    return x * at::rsqrt(x.pow(2).mean({-1}, true) + c_.rms_norm_eps) * w;
  }
  at::Tensor heads(const at::Tensor& x, int64_t n) const { return x.view({x.size(0), n, c_.head_dim}); }

  // Rows shared by everyone (or the reader's own, in full) below `limit`, as `actor` reads them.
  std::pair<at::Tensor, at::Tensor> context_view(int actor, int64_t layer, int64_t limit) {
    const Rows& rows = mode_ == SharingMode::kFull ? own_[static_cast<size_t>(actor)] : shared_;
    if (limit == 0 || rows.k.size() <= static_cast<size_t>(layer)) return {};
    at::Tensor k = rows.k[static_cast<size_t>(layer)].narrow(0, 0, limit);
    at::Tensor v = rows.v[static_cast<size_t>(layer)].narrow(0, 0, limit);
    if (mode_ != SharingMode::kBaseShared && mode_ != SharingMode::kBaseLrShared) return {k, v};
    const adapters::Adapter* a = adapter(actor);
    for (int module : kCached) {
      const adapters::LoraModule* mine = a ? a->find(layer, static_cast<adapters::ModuleId>(module)) : nullptr;
      if (mine == nullptr) continue;
      Rows& s = stream(mode_ == SharingMode::kBaseShared ? actor : kGroup, module);
      const at::Tensor delta = heads(at::matmul(s.k[static_cast<size_t>(layer)].narrow(0, 0, limit), mine->b.t()), c_.num_kv_heads);
      if (module == static_cast<int>(adapters::ModuleId::kV)) {
        v = v + delta;
      } else {
        k = k + rope(delta, at::arange(limit, at::kLong));
      }
    }
    return {k, v};
  }

  // One forward of `actor` over positions [start, end): writes the rows the mode defines,
  // attends over what it defines, returns all logits.
  at::Tensor run(int actor, int64_t start, int64_t end, Target target, const std::vector<int32_t>& private_tokens = {}) {
    const std::vector<int32_t> ids = target == Target::kPrivate
                                         ? private_tokens
                                         : std::vector<int32_t>(tokens_.begin() + start, tokens_.begin() + end);
    const runtime::ModelWeights& w = m_.weights();
    const at::Tensor positions = at::arange(start, end, at::kLong);
    at::Tensor h = at::embedding(w.embed_tokens.dense.to(at::kFloat), at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c_.head_dim));
    const bool residual_mode = mode_ == SharingMode::kBaseShared || mode_ == SharingMode::kBaseLrShared;
    for (int64_t l = 0; l < c_.num_layers; ++l) {
      const runtime::LayerWeights& lw = w.layers[static_cast<size_t>(l)];
      const at::Tensor x = norm(h, lw.attn_norm);
      const at::Tensor q = rope(heads(plus(at::matmul(x, lw.q_proj.t()), lora(actor, l, adapters::ModuleId::kQ, x)), c_.num_heads), positions);
      const at::Tensor k_base = at::matmul(x, lw.k_proj.t()), v_base = at::matmul(x, lw.v_proj.t());
      const at::Tensor k_full = rope(heads(plus(k_base, lora(actor, l, adapters::ModuleId::kK, x)), c_.num_kv_heads), positions);
      const at::Tensor v_full = heads(plus(v_base, lora(actor, l, adapters::ModuleId::kV, x)), c_.num_kv_heads);
      at::Tensor keys, values, key_positions;
      if (target == Target::kPrivate) {
        Rows& p = priv_[static_cast<size_t>(actor)];
        grow(p, l, k_full, v_full);
        const int64_t after = priv_after_[static_cast<size_t>(actor)];
        auto [ck, cv] = context_view(actor, l, after);
        keys = ck.defined() ? at::cat({ck, p.k[static_cast<size_t>(l)]}, 0) : p.k[static_cast<size_t>(l)];
        values = cv.defined() ? at::cat({cv, p.v[static_cast<size_t>(l)]}, 0) : p.v[static_cast<size_t>(l)];
        key_positions = at::cat({at::arange(after, at::kLong), at::arange(after, after + p.k[static_cast<size_t>(l)].size(0), at::kLong)});
      } else {
        write_context_rows(actor, l, start, end, x, k_base, v_base, k_full, v_full, residual_mode);
        std::tie(keys, values) = context_view(actor, l, end);
        key_positions = at::arange(end, at::kLong);
      }
      // Attention with the mask by position: [H, Tq, Tk].
      const int64_t group = c_.num_heads / c_.num_kv_heads;
      const at::Tensor kh = keys.repeat_interleave(group, 1).permute({1, 2, 0});   // [H, D, Tk]
      const at::Tensor vh = values.repeat_interleave(group, 1).permute({1, 0, 2}); // [H, Tk, D]
      at::Tensor scores = at::matmul(q.permute({1, 0, 2}), kh) * scale;           // [H, Tq, Tk]
      const at::Tensor masked = key_positions.unsqueeze(0) > positions.unsqueeze(1);  // [Tq, Tk]
      scores = scores.masked_fill(masked.unsqueeze(0), -INFINITY);
      const at::Tensor attn = at::matmul(at::softmax(scores, -1), vh).permute({1, 0, 2}).reshape({end - start, -1});
      h = h + plus(at::matmul(attn, lw.o_proj.t()), lora(actor, l, adapters::ModuleId::kO, attn));
      const at::Tensor y = norm(h, lw.mlp_norm);
      const at::Tensor gate = plus(at::matmul(y, lw.gate_proj.t()), lora(actor, l, adapters::ModuleId::kGate, y));
      const at::Tensor up = plus(at::matmul(y, lw.up_proj.t()), lora(actor, l, adapters::ModuleId::kUp, y));
      const at::Tensor g = at::silu(gate) * up;
      h = h + plus(at::matmul(g, lw.down_proj.t()), lora(actor, l, adapters::ModuleId::kDown, g));
    }
    if (target == Target::kPrivate) {
      priv_[static_cast<size_t>(actor)].len += end - start;
    } else {
      finish_context_rows(actor, end, residual_mode);
    }
    return at::matmul(norm(h, w.final_norm), w.lm_head.dense.to(at::kFloat).t());
  }

  // The rows a context processing event writes at layer l: the actor's own (full), the
  // shared rows nobody wrote yet, and the residual rows not yet covered.
  void write_context_rows(int actor, int64_t l, int64_t start, int64_t end, const at::Tensor& x, const at::Tensor& k_base,
                          const at::Tensor& v_base, const at::Tensor& k_full, const at::Tensor& v_full, bool residual_mode) {
    if (mode_ == SharingMode::kFull) {
      grow(own_[static_cast<size_t>(actor)], l, k_full, v_full);
      return;
    }
    const int64_t w = shared_.len;
    if (w < end && writes_shared(actor)) {
      const int64_t off = w - start, n = end - w;
      if (residual_mode) {
        const at::Tensor pos = at::arange(w, end, at::kLong);
        grow(shared_, l, rope(heads(k_base.narrow(0, off, n), c_.num_kv_heads), pos), heads(v_base.narrow(0, off, n), c_.num_kv_heads));
      } else {
        grow(shared_, l, k_full.narrow(0, off, n), v_full.narrow(0, off, n));
      }
    }
    for (int module : kCached) {
      const bool group = mode_ == SharingMode::kBaseLrShared;
      if (!residual_mode || (group && !writes_shared(actor))) continue;
      if (!group && (actor == kBaseActor || !adapts(actor, module))) continue;
      if (group && !group_adapts(module)) continue;
      Rows& s = stream(group ? kGroup : actor, module);
      if (s.len >= end) continue;
      const adapters::LoraModule* m = group ? group_module(l, module) : adapter(actor)->find(l, static_cast<adapters::ModuleId>(module));
      const int64_t off = s.len - start, n = end - s.len;
      at::Tensor c = m ? at::matmul(x.narrow(0, off, n), m->a.t()) : at::zeros({n, 1});
      grow(s, l, c, {});
    }
  }

  void finish_context_rows(int actor, int64_t end, bool residual_mode) {
    if (mode_ == SharingMode::kFull) {
      own_[static_cast<size_t>(actor)].len = end;
      return;
    }
    if (writes_shared(actor)) shared_.len = std::max(shared_.len, end);
    if (!residual_mode) return;
    for (auto& [key, s] : streams_) {
      const bool mine = key.first == (mode_ == SharingMode::kBaseLrShared ? kGroup : canonical(actor));
      const bool writes = mode_ == SharingMode::kBaseShared ? actor != kBaseActor : writes_shared(actor);
      if (mine && writes) s.len = std::max(s.len, end);
    }
  }

  const runtime::LlamaModel& m_;
  const runtime::ModelConfig& c_;
  SharingMode mode_;
  SharedWriter writer_;
  std::vector<const adapters::Adapter*> readers_;
  std::vector<int32_t> tokens_;
  std::vector<int> authors_;  // per token: its author reader, or kBaseActor
  bool writing_ = false;      // a writer author's run (process_by_authors)
  std::vector<Rows> own_;                      // full: per reader
  Rows shared_;                                // the other modes
  std::map<std::pair<int, int>, Rows> streams_;  // (reader or kGroup, module) -> C rows
  std::vector<Rows> priv_;
  std::vector<int64_t> priv_after_;
  std::map<int, std::vector<int32_t>> priv_tokens_;
  at::Tensor inv_freq_;
};

}  // namespace lorakv::reference
