// tests/cache/randomized_cache_test.cpp: random sequences of create (with prefix match) /
// fork / append (base and residual catch-up) / attach / compact / release, checked after
// every step against a simple model (per sequence: token ids, row writers, per lane the
// kept positions, per residual stream its writers), against reference counts recounted
// from the tables, and against the stored rows' contents. Rows hold history contents
// (cache_test_util.h): a function of the whole token prefix, every row's writer, the
// compaction epoch and the stream's owner. Lookups name the writer of every row: mostly the
// agent's own, sometimes a history's writers row by row (as a restored session asks); either
// way every row a sequence reuses must hold exactly what its prefix and writers would have
// written.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "lorakv/cache/paged_kv_cache.h"
#include "cache_test_util.h"
#include "lorakv/common/sha256.h"

namespace lorakv::cache {
namespace {

constexpr int64_t kNumAgents = 3;  // agent 0 is the base model; 1 and 2 have residual streams

AdapterIdentity identity_of(int64_t agent) {
  if (agent == 0) return AdapterIdentity::base_model();
  return AdapterIdentity{sha256("agent " + std::to_string(agent))};
}

// The agents the cache reports as writers (-1 for an identity no agent has).
std::vector<int64_t> agents_of(const std::vector<AdapterIdentity>& identities) {
  std::vector<int64_t> out;
  for (AdapterIdentity id : identities) {
    int64_t agent = -1;
    for (int64_t a = 0; a < kNumAgents; ++a) agent = identity_of(a) == id ? a : agent;
    out.push_back(agent);
  }
  return out;
}

ContentKey base_key(int64_t owner) {
  return owner == 0 ? ContentKey::base(StorageDtype::kFloat32)
                    : ContentKey::base_with_adapter(StorageDtype::kFloat32, identity_of(owner));
}
ContentKey residual_key(int64_t agent) {
  return ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, identity_of(agent));
}
// A lookup's writers: agent `agents[p]` at position p.
WriterRuns writers_of(const std::vector<int64_t>& agents) {
  WriterRuns runs;
  for (int64_t a : agents) runs.append(1, identity_of(a));
  return runs;
}

std::vector<int64_t> ranks_of(int64_t agent) { return agent == 1 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3, 0}; }

struct ModelSeq {
  test::RowHistory history;
  std::vector<std::vector<int32_t>> lanes;             // kept positions per lane
  std::map<int64_t, test::ResidualHistory> residuals;  // agent -> its stream's history
  int64_t main_writer = 0;                             // the agent writing most of its rows
  uint64_t epoch = 0;                                  // rows written now carry it; > 0 once compacted
};

class RandomizedCache {
 public:
  explicit RandomizedCache(unsigned seed, int64_t heads_per_group) : rng_(seed), cache_(make_config(heads_per_group)) {}

  static CacheConfig make_config(int64_t heads_per_group) {
    CacheConfig c;
    c.layout = {2, 2, 4, 4, heads_per_group};
    // Per lane: room for a few sequences' worth of blocks, small enough that appends and
    // copies run out.
    const int64_t lanes = c.layout.num_lanes();
    c.num_base_blocks = 24 * lanes;
    c.residual_pools = {{2, 10 * lanes}, {3, 12 * lanes}};
    return c;
  }

  void step() {
    const unsigned op = pick(100);
    if (seqs_.empty() || op < 12) return create();
    const SeqId seq = any_seq();
    if (op < 20) return fork(seq);
    if (op < 70) return append(seq);
    if (op < 80) return attach(seq);
    if (op < 87) return compact(seq);
    return release(seq);
  }

  void check() {
    const CacheLayout& l = cache_.layout();
    const CacheManager& m = cache_.manager();
    std::map<std::pair<int32_t, int64_t>, int32_t> refs;
    ASSERT_EQ(m.sequences().size(), seqs_.size());
    for (const auto& [id, model] : seqs_) {
      const SequenceState& s = m.sequence(id);
      // The token list goes at the first compaction that drops a row; the count stays.
      ASSERT_EQ(s.num_positions, static_cast<int64_t>(model.history.tokens.size()));
      ASSERT_EQ(s.keeps_tokens, model.epoch == 0) << "seq " << id.value();
      ASSERT_EQ(s.tokens, model.epoch == 0 ? model.history.tokens : std::vector<int32_t>{});
      ASSERT_EQ(agents_of(s.writers.expand()), model.history.writers) << "seq " << id.value();
      for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
        const BaseLane& base = s.lanes[static_cast<size_t>(lane)];
        ASSERT_EQ(base.positions, model.lanes[static_cast<size_t>(lane)]) << "seq " << id.value() << " lane " << lane;
        ASSERT_EQ(base.table.num_rows, static_cast<int64_t>(base.positions.size()));
        ASSERT_EQ(static_cast<int64_t>(base.table.blocks.size()), l.blocks_for(base.table.num_rows));
        for (BlockId b : base.table.blocks) ++refs[{0, b.value()}];
      }
      ASSERT_EQ(s.residuals.size(), model.residuals.size());
      for (const auto& [agent, history] : model.residuals) {
        const ResidualStream& r = m.residual(id, residual_key(agent));
        const auto covered = static_cast<int64_t>(history.writers.size());
        ASSERT_EQ(r.covered, covered);
        ASSERT_EQ(agents_of(r.writers.expand()), history.writers) << "residual of agent " << agent;
        for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
          const int32_t pool = r.pools[static_cast<size_t>(l.layer_of(lane))];
          const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
          const auto& kept = model.lanes[static_cast<size_t>(lane)];
          const auto expect_rows = pool < 0 ? 0 : std::lower_bound(kept.begin(), kept.end(), covered) - kept.begin();
          ASSERT_EQ(t.num_rows, expect_rows) << "residual of agent " << agent << " lane " << lane;
          ASSERT_EQ(static_cast<int64_t>(t.blocks.size()), l.blocks_for(t.num_rows));
          for (BlockId b : t.blocks) ++refs[{pool, b.value()}];
        }
        test::expect_residual_holds_history(cache_, id, residual_key(agent), model.history, history);
      }
      test::expect_lanes_hold_history(cache_, id, model.history);
    }
    // Reference counts equal the references in the tables; nothing else is allocated.
    std::vector<int64_t> used(static_cast<size_t>(m.num_pools()), 0);
    for (const auto& [key, count] : refs) {
      ASSERT_EQ(m.allocator(key.first).refcount(BlockId(key.second)), count);
      ++used[static_cast<size_t>(key.first)];
    }
    int64_t cached = 0;
    for (int32_t p = 0; p < m.num_pools(); ++p) {
      ASSERT_EQ(m.allocator(p).num_used(), used[static_cast<size_t>(p)]);
      // A cached block is unreferenced and still named by the index (else it would be free).
      for (BlockId b : m.allocator(p).cached_blocks()) {
        ASSERT_EQ(m.allocator(p).refcount(b), 0);
        ASSERT_TRUE(m.index().entry_of({p, b}).has_value()) << "cached block " << b.value() << " of pool " << p;
      }
      cached += m.allocator(p).num_cached();
    }
    ASSERT_LE(m.index().num_indexed_blocks(), static_cast<int64_t>(refs.size()) + cached);
    const CacheStats stats = cache_.stats();
    ASSERT_EQ(stats.pools[0].blocks_used, used[0]);
    ASSERT_LE(stats.bytes_in_use, stats.peak_bytes_in_use);
  }

  void release_all() {
    while (!seqs_.empty()) release(seqs_.begin()->first);
  }
  const PagedKvCache& cache() const { return cache_; }
  // Tokens matched / residual rows adopted under the agent's own writer filter, and under
  // the any-writer filter.
  int64_t matched_own = 0, matched_mixed = 0, adopted_own = 0, adopted_mixed = 0;
  int64_t shortfalls = 0, compactions = 0;

 private:
  unsigned pick(unsigned n) { return static_cast<unsigned>(rng_() % n); }
  SeqId any_seq() {
    auto it = seqs_.begin();
    std::advance(it, pick(static_cast<unsigned>(seqs_.size())));
    return it->first;
  }
  // Tokens from a tiny alphabet, so prefixes collide and diverge often.
  std::vector<int32_t> random_tokens(int64_t n) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(pick(3)));
    return t;
  }

  // Every block-aligned prefix of every history written before any compaction, as its
  // prefix hash: what an any-writer lookup may legitimately hand back.
  void record_written(const ModelSeq& m) {
    if (m.epoch != 0) return;
    const int64_t bs = cache_.layout().block_size;
    const std::vector<uint64_t> hb = test::base_prefix_hashes(m.history);
    for (auto end = static_cast<size_t>(bs); end <= hb.size(); end += static_cast<size_t>(bs)) {
      written_base_.insert(hb[end - 1]);
    }
    for (const auto& [agent, r] : m.residuals) {
      const std::vector<uint64_t> hr = test::residual_prefix_hashes(m.history, r);
      for (auto end = static_cast<size_t>(bs); end <= hr.size(); end += static_cast<size_t>(bs)) {
        written_residual_.insert(hr[end - 1]);
      }
    }
  }
  void expect_written(const std::vector<uint64_t>& hashes, const std::set<uint64_t>& written, const char* what) {
    const int64_t bs = cache_.layout().block_size;
    for (auto end = static_cast<size_t>(bs); end <= hashes.size(); end += static_cast<size_t>(bs)) {
      ASSERT_TRUE(written.count(hashes[end - 1])) << what << " block ending at " << end << " matches no written history";
    }
  }

  void create() {
    const SeqId id(next_id_++);
    ModelSeq m;
    m.history.base_owner = pick(3) == 0 ? 1 : 0;
    m.main_writer = pick(kNumAgents);
    std::vector<int32_t> query = random_tokens(pick(12));
    std::vector<int64_t> source_writers;
    if (!seqs_.empty()) {
      const ModelSeq& source = seqs_[any_seq()];
      query = source.history.tokens;
      source_writers = source.history.writers;
      if (pick(3) != 0) {  // mostly the same agent coming back to its trajectory
        m.history.base_owner = source.history.base_owner;
        m.main_writer = source.main_writer;
      }
    }
    if (pick(2)) query.resize(query.size() / 2 + 1);
    // Mostly the agent's own rows; sometimes the source's writers, row by row.
    const bool mixed = !source_writers.empty() && pick(3) == 0;
    std::vector<int64_t> want = mixed ? source_writers : std::vector<int64_t>();
    want.resize(query.size(), m.main_writer);
    const PrefixMatch match = cache_.match_prefix(base_key(m.history.base_owner), query, writers_of(want));
    ASSERT_EQ(match.num_tokens % cache_.layout().block_size, 0);
    ASSERT_LE(match.num_tokens, static_cast<int64_t>(query.size()));
    cache_.create_sequence(id, base_key(m.history.base_owner), match);
    const auto n = static_cast<size_t>(match.num_tokens);
    m.history.tokens.assign(query.begin(), query.begin() + match.num_tokens);
    m.history.epochs.assign(n, 0);
    m.history.writers.assign(want.begin(), want.begin() + match.num_tokens);
    ASSERT_EQ(agents_of(cache_.manager().sequence(id).writers.expand()), m.history.writers);
    expect_written(test::base_prefix_hashes(m.history), written_base_, "match:");
    (mixed ? matched_mixed : matched_own) += match.num_tokens;
    std::vector<int32_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
    m.lanes.assign(static_cast<size_t>(cache_.layout().num_lanes()), all);
    seqs_[id] = m;
    if (pick(2)) attach(id);  // an agent joining a matched prefix may adopt residual rows
  }

  void fork(SeqId src) {
    const SeqId id(next_id_++);
    cache_.fork(src, id);
    seqs_[id] = seqs_[src];
  }

  void attach(SeqId seq) {
    ModelSeq& m = seqs_[seq];
    const int64_t agent = 1 + pick(2);
    if (m.residuals.count(agent)) return;
    // The writers asked for: the base rows' own, row by row; another agent; or the main writer.
    const unsigned f = pick(4);
    const bool mixed = f == 0;
    std::vector<int64_t> want = m.history.writers;
    if (!mixed) std::fill(want.begin(), want.end(), f == 1 ? pick(kNumAgents) : m.main_writer);
    const int64_t covered = cache_.attach_residual(seq, residual_key(agent), ranks_of(agent), writers_of(want));
    ASSERT_EQ(covered % cache_.layout().block_size, 0);
    ASSERT_LE(covered, static_cast<int64_t>(m.history.tokens.size()));
    test::ResidualHistory r{agent, {}, std::vector<uint64_t>(static_cast<size_t>(covered), 0)};
    r.writers.assign(want.begin(), want.begin() + covered);
    ASSERT_EQ(agents_of(cache_.manager().residual(seq, residual_key(agent)).writers.expand()), r.writers);
    expect_written(test::residual_prefix_hashes(m.history, r), written_residual_, "residual adoption:");
    (mixed ? adopted_mixed : adopted_own) += covered;
    m.residuals[agent] = std::move(r);
  }

  void append(SeqId seq) {
    ModelSeq& m = seqs_[seq];
    const std::vector<int32_t> tokens = random_tokens(pick(7));
    const int64_t writer = pick(8) == 0 ? pick(kNumAgents) : m.main_writer;
    const auto first = static_cast<int64_t>(m.history.tokens.size());
    const auto length = first + static_cast<int64_t>(tokens.size());
    AppendRequest req{tokens, identity_of(writer), {}};
    std::vector<int64_t> agents, firsts;
    for (const auto& [agent, r] : m.residuals) {
      const auto covered = static_cast<int64_t>(r.writers.size());
      const int64_t n = pick(2) ? length - covered : static_cast<int64_t>(pick(static_cast<unsigned>(length - covered + 1)));
      req.residuals.push_back({residual_key(agent), n});
      agents.push_back(agent);
      firsts.push_back(covered);
    }
    if (!cache_.can_append(seq, req).ok) {
      ++shortfalls;
      ASSERT_FALSE(cache_.append(seq, req));  // nothing changes; check() confirms
      return;
    }
    std::optional<AppendSlots> slots = cache_.append(seq, req);
    ASSERT_TRUE(slots);
    m.history.tokens.insert(m.history.tokens.end(), tokens.begin(), tokens.end());
    m.history.writers.insert(m.history.writers.end(), tokens.size(), writer);
    m.history.epochs.insert(m.history.epochs.end(), tokens.size(), m.epoch);
    for (auto& lane : m.lanes) {
      for (size_t i = 0; i < tokens.size(); ++i) lane.push_back(static_cast<int32_t>(first + static_cast<int64_t>(i)));
    }
    for (size_t i = 0; i < agents.size(); ++i) {
      test::ResidualHistory& r = m.residuals[agents[i]];
      const auto n = static_cast<size_t>(req.residuals[i].num_tokens);
      r.writers.insert(r.writers.end(), n, writer);
      r.epochs.insert(r.epochs.end(), n, m.epoch);
    }
    for (int64_t layer = 0; layer < cache_.layout().num_layers; ++layer) {
      const at::Tensor k = test::history_k(cache_.layout(), layer, first, static_cast<int64_t>(tokens.size()), m.history);
      cache_.write_base(*slots, layer, k, k + 0.25);
      for (size_t i = 0; i < agents.size(); ++i) {
        const int64_t rank = ranks_of(agents[i])[static_cast<size_t>(layer)];
        if (rank == 0) continue;
        cache_.write_residual(*slots, i, layer,
                              test::history_c(layer, rank, firsts[i], req.residuals[i].num_tokens, m.history,
                                              m.residuals[agents[i]]));
      }
    }
    record_written(m);
  }

  void compact(SeqId seq) {
    ModelSeq& m = seqs_[seq];
    KeepSets keep;
    std::vector<std::vector<int32_t>> lanes;
    bool drops = false;
    const unsigned keep_pct = 30 + pick(71);
    for (const auto& lane : m.lanes) {
      keep.emplace_back();
      lanes.emplace_back();
      for (size_t row = 0; row < lane.size(); ++row) {
        if (pick(100) < keep_pct) {
          keep.back().push_back(static_cast<int64_t>(row));
          lanes.back().push_back(lane[row]);
        }
      }
      drops = drops || lanes.back().size() < lane.size();
    }
    if (!cache_.can_compact(seq, keep).ok) {
      ++shortfalls;
      ASSERT_FALSE(cache_.compact(seq, keep));
      return;
    }
    ASSERT_TRUE(cache_.compact(seq, keep));
    ++compactions;
    m.lanes = std::move(lanes);
    // Rows written from now on are computed over fewer tokens: another content.
    if (drops) m.epoch = next_epoch_++;
  }

  void release(SeqId seq) {
    cache_.release(seq);
    seqs_.erase(seq);
  }

  std::mt19937 rng_;
  PagedKvCache cache_;
  std::map<SeqId, ModelSeq> seqs_;
  std::set<uint64_t> written_base_, written_residual_;
  int64_t next_id_ = 1;
  uint64_t next_epoch_ = 1;
};

TEST(RandomizedCache, OperationsAgreeWithASimpleModel) {
  int64_t matched_own = 0, matched_mixed = 0, adopted_own = 0, adopted_mixed = 0;
  for (int64_t heads_per_group : {1, 2}) {
    for (unsigned seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " heads_per_group " + std::to_string(heads_per_group));
      RandomizedCache r(seed, heads_per_group);
      for (int i = 0; i < 300; ++i) {
        r.step();
        ASSERT_NO_FATAL_FAILURE(r.check()) << "after step " << i;
        if (testing::Test::HasFailure()) return;
      }
      // Every run shared blocks of the agent's own rows, compacted and ran out of blocks.
      EXPECT_GT(r.matched_own, 0);
      EXPECT_GT(r.compactions, 0);
      EXPECT_GT(r.shortfalls, 0);
      std::printf("  seed %u, heads_per_group %lld: matched %lld own-writer / %lld mixed-writer tokens, "
                  "adopted %lld own / %lld mixed residual rows, %lld compactions, %lld shortfalls\n",
                  seed, static_cast<long long>(heads_per_group), static_cast<long long>(r.matched_own),
                  static_cast<long long>(r.matched_mixed), static_cast<long long>(r.adopted_own),
                  static_cast<long long>(r.adopted_mixed), static_cast<long long>(r.compactions),
                  static_cast<long long>(r.shortfalls));
      matched_own += r.matched_own, matched_mixed += r.matched_mixed;
      adopted_own += r.adopted_own, adopted_mixed += r.adopted_mixed;
      r.release_all();
      for (int32_t p = 0; p < r.cache().manager().num_pools(); ++p) EXPECT_EQ(r.cache().manager().allocator(p).num_used(), 0);
      // What stays indexed is cached, reclaimable: no byte is in use.
      int64_t cached = 0;
      for (int32_t p = 0; p < r.cache().manager().num_pools(); ++p) cached += r.cache().manager().allocator(p).num_cached();
      EXPECT_EQ(r.cache().manager().index().num_indexed_blocks(), cached);
      EXPECT_EQ(r.cache().stats().bytes_in_use, 0);
    }
  }
  // Together the runs reused base and residual rows asking for one writer and for mixed ones.
  EXPECT_GT(matched_mixed, 0);
  EXPECT_GT(adopted_own, 0);
  EXPECT_GT(adopted_mixed, 0);
}

}  // namespace
}  // namespace lorakv::cache
