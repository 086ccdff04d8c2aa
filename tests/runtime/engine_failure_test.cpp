// tests/runtime/engine_failure_test.cpp: a step fails cleanly. Twin engines on the tiny model
// (tests/runtime/tiny_engine_model.h) run one seeded random multi-context, multi-reader
// workload in lockstep: contexts in every sharing mode and writer, with and without an
// eviction policy (scores summed, maxed or the writer's, observation windows, capkv's query
// anchors, a protected window that grows with replies, the loss bound), appends, context
// chunks, private turns, commits, drops, releases, pools small enough that work is
// deferred. Each step is followed by the eviction phase (Engine::evict), as the driver runs
// them. Before
// each step of engine A an allocation failure is armed at a random allocation of that step
// (the count measured on engine B, which runs it first): anywhere from planning, between two
// reservations, to any layer of the forward pass. The failure comes from this binary's
// replacement of operator new, a test wrapper: the engine has no branch for it. After the
// throw, A must be as before the step (tokens, pending work, private tokens, bytes and blocks
// of every pool, the prefix index, every row's eviction score, the rows each lane keeps,
// capkv's anchors); it then runs the step again and must produce what B produced (logits,
// rows evicted, the loss bound), and the two engines must stay equal for the rest of the
// run. Sometimes the failure is armed in the eviction after the step instead: the step's
// rows stand, and evicting again leaves A as B.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace {
// >0: the allocation that many from now on this thread throws std::bad_alloc (once).
thread_local int64_t t_fail_in = 0;
thread_local int64_t t_allocations = 0;  // allocations on this thread
}  // namespace

// Inert unless a test arms t_fail_in: then one allocation of the arming thread fails. malloc
// and free are called through pointers GCC cannot see through: it would otherwise warn that
// memory from operator new reaches free (which is this pair's whole design).
namespace {
void* (*volatile g_malloc)(std::size_t) = std::malloc;
void (*volatile g_free)(void*) = std::free;
}  // namespace
void* operator new(std::size_t n) {
  if (t_fail_in > 0 && --t_fail_in == 0) throw std::bad_alloc();
  ++t_allocations;
  if (void* p = g_malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { g_free(p); }
void operator delete(void* p, std::size_t) noexcept { g_free(p); }

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

// What an engine's user can see of its state, plus the cache's bookkeeping totals.
std::string describe_state(const Engine& e, const std::vector<ContextId>& contexts) {
  std::ostringstream out;
  for (ContextId c : contexts) {
    out << "context " << c.value() << ": " << e.context_tokens(c).size() << " tokens [";
    for (int32_t t : e.context_tokens(c)) out << t << ' ';
    out << "]\n";
    for (int32_t r = 0; r < e.num_readers(c); ++r) {
      out << "  reader " << r << ": pending " << e.pending_tokens({c, r}) << ", private [";
      for (int32_t t : e.private_tokens({c, r})) out << t << ' ';
      out << "], anchor queries " << e.anchor_queries(c, r) << ", kept";
      for (const std::vector<int32_t>& lane : e.kept_positions(c, r)) {
        out << " [";
        for (int32_t p : lane) out << p << ' ';
        out << "]";
      }
      out << "\n";
    }
  }
  const cache::CacheStats s = e.cache().stats();
  out << "bytes in use " << s.bytes_in_use << ", residual " << s.residual_bytes_total << ", blocks used";
  for (const cache::PoolUsage& p : s.pools) out << ' ' << p.blocks_used;
  // Reference counts: a block two sequences share needs a copy before a write (a rollback
  // that lost or kept one reference too many would change what later steps need).
  for (int32_t p = 0; p < e.cache().manager().num_pools(); ++p) {
    const cache::BlockAllocator& alloc = e.cache().manager().allocator(p);
    int64_t refs = 0, shared = 0;
    for (int64_t b = 0; b < alloc.num_blocks(); ++b) {
      const int32_t rc = alloc.refcount(BlockId(b));
      refs += rc;
      shared += rc > 1 ? 1 : 0;
    }
    out << ", pool " << p << " references " << refs << " shared blocks " << shared;
  }
  // Indexed blocks in use. Cached blocks (unreferenced, still findable) are left out: a step
  // that fails after it reclaimed some for its rows cannot give them back (their rows may be
  // overwritten); it gives back the blocks, which are then free instead of cached.
  int64_t cached = 0, available = 0;
  for (int32_t p = 0; p < e.cache().manager().num_pools(); ++p) {
    cached += e.cache().manager().allocator(p).num_cached();
    available += e.cache().manager().allocator(p).num_free();
  }
  out << ", indexed blocks in use " << e.cache().manager().index().num_indexed_blocks() - cached
      << ", free or cached blocks " << available << ", sequences " << e.cache().manager().sequences().size() << "\n";
  return out.str();
}

// Every row's eviction score, sequence by sequence, lane by lane (empty lanes hold none).
std::vector<float> all_scores(const Engine& e) {
  std::vector<float> scores;
  for (SeqId id : e.cache().manager().sequences()) {
    for (const cache::BaseLane& l : e.cache().manager().sequence(id).lanes) scores.insert(scores.end(), l.scores.begin(), l.scores.end());
  }
  return scores;
}

// Scores of twin engines: equal up to float32 rounding of sums of attention mass (at most
// a few hundred terms of [0, 1]), in count and value.
void expect_scores_near(const std::vector<float>& a, const std::vector<float>& b, int64_t step) {
  ASSERT_EQ(a.size(), b.size()) << "step " << step;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5f * std::max(1.f, std::abs(b[i]))) << "step " << step << " score " << i;
  }
}

// Every sequence's block tables with reference counts, for a failure message.
std::string describe_tables(const Engine& e) {
  std::ostringstream out;
  const cache::CacheManager& m = e.cache().manager();
  for (SeqId id : m.sequences()) {
    const cache::SequenceState& s = m.sequence(id);
    out << "seq " << id.value() << " first " << s.first_position << " positions " << s.num_positions << " lanes:";
    for (const cache::BaseLane& l : s.lanes) {
      out << " [" << l.table.num_rows << ":";
      for (BlockId b : l.table.blocks) out << " " << b.value() << "/" << m.allocator(0).refcount(b);
      out << "]";
    }
    for (const cache::ResidualStream& r : s.residuals) out << " stream covered " << r.covered;
    out << "\n";
  }
  return out.str();
}

// A context's eviction: none a quarter of the time, else one of the policies the tiny model's one KV
// head allows, each way its rows can be scored, capkv's anchors, a window that grows with
// replies, the loss bound.
template <typename Pick, typename Chance>
cache::eviction::EvictionConfig random_eviction(Pick& pick, Chance& chance) {
  cache::eviction::EvictionConfig e;
  if (chance(0.25)) return e;
  static const std::vector<std::pair<std::string, std::string>> kinds = {
      {"streaming_llm", "auto"}, {"h2o", "sum"}, {"h2o", "max"}, {"h2o", "writer"},
      {"snapkv", "auto"},        {"snapkv", "max"}, {"capkv", "auto"}, {"leverage", "auto"}};
  const auto& [policy, scoring] = kinds[static_cast<size_t>(pick(0, static_cast<int64_t>(kinds.size()) - 1))];
  e.policy = policy;
  e.scoring = scoring;
  e.budget_tokens = pick(20, 48);
  e.sinks = pick(0, 4);
  e.window = pick(2, 8);
  e.window_growth = chance(0.3) ? 0.5 : 0;
  e.capkv_future_positions = 16;
  e.loss_bound = chance(0.3);
  return e;
}

class EngineFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    const LlamaModel& m = *tiny_.model;
    // Two shared-A groups of two adapters each; base_lr_shared contexts draw from one group.
    adapters_ = {lorakv::testing::make_tiny_adapter(m, "g1.a", 1, 11), lorakv::testing::make_tiny_adapter(m, "g1.b", 1, 12),
                 lorakv::testing::make_tiny_adapter(m, "g2.a", 2, 21), lorakv::testing::make_tiny_adapter(m, "g2.b", 2, 22)};
  }

  // Pools no test here fills, in chunks of 16.
  static EngineOptions roomy_pools() {
    EngineOptions eo;
    eo.base_rows = 512;
    eo.residual_rows = 512;
    eo.prefill_chunk = 16;
    return eo;
  }

  lorakv::testing::TinyEngineModel tiny_;
  std::vector<AdapterPtr> adapters_;
};

TEST_F(EngineFailures, AFailedStepLeavesTheEngineAsIfItNeverRan) {
  EngineOptions eo;
  eo.base_rows = 256;  // 16 blocks per lane: long contexts and several of them get deferred
  eo.residual_rows = 256;
  eo.block_size = 16;
  Engine a(*tiny_.model, eo), b(*tiny_.model, eo);
  std::mt19937 rng(20261202);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const int32_t vocab = static_cast<int32_t>(tiny_.model->config().vocab_size);
  auto tokens = [&](int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = static_cast<int32_t>(pick(0, vocab - 1));
    return t;
  };

  std::vector<ContextId> contexts;
  int64_t steps = 0, injected = 0, deferred = 0, policies = 0, evicted = 0, eviction_failures = 0;
  for (int op = 0; op < 260; ++op) {
    const double roll = std::uniform_real_distribution<double>(0, 1)(rng);
    if (contexts.empty() || (roll < 0.08 && contexts.size() < 3)) {
      const auto mode = static_cast<SharingMode>(pick(0, 3));
      const auto writer = static_cast<SharedWriter>(pick(0, 1));
      std::vector<AdapterPtr> readers;
      const int64_t group = pick(0, 1);
      for (int64_t i = 0, n = pick(1, 3); i < n; ++i) {
        if (chance(0.2)) {
          readers.push_back(nullptr);
        } else if (mode == SharingMode::kBaseLrShared) {
          readers.push_back(adapters_[static_cast<size_t>(group * 2 + pick(0, 1))]);
        } else {
          readers.push_back(adapters_[static_cast<size_t>(pick(0, 3))]);
        }
      }
      ContextOptions options{mode, writer};
      options.eviction = random_eviction(pick, chance);
      policies += options.eviction.enabled() ? 1 : 0;
      const ContextId ca = a.create_context(options, readers);
      const ContextId cb = b.create_context(options, readers);
      ASSERT_EQ(ca.value(), cb.value());
      contexts.push_back(ca);
      const std::vector<int32_t> t = tokens(pick(8, 40));
      a.append(ca, t);
      b.append(cb, t);
      continue;
    }
    const ContextId c = contexts[static_cast<size_t>(pick(0, static_cast<int64_t>(contexts.size()) - 1))];
    if (roll < 0.16) {
      if (a.context_tokens(c).size() > 120) continue;
      const std::vector<int32_t> t = tokens(pick(1, 24));
      a.append(c, t);
      b.append(c, t);
      continue;
    }
    const int32_t some_reader = static_cast<int32_t>(pick(0, a.num_readers(c) - 1));
    if (roll < 0.24) {
      if (a.private_tokens({c, some_reader}).empty()) continue;
      ASSERT_EQ(a.commit_private({c, some_reader}), b.commit_private({c, some_reader}));
      continue;
    }
    if (roll < 0.27) {
      a.drop_private({c, some_reader});
      b.drop_private({c, some_reader});
      continue;
    }
    if (roll < 0.30 && contexts.size() > 1) {
      a.release_context(c);
      b.release_context(c);
      contexts.erase(std::find(contexts.begin(), contexts.end(), c));
      continue;
    }

    // A step: random work for random readers of every context.
    std::vector<StepWork> work;
    for (ContextId ctx : contexts) {
      for (int32_t r = 0; r < a.num_readers(ctx); ++r) {
        if (!chance(0.5)) continue;
        StepWork w;
        w.reader = {ctx, r};
        const bool mid_reply = !a.private_tokens({ctx, r}).empty();
        if (a.pending_tokens({ctx, r}) > 0 && (!mid_reply || chance(0.5))) {
          w.kind = StepWork::Kind::kContext;
          w.max_tokens = pick(1, 40);
        } else {
          w.kind = StepWork::Kind::kPrivate;
          w.tokens = tokens(pick(1, 3));
        }
        w.all_logits = chance(0.3);
        work.push_back(w);
      }
    }
    if (work.empty()) continue;
    ++steps;
    t_allocations = 0;
    StepResult rb = b.step(work);
    const int64_t allocations = t_allocations;
    t_allocations = 0;
    b.evict(rb.stats);
    const int64_t eviction_allocations = t_allocations;
    evicted += rb.stats.rows_evicted;
    for (const StepAdmission& adm : rb.admissions) deferred += adm.admitted ? 0 : 1;

    std::optional<StepResult> ra;
    const double arm = std::uniform_real_distribution<double>(0, 1)(rng);
    if (arm < 0.6 && allocations > 0) {
      const std::string before = describe_state(a, contexts);
      const std::vector<float> scores_before = all_scores(a);
      t_fail_in = pick(1, allocations);
      const int64_t armed_at = t_fail_in;
      try {
        ra = a.step(work);
      } catch (const std::exception& e) {
        ++injected;
        EXPECT_EQ(describe_state(a, contexts), before)
            << "step " << steps << ": allocation " << armed_at << " of " << allocations << " failed (" << e.what()
            << ") and the engine changed";
        EXPECT_EQ(all_scores(a), scores_before)
            << "step " << steps << ": allocation " << armed_at << " of " << allocations << " failed and the scores changed";
      }
      t_fail_in = 0;
    }
    const std::string tables_a = describe_tables(a);
    if (!ra) ra = a.step(work);  // never failed, or again after the failure
    const bool evict_fails = arm >= 0.6 && arm < 0.75 && eviction_allocations > 0;
    if (evict_fails) {
      // The eviction fails instead: the step's rows stand, and the next eviction finishes
      // what it left (its figures then come from two calls: not compared).
      StepStats failed;
      t_fail_in = pick(1, eviction_allocations);
      try {
        a.evict(failed);
      } catch (const std::exception&) {
        ++eviction_failures;
      }
      t_fail_in = 0;
      StepStats again;
      a.evict(again);
    } else {
      a.evict(ra->stats);
      EXPECT_EQ(ra->stats.rows_evicted, rb.stats.rows_evicted) << "step " << steps;
      EXPECT_EQ(ra->stats.loss_bound_terms, rb.stats.loss_bound_terms) << "step " << steps;
      EXPECT_NEAR(ra->stats.loss_bound, rb.stats.loss_bound, 1e-5 * std::max(1.0, rb.stats.loss_bound)) << "step " << steps;
    }
    bool differ = false;
    for (size_t i = 0; i < rb.admissions.size(); ++i) differ = differ || ra->admissions[i].admitted != rb.admissions[i].admitted;
    if (differ) ADD_FAILURE() << "step " << steps << " admits other work on A, whose tables were:\n" << tables_a;
    ASSERT_EQ(ra->ok, rb.ok) << "step " << steps;
    ASSERT_EQ(ra->outputs.size(), rb.outputs.size());
    for (size_t i = 0; i < rb.outputs.size(); ++i) {
      EXPECT_EQ(ra->admissions[i].admitted, rb.admissions[i].admitted) << "step " << steps << " item " << i;
      EXPECT_EQ(ra->outputs[i].tokens_processed, rb.outputs[i].tokens_processed) << "step " << steps << " item " << i;
      ASSERT_EQ(ra->outputs[i].logits.sizes(), rb.outputs[i].logits.sizes()) << "step " << steps << " item " << i;
      if (rb.outputs[i].logits.numel() > 0) {
        EXPECT_LT(lorakv::testing::relative_error(ra->outputs[i].logits, rb.outputs[i].logits),
                  lorakv::testing::kFloat32LogitsTolerance)
            << "step " << steps << " item " << i;
      }
    }
    ASSERT_EQ(describe_state(a, contexts), describe_state(b, contexts)) << "after step " << steps;
    expect_scores_near(all_scores(a), all_scores(b), steps);
  }
  // The run exercised what it claims to: many failures, deferred work, evictions.
  EXPECT_GE(injected, 40) << steps << " steps";
  EXPECT_GE(deferred, 5) << steps << " steps";
  EXPECT_GE(policies, 3) << "contexts with an eviction policy";
  EXPECT_GE(evicted, 100) << "rows evicted";
  EXPECT_GE(eviction_failures, 3) << "evictions failed";
  std::printf("%lld steps, %lld failures injected, %lld work entries deferred, %lld contexts with a policy, %lld rows "
              "evicted, %lld evictions failed\n",
              static_cast<long long>(steps), static_cast<long long>(injected), static_cast<long long>(deferred),
              static_cast<long long>(policies), static_cast<long long>(evicted), static_cast<long long>(eviction_failures));
}

// A step that adopts a released context's cached system prompt and then fails, at any of its
// allocations, gives the cached blocks back as cached: the prompt stays findable, and the
// step run again adopts it. (Cached blocks a failed step reclaimed for its own rows are lost
// instead, their rows possibly overwritten; here the pool is large enough that none is.)
TEST_F(EngineFailures, AFailedStepKeepsTheCachedPromptFindable) {
  EngineOptions eo;
  eo.base_rows = 512;
  Engine a(*tiny_.model, eo), b(*tiny_.model, eo);
  std::vector<int32_t> system;
  for (int32_t i = 0; i < 64; ++i) system.push_back((i * 5 + 3) % 48);
  std::vector<int32_t> question = system;
  question.insert(question.end(), {7, 8, 9});
  const ContextOptions full{SharingMode::kFull, SharedWriter::kFirst};
  for (Engine* e : {&a, &b}) {
    const ContextId first = e->create_context(full, {adapters_[0]});
    e->append(first, question);
    prefill(*e, {first, 0});
    e->release_context(first);
  }
  const cache::ContentKey key = cache::ContentKey::base_with_adapter(cache::StorageDtype::kFloat32, adapters_[0]->identity());
  const cache::WriterRuns writers = cache::WriterRuns::filled(64, adapters_[0]->identity());
  ASSERT_EQ(a.cache().match_prefix(key, system, writers).num_tokens, 64);
  const ContextId ca = a.create_context(full, {adapters_[0]}), cb = b.create_context(full, {adapters_[0]});
  a.append(ca, question);
  b.append(cb, question);
  StepWork w;
  w.reader = {cb, 0};
  t_allocations = 0;
  const StepResult rb = b.step({w});
  const int64_t allocations = t_allocations;
  ASSERT_EQ(rb.stats.prefix_hit_tokens, 64);
  w.reader = {ca, 0};
  // Fail allocation 1, 2, ... of A's step until the step gets through: it then made fewer
  // allocations than the last armed one, each of which has failed once in an earlier try.
  // (Their number differs from B's: caches shared between engines, such as the kernel's
  // per-thread buffers and LoRA stacks, are already filled.)
  int64_t failures = 0;
  std::optional<StepResult> ra;
  for (int64_t k = 1; !ra && k <= 2 * allocations; ++k) {
    t_fail_in = k;
    try {
      ra = a.step({w});
    } catch (const std::exception&) {  // bad_alloc, or a torch error wrapping it
      ++failures;
    }
    t_fail_in = 0;
    if (ra) break;
    ASSERT_EQ(a.pending_tokens({ca, 0}), static_cast<int64_t>(question.size())) << "allocation " << k;
    ASSERT_EQ(a.cache().stats().bytes_in_use, 0) << "allocation " << k;
    ASSERT_EQ(a.cache().match_prefix(key, system, writers).num_tokens, 64) << "allocation " << k;
  }
  ASSERT_TRUE(ra.has_value());
  EXPECT_GE(failures, 50) << "the step should allocate more than that on its way";
  EXPECT_EQ(ra->stats.prefix_hit_tokens, 64);
  EXPECT_LT(lorakv::testing::relative_error(ra->outputs[0].logits, rb.outputs[0].logits),
            lorakv::testing::kFloat32LogitsTolerance);
  std::printf("%lld allocations of the step failed one by one; the cached prompt stayed findable\n",
              static_cast<long long>(failures));
}

// One step over contexts with capkv's anchors and h2o's scores, failed at each of its
// allocations in turn (1, 2, ... until it gets through): after every failure the scores, the
// anchors and everything else are as before the step.
TEST_F(EngineFailures, EachAllocationOfAStepFailsWithoutTouchingScoresOrAnchors) {
  Engine e(*tiny_.model, roomy_pools());
  ContextOptions capkv{SharingMode::kFull, SharedWriter::kFirst};
  capkv.eviction.policy = "capkv";
  capkv.eviction.budget_tokens = 40;  // above the context's 34 tokens: nothing evicted here
  capkv.eviction.capkv_future_positions = 16;
  ContextOptions h2o{SharingMode::kBaseShared, SharedWriter::kFirst};
  h2o.eviction.policy = "h2o";
  h2o.eviction.budget_tokens = 24;
  h2o.eviction.loss_bound = true;
  const std::vector<ContextId> contexts = {e.create_context(capkv, {nullptr}), e.create_context(h2o, {adapters_[0], adapters_[1]})};
  for (ContextId c : contexts) {
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 30; ++i) prompt.push_back((i * 7 + static_cast<int32_t>(c.value()) * 3) % 48);
    e.append(c, prompt);
  }
  auto work_now = [&] {
    std::vector<StepWork> work;
    for (ContextId c : contexts) {
      for (int32_t r = 0; r < e.num_readers(c); ++r) {
        StepWork w;
        w.reader = {c, r};
        if (e.pending_tokens({c, r}) == 0) {
          w.kind = StepWork::Kind::kPrivate;
          w.tokens = {static_cast<int32_t>((e.private_tokens({c, r}).size() * 5 + 1) % 48)};
        }
        work.push_back(w);
      }
    }
    return work;
  };
  for (int s = 0; s < 3; ++s) {  // the prompts, then a token each: scores and anchors exist
    StepResult r = e.step(work_now());
    e.evict(r.stats);
  }
  ASSERT_GT(e.anchor_queries(contexts[0]), 0);
  ASSERT_FALSE(all_scores(e).empty());
  e.append(contexts[0], {3, 9, 27, 33});  // capkv's anchor grows only with context rows
  const std::vector<StepWork> work = work_now();
  const int64_t anchored = e.anchor_queries(contexts[0]);
  const std::string before = describe_state(e, contexts);
  const std::vector<float> scores_before = all_scores(e);
  int64_t failures = 0;
  std::optional<StepResult> done;
  for (int64_t k = 1; !done && k < 100000; ++k) {
    t_fail_in = k;
    try {
      done = e.step(work);
    } catch (const std::exception&) {
      ++failures;
      ASSERT_EQ(describe_state(e, contexts), before) << "allocation " << k;
      ASSERT_EQ(all_scores(e), scores_before) << "allocation " << k;
    }
    t_fail_in = 0;
  }
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(e.anchor_queries(contexts[0]), anchored + 4);
  EXPECT_NE(describe_state(e, contexts), before) << "the step that got through changed nothing";
  EXPECT_GE(failures, 200);
  std::printf("the step failed at each of its %lld allocations without touching scores or anchors\n",
              static_cast<long long>(failures));
}

// Through the driver, an allocation failure anywhere in one step (admission, forward,
// commit, the eviction after it, handing out the outputs) either rolls the step back (no job
// saw an output of it, the engine is as before) or comes after the commit: then every job
// has the step's output first and the step's rows stand. Allocations are sampled evenly over
// the step; some fall on each side of the commit.
TEST_F(EngineFailures, ADriverStepFailsWholeOrAfterEveryJobHasItsOutput) {
  const EngineOptions eo = roomy_pools();
  ContextOptions options{SharingMode::kBaseShared, SharedWriter::kFirst};
  options.eviction.policy = "h2o";
  options.eviction.budget_tokens = 24;
  options.eviction.sinks = 2;
  options.eviction.window = 4;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back((i * 11 + 5) % 48);
  const std::vector<int32_t> forced = {7, 9, 11, 13, 15, 17};
  constexpr int kStepsBefore = 5;  // the prompt's chunks and the first forced tokens
  struct Run {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Driver> driver;
    ContextId ctx;
    std::vector<int64_t> outputs = std::vector<int64_t>(2, 0);  // per job
  };
  auto start = [&](Run& run) {
    run.engine = std::make_unique<Engine>(*tiny_.model, eo);
    run.ctx = run.engine->create_context(options, {adapters_[0], adapters_[1]});
    run.engine->append(run.ctx, prompt);
    run.driver = std::make_unique<Driver>(*run.engine);
    for (int32_t r = 0; r < 2; ++r) {
      DriverJob job = forced_decode_job({run.ctx, r}, forced);
      job.on_output = [&run, r](const StepOutput&) { ++run.outputs[static_cast<size_t>(r)]; };  // allocates nothing
      run.driver->add(std::move(job));
    }
    for (int s = 0; s < kStepsBefore; ++s) ASSERT_TRUE(run.driver->step());
  };
  Run reference;
  start(reference);
  t_allocations = 0;
  ASSERT_TRUE(reference.driver->step());
  const int64_t allocations = t_allocations;
  ASSERT_GT(reference.driver->stats().rows_evicted, 0) << "the steps should evict";

  // 80 allocations spread over the step, and each of its last 60 (the eviction after it and
  // the handing out of outputs).
  std::vector<int64_t> armed;
  for (int64_t i = 0; i < 80; ++i) armed.push_back(1 + i * (allocations - 1) / 79);
  for (int64_t k = std::max<int64_t>(1, allocations - 60); k <= allocations; ++k) armed.push_back(k);
  int64_t rolled_back = 0, after_commit = 0;
  for (const int64_t k : armed) {
    Run run;
    start(run);
    const std::string before = describe_state(*run.engine, {run.ctx});
    const std::vector<int64_t> outputs_before = run.outputs;
    t_fail_in = k;
    bool threw = false;
    try {
      run.driver->step();
    } catch (const std::exception&) {
      threw = true;
    }
    t_fail_in = 0;
    if (!threw) continue;
    if (run.outputs == outputs_before) {
      ++rolled_back;
      EXPECT_EQ(describe_state(*run.engine, {run.ctx}), before) << "allocation " << k << " of " << allocations;
      continue;
    }
    ++after_commit;
    for (int32_t r = 0; r < 2; ++r) {
      EXPECT_EQ(run.outputs[static_cast<size_t>(r)], outputs_before[static_cast<size_t>(r)] + 1)
          << "allocation " << k << ": job " << r << " did not get the step's output";
      EXPECT_EQ(run.engine->private_tokens({run.ctx, r}), reference.engine->private_tokens({reference.ctx, r}))
          << "allocation " << k << ": the step's rows should stand";
    }
  }
  EXPECT_GE(rolled_back, 10);
  EXPECT_GE(after_commit, 3);
  std::printf("%lld allocations in the step; of %zu failures armed, %lld rolled back, %lld after the commit\n",
              static_cast<long long>(allocations), armed.size(), static_cast<long long>(rolled_back),
              static_cast<long long>(after_commit));
}

}  // namespace
}  // namespace lorakv::runtime
