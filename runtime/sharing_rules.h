// runtime/sharing_rules.h: every rule that depends on a context's sharing mode and writer, in
// one place (internal to runtime/engine*.cpp; the math is in docs/sharing_modes.md): the keys
// its rows carry, who writes the rows a reader finds unprocessed, which residual streams a
// reader reads and fills, how many context tokens a reader still has to process, the forward
// items of its context work, and whether a reply's private rows become the context's rows at
// commit. The engine's files ask these functions and never test the mode themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lorakv/cache/paged_kv_cache.h"
#include "lorakv/runtime/engine_state.h"
#include "lorakv/runtime/step_items.h"

namespace lorakv::runtime {

// Keys of the rows (docs/cache_layout.md, "Content keys").
cache::ContentKey shared_base_key(SharingMode mode, cache::StorageDtype dtype);
cache::ContentKey own_base_key(const ReaderState& reader, cache::StorageDtype dtype);  // context rows (full)
cache::ContentKey private_key(const ReaderState& reader, cache::StorageDtype dtype);   // private rows

// Whose hidden states fill the context rows `reader` finds unprocessed, position by
// position over the context's first n tokens, and so the only writers whose indexed rows it
// may adopt instead (docs/sharing_modes.md, "Reuse"): its own in `full`; the base model with
// writer `base`; with writer `first` the reader itself, the first to process them (an aLoRA
// reader's context rows are the base model's); with writer `author` each token's author
// (writing_author), the base model for text.
cache::WriterRuns context_writers(const ContextState& c, const ReaderState& reader, int64_t n);
// The same for the residual rows `filler` fills: its own C_i in base_shared, the shared C
// of base_lr_shared by the writers of the base rows beside it.
cache::WriterRuns residual_writers(const ContextState& c, const ReaderState& filler, int64_t n);
// Writer author: the reader that writes the rows of text authored by `author` (an identity
// from ContextState::authors): a live reader reading the context with that identity; null
// for the base model (text, an aLoRA author, or an author whose readers all left).
// `prefer` is taken when it qualifies (a reader whose agent shares the author's adapter).
const ReaderState* writing_author(const ContextState& c, const AdapterIdentity& author,
                                  const ReaderState* prefer = nullptr);

// Sets up the residual streams a new reader `r` of `c` reads (its own C_i in base_shared; the
// context's shared-A group streams in base_lr_shared, added to c.group_streams when new),
// with the reader's B; none in the other modes or for an aLoRA reader.
void add_reader_streams(const ModelConfig& model, cache::StorageDtype residual_dtype, ContextState& c, ReaderState& r);
// The streams a reader's processing fills: its own (base_shared) or the context's (base_lr_shared).
const std::vector<ReaderStream>& streams_to_fill(const ContextState& c, const ReaderState& r);
// The readers whose streams_to_fill a context work of `r` may fill, so they must exist in
// the shared rows first: r, and with writer author the authors writing its pending tokens.
std::vector<const ReaderState*> stream_fillers(const cache::PagedKvCache& cache, const ContextState& c,
                                               const ReaderState& r);

// The sequence holding the context rows `r` reads (its own rows in `full`, the shared rows
// otherwise; invalid before its first work), and how many sets of base rows `c` keeps.
SeqId context_rows(const ContextState& c, const ReaderState& r);
int64_t base_row_sets(const ContextState& c);

// Rows of `seq` (0 for an invalid one), and the rows of `s` that `seq` covers.
int64_t rows_of(const cache::PagedKvCache& cache, SeqId seq);
int64_t coverage(const cache::PagedKvCache& cache, SeqId seq, const ReaderStream& s);

// Context tokens the reader still has to process before it can read the context's end.
int64_t pending_tokens(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r);

// The sequence a reader's first work on a context creates (its own rows in `full`, the
// shared rows otherwise), or nullopt when it exists.
struct NewSequence {
  SeqId* slot = nullptr;  // where its id goes (ReaderState::own_seq or ContextState::shared_seq)
  cache::ContentKey key;
  cache::WriterRuns writers;  // per context token: of every row it would write, and so of every row it may adopt
};
std::optional<NewSequence> sequence_to_create(cache::StorageDtype dtype, ContextState& c, ReaderState& r);

// The items of one kContext work entry (none when the reader has nothing to process).
// Planned against the cache as it is, which already holds the rows that earlier admitted
// work entries of this step reserved: a later entry on one context plans after them.
std::vector<Item> plan_context_work(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r,
                                    size_t work, int64_t chunk, bool all_logits);

// Writer author's fast form: whether a reply `r` begins keeps its rows a second time in the
// shared layout while it decodes (ReaderState::author_rows: base rows from its hidden states
// and the C rows of its streams_to_fill), so that its commit adopts them instead of
// processing the reply again: base_shared and base_lr_shared with writer author, for a
// reader that is not an aLoRA (its context rows are the base model's, its private rows its
// adapter's). The engine asks only where EngineOptions::keep_author_rows is set.
bool keeps_author_rows(const ContextState& c, const ReaderState& r);

// What the reader's reply becomes at commit (docs/sharing_modes.md, "Commit"): the rows of
// `rows` (its private rows, or its author rows) moved onto the end of `target`; an invalid
// target: the reply is processed again.
struct Adoption {
  SeqId target;
  SeqId rows;
};
Adoption adoption(const cache::PagedKvCache& cache, const ContextState& c, const ReaderState& r);

}  // namespace lorakv::runtime
