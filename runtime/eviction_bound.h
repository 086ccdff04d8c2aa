// runtime/eviction_bound.h: the eviction loss bound (docs/eviction.md, "The loss bound"),
// computed at an eviction from the attention mass the step's readers put on the rows.
//
// For one query of one head whose attention weights over every row it read are a, and the
// rows E that leave (C: every row it read that stays, its private rows included),
//   ||o - o'||_1 <= sum_{i in E} a_i ||v_i||_1 + (sum_{i in E} a_i) * max_{k in C} ||v_k||_1,
// where o' renormalises the weights over C (1 - sum_C a = sum_E a). The bound is linear in a,
// so its sum over a reader's queries and over the query heads of one KV head needs only
// their summed mass per row, which the kernel returns; the max over C is taken over every
// kept row the reader read, which bounds each query's own max. A reader's value through a V
// residual is bounded as ||v_base||_1 + sum_r |c_r| ||B_r||_1 (c: the row's residual, B_r:
// row r of the reader's B for that KV head, scale folded).
#pragma once

#include <cstdint>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/runtime/step_items.h"

namespace lorakv::runtime {

struct LossBound {
  double sum = 0;     // summed over readers, layers, query heads and queries
  int64_t terms = 0;  // the (layer, query head, query) terms summed
};

// The bound for evicting `seq` down to `keep` (row ids per lane, ascending), from the step's
// `mass` on it; query_heads_per_kv: the model's query heads per KV head. Reads the rows'
// values, so call it before the cache evicts.
LossBound eviction_loss_bound(const cache::PagedKvCache& cache, SeqId seq, const cache::KeepSets& keep,
                              const StepMass& mass, int64_t query_heads_per_kv);

}  // namespace lorakv::runtime
