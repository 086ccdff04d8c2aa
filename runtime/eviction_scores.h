// runtime/eviction_scores.h: row scores an eviction policy computes from the cached rows
// themselves rather than from attention (cache::eviction::ScoreSource::kKeys, kKeysValuesQueries).
#pragma once

#include <ATen/ATen.h>

namespace lorakv::runtime {

// Rows as they were before RoPE: `x` float32 or bfloat16 [N, heads, head_dim] rotated at
// `positions` int64 [N]; cos_half, sin_half: float32 [>= max position + 1, head_dim / 2],
// the model's tables (LlamaModel::rope_half_tables). Returns float32 [N, heads, head_dim].
at::Tensor unrotated(const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos_half,
                     const at::Tensor& sin_half);

// The same for keys as the cache gathers them: `keys` float32 or bfloat16 [heads, N, head_dim].
// Returns float32 [heads, N, head_dim].
at::Tensor unrotated_keys(const at::Tensor& keys, const at::Tensor& positions, const at::Tensor& cos_half,
                          const at::Tensor& sin_half);

// The leverage score of each row (docs/eviction.md, `leverage`): per head, with U the
// `rank` eigenvectors of the largest eigenvalues of K^T K (K: that head's keys, [N, D]),
// ||U^T k_i||^2 / ||k_i||^2 (0 for a zero key), summed over heads.
// keys: float32 [heads, N, head_dim]. Returns float32 [N].
at::Tensor key_leverage(const at::Tensor& keys, int64_t rank);

// capkv's anchor: `query_mean` float32 [heads, head_dim] (the mean query before RoPE) rotated
// by R_avg, the mean of the RoPE rotations at positions [q_len, q_len + future): R_avg q =
// mean_p (cos_p * q + sin_p * rotate_half(q)). cos_half, sin_half as for unrotated(), with at
// least q_len + future rows. Returns float32 [heads, head_dim].
at::Tensor capkv_anchor(const at::Tensor& query_mean, int64_t q_len, int64_t future, const at::Tensor& cos_half,
                        const at::Tensor& sin_half);

// capkv's score of each row (docs/eviction.md, `capkv`), per query head h of KV head h / group:
// w_i = exp(tau c_i - max_j tau c_j), c_i = cos(anchor_h, k_i) clamped to [-1, 1];
// A = I + sum_j (w_j + eps) v_j v_j^T; score w_i v_i^T A^-1 v_i (float32 solve); then the
// mean over each KV head's query heads.
// keys: float32 or bfloat16 [kv_heads, N, head_dim], as cached (RoPE applied); values: the same
// dtype and shape; anchor: float32 [kv_heads * group, head_dim] (capkv_anchor's). Returns
// float32 [kv_heads, N].
at::Tensor capkv_scores(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& anchor, double tau,
                        double eps = 1e-6);

}  // namespace lorakv::runtime
