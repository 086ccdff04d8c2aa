// runtime/eviction_scores.h: row scores an eviction policy computes from the cached keys
// themselves rather than from attention (cache::eviction::ScoreSource::kKeys).
#pragma once

#include <ATen/ATen.h>

namespace lorakv::runtime {

// Keys as they were before RoPE: `keys` float32 or bfloat16 [heads, N, head_dim] rotated at
// `positions` int64 [N]; cos_half, sin_half: float32 [>= max position + 1, head_dim / 2],
// the model's tables (LlamaModel::rope_half_tables). Returns float32 [heads, N, head_dim].
at::Tensor unrotated_keys(const at::Tensor& keys, const at::Tensor& positions, const at::Tensor& cos_half,
                          const at::Tensor& sin_half);

// The leverage score of each row (docs/eviction.md, `leverage`): per head, with U the
// `rank` eigenvectors of the largest eigenvalues of K^T K (K: that head's keys, [N, D]),
// ||U^T k_i||^2 / ||k_i||^2 (0 for a zero key), summed over heads.
// keys: float32 [heads, N, head_dim]. Returns float32 [N].
at::Tensor key_leverage(const at::Tensor& keys, int64_t rank);

}  // namespace lorakv::runtime
