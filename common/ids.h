// common/ids.h: strong id types passed between layers, so a sequence id can never be
// mistaken for a block id or a token count.
#pragma once

#include <cstdint>
#include <functional>

namespace lorakv {

template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(int64_t value) : value_(value) {}
  constexpr int64_t value() const { return value_; }
  constexpr bool valid() const { return value_ >= 0; }
  friend constexpr bool operator==(StrongId a, StrongId b) { return a.value_ == b.value_; }
  friend constexpr bool operator!=(StrongId a, StrongId b) { return a.value_ != b.value_; }
  friend constexpr bool operator<(StrongId a, StrongId b) { return a.value_ < b.value_; }

 private:
  int64_t value_ = -1;
};

using SeqId = StrongId<struct SeqIdTag>;
// A block of a cache pool (cache/): unique within its pool, not across pools.
using BlockId = StrongId<struct BlockIdTag>;

}  // namespace lorakv

template <typename Tag>
struct std::hash<lorakv::StrongId<Tag>> {
  size_t operator()(lorakv::StrongId<Tag> id) const noexcept { return std::hash<int64_t>()(id.value()); }
};
