// cache/block_pool.cpp: row storage of one pool.
#include "lorakv/cache/block_pool.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "lorakv/common/errors.h"

namespace lorakv::cache {

at::ScalarType to_scalar_type(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32: return at::kFloat;
    case StorageDtype::kBFloat16: return at::kBFloat16;
    case StorageDtype::kInt8: return at::kChar;
  }
  return at::kFloat;
}

Int8Rows quantize_int8(const at::Tensor& rows) {
  const at::Tensor x = rows.to(at::kFloat);
  const at::Tensor scales = x.abs().amax(-1) / 127.0f;  // [T, heads]
  // An all-zero row keeps scale 0; dividing by FLT_MIN instead of 0 gives it zeros, not NaN.
  const at::Tensor q = (x / scales.clamp_min(FLT_MIN).unsqueeze(-1)).round().clamp(-127, 127).to(at::kChar);
  return {q, scales};
}

at::Tensor hadamard_matrix(int64_t n) {
  LORAKV_ASSERT(n > 0 && (n & (n - 1)) == 0, "a Hadamard matrix needs a power-of-two size, not " << n);
  at::Tensor h = at::ones({1, 1}, at::kDouble);  // Sylvester's construction, in double, normalised once
  while (h.size(0) < n) h = at::cat({at::cat({h, h}, 1), at::cat({h, -h}, 1)}, 0);
  return (h / std::sqrt(static_cast<double>(n))).to(at::kFloat);
}

at::Tensor dequantize_int8(const at::Tensor& values, const at::Tensor& scales) {
  return values.to(at::kFloat) * scales.unsqueeze(-1);
}

BlockPool::BlockPool(const BlockPoolSpec& spec) : spec_(spec) {
  LORAKV_ASSERT(spec.num_blocks > 0 && spec.block_size > 0 && !spec.row_shape.empty(), "bad block pool spec");
  LORAKV_ASSERT(!int8() || (spec.base && spec.row_shape.size() == 2), "int8 storage is for base pools only");
  std::vector<int64_t> shape{spec.num_blocks, spec.block_size};
  shape.insert(shape.end(), spec.row_shape.begin(), spec.row_shape.end());
  const auto opts = at::TensorOptions().dtype(to_scalar_type(spec.dtype)).device(spec.device);
  // Rows uninitialised: a row is read only after it was written (views cover written rows),
  // so pages of rows never written need not be backed by memory. The positions below are
  // not: the whole table is filled with -1 here.
  a_ = at::empty(shape, opts);
  if (spec.base) {
    b_ = at::empty(shape, opts);
    positions_ = at::full({spec.num_blocks, spec.block_size}, -1, opts.dtype(at::kInt));
  }
  if (int8()) {
    a_scales_ = at::empty({spec.num_blocks, spec.block_size, spec.row_shape.front()}, opts.dtype(at::kFloat));
    b_scales_ = at::empty_like(a_scales_);
  }
  LORAKV_ASSERT(!spec.hadamard || int8(), "Hadamard-rotated rows are int8 rows");
  if (spec.hadamard) hadamard_ = hadamard_matrix(spec.row_shape.back()).to(spec.device);
}

at::Tensor BlockPool::rotated(const at::Tensor& rows) const {
  return hadamard_.defined() ? at::matmul(rows, hadamard_) : rows;
}

at::Tensor BlockPool::flat(const at::Tensor& t) const {
  std::vector<int64_t> shape{spec_.num_blocks * spec_.block_size};
  shape.insert(shape.end(), t.sizes().begin() + 2, t.sizes().end());
  return t.view(shape);
}

void BlockPool::write_rows(const at::Tensor& idx, const at::Tensor& rows, const at::Tensor& stored,
                           const at::Tensor& scales) {
  if (!int8()) {
    flat(stored).index_copy_(0, idx, rows.to(spec_.device, stored.scalar_type()));
    return;
  }
  const Int8Rows q = quantize_int8(rotated(rows.to(spec_.device, at::kFloat)));
  flat(stored).index_copy_(0, idx, q.values.to(spec_.device));
  flat(scales).index_copy_(0, idx, q.scales.to(spec_.device));
}

void BlockPool::write(const at::Tensor& slots, const at::Tensor& a, const at::Tensor& b) {
  if (slots.numel() == 0) return;
  const auto idx = slots.to(spec_.device, at::kLong);
  std::vector<int64_t> want{slots.numel()};
  want.insert(want.end(), spec_.row_shape.begin(), spec_.row_shape.end());
  LORAKV_CHECK(a.defined() && a.sizes() == at::IntArrayRef(want), InvalidArgumentError,
               "block pool " << spec_.id << ": rows " << at::IntArrayRef(want) << " expected, got "
                             << (a.defined() ? a.sizes() : at::IntArrayRef{}));
  write_rows(idx, a, a_, a_scales_);
  if (b_.defined()) {
    LORAKV_CHECK(b.defined() && b.sizes() == a.sizes(), InvalidArgumentError,
                 "block pool " << spec_.id << ": base rows need V of K's shape " << a.sizes() << ", got "
                               << (b.defined() ? b.sizes() : at::IntArrayRef{}));
    write_rows(idx, b, b_, b_scales_);
  }
}

void BlockPool::write_int8(const at::Tensor& slots, const Int8Rows& a, const Int8Rows& b) {
  LORAKV_CHECK(int8(), InvalidArgumentError, "block pool " << spec_.id << ": int8 rows for a pool that is not int8");
  if (slots.numel() == 0) return;
  std::vector<int64_t> want{slots.numel()};
  want.insert(want.end(), spec_.row_shape.begin(), spec_.row_shape.end());
  const std::vector<int64_t> want_scales{slots.numel(), spec_.row_shape.front()};
  for (const Int8Rows* r : {&a, &b}) {
    LORAKV_CHECK(r->values.defined() && r->values.scalar_type() == at::kChar && r->values.sizes() == at::IntArrayRef(want) &&
                     r->scales.defined() && r->scales.scalar_type() == at::kFloat &&
                     r->scales.sizes() == at::IntArrayRef(want_scales),
                 InvalidArgumentError,
                 "block pool " << spec_.id << ": int8 rows " << at::IntArrayRef(want) << " with float32 scales "
                               << at::IntArrayRef(want_scales) << " expected");
  }
  const auto idx = slots.to(spec_.device, at::kLong);
  flat(a_).index_copy_(0, idx, a.values.to(spec_.device));
  flat(a_scales_).index_copy_(0, idx, a.scales.to(spec_.device));
  flat(b_).index_copy_(0, idx, b.values.to(spec_.device));
  flat(b_scales_).index_copy_(0, idx, b.scales.to(spec_.device));
}

void BlockPool::write_positions(const at::Tensor& slots, const at::Tensor& positions) {
  LORAKV_ASSERT(positions_.defined(), "positions live in the base pool");
  if (slots.numel() == 0) return;
  flat(positions_).index_copy_(0, slots.to(spec_.device, at::kLong), positions.to(spec_.device, at::kInt));
}

void BlockPool::apply(const StorageOps& ops) { write(prepare(ops)); }

BlockPool::PreparedRows BlockPool::prepare(const StorageOps& ops) const {
  std::vector<int64_t> copy_src, copy_dst, move_src, move_dst;
  for (const BlockCopy& c : ops.copies) {
    if (c.pool != spec_.id) continue;
    copy_src.push_back(c.src.value());
    copy_dst.push_back(c.dst.value());
  }
  for (const SlotMove& m : ops.moves) {
    if (m.pool != spec_.id) continue;
    move_src.push_back(m.src_slot);
    move_dst.push_back(m.dst_slot);
  }
  PreparedRows out;
  // One part per tensor and kind: `rows_of` is the tensor with a block (copies) or a slot
  // (moves) per row. Scales and positions move with their rows.
  auto add = [&](const at::Tensor& rows_of, const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
    if (src.empty()) return;
    const auto cpu = at::TensorOptions().dtype(at::kLong);
    PreparedRows::Part part;
    const at::Tensor rows2d = rows_of.view({rows_of.size(0), -1});
    part.rows = rows2d.index_select(0, at::tensor(src, cpu).to(spec_.device)).contiguous();  // a copy: read before any write
    part.dst = dst;
    if (rows_of.device().is_cpu() && rows_of.is_contiguous()) {
      part.storage = static_cast<char*>(rows_of.data_ptr());
      part.row_bytes = rows2d.size(1) * rows_of.element_size();
    } else {
      part.target = rows2d;
      part.index = at::tensor(dst, cpu).to(spec_.device);
    }
    out.parts.push_back(std::move(part));
  };
  for (const at::Tensor* t : {&a_, &b_, &positions_, &a_scales_, &b_scales_}) {
    if (!t->defined()) continue;
    add(*t, copy_src, copy_dst);
  }
  for (const at::Tensor* t : {&a_, &b_, &positions_, &a_scales_, &b_scales_}) {
    if (!t->defined()) continue;
    add(flat(*t), move_src, move_dst);
  }
  return out;
}

void BlockPool::write(const PreparedRows& prepared) {
  for (const PreparedRows::Part& part : prepared.parts) {
    if (!part.storage) {
      part.target.index_copy_(0, part.index, part.rows);  // a device pool: the one write that may fail
      continue;
    }
    const char* from = static_cast<const char*>(part.rows.data_ptr());
    for (size_t i = 0; i < part.dst.size(); ++i) {
      std::memcpy(part.storage + part.dst[i] * part.row_bytes, from + static_cast<int64_t>(i) * part.row_bytes,
                  static_cast<size_t>(part.row_bytes));
    }
  }
}

at::Tensor BlockPool::gather_a(const at::Tensor& slots) const {
  if (int8()) {
    const Int8Rows r = gather_a_int8(slots);
    return rotated(dequantize_int8(r.values, r.scales));
  }
  return flat(a_).index_select(0, slots.to(spec_.device, at::kLong));
}

at::Tensor BlockPool::gather_b(const at::Tensor& slots) const {
  LORAKV_ASSERT(b_.defined(), "V lives in the base pool");
  if (int8()) {
    const Int8Rows r = gather_b_int8(slots);
    return rotated(dequantize_int8(r.values, r.scales));
  }
  return flat(b_).index_select(0, slots.to(spec_.device, at::kLong));
}

Int8Rows BlockPool::gather_a_int8(const at::Tensor& slots) const {
  LORAKV_ASSERT(int8(), "int8 rows of a pool that is not int8");
  const at::Tensor idx = slots.to(spec_.device, at::kLong);
  return {flat(a_).index_select(0, idx), flat(a_scales_).index_select(0, idx)};
}

Int8Rows BlockPool::gather_b_int8(const at::Tensor& slots) const {
  LORAKV_ASSERT(int8(), "int8 rows of a pool that is not int8");
  const at::Tensor idx = slots.to(spec_.device, at::kLong);
  return {flat(b_).index_select(0, idx), flat(b_scales_).index_select(0, idx)};
}

at::Tensor BlockPool::gather_positions(const at::Tensor& slots) const {
  LORAKV_ASSERT(positions_.defined(), "positions live in the base pool");
  return flat(positions_).index_select(0, slots.to(spec_.device, at::kLong)).to(at::kLong);
}

}  // namespace lorakv::cache
