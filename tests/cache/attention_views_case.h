// tests/cache/attention_views_case.h: a small paged cache of random rows, the fused kernel
// run on it through cache/attention_views.h, and the same attention done the plain way
// (tests/reference/lora_attention_reference.h) from the cache's own dense gathers.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "lorakv/cache/attention_views.h"

namespace lorakv::cache::test {

// 2 layers, 4 query heads over 2 KV heads of 32 dims (the kernel takes multiples of 32),
// blocks of 4 rows, one residual pool of rank 8.
inline constexpr int64_t kViewLayers = 2, kViewHeads = 4, kViewKvHeads = 2, kViewHeadDim = 32, kViewBlock = 4;
inline constexpr int64_t kViewRank = 8;

CacheConfig views_config(int64_t heads_per_group, StorageDtype dtype);
// The v residual stream of the test's one adapted agent.
ContentKey agent_v_stream(StorageDtype dtype);

// Appends `count` tokens with random K, V (float [count, kv_heads, head_dim]) at every
// layer and random C rows over them for each of `streams` (covering the new tokens).
void append_random(PagedKvCache& cache, SeqId seq, int64_t count, const std::vector<ContentKey>& streams);

struct ViewAgent {
  at::Tensor q;            // float [Tq, kViewHeads, kViewHeadDim]
  at::Tensor q_positions;  // int64 [Tq]
  bool adapted = false;    // reads the stream's C rows as its v residual
  at::Tensor b_v;          // float [kViewKvHeads, rank, kViewHeadDim] when adapted at rank > 0
};

// Random queries at positions last_position - num_queries + 1 .. last_position; B scaled so
// the residual is about as large as the base values (rank 0: no B).
ViewAgent random_agent(int64_t num_queries, int64_t last_position, bool adapted, int64_t rank);

// Outputs, float [Tq, H, D] per agent, of one kernels::lora_attention call over the views of
// `seq` at `layer`: every agent on the shared base rows, the adapted ones with `stream`.
std::vector<at::Tensor> attend_through_views(const PagedKvCache& cache, SeqId seq, int64_t layer,
                                             const ContentKey& stream, const std::vector<ViewAgent>& agents);

// The reference output, double [Tq, H, D], from gather_lane / gather_residual.
at::Tensor reference_out(const PagedKvCache& cache, SeqId seq, int64_t layer, const ContentKey& stream,
                         const ViewAgent& agent);

// Runs both and returns "" or, per agent, the largest violation of the tolerance.
std::string compare_views_with_reference(const PagedKvCache& cache, SeqId seq, int64_t layer,
                                         const ContentKey& stream, const std::vector<ViewAgent>& agents);

}  // namespace lorakv::cache::test
