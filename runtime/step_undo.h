// runtime/step_undo.h: what one engine step can take back (internal to engine_step.cpp): the
// cache's transaction levels (cache/cache_manager.h, "Transactions") and the engine's own
// fields a work entry's admission sets. A deferred entry is undone alone; an exception
// anywhere in the step undoes all of it.
#pragma once

#include <cstdint>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/runtime/engine_state.h"

namespace lorakv::runtime {

// Engine fields a work entry's admission may set (rows created, the private start), saved
// before it runs so a deferred entry or a failed step can put them back.
struct ReaderMarks {
  ContextState* context = nullptr;
  ReaderState* reader = nullptr;
  SeqId shared_seq, own_seq, private_seq, author_rows;
  int64_t private_after = 0;
  int64_t active_from = -1;

  static ReaderMarks of(ContextState& c, ReaderState& r) {
    return {&c, &r, c.shared_seq, r.own_seq, r.private_seq, r.author_rows, r.private_after, r.active_from};
  }
  void restore() const {
    context->shared_seq = shared_seq;
    reader->own_seq = own_seq;
    reader->private_seq = private_seq;
    reader->author_rows = author_rows;
    reader->private_after = private_after;
    reader->active_from = active_from;
  }
};

// One step's undo: a cache transaction level plus the engine fields its work set. Rolls
// everything back when destroyed uncommitted (an exception anywhere in the step).
class StepUndo {
 public:
  explicit StepUndo(cache::PagedKvCache& cache) : cache_(cache), depth_(cache.manager().transaction_depth()) {
    cache_.begin_transaction();
  }
  ~StepUndo() {
    if (open_) rollback_to(depth_, 0);
  }
  StepUndo(const StepUndo&) = delete;
  StepUndo& operator=(const StepUndo&) = delete;

  // A work entry's admission: its own level and marks, kept or undone alone.
  void begin_entry(ReaderMarks marks) {
    cache_.begin_transaction();
    marks_.push_back(marks);
    entry_marks_ = marks_.size() - 1;
  }
  void keep_entry() { cache_.commit_transaction(); }
  void defer_entry() { rollback_to(depth_ + 1, entry_marks_); }

  void commit() {
    cache_.commit_transaction();
    open_ = false;
  }

 private:
  // Rolls back the cache's levels above `depth` and restores the marks from `first` on.
  void rollback_to(int64_t depth, size_t first) {
    while (cache_.manager().transaction_depth() > depth) cache_.rollback_transaction();
    while (marks_.size() > first) {
      marks_.back().restore();
      marks_.pop_back();
    }
  }

  cache::PagedKvCache& cache_;
  int64_t depth_;
  bool open_ = true;
  std::vector<ReaderMarks> marks_;
  size_t entry_marks_ = 0;
};

}  // namespace lorakv::runtime
