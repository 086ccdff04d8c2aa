// runtime/evicted_rows.h: a sequence's rows lane by lane, as eviction leaves them (internal to
// runtime/engine_rows.cpp). Export reads each lane's rows as stored, masked ones included,
// with their positions, masks and scores (SequenceRows::lanes); import rebuilds lanes that
// hold the same rows in the same order and blocks, the same rows masked and the same scores,
// so a policy goes on evicting the restored sequence as it would have the saved one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::runtime {

// The rows of `seq` (not a suffix sequence) lane by lane; its tokens are the first of
// `context_tokens` (the sequence itself forgets them at its first eviction).
SequenceRows export_lanes(const cache::PagedKvCache& cache, SeqId seq, const std::vector<int32_t>& context_tokens);

// Whether the rows' dtype and scales agree: with an int8 key, k and v are int8 and k_scale,
// v_scale float32 of shape `scale_shape(i)` for each of the k tensors; otherwise no scales
// and k, v of a float type.
bool int8_scales_fit(const SequenceRows& rows, const std::function<std::vector<int64_t>(size_t)>& scale_shape);

// Throws ConfigError naming the lane (or stream) and what is wrong when `rows.lanes` is not
// a state eviction leaves in this layout: positions not ascending or past the tokens, masks
// or scores of another length, a block whose rows are all masked, tensors of other shapes.
void check_lanes(const cache::CacheLayout& layout, const SequenceRows& rows);

// Writes checked `rows` into the new sequence `seq`: positions are appended `chunk` at a
// time (every lane gets a row per position), each lane packs away the rows it did not hold,
// then the rows it held evicted are masked and the scores set. Not inside a transaction
// (packing and masking cannot be undone: the caller releases the sequence on failure).
// Throws CapacityError when the pools cannot hold one chunk beside the rows so far.
void import_lanes(cache::PagedKvCache& cache, SeqId seq, const SequenceRows& rows, int64_t chunk);

}  // namespace lorakv::runtime
