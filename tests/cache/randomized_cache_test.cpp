// tests/cache/randomized_cache_test.cpp: random sequences of create (with prefix match) /
// fork / append (base and residual catch-up) / attach / compact / release, checked after
// every step against a simple model (per sequence: token ids, per lane the kept positions,
// per residual stream the covered positions), against reference counts recounted from the
// tables, and against the stored rows' synthetic contents.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "cache/paged_kv_cache.h"
#include "cache_test_util.h"

namespace lorakv::cache {
namespace {

struct ModelSeq {
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> lanes;  // kept positions per lane
  std::map<int64_t, int64_t> covered;       // agent -> positions covered by its residual stream
};

const AdapterIdentity kAgents[] = {{0, 0}, {1, 1}, {2, 2}};

ContentKey residual_key(int64_t agent) {
  return ContentKey::residual(StreamKind::kResidualV, StorageDtype::kFloat32, kAgents[agent]);
}
std::vector<int64_t> ranks_of(int64_t agent) { return agent == 1 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3, 0}; }

class RandomizedCache {
 public:
  explicit RandomizedCache(unsigned seed, int64_t heads_per_group) : rng_(seed), cache_(make_config(heads_per_group)) {}

  static CacheConfig make_config(int64_t heads_per_group) {
    CacheConfig c;
    c.layout = {2, 2, 4, 4, heads_per_group};
    c.num_base_blocks = 64;  // small enough that appends and copies run out
    c.residual_pools = {{2, 40}, {3, 48}};
    return c;
  }

  void step() {
    const unsigned op = pick(100);
    if (seqs_.empty() || op < 12) return create();
    const SeqId seq = any_seq();
    if (op < 22) return fork(seq);
    if (op < 70) return append(seq);
    if (op < 78) return attach(seq);
    if (op < 90) return compact(seq);
    return release(seq);
  }

  void check() {
    const CacheLayout& l = cache_.layout();
    const CacheManager& m = cache_.manager();
    std::map<std::pair<int32_t, int64_t>, int32_t> refs;
    ASSERT_EQ(m.sequences().size(), seqs_.size());
    for (const auto& [id, model] : seqs_) {
      const SequenceState& s = m.sequence(id);
      ASSERT_EQ(s.tokens, model.tokens);
      for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
        const BaseLane& base = s.lanes[static_cast<size_t>(lane)];
        ASSERT_EQ(base.positions, model.lanes[static_cast<size_t>(lane)]) << "seq " << id.value() << " lane " << lane;
        ASSERT_EQ(base.table.num_rows, static_cast<int64_t>(base.positions.size()));
        ASSERT_EQ(static_cast<int64_t>(base.table.blocks.size()), l.blocks_for(base.table.num_rows));
        for (BlockId b : base.table.blocks) ++refs[{0, b.value()}];
      }
      ASSERT_EQ(s.residuals.size(), model.covered.size());
      for (const auto& [agent, covered] : model.covered) {
        const ResidualStream& r = m.residual(id, residual_key(agent));
        ASSERT_EQ(r.covered, covered);
        for (int64_t lane = 0; lane < l.num_lanes(); ++lane) {
          const int32_t pool = r.pools[static_cast<size_t>(l.layer_of(lane))];
          const BlockTable& t = r.lanes[static_cast<size_t>(lane)];
          const auto& kept = model.lanes[static_cast<size_t>(lane)];
          const auto expect_rows = pool < 0 ? 0 : std::lower_bound(kept.begin(), kept.end(), covered) - kept.begin();
          ASSERT_EQ(t.num_rows, expect_rows) << "residual of agent " << agent << " lane " << lane;
          ASSERT_EQ(static_cast<int64_t>(t.blocks.size()), l.blocks_for(t.num_rows));
          for (BlockId b : t.blocks) ++refs[{pool, b.value()}];
        }
        test::expect_residual_aligned(cache_, id, residual_key(agent), agent, model.tokens);
      }
      test::expect_lanes_hold(cache_, id, model.tokens);
    }
    // Reference counts equal the references in the tables; nothing else is allocated.
    std::vector<int64_t> used(static_cast<size_t>(m.num_pools()), 0);
    for (const auto& [key, count] : refs) {
      ASSERT_EQ(m.allocator(key.first).refcount(BlockId(key.second)), count);
      ++used[static_cast<size_t>(key.first)];
    }
    for (int32_t p = 0; p < m.num_pools(); ++p) ASSERT_EQ(m.allocator(p).num_used(), used[static_cast<size_t>(p)]);
    ASSERT_LE(m.index().num_indexed_blocks(), static_cast<int64_t>(refs.size()));
    const CacheStats stats = cache_.stats();
    ASSERT_EQ(stats.pools[0].blocks_used, used[0]);
    ASSERT_LE(stats.bytes_in_use, stats.peak_bytes_in_use);
  }

  void release_all() {
    while (!seqs_.empty()) release(seqs_.begin()->first);
  }
  const PagedKvCache& cache() const { return cache_; }
  int64_t shortfalls = 0, matched_tokens = 0, adopted_rows = 0, compactions = 0;

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

  void create() {
    const SeqId id(next_id_++);
    std::vector<int32_t> query = seqs_.empty() ? random_tokens(pick(12)) : seqs_[any_seq()].tokens;
    if (pick(2)) query.resize(query.size() / 2 + 1);
    const PrefixMatch match = cache_.match_prefix(ContentKey::base(StorageDtype::kFloat32), query, {});
    ASSERT_EQ(match.num_tokens % cache_.layout().block_size, 0);
    ASSERT_LE(match.num_tokens, static_cast<int64_t>(query.size()));
    matched_tokens += match.num_tokens;
    cache_.create_sequence(id, ContentKey::base(StorageDtype::kFloat32), match);
    ModelSeq m;
    m.tokens.assign(query.begin(), query.begin() + match.num_tokens);
    std::vector<int32_t> all(m.tokens.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
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
    if (m.covered.count(agent)) return;
    const int64_t covered = cache_.attach_residual(seq, residual_key(agent), ranks_of(agent), {});
    ASSERT_EQ(covered % cache_.layout().block_size, 0);
    ASSERT_LE(covered, static_cast<int64_t>(m.tokens.size()));
    adopted_rows += covered;
    m.covered[agent] = covered;
  }

  void append(SeqId seq) {
    ModelSeq& m = seqs_[seq];
    const std::vector<int32_t> tokens = random_tokens(pick(7));
    const auto length = static_cast<int64_t>(m.tokens.size() + tokens.size());
    AppendRequest req{tokens, kAgents[pick(3)], {}};
    std::vector<int64_t> agents, firsts;
    for (const auto& [agent, covered] : m.covered) {
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
    const auto first = static_cast<int32_t>(m.tokens.size());
    m.tokens.insert(m.tokens.end(), tokens.begin(), tokens.end());
    for (auto& lane : m.lanes) {
      for (size_t i = 0; i < tokens.size(); ++i) lane.push_back(first + static_cast<int32_t>(i));
    }
    for (int64_t layer = 0; layer < cache_.layout().num_layers; ++layer) {
      const at::Tensor k = test::make_k(cache_.layout(), layer, first, tokens);
      cache_.write_base(*slots, layer, k, k + 0.25);
      for (size_t i = 0; i < agents.size(); ++i) {
        const int64_t rank = ranks_of(agents[i])[static_cast<size_t>(layer)];
        if (rank == 0) continue;
        cache_.write_residual(*slots, i, layer,
                              test::make_c(agents[i], layer, rank, firsts[i], req.residuals[i].num_tokens, m.tokens));
      }
    }
    for (size_t i = 0; i < agents.size(); ++i) m.covered[agents[i]] += req.residuals[i].num_tokens;
  }

  void compact(SeqId seq) {
    ModelSeq& m = seqs_[seq];
    KeepSets keep;
    std::vector<std::vector<int32_t>> lanes;
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
    }
    if (!cache_.can_compact(seq, keep).ok) {
      ++shortfalls;
      ASSERT_FALSE(cache_.compact(seq, keep));
      return;
    }
    ASSERT_TRUE(cache_.compact(seq, keep));
    ++compactions;
    m.lanes = std::move(lanes);
  }

  void release(SeqId seq) {
    cache_.release(seq);
    seqs_.erase(seq);
  }

  std::mt19937 rng_;
  PagedKvCache cache_;
  std::map<SeqId, ModelSeq> seqs_;
  int64_t next_id_ = 1;
};

TEST(RandomizedCache, OperationsAgreeWithASimpleModel) {
  for (int64_t heads_per_group : {1, 2}) {
    for (unsigned seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " heads_per_group " + std::to_string(heads_per_group));
      RandomizedCache r(seed, heads_per_group);
      for (int i = 0; i < 300; ++i) {
        r.step();
        ASSERT_NO_FATAL_FAILURE(r.check()) << "after step " << i;
        if (testing::Test::HasFailure()) return;
      }
      // The run exercised sharing, adoption, eviction and shortfalls.
      EXPECT_GT(r.matched_tokens, 0);
      EXPECT_GT(r.adopted_rows, 0);
      EXPECT_GT(r.compactions, 0);
      EXPECT_GT(r.shortfalls, 0);
      r.release_all();
      for (int32_t p = 0; p < r.cache().manager().num_pools(); ++p) EXPECT_EQ(r.cache().manager().allocator(p).num_used(), 0);
      EXPECT_EQ(r.cache().manager().index().num_entries(), 0);
      EXPECT_EQ(r.cache().stats().bytes_in_use, 0);
    }
  }
}

}  // namespace
}  // namespace lorakv::cache
