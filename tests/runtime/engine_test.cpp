// tests/runtime/engine_test.cpp: the engine on the shared, paged cache, on the real SmolLM2
// model with the trained role adapters. Each sharing mode and writer runs a multi-agent
// scenario (three readers with different adapters taking turns on one trajectory: context
// processing in small chunks, private turns, commits, batched single-token steps of two
// readers on one context) and must match tests/reference/sharing_reference.h, the mode's
// defined semantics in plain libtorch, within the float32 tolerance below. The approximate
// modes must also differ from `full` by far more than that tolerance, so the comparison can
// tell a mode from its neighbour.
//
// Tolerance: both sides run float32 through 30 layers with different summation orders
// (paged fused attention, chunked GEMMs and LoRA kernels against dense ATen), as lorakv and
// transformers do; the project's float32 logits tolerance applies, 1e-5 of the largest
// reference logit (tests/support/reference_values.h derives it: each side within ~2e-6 of
// the exact logits). A wrong row (another writer's, a missing residual) moves the logits
// by 1e-3 of their scale or more: SharedModesDifferFromFull checks that margin.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/tokenizer_gguf.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/reference/sharing_reference.h"
#include "tests/support/reference_values.h"
#include "tests/support/test_settings.h"

namespace lorakv::runtime {
namespace {

constexpr double kTolerance = lorakv::testing::kFloat32LogitsTolerance;

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = lorakv::testing::test_setting("LORAKV_MODEL");
    ASSERT_FALSE(path.empty()) << "LORAKV_MODEL is not set";
    file_ = formats::GgufFile::open(path).release();
    // Dense float32 weights: the reference multiplies them directly.
    model_ = LlamaModel::from_gguf(*file_, at::kFloat, WeightForm::kFloat32).release();
    tokenizer_ = new formats::BpeTokenizer(formats::tokenizer_from_gguf(*file_));
    registry_ = new adapters::AdapterRegistry(model_->adapter_shape(), model_->dtype());
    const std::string dir = lorakv::testing::test_setting("LORAKV_SOURCE_DIR") + "/assets/role_adapters/";
    for (const char* set : {"all_linear", "qv_shared_a"}) {
      for (const char* role : {"planner", "actor", "reflector"}) {
        registry_->load(std::string(set) + "." + role, dir + set + "/" + role);
      }
    }
  }
  static void TearDownTestSuite() {
    delete registry_;
    delete tokenizer_;
    delete model_;
    delete file_;
  }

  static AdapterPtr adapter(const std::string& name) { return registry_->require(name); }
  static std::vector<AdapterPtr> role_set(const std::string& set) {
    return {adapter(set + ".planner"), adapter(set + ".actor"), adapter(set + ".reflector")};
  }
  static std::vector<int32_t> encode(const std::string& text) { return tokenizer_->encode(text); }

  static formats::GgufFile* file_;
  static LlamaModel* model_;
  static formats::BpeTokenizer* tokenizer_;
  static adapters::AdapterRegistry* registry_;
};

formats::GgufFile* EngineTest::file_ = nullptr;
LlamaModel* EngineTest::model_ = nullptr;
formats::BpeTokenizer* EngineTest::tokenizer_ = nullptr;
adapters::AdapterRegistry* EngineTest::registry_ = nullptr;

// max |a - b| / max |b|; sizes must agree.
double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes() || a.numel() == 0) return a.numel() == b.numel() ? 0.0 : 1e9;
  return lorakv::testing::relative_error(a, b);
}

// Everything the scenario produced, in order: each processing event's and each private
// run's logits.
struct Trace {
  std::vector<at::Tensor> logits;
  std::vector<std::string> labels;
};

// The scenario both sides run. `Side` has process(r), run_private(r, tokens), commit(r),
// append(tokens), and decode_two(r1, t1, r2, t2) (one step for two readers).
template <class Side>
Trace run_scenario(Side& side, const std::vector<std::vector<int32_t>>& turns) {
  Trace t;
  auto record = [&](const std::string& label, const at::Tensor& logits) {
    t.labels.push_back(label);
    t.logits.push_back(logits);
  };
  side.append(turns[0]);  // system + user
  for (int r = 0; r < 3; ++r) {
    record("process r" + std::to_string(r), side.process(r));
    record("private r" + std::to_string(r), side.run_private(r, turns[1 + static_cast<size_t>(r)]));
    side.commit(r);
    if (r == 1) side.append(turns[4]);  // a tool result
  }
  // Two readers decode single tokens side by side on the shared context.
  record("process r0 again", side.process(0));
  record("process r1 again", side.process(1));
  const std::vector<int32_t>& reply = turns[5];
  for (size_t i = 0; i < reply.size(); ++i) {
    auto [a, b] = side.decode_two(0, reply[i], 1, reply[reply.size() - 1 - i]);
    record("decode r0 #" + std::to_string(i), a);
    record("decode r1 #" + std::to_string(i), b);
  }
  side.commit(0);
  record("process r2 last", side.process(2));
  return t;
}

struct EngineSide {
  Engine& engine;
  ContextId ctx;
  void append(const std::vector<int32_t>& t) { engine.append(ctx, t); }
  at::Tensor process(int r) {
    // Every chunk's logits, concatenated: small chunks cross block boundaries.
    std::vector<at::Tensor> parts;
    while (engine.pending_tokens({ctx, r}) > 0) {
      StepWork w;
      w.reader = {ctx, r};
      w.all_logits = true;
      StepResult res = engine.step({w});
      EXPECT_TRUE(res.ok);
      parts.push_back(res.outputs[0].logits);
    }
    return parts.empty() ? at::empty({0, engine.model().config().vocab_size}) : at::cat(parts, 0);
  }
  at::Tensor run_private(int r, const std::vector<int32_t>& tokens) {
    return engine.step({StepWork::private_tokens({ctx, r}, tokens, true)}).outputs[0].logits;
  }
  void commit(int r) { engine.commit_private({ctx, r}); }
  std::pair<at::Tensor, at::Tensor> decode_two(int r1, int32_t t1, int r2, int32_t t2) {
    StepResult res = engine.step({StepWork::private_tokens({ctx, r1}, {t1}), StepWork::private_tokens({ctx, r2}, {t2})});
    return {res.outputs[0].logits, res.outputs[1].logits};
  }
};

struct ReferenceSide {
  reference::SharingReference& ref;
  void append(const std::vector<int32_t>& t) { ref.append(t); }
  at::Tensor process(int r) { return ref.process(r); }
  at::Tensor run_private(int r, const std::vector<int32_t>& tokens) { return ref.run_private(r, tokens); }
  void commit(int r) { ref.commit(r); }
  std::pair<at::Tensor, at::Tensor> decode_two(int r1, int32_t t1, int r2, int32_t t2) {
    at::Tensor a = ref.run_private(r1, {t1});
    return {a, ref.run_private(r2, {t2})};
  }
};

class EngineModes : public EngineTest {
 protected:
  std::vector<std::vector<int32_t>> turns() const {
    return {encode("<|im_start|>system\nAnswer with tools: Lookup[name], Calculate[a - b], Finish[answer].<|im_end|>\n"
                   "<|im_start|>user\nWho is the mayor of the city where Thou Futrel lives?<|im_end|>\n"),
            encode("<|im_start|>planner\nThought: look up Thou Futrel.\nAction: Lookup<|im_end|>\n"),
            encode("<|im_start|>actor\nLookup[Thou Futrel]<|im_end|>\n"),
            encode("<|im_start|>reflector\nGiven: Quegou. Expected: Quegou.\nVerdict: right.<|im_end|>\n"),
            encode("<|im_start|>tool\nThou Futrel: born 1705, lives in Quegou, works as baker.<|im_end|>\n"),
            encode("Thought: look up Quegou.")};
  }

  Trace engine_trace(ContextOptions o, const std::vector<AdapterPtr>& readers, EngineOptions eo = small_chunks()) {
    Engine engine(*model_, eo);
    EngineSide side{engine, engine.create_context(o, readers)};
    return run_scenario(side, turns());
  }
  Trace reference_trace(ContextOptions o, const std::vector<AdapterPtr>& readers) {
    std::vector<const adapters::Adapter*> raw;
    for (const AdapterPtr& a : readers) raw.push_back(a.get());
    reference::SharingReference ref(*model_, o.mode, o.writer, raw);
    ReferenceSide side{ref};
    return run_scenario(side, turns());
  }
  static EngineOptions small_chunks() {
    EngineOptions eo;
    eo.base_rows = 1024;
    eo.residual_rows = 1024;
    eo.prefill_chunk = 7;  // chunks that cross the 16-row blocks
    return eo;
  }

  // Engine against reference, event by event; returns the largest difference.
  double check_against_reference(ContextOptions o, const std::vector<AdapterPtr>& readers, EngineOptions eo = small_chunks()) {
    const Trace ours = engine_trace(o, readers, eo), ref = reference_trace(o, readers);
    EXPECT_EQ(ours.logits.size(), ref.logits.size());
    double worst = 0;
    for (size_t i = 0; i < ours.logits.size() && i < ref.logits.size(); ++i) {
      const double d = max_diff(ours.logits[i], ref.logits[i]);
      EXPECT_LT(d, kTolerance) << sharing_mode_name(o.mode) << "/" << shared_writer_name(o.writer) << ": " << ours.labels[i];
      worst = std::max(worst, d);
    }
    std::printf("  %-15s writer %-5s: max |engine - reference| / max |reference| = %.3g over %zu events\n", sharing_mode_name(o.mode),
                shared_writer_name(o.writer), worst, ours.logits.size());
    return worst;
  }
};

TEST_F(EngineModes, EachModeAndWriterMatchesItsReference) {
  const std::vector<AdapterPtr> all_linear = role_set("all_linear"), shared_a = role_set("qv_shared_a");
  for (SharedWriter w : {SharedWriter::kFirst, SharedWriter::kBase, SharedWriter::kAuthor}) {
    if (w != SharedWriter::kAuthor) check_against_reference({SharingMode::kFull, w}, all_linear);  // full has no writer
    check_against_reference({SharingMode::kFullShared, w}, all_linear);
    check_against_reference({SharingMode::kBaseShared, w}, all_linear);  // k and v residuals (K-LoRA)
    check_against_reference({SharingMode::kBaseShared, w}, shared_a);
    check_against_reference({SharingMode::kBaseLrShared, w}, shared_a);
  }
}

TEST_F(EngineModes, PerHeadTokenSetsMatchTheReferenceToo) {
  EngineOptions eo = small_chunks();
  eo.per_head_token_sets = true;  // one lane and one residual row per KV head
  check_against_reference({SharingMode::kBaseShared, SharedWriter::kFirst}, role_set("all_linear"), eo);
  check_against_reference({SharingMode::kBaseLrShared, SharedWriter::kFirst}, role_set("qv_shared_a"), eo);
}

// The comparison above can tell the modes apart: with different adapters, every shared
// mode differs from full by far more than the tolerance.
TEST_F(EngineModes, SharedModesDifferFromFullWithDifferentAdapters) {
  const std::vector<AdapterPtr> shared_a = role_set("qv_shared_a");
  const Trace full = engine_trace({SharingMode::kFull, SharedWriter::kFirst}, shared_a);
  for (SharingMode m : {SharingMode::kFullShared, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    const Trace t = engine_trace({m, SharedWriter::kFirst}, shared_a);
    double worst = 0;
    for (size_t i = 0; i < t.logits.size(); ++i) {
      if (t.logits[i].sizes() == full.logits[i].sizes()) worst = std::max(worst, max_diff(t.logits[i], full.logits[i]));
    }
    std::printf("  %-15s vs full: max logit difference %.3g of the largest logit\n", sharing_mode_name(m), worst);
    EXPECT_GT(worst, 100 * kTolerance) << sharing_mode_name(m);
  }
}

// With writer first and one reader, or all readers on one adapter, the shared-base modes
// are exact: they equal full. Every event where both produced logits is compared (a reader
// that read rows others wrote produces none); the test fails if fewer than half of the
// events were, so it cannot pass by skipping them.
TEST_F(EngineModes, SharedBaseModesEqualFullForOneReaderOrOneAdapter) {
  const AdapterPtr planner = adapter("qv_shared_a.planner");
  // Largest difference over the events `t` has logits for, and how many those were.
  auto compare = [](const Trace& t, const Trace& full, int64_t& compared) {
    double worst = 0;
    compared = 0;
    EXPECT_EQ(t.logits.size(), full.logits.size());
    for (size_t i = 0; i < t.logits.size() && i < full.logits.size(); ++i) {
      if (t.logits[i].numel() == 0 || full.logits[i].numel() == 0) continue;
      // A commit adopts the reply's rows in full but not in the residual modes, which then
      // process the reply again: their event has more rows. The rows of the tokens both
      // processed, the last ones, are compared.
      const int64_t rows = std::min(t.logits[i].size(0), full.logits[i].size(0));
      worst = std::max(worst, max_diff(t.logits[i].narrow(0, t.logits[i].size(0) - rows, rows),
                                       full.logits[i].narrow(0, full.logits[i].size(0) - rows, rows)));
      ++compared;
    }
    EXPECT_GE(2 * compared, static_cast<int64_t>(t.logits.size())) << "too few events compared";
    return worst;
  };
  for (const std::vector<AdapterPtr>& readers :
       {std::vector<AdapterPtr>{planner, planner, planner}, std::vector<AdapterPtr>{adapter("all_linear.actor"),
                                                                                      adapter("all_linear.actor"),
                                                                                      adapter("all_linear.actor")}}) {
    const Trace full = engine_trace({SharingMode::kFull, SharedWriter::kFirst}, readers);
    for (SharingMode m : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
      if (m == SharingMode::kBaseLrShared && readers[0]->name() == "all_linear.actor") continue;  // q/v only
      int64_t compared = 0;
      const double worst = compare(engine_trace({m, SharedWriter::kFirst}, readers), full, compared);
      EXPECT_LT(worst, kTolerance) << sharing_mode_name(m) << " with " << readers[0]->name();
      std::printf("  %-15s with %s: %lld events equal full within %.3g\n", sharing_mode_name(m), readers[0]->name().c_str(),
                  static_cast<long long>(compared), worst);
    }
    // Writer base differs by definition (the base model's hidden states fill the rows).
    int64_t compared = 0;
    EXPECT_GT(compare(engine_trace({SharingMode::kBaseShared, SharedWriter::kBase}, readers), full, compared),
              100 * kTolerance);
  }
}

// full through the engine equals the contiguous reference path (itself PEFT- and
// transformers-checked) for each adapter alone.
TEST_F(EngineModes, FullModeEqualsTheContiguousPath) {
  const std::vector<int32_t> prompt = turns()[0];
  for (const AdapterPtr& a : role_set("all_linear")) {
    Engine engine(*model_, small_chunks());
    const ContextId ctx = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {a});
    engine.append(ctx, prompt);
    EngineSide side{engine, ctx};
    const at::Tensor ours = side.process(0);
    auto cache = model_->make_cache();
    const at::Tensor ref = model_->forward({{SeqId(0), prompt, a.get()}}, *cache, {/*all_logits=*/true});
    EXPECT_LT(max_diff(ours, ref), kTolerance) << a->name();
  }
}

// Chunked context processing of one reader runs in the same step as another reader's
// private token on the same context and a reader of another context, and each gets what it
// gets when run alone.
TEST_F(EngineModes, ContextChunksRunBesideOtherReadersDecodeSteps) {
  const std::vector<AdapterPtr> readers = role_set("qv_shared_a");
  const std::vector<std::vector<int32_t>> t = turns();
  auto setup = [&](Engine& e) {
    const ContextId a = e.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, readers);
    const ContextId b = e.create_context({SharingMode::kFull, SharedWriter::kFirst}, {readers[2]});
    e.append(a, t[0]);
    e.append(b, t[4]);
    prefill(e, {a, 0});
    return std::make_pair(a, b);
  };
  auto private_work = [](ReaderRef r, std::vector<int32_t> tokens) { return StepWork::private_tokens(r, std::move(tokens)); };
  auto context_work = [](ReaderRef r) { return StepWork::context(r, 9, true); };
  Engine together(*model_, small_chunks()), alone(*model_, small_chunks());
  const auto [a1, b1] = setup(together);
  const auto [a2, b2] = setup(alone);
  const StepResult mixed = together.step({private_work({a1, 0}, {t[1][0]}), context_work({a1, 1}), context_work({b1, 0})});
  ASSERT_TRUE(mixed.ok);
  const at::Tensor decode = alone.step({private_work({a2, 0}, {t[1][0]})}).outputs[0].logits;
  const at::Tensor chunk = alone.step({context_work({a2, 1})}).outputs[0].logits;
  const at::Tensor other = alone.step({context_work({b2, 0})}).outputs[0].logits;
  EXPECT_EQ(mixed.outputs[1].tokens_processed, 9);
  EXPECT_EQ(mixed.stats.kernel_plans, 1) << "every layer has the step's shape: one kernel plan for the step";
  EXPECT_LT(max_diff(mixed.outputs[0].logits, decode), kTolerance);
  EXPECT_LT(max_diff(mixed.outputs[1].logits, chunk), kTolerance);
  EXPECT_LT(max_diff(mixed.outputs[2].logits, other), kTolerance);
}

// A reader whose adapter has a rank no pool holds joins later: its residual pool is created
// then, with rows of its own rank (a padded pool would give it rank-8 rows), and it matches
// the reference.
TEST_F(EngineModes, AdapterOfANewRankGetsItsOwnPool) {
  const AdapterPtr planner = adapter("qv_shared_a.planner");
  std::vector<adapters::LoraModule> modules;
  for (const adapters::LoraModule& m : planner->modules()) {
    if (m.module != adapters::ModuleId::kV) continue;
    // Rank 4: the first four rows of A and columns of B (B already holds the scale).
    modules.push_back(adapters::make_lora_module(planner->base_shape(), m.layer, m.module, m.a.narrow(0, 0, 4).to(at::kFloat),
                                                 m.b.narrow(1, 0, 4).to(at::kFloat), 4.0, 1.0, m.a.scalar_type(), "rank4", ""));
  }
  const AdapterPtr rank4 = std::make_shared<adapters::Adapter>("rank4", "in-test", adapters::AdapterFormat::kPeft,
                                                               planner->base_shape(), std::move(modules));
  Engine engine(*model_, small_chunks());
  const ContextId ctx = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, {planner});
  EXPECT_EQ(engine.cache().manager().num_pools(), 2);  // base, rank 8
  engine.append(ctx, turns()[0]);
  prefill(engine, {ctx, 0});
  EXPECT_EQ(engine.add_reader(ctx, rank4), 1);
  ASSERT_EQ(engine.cache().manager().num_pools(), 3);
  EXPECT_EQ(engine.cache().manager().pool_rank(2), 4);
  const at::Tensor ours = EngineSide{engine, ctx}.process(1);

  reference::SharingReference ref(*model_, SharingMode::kBaseShared, SharedWriter::kFirst, {planner.get(), rank4.get()});
  ref.append(turns()[0]);
  ref.process(0);
  EXPECT_LT(max_diff(ours, ref.process(1)), kTolerance);
  const cache::CacheStats stats = engine.cache().stats();
  EXPECT_EQ(stats.pools.at(2).block_bytes, 16 * 4 * 4);  // rank-4 float32 rows, half a rank-8 block
  EXPECT_EQ(stats.residual_bytes.at(rank4->identity()), stats.residual_bytes.at(planner->identity()) / 2);
}

TEST_F(EngineTest, ModeRefusesAdaptersItCannotServe) {
  Engine engine(*model_);
  try {
    engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kFirst}, role_set("all_linear"));
    FAIL() << "base_lr_shared accepted adapters without a shared A";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("base_lr_shared"), std::string::npos) << what;
    EXPECT_NE(what.find("all_linear.actor"), std::string::npos) << what;
    EXPECT_NE(what.find("_proj"), std::string::npos) << what;
  }
  // The same adapters are fine where residuals are per reader.
  EXPECT_NO_THROW(engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, role_set("all_linear")));
  // Mixing a shared-A set with an adapter of another A is refused too, naming the module.
  const ContextId ctx = engine.create_context({SharingMode::kBaseLrShared, SharedWriter::kFirst}, role_set("qv_shared_a"));
  EXPECT_THROW(engine.add_reader(ctx, adapter("all_linear.planner")), ConfigError);
  EXPECT_NO_THROW(engine.add_reader(ctx, nullptr));  // the base model reads no residual
}

TEST_F(EngineTest, BadWorkIsRefusedWithoutChangingState) {
  Engine engine(*model_);
  const ContextId ctx = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, role_set("qv_shared_a"));
  engine.append(ctx, encode("Hello there, planner."));
  const StepWork early = StepWork::private_tokens({ctx, 0}, {1, 2});
  EXPECT_THROW(engine.step({early}), ConfigError);  // the context is not processed yet
  EXPECT_THROW(engine.append(ctx, {-1}), ConfigError);
  EXPECT_THROW(engine.append(ctx, {static_cast<int32_t>(model_->config().vocab_size)}), ConfigError);
  StepWork unknown;
  unknown.reader = {ctx, 7};
  EXPECT_THROW(engine.step({unknown}), ConfigError);
  StepWork twice;
  twice.reader = {ctx, 0};
  EXPECT_THROW(engine.step({twice, twice}), ConfigError);
  // A valid entry before a bad one: the whole step is refused and leaves nothing of the
  // valid entry either (no sequence created, no stream attached, no row reserved).
  StepWork valid;
  valid.reader = {ctx, 1};
  EXPECT_THROW(engine.step({valid, unknown}), ConfigError);
  EXPECT_THROW(engine.step({valid, early}), ConfigError);
  EXPECT_TRUE(engine.cache().manager().sequences().empty());
  EXPECT_EQ(engine.cache().manager().index().num_entries(), 0);
  EXPECT_EQ(engine.cache().stats().bytes_in_use, 0);
  EXPECT_GT(engine.pending_tokens({ctx, 0}), 0);
  EXPECT_GT(engine.pending_tokens({ctx, 1}), 0);
}

TEST_F(EngineTest, FullPoolIsReportedNotCorrupted) {
  EngineOptions eo;
  eo.base_rows = 32;  // two blocks per lane
  eo.residual_rows = 32;
  Engine engine(*model_, eo);
  const ContextId ctx = engine.create_context({SharingMode::kBaseShared, SharedWriter::kFirst}, role_set("qv_shared_a"));
  engine.append(ctx, encode(std::string(400, 'a')));
  EXPECT_THROW(prefill(engine, {ctx, 0}), CapacityError);
  StepWork w;
  w.reader = {ctx, 0};
  w.max_tokens = 64;
  const StepResult r = engine.step({w});
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.capacity.ok);
  ASSERT_EQ(r.admissions.size(), 1u);
  EXPECT_FALSE(r.admissions[0].admitted);
  EXPECT_NE(r.admissions[0].reason.find("base pool"), std::string::npos) << r.admissions[0].reason;
  // The refused work left no trace: no sequence created, no residual stream attached, no
  // block in use, nothing indexed; the work is still pending.
  EXPECT_TRUE(engine.cache().manager().sequences().empty());
  EXPECT_EQ(engine.cache().stats().bytes_in_use, 0);
  EXPECT_EQ(engine.cache().manager().index().num_entries(), 0);
  EXPECT_EQ(engine.pending_tokens({ctx, 0}), static_cast<int64_t>(engine.context_tokens(ctx).size()));
  // And the engine still works: a chunk that fits runs.
  w.max_tokens = 16;
  EXPECT_TRUE(engine.step({w}).ok);
}

// all_logits is per work item: in one step, the item that asks gets a row per processed
// token and the other its last token's row only, each equal to what it gets when run alone
// (the LM head runs on the rows asked for, not on every row of the step).
TEST_F(EngineTest, AllLogitsIsPerWorkItem) {
  const std::vector<int32_t> a_text = encode("The planner reads the task and writes a plan.");
  const std::vector<int32_t> b_text = encode("The actor reads the plan and calls a tool.");
  auto run = [&](bool with_a, bool with_b) {
    Engine engine(*model_);
    const ContextId a = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {adapter("all_linear.planner")});
    const ContextId b = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {adapter("all_linear.actor")});
    engine.append(a, a_text);
    engine.append(b, b_text);
    StepWork wa, wb;
    wa.reader = {a, 0};
    wa.all_logits = true;
    wb.reader = {b, 0};
    std::vector<StepWork> work;
    if (with_a) work.push_back(wa);
    if (with_b) work.push_back(wb);
    StepResult r = engine.step(work);
    EXPECT_TRUE(r.ok);
    return r.outputs;
  };
  const std::vector<StepOutput> both = run(true, true), a_alone = run(true, false), b_alone = run(false, true);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].logits.size(0), static_cast<int64_t>(a_text.size()));
  EXPECT_EQ(both[1].logits.size(0), 1);
  EXPECT_LT(max_diff(both[0].logits, a_alone[0].logits), kTolerance);
  EXPECT_LT(max_diff(both[1].logits, b_alone[0].logits), kTolerance);
}

// The bytes the pools report agree with the closed form for the layout: whole blocks of
// rows, K and V of every KV head, one int32 position per row, one C row of rank r per token
// per layer and reader (base_shared) or per group (base_lr_shared).
TEST_F(EngineTest, MemoryAccountingMatchesTheClosedForm) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> text = encode(std::string("The quick brown fox jumps over the lazy dog. ") + "And again, " +
                                           "the quick brown fox jumps over the lazy dog.");
  const auto t = static_cast<int64_t>(text.size());
  const int64_t bs = 16, blocks = (t + bs - 1) / bs, rank = 8;
  const std::vector<AdapterPtr> readers = role_set("qv_shared_a");
  for (SharingMode m : {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    Engine engine(*model_);
    const ContextId ctx = engine.create_context({m, SharedWriter::kFirst}, readers);
    engine.append(ctx, text);
    for (int r = 0; r < 3; ++r) prefill(engine, {ctx, r});
    const EngineMemory mem = engine.memory();
    const int64_t copies = m == SharingMode::kFull ? 3 : 1;
    const int64_t kv = copies * c.num_layers * blocks * bs * c.num_kv_heads * c.head_dim * 4;
    EXPECT_EQ(mem.cache.base_k_bytes, kv) << sharing_mode_name(m);
    EXPECT_EQ(mem.cache.base_v_bytes, kv) << sharing_mode_name(m);
    EXPECT_EQ(mem.cache.positions_bytes, copies * c.num_layers * blocks * bs * 4) << sharing_mode_name(m);
    const int64_t streams = m == SharingMode::kBaseShared ? 3 : m == SharingMode::kBaseLrShared ? 1 : 0;
    EXPECT_EQ(mem.cache.residual_bytes_total, streams * c.num_layers * blocks * bs * rank * 4) << sharing_mode_name(m);
    EXPECT_EQ(mem.adapter_bytes, readers[0]->num_bytes() * 3);
    EXPECT_EQ(mem.model_weight_bytes, model_->weights().num_bytes);
    EXPECT_GT(mem.cache.metadata_bytes, 0);
    engine.release_context(ctx);
    EXPECT_EQ(engine.memory().cache.bytes_in_use, 0) << "released rows go back to the pool";
    EXPECT_GE(engine.memory().cache.peak_bytes_in_use, kv * 2);
  }
}

// A second context that starts with the same tokens under the same key reuses the first
// one's full blocks (by token ids, not by count), and diverging tokens are not reused.
TEST_F(EngineTest, SecondContextReusesMatchingBlocksByTokenIds) {
  Engine engine(*model_);
  const std::vector<int32_t> text = encode(std::string(200, 'x') + " and then some more words to fill the blocks.");
  ASSERT_GT(text.size() % 16, 0u);  // a partial last block, which is never shared
  const AdapterPtr a = adapter("qv_shared_a.actor");
  const int64_t lanes = model_->config().num_layers;
  auto used_blocks = [&](size_t pool) { return engine.cache().stats().pools.at(pool).blocks_used; };
  for (SharedWriter w : {SharedWriter::kBase, SharedWriter::kFirst}) {
    const ContextId first = engine.create_context({SharingMode::kBaseShared, w}, {a});
    engine.append(first, text);
    const at::Tensor first_logits = prefill(engine, {first, 0});
    const int64_t base = used_blocks(0), residual = used_blocks(1);
    // The same tokens and key: only the partial last block is new, base and C alike, and
    // the reused rows give the same logits.
    const ContextId second = engine.create_context({SharingMode::kBaseShared, w}, {a});
    engine.append(second, text);
    const at::Tensor second_logits = prefill(engine, {second, 0});
    EXPECT_EQ(used_blocks(0) - base, lanes) << shared_writer_name(w);
    EXPECT_EQ(used_blocks(1) - residual, lanes) << shared_writer_name(w);
    EXPECT_LT(max_diff(second_logits, first_logits), kTolerance);
    // Same length, another first token: nothing matches, every block is new.
    std::vector<int32_t> other = text;
    other[0] = other[0] == 5 ? 6 : 5;
    const ContextId third = engine.create_context({SharingMode::kBaseShared, w}, {a});
    engine.append(third, other);
    const int64_t before = used_blocks(0);
    prefill(engine, {third, 0});
    EXPECT_EQ(used_blocks(0) - before, base) << "every block of the context is new";
    for (ContextId c : {first, second, third}) engine.release_context(c);
    EXPECT_EQ(engine.cache().stats().bytes_in_use, 0);
  }
  // Another adapter does not reuse base_shared C rows, and full rows are keyed by adapter.
  const ContextId mine = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {a});
  engine.append(mine, text);
  prefill(engine, {mine, 0});
  const int64_t base = used_blocks(0);
  const ContextId theirs = engine.create_context({SharingMode::kFull, SharedWriter::kFirst}, {adapter("qv_shared_a.planner")});
  engine.append(theirs, text);
  prefill(engine, {theirs, 0});
  EXPECT_EQ(used_blocks(0), 2 * base);
}

}  // namespace
}  // namespace lorakv::runtime
