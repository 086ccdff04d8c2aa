// runtime/engine_step.cpp: one engine step. Validate the work; admit it entry by entry:
// turn each work entry into forward items (which tokens run with which adapter, which rows
// they write into which sequence, which rows their queries read) and reserve their rows in
// the cache; run them (runtime/paged_attention.cpp); commit.
#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/sharing_rules.h"
#include "lorakv/runtime/step_items.h"
#include "lorakv/runtime/step_undo.h"

namespace lorakv::runtime {

int64_t Engine::pending_tokens(ReaderRef ref) const {
  return runtime::pending_tokens(*cache_, state_->context(ref.context), state_->reader(ref));
}

namespace {

// The tokens a new sequence may adopt rows for: all but the last, so whoever creates it
// processes at least one token and has logits at the end of the context.
std::vector<int32_t> matchable_tokens(const ContextState& c) {
  if (c.tokens.empty()) return {};
  return std::vector<int32_t>(c.tokens.begin(), c.tokens.end() - 1);
}

// The indexed rows a new sequence adopts: the same tokens and key, every row by its writer.
cache::PrefixMatch match_for(const cache::PagedKvCache& cache, const NewSequence& want,
                             const std::vector<int32_t>& tokens) {
  return cache.match_prefix(want.key, tokens, want.writers.prefix(static_cast<int64_t>(tokens.size())));
}

// Identical prefixes in one step: the work entry of `written` (sequences that admitted
// entries of this step reserve rows in, with their entry) whose pending rows `tokens` could
// adopt beyond the `matched` tokens the index already holds (same key and tokens, every row
// by its writer in want.writers, as match_for will ask next step), if any. Those rows enter the
// index when the step commits; the entry waits for them (deferred) instead of computing
// them again.
std::optional<size_t> entry_writing_prefix(const cache::PagedKvCache& cache, const NewSequence& want,
                                           const std::vector<int32_t>& tokens, int64_t matched,
                                           const std::vector<std::pair<SeqId, size_t>>& written) {
  const int64_t bs = cache.layout().block_size;
  for (const auto& [seq, entry] : written) {
    const cache::SequenceState& s = cache.manager().sequence(seq);
    if (!s.indexable || !(s.base_key == want.key)) continue;
    const auto limit = static_cast<int64_t>(std::min(s.tokens.size(), tokens.size())) / bs * bs;
    int64_t common = matched;
    while (common + bs <= limit && std::equal(tokens.begin() + common, tokens.begin() + common + bs, s.tokens.begin() + common)) {
      common += bs;
    }
    if (common == matched) continue;
    if (s.writers.slice(matched, common) == want.writers.slice(matched, common)) return entry;
  }
  return std::nullopt;
}

// Creates the rows a reader's work needs to exist: its context's shared sequence (or its
// own, in full), reusing indexed blocks (in use or cached) of the same tokens and key, and
// the residual streams it fills or reads. Adopts blocks only; needs no free blocks.
// Returns the context tokens whose rows it adopted from the prefix index.
int64_t prepare_rows(cache::PagedKvCache& cache, Engine::State& st, ContextState& c, ReaderState& r) {
  int64_t hits = 0;
  if (const std::optional<NewSequence> fresh = sequence_to_create(cache.manager().config().base_dtype, c, r)) {
    *fresh->slot = st.new_seq();
    const cache::PrefixMatch match = match_for(cache, *fresh, matchable_tokens(c));
    cache.create_sequence(*fresh->slot, fresh->key, match);
    hits = match.num_tokens;
  }
  for (const ReaderState* filler : stream_fillers(cache, c, r)) {
    for (const ReaderStream& s : streams_to_fill(c, *filler)) {  // none in full and full_shared
      if (cache.manager().sequence(c.shared_seq).find_residual(s.key) != nullptr) continue;
      const int64_t rows = rows_of(cache, c.shared_seq);
      cache.attach_residual(c.shared_seq, s.key, s.ranks, residual_writers(c, *filler, rows));
    }
  }
  return hits;
}

cache::AppendRequest append_request(const Item& it) {
  cache::AppendRequest req;
  req.writer = it.writer;
  if (it.base_from < it.end) req.tokens.assign(it.tokens.begin() + (it.base_from - it.start), it.tokens.end());
  for (const Fill& f : it.fills) req.residuals.push_back({f.stream->key, it.end - f.from});
  return req;
}

// Writer author's fast form: the rows of a reply `r` begins kept again in the shared layout
// (ReaderState::author_rows): a suffix sequence after the same context tokens, with the
// streams the reader fills as a writer of the shared rows.
void start_author_rows(cache::PagedKvCache& cache, Engine::State& st, const ContextState& c, ReaderState& r) {
  r.author_rows = st.new_seq();
  cache.create_suffix_sequence(r.author_rows, shared_base_key(c.options.mode, cache.manager().config().base_dtype),
                               r.private_after);
  for (const ReaderStream& s : streams_to_fill(c, r)) cache.attach_residual(r.author_rows, s.key, s.ranks, {});
}

// What a private item writes into the reader's author rows: its tokens' base rows, as the
// reader's writing of the context would (its context identity), and their C rows.
cache::AppendRequest author_request(const ContextState& c, const ReaderState& r, Item& it) {
  it.author_rows = r.author_rows;
  cache::AppendRequest req;
  req.writer = r.context_identity();
  req.tokens = it.tokens;
  for (const ReaderStream& s : streams_to_fill(c, r)) {
    it.author_fills.push_back(&s);
    req.residuals.push_back({s.key, it.end - it.start});
  }
  return req;
}

// The private items of a kPrivate work entry: its tokens after the reader's private rows.
// One item, or for an aLoRA reader whose first private work holds its invocation after
// other tokens (an instruction), two: the tokens before it with the base weights, then the
// adapted span. Its first private work sets where the span begins (validate_work checked
// that the invocation is there); every later private token is adapted.
std::vector<Item> plan_private_work(const ContextState& c, ReaderState& r, size_t work, const StepWork& w) {
  Item it;
  it.work = work;
  it.adapter = r.adapter.get();
  it.writer = r.identity;
  it.kv_lora_in_rows = true;  // private rows are the reader's full rows
  it.tokens = w.tokens;
  if (!r.private_seq.valid()) r.private_after = static_cast<int64_t>(c.tokens.size());
  it.start = r.private_after + static_cast<int64_t>(r.private_tokens.size());
  it.end = it.start + static_cast<int64_t>(w.tokens.size());
  it.base_from = it.start;
  it.read_seq = context_rows(c, r);
  it.read_limit = r.private_after;
  it.write_seq = it.private_seq = r.private_seq;  // invalid until its first row
  for (const ReaderStream& s : r.streams) it.reads.push_back(&s);
  it.all_logits = w.all_logits;
  if (!r.activated()) return {it};
  if (r.active_from < 0) r.active_from = it.start + r.adapter->find_invocation(w.tokens);
  it.activation_applied = true;
  if (r.active_from <= it.start) return {it};
  Item before = it;  // [start, active_from): the base model's rows, read by the span after them
  before.adapter = nullptr;
  before.writer = AdapterIdentity::base_model();
  before.activation_applied = false;
  before.end = r.active_from;
  before.tokens.resize(static_cast<size_t>(before.end - before.start));
  it.tokens.erase(it.tokens.begin(), it.tokens.begin() + (before.end - before.start));
  it.start = it.base_from = r.active_from;
  return {before, it};
}

// "base pool: 12 blocks needed, 3 free" for the pools the shortfall names.
std::string shortfall_text(const cache::Capacity& cap) {
  std::string text;
  for (size_t p = 0; p < cap.blocks_needed.size(); ++p) {
    if (cap.blocks_needed[p] <= cap.blocks_free[p]) continue;
    if (!text.empty()) text += "; ";
    text += (p == 0 ? std::string("base pool") : "residual pool " + std::to_string(p)) + ": " +
            std::to_string(cap.blocks_needed[p]) + " blocks needed, " + std::to_string(cap.blocks_free[p]) + " free";
  }
  return text;
}


}  // namespace

void Engine::validate_work(const std::vector<StepWork>& work) const {
  std::set<std::pair<int64_t, int32_t>> seen;
  for (const StepWork& w : work) {
    const ReaderState& r = state_->reader(w.reader);  // throws for an unknown context or reader
    const std::string where = "context " + std::to_string(w.reader.context.value()) + " reader " +
                              std::to_string(w.reader.index);
    if (!seen.insert({w.reader.context.value(), w.reader.index}).second) {
      throw ConfigError("two work items for one reader in one step", {"", where});
    }
    if (w.kind != StepWork::Kind::kPrivate) continue;
    if (w.tokens.empty()) throw ConfigError("private work needs tokens", {"", where});
    // A reader mid-reply reads only rows below its private start, which exist: others may
    // have appended to the context since. A reader starting a reply must have processed it.
    const int64_t pending = pending_tokens(w.reader);
    if (!r.private_seq.valid() && pending > 0) {
      throw ConfigError("private work for a reader that has not processed its context",
                        {"", where, "0 pending context tokens", std::to_string(pending), "process the context first (runtime/driver.h: prefill)"});
    }
    for (int32_t t : w.tokens) {
      if (t < 0 || t >= model_.config().vocab_size) {
        throw ConfigError("token id out of range", {"", where, "0.." + std::to_string(model_.config().vocab_size - 1),
                                                    std::to_string(t), ""});
      }
    }
    if (r.activated() && r.active_from < 0 && r.adapter->find_invocation(w.tokens) < 0) {
      // PEFT would run the whole reply with the base weights: never silently.
      throw ConfigError("the first private work of an activated LoRA reader must hold its invocation tokens",
                        {r.adapter->invocation_tokens_file(), where + " (adapter '" + r.adapter->name() + "')",
                         std::to_string(r.adapter->invocation_tokens().size()) + " invocation tokens",
                         "none in " + std::to_string(w.tokens.size()) + " private tokens",
                         "begin the agent's turn with its invocation (the turn header the adapter was trained on)"});
    }
  }
}

namespace {

// The admission phase of one step: what the admitted work entries reserved so far.
struct Admission {
  cache::PagedKvCache& cache;
  Engine::State& state;
  const EngineOptions& options;
  StepUndo& undo;
  StepResult& result;
  std::vector<Item> items;
  std::vector<std::pair<SeqId, size_t>> written;  // indexable sequences receiving base rows, by entry
};

void defer(Admission& a, size_t entry, std::string reason, std::optional<cache::Capacity> shortfall,
           std::optional<size_t> waits_for) {
  a.undo.defer_entry();
  StepAdmission& adm = a.result.admissions[entry];
  adm.admitted = false;
  adm.reason = std::move(reason);
  if (waits_for) adm.waits_for = static_cast<int64_t>(*waits_for);
  ++a.result.stats.deferred;
  a.result.ok = false;
  if (shortfall) {
    adm.shortfall = *shortfall;
    if (a.result.capacity.ok) {
      a.result.capacity = *shortfall;
      a.result.capacity.ok = false;
    }
  }
}

// Plans one work entry against the rows that exist (earlier admitted entries' included),
// reserves its rows at once so the count of blocks is exact, or defers it with its own
// changes undone: for capacity, or to wait for rows an earlier entry writes in this step.
void admit_entry(Admission& a, const StepWork& w, size_t entry) {
  ContextState& c = a.state.context(w.reader.context);
  ReaderState& r = a.state.reader(w.reader);
  const int32_t pools = a.cache.manager().num_pools();
  a.undo.begin_entry(ReaderMarks::of(c, r));
  if (const std::optional<NewSequence> fresh = sequence_to_create(a.cache.manager().config().base_dtype, c, r)) {
    const std::vector<int32_t> tokens = matchable_tokens(c);
    const int64_t matched = match_for(a.cache, *fresh, tokens).num_tokens;
    if (const std::optional<size_t> writer = entry_writing_prefix(a.cache, *fresh, tokens, matched, a.written)) {
      defer(a, entry, "waits for the rows work entry " + std::to_string(*writer) + " writes in this step", std::nullopt,
            writer);
      return;
    }
  }
  const int64_t hits = prepare_rows(a.cache, a.state, c, r);
  std::vector<Item> planned;
  if (w.kind == StepWork::Kind::kContext) {
    planned = plan_context_work(a.cache, c, r, entry, w.max_tokens > 0 ? w.max_tokens : a.options.prefill_chunk,
                                w.all_logits);
  } else {
    planned = plan_private_work(c, r, entry, w);
    if (!r.private_seq.valid()) {
      r.private_seq = a.state.new_seq();
      a.cache.create_suffix_sequence(r.private_seq, private_key(r, a.cache.manager().config().base_dtype), r.private_after);
      if (a.options.keep_author_rows && keeps_author_rows(c, r)) start_author_rows(a.cache, a.state, c, r);
      for (Item& it : planned) it.write_seq = it.private_seq = r.private_seq;
    }
  }
  std::vector<int64_t> reserved(static_cast<size_t>(pools), 0);
  // Reserves `req` in `seq` into `slots`, or defers the entry (false).
  const auto reserve = [&](SeqId seq, const cache::AppendRequest& req, std::optional<cache::AppendSlots>& slots) {
    if (req.tokens.empty() && req.residuals.empty()) return true;
    const cache::Capacity cap = a.cache.can_append(seq, req);
    if (!cap.ok) {
      defer(a, entry, shortfall_text(cap), cap, std::nullopt);
      return false;
    }
    slots = a.cache.append(seq, req);
    LORAKV_ASSERT(slots.has_value(), "append failed after can_append said yes");
    for (size_t p = 0; p < cap.blocks_needed.size(); ++p) reserved[p] += cap.blocks_needed[p];
    return true;
  };
  for (Item& it : planned) {
    if (!reserve(it.write_seq, append_request(it), it.slots)) return;
    if (w.kind == StepWork::Kind::kPrivate && r.author_rows.valid() &&
        !reserve(r.author_rows, author_request(c, r, it), it.author_slots)) {
      return;
    }
  }
  a.undo.keep_entry();
  StepStats& stats = a.result.stats;
  ++stats.admitted;
  stats.prefix_hit_tokens += hits;
  a.result.outputs[entry].prefix_hit_tokens = hits;
  for (size_t p = 0; p < reserved.size(); ++p) {
    stats.blocks_reserved[p] += reserved[p];
    if (a.result.capacity.ok) a.result.capacity.blocks_needed[p] += reserved[p];
  }
  for (Item& it : planned) {
    if (it.base_from < it.end && a.cache.manager().sequence(it.write_seq).indexable) a.written.emplace_back(it.write_seq, entry);
    stats.tokens_processed += it.end - it.start;
    a.items.push_back(std::move(it));
  }
}

// Planned in order, no two items write the same rows.
void check_disjoint_writes(const std::vector<Item>& items) {
  for (size_t a = 0; a < items.size(); ++a) {
    for (size_t b = a + 1; b < items.size(); ++b) {
      const Item &x = items[a], &y = items[b];
      LORAKV_ASSERT(!x.write_seq.valid() || x.write_seq != y.write_seq || x.base_from >= x.end || y.base_from >= y.end ||
                        y.base_from >= x.end || x.base_from >= y.end,
                    "two items of one step plan the same rows");
    }
  }
}

StepResult empty_result(const cache::PagedKvCache& cache, size_t entries) {
  StepResult result;
  result.outputs.resize(entries);
  result.admissions.resize(entries);
  const auto pools = static_cast<size_t>(cache.manager().num_pools());
  result.capacity.blocks_needed.assign(pools, 0);
  for (size_t p = 0; p < pools; ++p) {
    result.capacity.blocks_free.push_back(cache.manager().allocator(static_cast<int32_t>(p)).num_free());
  }
  result.stats.blocks_reserved.assign(pools, 0);
  return result;
}

}  // namespace

// validate -> admit (plan and reserve, entry by entry) -> run (one forward) -> finish
// (commit the reservations, record private tokens, apply the step's effects). Nothing
// changes before admission; any throw before the commit rolls the whole step back (StepUndo:
// rows, reservations, scores) and propagates; after it, nothing throws. Eviction is a phase
// of its own (Engine::evict).
StepResult Engine::step(const std::vector<StepWork>& work) {
  const log::Stopwatch admit_watch;
  validate_work(work);
  StepResult result = empty_result(*cache_, work.size());
  StepUndo undo(*cache_);
  Admission admission{*cache_, *state_, options_, undo, result, {}, {}};
  for (size_t i = 0; i < work.size(); ++i) admit_entry(admission, work[i], i);
  std::vector<Item>& items = admission.items;
  check_disjoint_writes(items);
  result.stats.admit_seconds = admit_watch.seconds();

  const log::Stopwatch run_watch;
  StepEffects effects;  // capkv's anchors and the loss bound's mass, applied at the commit
  if (!items.empty()) run_items(model_, *cache_, *state_, items, result, effects);
  result.stats.run_seconds = run_watch.seconds();

  // Everything that can fail (allocate) happens before the commit; after it, nothing may.
  const log::Stopwatch commit_watch;
  for (StepOutput& out : result.outputs) {
    if (!out.logits.defined()) out.logits = at::empty({0, model_.config().vocab_size}, at::kFloat);
  }
  for (const Item& it : items) {
    if (it.work == kNoWork || work[it.work].kind != StepWork::Kind::kPrivate) continue;
    ReaderState& r = state_->reader(work[it.work].reader);
    r.private_tokens.reserve(r.private_tokens.size() + work[it.work].tokens.size());  // all its items' tokens
  }
  // The rows are written: keep the reservations and index the newly full blocks (all or
  // nothing: a failure there rolls the step back like any other).
  undo.commit();
  for (const Item& it : items) {
    if (it.work == kNoWork || work[it.work].kind != StepWork::Kind::kPrivate) continue;
    ReaderState& r = state_->reader(work[it.work].reader);
    r.private_tokens.insert(r.private_tokens.end(), it.tokens.begin(), it.tokens.end());  // reserved: no allocation
  }
  for (auto& [anchor, after] : effects.anchors) *anchor = std::move(after);  // moves: no allocation
  state_->step_mass.swap(effects.mass);
  result.stats.commit_seconds = commit_watch.seconds();
  return result;
}

}  // namespace lorakv::runtime
