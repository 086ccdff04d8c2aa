// runtime/eviction_bound.cpp: the eviction loss bound (runtime/eviction_bound.h).
#include "lorakv/runtime/eviction_bound.h"

#include <algorithm>

namespace lorakv::runtime {

namespace {

// ||v||_1 of each row: `v` [heads, N, head_dim] (storage dtype) -> float32 [heads, N].
at::Tensor l1_norms(const at::Tensor& v) { return v.to(at::kFloat).abs().sum(-1).contiguous(); }

// Each lane row's value norm as reader `r` reads it at `layer`, heads of group g: the base
// value's, plus the bound of its V residual. base: float32 [heads, N].
at::Tensor reader_norms(const cache::PagedKvCache& cache, SeqId seq, const ReaderMass& r, int64_t layer, int64_t g,
                        const at::Tensor& base) {
  if (!r.value_stream) return base;
  const at::Tensor& b = r.value_stream->b[static_cast<size_t>(layer)];  // float32 [kv_heads, rank, head_dim]
  if (!b.defined()) return base;
  const int64_t heads = base.size(0);
  const at::Tensor c = cache.gather_residual(seq, r.value_stream->key, layer, g).c.to(at::kFloat);  // [N_r, rank]
  const at::Tensor b_norms = b.narrow(0, g * heads, heads).abs().sum(-1);                      // [heads, rank]
  const at::Tensor extra = at::matmul(b_norms, c.narrow(1, 0, b.size(1)).abs().t());           // [heads, N_r]
  at::Tensor out = base.clone();
  out.narrow(1, 0, extra.size(1)).add_(extra);
  return out;
}

// The largest value norm among the reader's private rows, per head of group g (0 without).
std::vector<float> private_max(const cache::PagedKvCache& cache, const ReaderMass& r, int64_t layer, int64_t g,
                               int64_t heads) {
  std::vector<float> out(static_cast<size_t>(heads), 0.f);
  if (!r.private_seq.valid()) return out;
  const at::Tensor v = cache.gather_lane(r.private_seq, layer, g).v;
  if (v.size(1) == 0) return out;
  const at::Tensor m = l1_norms(v).amax(1).contiguous();  // float32 [heads]
  std::copy(m.data_ptr<float>(), m.data_ptr<float>() + heads, out.begin());
  return out;
}

}  // namespace

LossBound eviction_loss_bound(const cache::PagedKvCache& cache, SeqId seq, const cache::KeepSets& keep,
                              const StepMass& mass, int64_t query_heads_per_kv) {
  const cache::CacheLayout& layout = cache.layout();
  const int64_t heads = layout.heads_per_group;
  LossBound out;
  for (int64_t layer = 0; layer < layout.num_layers; ++layer) {
    for (int64_t g = 0; g < layout.num_groups(); ++g) {
      const int64_t lane = layout.lane(layer, g);
      const std::vector<int64_t> live = cache.manager().live_rows(seq, lane);
      std::vector<int64_t> kept_rows = keep[static_cast<size_t>(lane)];
      std::sort(kept_rows.begin(), kept_rows.end());
      const at::Tensor base = live.empty() ? at::Tensor() : l1_norms(cache.gather_lane(seq, layer, g).v);
      for (const ReaderMass& r : mass.readers) {
        out.terms += r.queries * query_heads_per_kv * heads;
        const std::vector<float>& m = r.mass[static_cast<size_t>(layer)];
        if (live.empty() || m.empty()) continue;
        const int64_t read = r.rows_read[static_cast<size_t>(layer)][static_cast<size_t>(g)];
        const at::Tensor norms = reader_norms(cache, seq, r, layer, g, base);  // float32 [heads, N]
        const std::vector<float> kept_max = private_max(cache, r, layer, g, heads);
        for (int64_t h = 0; h < heads; ++h) {
          const float* row_mass = m.data() + (g * heads + h) * r.stride;
          const float* norm = norms.data_ptr<float>() + h * norms.size(1);
          double evicted_mass = 0, evicted_term = 0;
          float largest_kept = kept_max[static_cast<size_t>(h)];
          for (size_t j = 0; j < live.size(); ++j) {
            const int64_t row = live[j];
            if (row >= read) break;  // rows ascend; the reader saw none further
            if (std::binary_search(kept_rows.begin(), kept_rows.end(), row)) {
              largest_kept = std::max(largest_kept, norm[j]);
            } else {
              evicted_mass += row_mass[row];
              evicted_term += static_cast<double>(row_mass[row]) * norm[j];
            }
          }
          out.sum += evicted_term + evicted_mass * largest_kept;
        }
      }
    }
  }
  return out;
}

}  // namespace lorakv::runtime
