// runtime/sharing_rules.cpp: each sharing mode's rules (runtime/sharing_rules.h).
#include "lorakv/runtime/sharing_rules.h"

#include <algorithm>
#include <map>

#include "lorakv/common/sha256.h"

namespace lorakv::runtime {

namespace {

// The identity of the stream whose rows every reader of a base_lr_shared context shares:
// the module and the A of each layer (a_hash), so equal A means one stream.
AdapterIdentity group_identity(adapters::ModuleId module, const adapters::Adapter& a) {
  Sha256 h;
  h.update_string("lorakv.shared_a_stream").update_string(adapters::module_name(module));
  for (const adapters::LoraModule& m : a.modules()) {
    if (m.module == module) h.update_u64(static_cast<uint64_t>(m.layer)).update_digest(m.a_hash.digest);
  }
  return AdapterIdentity{h.finish()};
}

// A stream of `module` filled with `a`'s A (and, when `reader` is given, read with its B).
ReaderStream make_stream(const ModelConfig& c, adapters::ModuleId module, const adapters::Adapter& a,
                         const cache::ContentKey& key, const adapters::Adapter* reader) {
  ReaderStream s;
  s.key = key;
  s.module = module;
  s.ranks.assign(static_cast<size_t>(c.num_layers), 0);
  s.a.resize(static_cast<size_t>(c.num_layers));
  s.b.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const adapters::LoraModule* m = a.find(l, module);
    if (m == nullptr) continue;
    s.ranks[static_cast<size_t>(l)] = m->rank;
    s.a[static_cast<size_t>(l)] = m->a;
    const adapters::LoraModule* mine = reader ? reader->find(l, module) : nullptr;
    if (mine == nullptr) continue;
    // B [kv_heads * head_dim, rank] (scale folded) -> [kv_heads, rank, head_dim] float32.
    s.b[static_cast<size_t>(l)] =
        mine->b.to(at::kFloat).view({c.num_kv_heads, c.head_dim, mine->rank}).permute({0, 2, 1}).contiguous();
  }
  return s;
}

bool adapts(const adapters::Adapter* a, adapters::ModuleId module) {
  if (a == nullptr) return false;
  for (const adapters::LoraModule& m : a->modules()) {
    if (m.module == module) return true;
  }
  return false;
}

constexpr adapters::ModuleId kCachedModules[] = {adapters::ModuleId::kV, adapters::ModuleId::kK};

cache::StreamKind stream_kind(adapters::ModuleId module) {
  return module == adapters::ModuleId::kV ? cache::StreamKind::kResidualV : cache::StreamKind::kResidualK;
}

}  // namespace

cache::ContentKey shared_base_key(SharingMode mode, cache::StorageDtype dtype) {
  if (mode != SharingMode::kFullShared) return cache::ContentKey::base(dtype);
  // full_shared rows include their writer's adapter output: never reuse them as base rows.
  static const AdapterIdentity full_shared{Sha256().update_string("lorakv.full_shared_rows").finish()};
  return cache::ContentKey::base_with_adapter(dtype, full_shared);
}

cache::ContentKey own_base_key(const ReaderState& reader, cache::StorageDtype dtype) {
  if (!reader.context_adapter()) return cache::ContentKey::base(dtype);
  return cache::ContentKey::base_with_adapter(dtype, reader.identity);
}

cache::ContentKey private_key(const ReaderState& reader, cache::StorageDtype dtype) {
  if (!reader.adapter) return cache::ContentKey::base(dtype);
  return cache::ContentKey::base_with_adapter(dtype, reader.identity);
}

const ReaderState* writing_author(const ContextState& c, const AdapterIdentity& author, const ReaderState* prefer) {
  if (author == AdapterIdentity::base_model()) return nullptr;
  const auto writes = [&](const ReaderState& r) {
    return !r.left && r.context_adapter() != nullptr && r.context_identity() == author;
  };
  if (prefer != nullptr && writes(*prefer)) return prefer;
  for (const ReaderState& r : c.readers) {
    if (writes(r)) return &r;
  }
  return nullptr;
}

namespace {

// Writer author: each token's writer, the author's identity or the base model's.
cache::WriterRuns author_writers(const ContextState& c, int64_t n) {
  cache::WriterRuns out;
  for (int64_t p = 0; p < n;) {
    const int64_t end = c.authors.run_end(p, n);
    const ReaderState* w = writing_author(c, c.authors[p]);
    out.append(end - p, w != nullptr ? w->context_identity() : AdapterIdentity::base_model());
    p = end;
  }
  return out;
}

}  // namespace

cache::WriterRuns context_writers(const ContextState& c, const ReaderState& reader, int64_t n) {
  if (c.options.mode == SharingMode::kFull) return cache::WriterRuns::filled(n, reader.context_identity());
  switch (c.options.writer) {
    case SharedWriter::kBase: return cache::WriterRuns::filled(n, AdapterIdentity::base_model());
    case SharedWriter::kAuthor: return author_writers(c, n);
    case SharedWriter::kFirst: break;
  }
  return cache::WriterRuns::filled(n, reader.context_identity());
}

cache::WriterRuns residual_writers(const ContextState& c, const ReaderState& filler, int64_t n) {
  if (c.options.mode == SharingMode::kBaseShared) return cache::WriterRuns::filled(n, filler.identity);  // C_i = X_i A_i
  return context_writers(c, filler, n);  // C = X_w A, beside the base rows
}

void add_reader_streams(const ModelConfig& model, cache::StorageDtype residual_dtype, ContextState& c, ReaderState& r) {
  // The adapter whose residual rows the reader reads (none for an aLoRA reader).
  const adapters::Adapter* residual = r.context_adapter();
  if (residual == nullptr || !mode_keeps_residuals(c.options.mode)) return;
  for (adapters::ModuleId m : kCachedModules) {
    if (!adapts(residual, m)) continue;
    if (c.options.mode == SharingMode::kBaseShared) {
      const cache::ContentKey key = cache::ContentKey::residual(stream_kind(m), residual_dtype, r.identity);
      r.streams.push_back(make_stream(model, m, *residual, key, residual));
      continue;
    }
    const cache::ContentKey key = cache::ContentKey::residual(stream_kind(m), residual_dtype, group_identity(m, *residual));
    if (c.group_stream(key) == nullptr) c.group_streams.push_back(make_stream(model, m, *residual, key, nullptr));
    r.streams.push_back(make_stream(model, m, *residual, key, residual));
  }
  for (const ReaderStream& s : r.streams) {
    ContextState::StreamUse& use = c.streams[s.key];
    use.ranks = s.ranks;
    ++use.readers;
  }
}

const ReaderStream* ContextState::group_stream(const cache::ContentKey& key) const {
  const auto found = std::find_if(group_streams.begin(), group_streams.end(), [&](const ReaderStream& g) { return g.key == key; });
  return found == group_streams.end() ? nullptr : &*found;
}

const std::vector<ReaderStream>& streams_to_fill(const ContextState& c, const ReaderState& r) {
  return c.options.mode == SharingMode::kBaseLrShared ? c.group_streams : r.streams;
}

std::vector<const ReaderState*> stream_fillers(const cache::PagedKvCache& cache, const ContextState& c,
                                               const ReaderState& r) {
  std::vector<const ReaderState*> out{&r};
  if (c.options.writer != SharedWriter::kAuthor || !mode_keeps_residuals(c.options.mode)) return out;
  const auto n = static_cast<int64_t>(c.tokens.size());
  for (int64_t p = rows_of(cache, c.shared_seq); p < n; p = c.authors.run_end(p, n)) {
    const ReaderState* w = writing_author(c, c.authors[p]);
    if (w != nullptr && std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  }
  return out;
}

SeqId context_rows(const ContextState& c, const ReaderState& r) {
  return c.options.mode == SharingMode::kFull ? r.own_seq : c.shared_seq;
}

int64_t base_row_sets(const ContextState& c) {
  if (c.options.mode != SharingMode::kFull) return 1;
  return std::count_if(c.readers.begin(), c.readers.end(), [](const ReaderState& r) { return !r.left; });
}

int64_t rows_of(const cache::PagedKvCache& cache, SeqId seq) {
  return seq.valid() ? cache.manager().sequence(seq).num_positions : 0;
}

int64_t coverage(const cache::PagedKvCache& cache, SeqId seq, const ReaderStream& s) {
  const cache::ResidualStream* r = cache.manager().sequence(seq).find_residual(s.key);
  return r != nullptr ? r->covered : 0;
}

int64_t pending_tokens(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (c.options.mode == SharingMode::kFull) return n - rows_of(cache, r.own_seq);
  int64_t pending = n - rows_of(cache, c.shared_seq);
  if (!mode_keeps_residuals(c.options.mode)) return pending;
  // base_shared: the reader's own C_i; base_lr_shared: the context's C, filled by its writer.
  for (const ReaderStream& s : streams_to_fill(c, r)) {
    pending = std::max(pending, n - (c.shared_seq.valid() ? coverage(cache, c.shared_seq, s) : 0));
  }
  return pending;
}

std::optional<NewSequence> sequence_to_create(cache::StorageDtype dtype, ContextState& c, ReaderState& r) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (c.options.mode == SharingMode::kFull) {
    if (r.own_seq.valid()) return std::nullopt;
    return NewSequence{&r.own_seq, own_base_key(r, dtype), context_writers(c, r, n)};
  }
  if (c.shared_seq.valid()) return std::nullopt;
  return NewSequence{&c.shared_seq, shared_base_key(c.options.mode, dtype), context_writers(c, r, n)};
}

namespace {

// One item of a reader's context work (or, with work kNoWork, of a writer running for it):
// `adapter` runs tokens [start, end) of the context; it writes no base rows unless base_from
// is set below end.
Item context_item(const ContextState& c, size_t work, bool all_logits, const adapters::Adapter* adapter,
                  AdapterIdentity writer, int64_t start, int64_t end) {
  Item it;
  it.work = work;
  it.adapter = adapter;
  it.writer = writer;
  it.kv_lora_in_rows = !mode_keeps_residuals(c.options.mode);
  it.tokens.assign(c.tokens.begin() + start, c.tokens.begin() + end);
  it.start = start;
  it.end = end;
  it.base_from = end;
  it.read_limit = end;
  it.all_logits = all_logits;
  return it;
}

// The rows of `fills` an item ending at it.end fills: each stream from its coverage on.
void add_fills(const cache::PagedKvCache& cache, const ContextState& c, const std::vector<ReaderStream>& fills,
               Item& it) {
  for (const ReaderStream& s : fills) {
    const int64_t from = coverage(cache, c.shared_seq, s);
    if (from < it.end) it.fills.push_back({&s, from});
  }
}

// Writer `base`: the base model processes the new tokens first and writes the shared rows
// (and, in base_lr_shared, the shared C); the reader then builds only its own residuals.
// The shared C may lag the base rows (base rows adopted from the prefix index where another
// context, in base_shared, indexed no C of this group): the base writer then runs from the
// lagging C on and writes base rows only from the shared rows' end `w`.
std::optional<Item> base_writer_item(const cache::PagedKvCache& cache, const ContextState& c,
                                     const std::vector<ReaderStream>& fills, int64_t w, int64_t chunk) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  const bool fills_c = c.options.mode == SharingMode::kBaseLrShared;
  int64_t start = w;
  if (fills_c) {
    for (const ReaderStream& s : fills) start = std::min(start, coverage(cache, c.shared_seq, s));
  }
  if (start >= n) return std::nullopt;
  Item it = context_item(c, kNoWork, /*all_logits=*/false, nullptr, AdapterIdentity::base_model(), start,
                         std::min(n, start + chunk));  // nobody reads the base writer's logits
  it.write_seq = it.read_seq = c.shared_seq;
  if (w < it.end) it.base_from = w;
  if (fills_c) add_fills(cache, c, fills, it);
  return it;
}

// Writer author: the context's unwritten tokens run by run, each by its writer
// (writing_author; the base model for text), which writes the shared rows and fills its
// streams_to_fill (base_lr_shared: the shared C; base_shared: its own C_i, from where it
// lags), reading with its own streams; then, in base_shared, the reader fills its own C_i up
// to the rows written. Items of one step see each other's rows (each layer writes every
// item's rows before any attends), so one step may hold several runs, `chunk` tokens in all.
std::vector<Item> plan_author_work(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r,
                                   size_t work, int64_t chunk, bool all_logits) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  std::map<cache::ContentKey, int64_t> planned;  // streams' coverage once the items planned so far ran
  const auto covered = [&](const ReaderStream& s) {
    const auto found = planned.find(s.key);
    return found != planned.end() ? found->second : coverage(cache, c.shared_seq, s);
  };
  const auto fill = [&](const std::vector<ReaderStream>& streams, Item& it) {
    for (const ReaderStream& s : streams) {
      const int64_t from = covered(s);
      if (from >= it.end) continue;
      it.fills.push_back({&s, from});
      planned[s.key] = it.end;
    }
  };
  const bool group_c = c.options.mode == SharingMode::kBaseLrShared;
  static const std::vector<ReaderStream> kNoStreams;
  int64_t w = rows_of(cache, c.shared_seq);  // the shared rows' end once the items planned so far ran
  int64_t pos = w;                           // the shared C may lag them (see base_writer_item)
  if (group_c) {
    for (const ReaderStream& s : c.group_streams) pos = std::min(pos, covered(s));
  }
  std::vector<Item> items;
  for (int64_t budget = chunk; pos < n && budget > 0;) {
    const int64_t run_end = c.authors.run_end(pos, n);
    const ReaderState* writer = writing_author(c, c.authors[pos], &r);
    const std::vector<ReaderStream>& fills =
        writer != nullptr ? streams_to_fill(c, *writer) : (group_c ? c.group_streams : kNoStreams);
    int64_t start = pos;
    for (const ReaderStream& s : fills) start = std::min(start, covered(s));
    const int64_t end = std::min(run_end, start + budget);
    const bool mine = writer == &r;
    Item it = context_item(c, mine ? work : kNoWork, mine && all_logits, writer ? writer->context_adapter() : nullptr,
                           writer ? writer->context_identity() : AdapterIdentity::base_model(), start, end);
    it.write_seq = it.read_seq = c.shared_seq;
    if (w < end) it.base_from = w;
    fill(fills, it);
    if (writer != nullptr) {
      for (const ReaderStream& s : writer->streams) it.reads.push_back(&s);
    }
    items.push_back(std::move(it));
    budget -= end - start;
    w = std::max(w, end);
    pos = end;
    if (end < run_end) break;
  }
  if (c.options.mode != SharingMode::kBaseShared) return items;
  int64_t start = w;
  for (const ReaderStream& s : r.streams) start = std::min(start, covered(s));
  if (start >= w) return items;
  Item it = context_item(c, work, all_logits, r.context_adapter(), r.context_identity(), start, std::min(w, start + chunk));
  it.write_seq = it.read_seq = c.shared_seq;
  fill(r.streams, it);
  for (const ReaderStream& s : r.streams) it.reads.push_back(&s);
  items.push_back(std::move(it));
  return items;
}

}  // namespace

std::vector<Item> plan_context_work(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r,
                                    size_t work, int64_t chunk, bool all_logits) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  const SharingMode mode = c.options.mode;
  if (mode == SharingMode::kFull) {  // the reader's own rows, from where they end
    const int64_t w = rows_of(cache, r.own_seq);
    if (w >= n) return {};
    Item it = context_item(c, work, all_logits, r.context_adapter(), r.context_identity(), w, std::min(n, w + chunk));
    it.write_seq = it.read_seq = r.own_seq;
    it.base_from = w;
    return {it};
  }
  if (c.options.writer == SharedWriter::kAuthor) return plan_author_work(cache, c, r, work, chunk, all_logits);
  std::vector<Item> items;
  const int64_t w = rows_of(cache, c.shared_seq);
  const std::vector<ReaderStream>& fills = streams_to_fill(c, r);
  const bool reader_writes_base = c.options.writer == SharedWriter::kFirst;
  int64_t base_end = w;  // the shared rows' end once this step's base writer has run
  if (!reader_writes_base) {
    if (std::optional<Item> base = base_writer_item(cache, c, fills, w, chunk)) {
      base_end = std::max(w, base->end);
      items.push_back(std::move(*base));
    }
  }
  // The reader: writes the shared rows (writer first) and fills the streams it fills
  // (its own C_i in base_shared; the shared C of base_lr_shared with writer first).
  const bool reader_fills =
      mode == SharingMode::kBaseShared || (mode == SharingMode::kBaseLrShared && reader_writes_base);
  int64_t start = reader_writes_base ? w : n;
  if (reader_fills) {
    for (const ReaderStream& s : fills) start = std::min(start, coverage(cache, c.shared_seq, s));
  }
  const int64_t limit = reader_writes_base ? n : base_end;
  if (start >= limit) return items;
  Item it = context_item(c, work, all_logits, r.context_adapter(), r.context_identity(), start,
                         std::min(limit, start + chunk));
  it.write_seq = it.read_seq = c.shared_seq;
  if (reader_writes_base && w < it.end) it.base_from = w;
  if (reader_fills) add_fills(cache, c, fills, it);
  for (const ReaderStream& s : r.streams) it.reads.push_back(&s);
  items.push_back(std::move(it));
  return items;
}

bool keeps_author_rows(const ContextState& c, const ReaderState& r) {
  return c.options.writer == SharedWriter::kAuthor && mode_keeps_residuals(c.options.mode) && !r.activated();
}

// What the reply's rows can become: rows equal to what processing the reply as context
// would write. `full` (the reader's own rows) and `full_shared` with writer `first` (the
// shared rows are whoever processes first's full rows) or `author` (its author's full rows)
// take the private rows; the residual modes with writer author take the author rows, beside
// shared C streams that cover every row (base_shared: the other readers' own C_i are filled
// later, as for any text). Only when nothing was appended since the reply began and the rows
// before it are all there; otherwise the reply is processed again.
Adoption adoption(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r) {
  const auto n = static_cast<int64_t>(c.tokens.size());
  if (!r.private_seq.valid() || r.private_after != n) return {};
  Adoption a;
  if (c.options.mode == SharingMode::kFull) a = {r.own_seq, r.private_seq};
  if (c.options.mode == SharingMode::kFullShared && c.options.writer != SharedWriter::kBase) a = {c.shared_seq, r.private_seq};
  if (r.author_rows.valid()) a = {c.shared_seq, r.author_rows};
  // An aLoRA reader's private rows hold the adapter's K/V; its context rows are base rows.
  if (!a.target.valid() || (r.activated() && a.rows == r.private_seq)) return {};
  const cache::SequenceState& t = cache.manager().sequence(a.target);
  if (t.num_positions != n) return {};
  for (const cache::ResidualStream& s : cache.manager().sequence(a.rows).residuals) {
    const cache::ResidualStream* beside = t.find_residual(s.key);
    if (beside == nullptr || beside->covered != n) return {};
  }
  // Private rows hold no C rows: beside them the target must keep none either.
  if (a.rows == r.private_seq && !t.residuals.empty()) return {};
  return a;
}

}  // namespace lorakv::runtime
