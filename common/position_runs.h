// common/position_runs.h: a value per position 0..size-1, stored as runs of equal values.
// A sequence's writers change once per turn, not per token: as runs, a 100K-token trajectory
// written by three agents costs a few runs instead of 100K 32-byte identities, so the host
// bytes of a long (evicted) history stay flat.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "lorakv/common/errors.h"

namespace lorakv {

template <class T>
class PositionRuns {
 public:
  PositionRuns() = default;
  static PositionRuns from(const std::vector<T>& per_position) {
    PositionRuns out;
    for (const T& v : per_position) out.append(1, v);
    return out;
  }
  // `n` positions, every one holding `value`.
  static PositionRuns filled(int64_t n, const T& value) {
    PositionRuns out;
    out.append(n, value);
    return out;
  }

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t num_runs() const { return static_cast<int64_t>(starts_.size()); }

  // The value at `pos` (0 <= pos < size()).
  const T& operator[](int64_t pos) const { return values_[run_of(pos)]; }

  // One past the last position of the run holding `pos`, at most `limit`.
  int64_t run_end(int64_t pos, int64_t limit) const {
    const size_t r = run_of(pos);
    const int64_t end = r + 1 < starts_.size() ? starts_[r + 1] : size_;
    return std::min(end, limit);
  }

  // `n` more positions holding `value` (merged into the last run when it holds it too).
  void append(int64_t n, const T& value) {
    LORAKV_ASSERT(n >= 0, "appending " << n << " positions");
    if (n == 0) return;
    if (values_.empty() || !(values_.back() == value)) {
      starts_.push_back(size_);
      values_.push_back(value);
    }
    size_ += n;
  }
  void append(const PositionRuns& more) {
    for (size_t r = 0; r < more.starts_.size(); ++r) {
      const int64_t end = r + 1 < more.starts_.size() ? more.starts_[r + 1] : more.size_;
      append(end - more.starts_[r], more.values_[r]);
    }
  }

  // Positions [begin, end) hold `value` from now on (runs split and merge around them).
  void fill(int64_t begin, int64_t end, T value) {  // by value: it may alias a run
    LORAKV_ASSERT(0 <= begin && begin <= end && end <= size_, "fill [" << begin << ", " << end << ") of " << size_);
    if (begin == end) return;
    split_at(begin);
    split_at(end);
    const auto lo = std::lower_bound(starts_.begin(), starts_.end(), begin) - starts_.begin();
    const auto hi = std::lower_bound(starts_.begin(), starts_.end(), end) - starts_.begin();
    starts_.erase(starts_.begin() + lo, starts_.begin() + hi);
    values_.erase(values_.begin() + lo, values_.begin() + hi);
    starts_.insert(starts_.begin() + lo, begin);
    values_.insert(values_.begin() + lo, value);
    merge_with_next(lo);
    if (lo > 0) merge_with_next(lo - 1);
  }

  // Positions whose own value nobody needs any more (evicted everywhere): each range takes
  // its left neighbour's value (a range at 0 its right neighbour's), so the runs around it
  // merge and a long evicted history costs no runs. `ranges`: sorted, disjoint [begin, end).
  void forget(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    for (const auto& [begin, end] : ranges) {
      if (begin == end) continue;
      if (begin > 0) {
        fill(begin, end, (*this)[begin - 1]);
      } else if (end < size_) {
        fill(begin, end, (*this)[end]);
      }
    }
  }

  // The values of positions [begin, end), one per position.
  std::vector<T> slice(int64_t begin, int64_t end) const {
    LORAKV_ASSERT(0 <= begin && begin <= end && end <= size_, "slice [" << begin << ", " << end << ") of " << size_);
    std::vector<T> out;
    out.reserve(static_cast<size_t>(end - begin));
    for (int64_t p = begin; p < end;) {
      const int64_t b = run_end(p, end);
      out.insert(out.end(), static_cast<size_t>(b - p), (*this)[p]);
      p = b;
    }
    return out;
  }
  std::vector<T> expand() const { return slice(0, size_); }
  // Positions [0, n) as runs.
  PositionRuns prefix(int64_t n) const {
    LORAKV_ASSERT(0 <= n && n <= size_, "prefix of " << n << " of " << size_);
    PositionRuns out;
    for (int64_t p = 0; p < n; p = run_end(p, n)) out.append(run_end(p, n) - p, (*this)[p]);
    return out;
  }

  int64_t host_bytes() const {
    return static_cast<int64_t>(starts_.capacity() * sizeof(int64_t) + values_.capacity() * sizeof(T));
  }

  friend bool operator==(const PositionRuns& a, const PositionRuns& b) {
    return a.size_ == b.size_ && a.starts_ == b.starts_ && a.values_ == b.values_;
  }

 private:
  size_t run_of(int64_t pos) const {
    LORAKV_ASSERT(0 <= pos && pos < size_, "position " << pos << " of " << size_);
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), pos);
    return static_cast<size_t>(it - starts_.begin()) - 1;
  }

  // Makes `pos` the start of a run (0 < pos < size; else nothing to split).
  void split_at(int64_t pos) {
    if (pos <= 0 || pos >= size_) return;
    const size_t r = run_of(pos);
    if (starts_[r] == pos) return;
    starts_.insert(starts_.begin() + static_cast<std::ptrdiff_t>(r + 1), pos);
    values_.insert(values_.begin() + static_cast<std::ptrdiff_t>(r + 1), T(values_[r]));
  }
  // Joins run `r` and run r + 1 when they hold equal values.
  void merge_with_next(std::ptrdiff_t r) {
    const auto next = static_cast<size_t>(r + 1);
    if (next >= values_.size() || !(values_[next] == values_[static_cast<size_t>(r)])) return;
    starts_.erase(starts_.begin() + r + 1);
    values_.erase(values_.begin() + r + 1);
  }

  std::vector<int64_t> starts_;  // first position of each run, ascending; starts_[0] == 0
  std::vector<T> values_;        // each run's value; neighbours differ
  int64_t size_ = 0;
};

}  // namespace lorakv
