// cli/bench/fidelity_layers.cpp: the rows a reader sees per layer, and the swap ablation's
// rows (fidelity_layers.h).
#include "lorakv/cli/bench/fidelity_layers.h"

#include <cmath>

#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

using cache::StreamKind;

// RoPE in the rotate_half layout: x float32 [n, heads, head_dim]; cos, sin float32
// [n, head_dim / 2] (LlamaModel::rope_half_tables), row i at position i.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(2) / 2;
  const at::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [n, 1, half]
  return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2);
}

// The residual stream of `kind` this reader reads: its own (keyed by its identity), else the
// one stream of that kind (base_lr_shared's shared-A group); null when there is none.
const runtime::SequenceRows::Residual* stream_of(const runtime::SequenceRows& shared, StreamKind kind,
                                                 const adapters::Adapter& reader) {
  const runtime::SequenceRows::Residual* only = nullptr;
  int64_t of_kind = 0;
  for (const runtime::SequenceRows::Residual& r : shared.residuals) {
    if (r.key.kind != kind) continue;
    if (r.key.adapter == reader.identity()) return &r;
    only = &r;
    ++of_kind;
  }
  // Several streams and none the reader's: base_shared keys each reader's by its identity.
  LORAKV_ASSERT(of_kind <= 1, "no residual stream of " << reader.name() << " among " << of_kind);
  return only;
}

// C B of one layer: float32 [n, kv_heads, head_dim], zero where the module is not adapted.
at::Tensor residual_term(const runtime::SequenceRows::Residual* stream, const adapters::Adapter& reader,
                         adapters::ModuleId module, int64_t layer, const at::Tensor& like) {
  const adapters::LoraModule* m = reader.find(layer, module);
  if (stream == nullptr || m == nullptr || !stream->c[layer].defined()) return at::zeros_like(like);
  const at::Tensor c = stream->c[layer].to(at::kFloat);           // [n, rank]
  const at::Tensor cb = at::matmul(c, m->b.to(at::kFloat).t());  // [n, kv_heads * head_dim]
  return cb.view(like.sizes());
}

}  // namespace

LayerRows rows_reader_sees(const runtime::SequenceRows& shared, const adapters::Adapter* reader,
                           const runtime::LlamaModel& model) {
  LORAKV_ASSERT(shared.lanes.empty(), "rows_reader_sees: rows with eviction lanes");
  LayerRows out;
  const int64_t n = static_cast<int64_t>(shared.tokens.size());
  const auto [cos_table, sin_table] = model.rope_half_tables(n);
  const runtime::SequenceRows::Residual* k_stream =
      reader ? stream_of(shared, StreamKind::kResidualK, *reader) : nullptr;
  const runtime::SequenceRows::Residual* v_stream =
      reader ? stream_of(shared, StreamKind::kResidualV, *reader) : nullptr;
  for (size_t l = 0; l < shared.k.size(); ++l) {
    at::Tensor k = shared.k[l].to(at::kFloat), v = shared.v[l].to(at::kFloat);
    if (reader != nullptr) {
      const int64_t layer = static_cast<int64_t>(l);
      // C_k is kept before RoPE: the kernel rotates C_k B_k by each row's position.
      k = k + rotate(residual_term(k_stream, *reader, adapters::ModuleId::kK, layer, k), cos_table, sin_table);
      v = v + residual_term(v_stream, *reader, adapters::ModuleId::kV, layer, v);
    }
    out.k.push_back(k);
    out.v.push_back(v);
  }
  return out;
}

LayerRows own_rows(const runtime::SequenceRows& own) {
  LayerRows out;
  for (size_t l = 0; l < own.k.size(); ++l) {
    out.k.push_back(own.k[l].to(at::kFloat));
    out.v.push_back(own.v[l].to(at::kFloat));
  }
  return out;
}

void LayerRowError::add(const LayerRows& seen, const LayerRows& own) {
  const size_t layers = own.k.size();
  k_diff.resize(layers), k_own.resize(layers), v_diff.resize(layers), v_own.resize(layers);
  auto sq = [](const at::Tensor& t) { return t.to(at::kDouble).pow(2).sum().item<double>(); };
  for (size_t l = 0; l < layers; ++l) {
    k_diff[l] += sq(seen.k[l] - own.k[l]);
    k_own[l] += sq(own.k[l]);
    v_diff[l] += sq(seen.v[l] - own.v[l]);
    v_own[l] += sq(own.v[l]);
  }
}

double LayerRowError::k_relative(size_t layer) const { return std::sqrt(k_diff[layer] / k_own[layer]); }
double LayerRowError::v_relative(size_t layer) const { return std::sqrt(v_diff[layer] / v_own[layer]); }

runtime::ContextRows with_own_layers(const runtime::ContextRows& mode_rows, const runtime::SequenceRows& own,
                                     int64_t first, int64_t last) {
  LORAKV_CHECK(mode_rows.shared.has_value(), InvalidArgumentError,
               "with_own_layers: the mode's rows have no shared rows (rows of `full`?)");
  const runtime::SequenceRows& mode_shared = *mode_rows.shared;
  const auto layers = static_cast<int64_t>(mode_shared.k.size());
  LORAKV_CHECK(0 <= first && first <= last && last <= layers, InvalidArgumentError,
               "with_own_layers: layers [" << first << ", " << last << ") are not a band of the " << layers
                                           << " layers");
  LORAKV_CHECK(own.tokens.size() == mode_shared.tokens.size(), InvalidArgumentError,
               "with_own_layers: the reader's own rows hold " << own.tokens.size() << " tokens, the mode's rows "
                                                              << mode_shared.tokens.size());
  LORAKV_CHECK(own.tokens == mode_shared.tokens, InvalidArgumentError,
               "with_own_layers: the reader's own rows are of other tokens");
  LORAKV_CHECK(static_cast<int64_t>(own.k.size()) == layers && static_cast<int64_t>(own.v.size()) == layers,
               InvalidArgumentError,
               "with_own_layers: the reader's own rows have " << own.k.size() << " layers, the mode's rows " << layers);
  runtime::ContextRows out = mode_rows;
  runtime::SequenceRows& shared = *out.shared;
  // Copies: the exported tensors may be views the other rows still share.
  for (auto* tensors : {&shared.k, &shared.v}) {
    for (at::Tensor& t : *tensors) t = t.clone();
  }
  for (runtime::SequenceRows::Residual& r : shared.residuals) {
    for (at::Tensor& c : r.c) c = c.defined() ? c.clone() : c;
  }
  for (int64_t l = first; l < last; ++l) {
    shared.k[l].copy_(own.k[l]);
    shared.v[l].copy_(own.v[l]);
    for (runtime::SequenceRows::Residual& r : shared.residuals) {
      if (r.c[l].defined()) r.c[l].zero_();
    }
  }
  return out;
}

ReplayOptions keep_own_rows(std::vector<runtime::SequenceRows>& own) {
  ReplayOptions options;
  options.before_turn = [&own](const RoleTurnInfo& turn, runtime::Engine& engine, runtime::ContextId ctx) {
    own.push_back(*engine.export_context(ctx, {turn.reader}).own.at(0));
  };
  return options;
}

runtime::ContextRows export_every_reader(const runtime::Engine& engine, runtime::ContextId ctx) {
  std::vector<int32_t> readers(static_cast<size_t>(engine.num_readers(ctx)));
  for (size_t i = 0; i < readers.size(); ++i) readers[i] = static_cast<int32_t>(i);
  return engine.export_context(ctx, readers);
}

at::Tensor turn_over_rows(const runtime::LlamaModel& model, const runtime::ContextRows& rows,
                          const std::vector<AdapterPtr>& readers, const RoleTurnInfo& turn) {
  runtime::EngineOptions eo;
  // Room for the context, the turn, and a block of slack per lane; as much again per residual
  // stream in the rows (base_shared: a k and a v stream per reader, all in one pool of their
  // rank) and per reader whose turn may add one.
  eo.base_rows = static_cast<int64_t>(rows.tokens.size() + turn.tokens.size()) + 2 * eo.block_size;
  const size_t streams = rows.shared ? rows.shared->residuals.size() : 0;
  eo.residual_rows = static_cast<int64_t>(streams + 2 * readers.size()) * eo.base_rows;
  runtime::Engine engine(model, eo);
  const runtime::ContextId ctx = engine.import_context(rows, readers);
  return run_role_turn(engine, {ctx, turn.reader}, turn);
}

}  // namespace lorakv::cli
