// tests/runtime/engine_failure_test.cpp: a step fails cleanly. Twin engines on the tiny model
// (tests/runtime/tiny_engine_model.h) run one seeded random multi-context, multi-reader
// workload in lockstep: contexts in every sharing mode and writer, appends, context chunks,
// private turns, commits, drops, releases, pools small enough that work is deferred. Before
// each step of engine A an allocation failure is armed at a random allocation of that step
// (the count measured on engine B, which runs it first): anywhere from planning, between two
// reservations, to any layer of the forward pass. The failure comes from this binary's
// replacement of operator new, a test wrapper: the engine has no branch for it. After the
// throw, A must be as before the step (tokens, pending work, private tokens, bytes and blocks
// of every pool, the prefix index); it then runs the step again and must produce what B
// produced, and the two engines must stay equal for the rest of the run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>
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
      out << "]\n";
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

class EngineFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    const LlamaModel& m = *tiny_.model;
    // Two shared-A groups of two adapters each; base_lr_shared contexts draw from one group.
    adapters_ = {lorakv::testing::make_tiny_adapter(m, "g1.a", 1, 11), lorakv::testing::make_tiny_adapter(m, "g1.b", 1, 12),
                 lorakv::testing::make_tiny_adapter(m, "g2.a", 2, 21), lorakv::testing::make_tiny_adapter(m, "g2.b", 2, 22)};
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
  int64_t steps = 0, injected = 0, deferred = 0;
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
      const ContextId ca = a.create_context({mode, writer}, readers);
      const ContextId cb = b.create_context({mode, writer}, readers);
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
    const StepResult rb = b.step(work);
    const int64_t allocations = t_allocations;
    for (const StepAdmission& adm : rb.admissions) deferred += adm.admitted ? 0 : 1;

    std::optional<StepResult> ra;
    if (chance(0.6) && allocations > 0) {
      const std::string before = describe_state(a, contexts);
      t_fail_in = pick(1, allocations);
      const int64_t armed_at = t_fail_in;
      try {
        ra = a.step(work);
      } catch (const std::exception& e) {
        ++injected;
        EXPECT_EQ(describe_state(a, contexts), before)
            << "step " << steps << ": allocation " << armed_at << " of " << allocations << " failed (" << e.what()
            << ") and the engine changed";
      }
      t_fail_in = 0;
    }
    const std::string tables_a = describe_tables(a);
    if (!ra) ra = a.step(work);  // never failed, or again after the failure
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
  }
  // The run exercised what it claims to: many failures, and deferred work.
  EXPECT_GE(injected, 40) << steps << " steps";
  EXPECT_GE(deferred, 5) << steps << " steps";
  std::printf("%lld steps, %lld failures injected, %lld work entries deferred\n", static_cast<long long>(steps),
              static_cast<long long>(injected), static_cast<long long>(deferred));
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
  const cache::WriterFilter filter{adapters_[0]->identity()};
  ASSERT_EQ(a.cache().match_prefix(key, system, filter).num_tokens, 64);
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
    ASSERT_EQ(a.cache().match_prefix(key, system, filter).num_tokens, 64) << "allocation " << k;
  }
  ASSERT_TRUE(ra.has_value());
  EXPECT_GE(failures, 50) << "the step should allocate more than that on its way";
  EXPECT_EQ(ra->stats.prefix_hit_tokens, 64);
  EXPECT_LT(lorakv::testing::relative_error(ra->outputs[0].logits, rb.outputs[0].logits),
            lorakv::testing::kFloat32LogitsTolerance);
  std::printf("%lld allocations of the step failed one by one; the cached prompt stayed findable\n",
              static_cast<long long>(failures));
}

}  // namespace
}  // namespace lorakv::runtime
