// cache/block_pool.cpp: row storage of one pool.
#include "lorakv/cache/block_pool.h"

#include "lorakv/common/errors.h"

namespace lorakv::cache {

at::ScalarType to_scalar_type(StorageDtype dtype) {
  switch (dtype) {
    case StorageDtype::kFloat32: return at::kFloat;
    case StorageDtype::kBFloat16: return at::kBFloat16;
    case StorageDtype::kInt8: break;
  }
  LORAKV_ASSERT(false, "int8 storage needs per-row scales (eviction issue)");
  return at::kFloat;
}

BlockPool::BlockPool(const BlockPoolSpec& spec) : spec_(spec) {
  LORAKV_ASSERT(spec.num_blocks > 0 && spec.block_size > 0 && !spec.row_shape.empty(), "bad block pool spec");
  std::vector<int64_t> shape{spec.num_blocks, spec.block_size};
  shape.insert(shape.end(), spec.row_shape.begin(), spec.row_shape.end());
  const auto opts = at::TensorOptions().dtype(to_scalar_type(spec.dtype)).device(spec.device);
  // Uninitialised: a row is read only after it was written (views cover written rows),
  // and untouched pages of a large pool cost no memory.
  a_ = at::empty(shape, opts);
  if (spec.base) {
    b_ = at::empty(shape, opts);
    positions_ = at::full({spec.num_blocks, spec.block_size}, -1, opts.dtype(at::kInt));
  }
}

at::Tensor BlockPool::flat(const at::Tensor& t) const {
  std::vector<int64_t> shape{spec_.num_blocks * spec_.block_size};
  shape.insert(shape.end(), t.sizes().begin() + 2, t.sizes().end());
  return t.view(shape);
}

void BlockPool::write(const at::Tensor& slots, const at::Tensor& a, const at::Tensor& b) {
  if (slots.numel() == 0) return;
  const auto idx = slots.to(spec_.device, at::kLong);
  std::vector<int64_t> want{slots.numel()};
  want.insert(want.end(), spec_.row_shape.begin(), spec_.row_shape.end());
  LORAKV_CHECK(a.defined() && a.sizes() == at::IntArrayRef(want), InvalidArgumentError,
               "block pool " << spec_.id << ": rows " << at::IntArrayRef(want) << " expected, got "
                             << (a.defined() ? a.sizes() : at::IntArrayRef{}));
  flat(a_).index_copy_(0, idx, a.to(spec_.device, a_.scalar_type()));
  if (b_.defined()) {
    LORAKV_CHECK(b.defined() && b.sizes() == a.sizes(), InvalidArgumentError,
                 "block pool " << spec_.id << ": base rows need V of K's shape " << a.sizes() << ", got "
                               << (b.defined() ? b.sizes() : at::IntArrayRef{}));
    flat(b_).index_copy_(0, idx, b.to(spec_.device, b_.scalar_type()));
  }
}

void BlockPool::write_positions(const at::Tensor& slots, const at::Tensor& positions) {
  LORAKV_ASSERT(positions_.defined(), "positions live in the base pool");
  if (slots.numel() == 0) return;
  flat(positions_).index_copy_(0, slots.to(spec_.device, at::kLong), positions.to(spec_.device, at::kInt));
}

void BlockPool::apply(const StorageOps& ops) {
  std::vector<int64_t> src, dst;
  for (const BlockCopy& c : ops.copies) {
    if (c.pool != spec_.id) continue;
    src.push_back(c.src.value());
    dst.push_back(c.dst.value());
  }
  auto copy_rows = [&](const at::Tensor& t, const std::vector<int64_t>& s, const std::vector<int64_t>& d) {
    const auto cpu = at::TensorOptions().dtype(at::kLong);
    const at::Tensor si = at::tensor(s, cpu).to(spec_.device);
    const at::Tensor di = at::tensor(d, cpu).to(spec_.device);
    t.index_copy_(0, di, t.index_select(0, si));  // index_select copies: sources read first
  };
  auto for_each_tensor = [&](auto&& fn) {
    for (const at::Tensor* t : {&a_, &b_, &positions_}) {
      if (t->defined()) fn(*t);
    }
  };
  if (!src.empty()) for_each_tensor([&](const at::Tensor& t) { copy_rows(t, src, dst); });
  src.clear();
  dst.clear();
  for (const SlotMove& m : ops.moves) {
    if (m.pool != spec_.id) continue;
    src.push_back(m.src_slot);
    dst.push_back(m.dst_slot);
  }
  if (!src.empty()) for_each_tensor([&](const at::Tensor& t) { copy_rows(flat(t), src, dst); });
}

at::Tensor BlockPool::gather_a(const at::Tensor& slots) const {
  return flat(a_).index_select(0, slots.to(spec_.device, at::kLong));
}

at::Tensor BlockPool::gather_b(const at::Tensor& slots) const {
  LORAKV_ASSERT(b_.defined(), "V lives in the base pool");
  return flat(b_).index_select(0, slots.to(spec_.device, at::kLong));
}

at::Tensor BlockPool::gather_positions(const at::Tensor& slots) const {
  LORAKV_ASSERT(positions_.defined(), "positions live in the base pool");
  return flat(positions_).index_select(0, slots.to(spec_.device, at::kLong)).to(at::kLong);
}

}  // namespace lorakv::cache
