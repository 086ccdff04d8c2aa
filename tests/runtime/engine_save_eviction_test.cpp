// tests/runtime/engine_save_eviction_test.cpp: a context with an eviction policy exported
// after many evictions and imported into a fresh engine is the same context: the same rows
// per lane (masked ones included), the same scores, so going on with the same steps both
// keep the same positions in every lane and give the same logits bit for bit; the import
// rebuilds in chunks (pools that cannot hold the whole trajectory still take it); lanes that
// are not a state eviction leaves are refused before anything is created.
//   Models: the tiny engine model (one KV head) and the same shape with two KV heads, whose
//   per-head token sets give two lanes per layer with different positions.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/gguf_builder.h"
#include "tests/runtime/step_then_evict.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
using lorakv::testing::TinyEngineModel;

// The tiny engine model's shape (hidden 64, head_dim 32, vocab 48, 2 layers) with
// `kv_heads` KV heads (and as many query heads).
TinyEngineModel tiny_model(int kv_heads) {
  if (kv_heads == 1) return lorakv::testing::make_tiny_engine_model();
  constexpr int64_t kHeadDim = 32, kFfn = 96, kVocab = 48;
  const int64_t hidden = kHeadDim * kv_heads;
  lorakv::testing::GgufBuilder b;
  b.add_string("general.architecture", "llama");
  b.add_u32("llama.block_count", 2);
  b.add_u32("llama.embedding_length", static_cast<uint32_t>(hidden));
  b.add_u32("llama.feed_forward_length", kFfn);
  b.add_u32("llama.attention.head_count", static_cast<uint32_t>(kv_heads));
  b.add_u32("llama.attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  b.add_u32("llama.context_length", 4096);
  b.add_f32("llama.rope.freq_base", 10000.0f);
  b.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  uint32_t seed = 77;
  auto values = [&](std::vector<int64_t> shape, float scale) {
    return lorakv::testing::seeded_uniform({shape[0] * shape[1]}, seed++, scale);
  };
  auto add = [&](const std::string& name, std::vector<int64_t> shape, at::Tensor t) {
    b.add_f32_tensor(name, shape, std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()));
  };
  add("token_embd.weight", {hidden, kVocab}, values({hidden, kVocab}, 1.0f));
  add("output_norm.weight", {hidden}, at::ones({hidden}));
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {hidden}, at::ones({hidden}));
    add(p + "ffn_norm.weight", {hidden}, at::ones({hidden}));
    for (const char* w : {"attn_q", "attn_k", "attn_v", "attn_output"}) {
      add(p + w + ".weight", {hidden, hidden}, values({hidden, hidden}, 0.2f));
    }
    add(p + "ffn_gate.weight", {hidden, kFfn}, values({hidden, kFfn}, 0.2f));
    add(p + "ffn_up.weight", {hidden, kFfn}, values({hidden, kFfn}, 0.2f));
    add(p + "ffn_down.weight", {kFfn, hidden}, values({kFfn, hidden}, 0.2f));
  }
  const std::string path = lorakv::testing::temp_path("tiny_engine_model_kv" + std::to_string(kv_heads) + ".gguf");
  b.write(path);
  TinyEngineModel m;
  m.file = formats::GgufFile::open(path);
  m.model = LlamaModel::from_gguf(*m.file, at::kFloat, WeightForm::kFloat32);
  return m;
}

std::vector<int32_t> random_tokens(int64_t n, std::mt19937& rng) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 48);
  return t;
}

cache::eviction::EvictionConfig policy(const std::string& name) {
  cache::eviction::EvictionConfig c;
  c.policy = name;
  c.budget_tokens = 40;
  c.sinks = 4;
  c.window = 8;
  return c;
}

// A session's life, the same on every engine it drives: text arrives now and then, readers
// catch up in chunks of 13 (never a block's multiple), reply a token at a time and commit
// every third token. Its choices depend on its seed and on the engine's state only, so two
// engines in the same state take the same steps.
class Script {
 public:
  Script(ContextId ctx, int32_t readers, uint32_t seed) : ctx_(ctx), readers_(readers), rng_(seed) {}

  StepResult step(Engine& e) {
    if (step_++ == 0 || rng_() % 4 == 0) e.append(ctx_, random_tokens(1 + static_cast<int64_t>(rng_() % 24), rng_));
    std::vector<StepWork> work;
    for (int32_t i = 0; i < readers_; ++i) {
      const ReaderRef r{ctx_, i};
      if (e.private_tokens(r).size() >= 3) {
        e.commit_private(r);
        continue;
      }
      StepWork w;
      w.reader = r;
      w.all_logits = true;
      if (e.private_tokens(r).empty() && e.pending_tokens(r) > 0) {
        w.max_tokens = 13;
      } else {
        w.kind = StepWork::Kind::kPrivate;
        w.tokens = {static_cast<int32_t>(rng_() % 48)};
      }
      work.push_back(w);
    }
    return work.empty() ? StepResult{} : lorakv::testing::step_then_evict(e, work);
  }
  // This script, from its state now, on another engine's context `ctx`.
  Script on(ContextId ctx) const {
    Script copy = *this;
    copy.ctx_ = ctx;
    return copy;
  }
  // Commits every reply in progress: a context with private rows cannot be exported.
  void settle(Engine& e) const {
    for (int32_t i = 0; i < readers_; ++i) {
      if (!e.private_tokens({ctx_, i}).empty()) e.commit_private({ctx_, i});
    }
  }

 private:
  ContextId ctx_;
  int32_t readers_;
  std::mt19937 rng_;
  int step_ = 0;
};

struct Case {
  const char* name;
  SharingMode mode;
  const char* policy;
  int kv_heads;
  bool per_head;
  int readers;  // adapters (full: the base model for reader 0)
  bool int8 = false;  // an int8 base pool (EngineOptions::kv_dtype): rows and scales restored as stored
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EngineSaveEviction : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { tiny_ = tiny_model(GetParam().kv_heads); }
  const LlamaModel& model() const { return *tiny_.model; }
  // `rows` per lane for each row set: the base pool holds one set per reader (their own rows
  // in full) or one shared set, each residual pool one stream per reader.
  EngineOptions pools(int64_t rows = 1024, int64_t chunk = 512) const {
    EngineOptions eo;
    eo.base_rows = rows * (GetParam().mode == SharingMode::kFull ? num_readers() : 1) + 64;
    eo.residual_rows = rows * num_readers();
    eo.block_size = 16;
    eo.per_head_token_sets = GetParam().per_head;
    eo.prefill_chunk = chunk;
    if (GetParam().int8) eo.kv_dtype = cache::StorageDtype::kInt8;
    return eo;
  }
  std::vector<AdapterPtr> readers() const {
    if (GetParam().mode == SharingMode::kFull) return {nullptr};
    std::vector<AdapterPtr> out;
    for (int i = 0; i < GetParam().readers; ++i) {
      out.push_back(lorakv::testing::make_tiny_adapter(model(), "r" + std::to_string(i), 1, 10 + i));
    }
    return out;
  }
  int32_t num_readers() const { return GetParam().mode == SharingMode::kFull ? 1 : GetParam().readers; }
  // Engine `e` with the script's context run `steps` steps, then on until some lane holds a
  // masked row (packing takes them now and then), and settled; the script goes on.
  ContextId run_saved(Engine& e, std::unique_ptr<Script>& script, int steps) {
    const ContextId ctx = e.create_context({GetParam().mode, SharedWriter::kFirst, policy(GetParam().policy)}, readers());
    script = std::make_unique<Script>(ctx, num_readers(), 5);
    for (int s = 0; s < steps || (!has_masked_rows(e) && s < 4 * steps); ++s) {
      EXPECT_TRUE(script->step(e).ok) << "step " << s;
    }
    script->settle(e);
    return ctx;
  }
  static bool has_masked_rows(const Engine& e) {
    for (SeqId seq : e.cache().manager().sequences()) {
      for (const cache::BaseLane& l : e.cache().manager().sequence(seq).lanes) {
        if (l.num_evicted > 0) return true;
      }
    }
    return false;
  }
  std::vector<int32_t> exported_readers() const {
    std::vector<int32_t> r;
    for (int32_t i = 0; i < num_readers(); ++i) r.push_back(i);
    return r;
  }
  TinyEngineModel tiny_;
};

// The sequences of a context's rows, with lanes: the shared one or each reader's own.
std::vector<const SequenceRows*> sequences(const ContextRows& rows) {
  std::vector<const SequenceRows*> out;
  if (rows.shared) out.push_back(&*rows.shared);
  for (const std::optional<SequenceRows>& own : rows.own) {
    if (own) out.push_back(&*own);
  }
  return out;
}

bool same_rows(const SequenceRows& a, const SequenceRows& b) {
  if (a.tokens != b.tokens || a.writers != b.writers || a.lanes.size() != b.lanes.size() || a.k.size() != b.k.size()) {
    return false;
  }
  for (size_t l = 0; l < a.lanes.size(); ++l) {
    if (a.lanes[l].positions != b.lanes[l].positions || a.lanes[l].scores != b.lanes[l].scores) return false;
    const std::vector<uint8_t> all(a.lanes[l].positions.size(), 1);
    const std::vector<uint8_t>& live_a = a.lanes[l].live.empty() ? all : a.lanes[l].live;
    const std::vector<uint8_t>& live_b = b.lanes[l].live.empty() ? all : b.lanes[l].live;
    if (live_a != live_b || !at::equal(a.k[l], b.k[l]) || !at::equal(a.v[l], b.v[l])) return false;
  }
  if (a.k_scale.size() != b.k_scale.size()) return false;
  for (size_t l = 0; l < a.k_scale.size(); ++l) {
    if (!at::equal(a.k_scale[l], b.k_scale[l]) || !at::equal(a.v_scale[l], b.v_scale[l])) return false;
  }
  if (a.residuals.size() != b.residuals.size()) return false;
  for (size_t j = 0; j < a.residuals.size(); ++j) {
    for (size_t l = 0; l < a.residuals[j].c.size(); ++l) {
      const at::Tensor &x = a.residuals[j].c[l], &y = b.residuals[j].c[l];
      if (x.defined() != y.defined() || (x.defined() && !at::equal(x, y))) return false;
    }
  }
  return true;
}

TEST_P(EngineSaveEviction, RestoredContextEvictsAndAnswersAsTheSavedOne) {
  Engine original(model(), pools());
  std::unique_ptr<Script> script;
  const ContextId saved_ctx = run_saved(original, script, 120);
  const ContextRows rows = original.export_context(saved_ctx, exported_readers());
  // The state is one eviction has shaped: rows gone, rows masked in kept blocks, and the
  // scores of a scoring policy.
  int64_t masked = 0, scored = 0;
  for (const SequenceRows* s : sequences(rows)) {
    ASSERT_FALSE(s->lanes.empty());
    // int8 rows go out as stored, with their scales (nothing dequantised and quantised again).
    EXPECT_EQ(s->k[0].scalar_type(), GetParam().int8 ? at::kChar : at::kFloat);
    EXPECT_EQ(s->k_scale.size(), GetParam().int8 ? s->k.size() : 0u);
    for (const SequenceRows::Lane& l : s->lanes) {
      EXPECT_LT(l.positions.size(), s->tokens.size());
      masked += std::count(l.live.begin(), l.live.end(), uint8_t{0});
      scored += !l.scores.empty();
    }
  }
  EXPECT_GT(masked, 0) << "no masked row: the test would not see the masks restored";
  if (std::string(GetParam().policy) != "streaming_llm") {
    EXPECT_GT(scored, 0);
  }

  Engine restored(model(), pools());
  const ContextId ctx = restored.import_context(rows, readers());
  const ContextRows again = restored.export_context(ctx, exported_readers());
  ASSERT_EQ(sequences(again).size(), sequences(rows).size());
  for (size_t s = 0; s < sequences(rows).size(); ++s) {
    EXPECT_TRUE(same_rows(*sequences(rows)[s], *sequences(again)[s])) << "sequence " << s;
  }

  // Both go on with the same steps: the same kept positions and logits after each.
  Script twin = script->on(ctx);
  for (int s = 0; s < 150; ++s) {
    const StepResult a = script->step(original);
    const StepResult b = twin.step(restored);
    ASSERT_EQ(a.outputs.size(), b.outputs.size()) << "step " << s;
    for (size_t o = 0; o < a.outputs.size(); ++o) {
      ASSERT_TRUE(at::equal(a.outputs[o].logits, b.outputs[o].logits)) << "step " << s << " output " << o;
    }
    for (int32_t i = 0; i < num_readers(); ++i) {
      ASSERT_EQ(original.kept_positions(saved_ctx, i), restored.kept_positions(ctx, i)) << "step " << s;
    }
  }
}

// The import appends a chunk (prefill_chunk) at a time and packs each lane before the next:
// pools far too small for the whole trajectory take the restored context.
TEST_P(EngineSaveEviction, RestoreNeedsRoomForTheKeptRowsAndOneChunkOnly) {
  Engine original(model(), pools());
  std::unique_ptr<Script> script;
  const ContextId saved_ctx = run_saved(original, script, 240);
  const ContextRows rows = original.export_context(saved_ctx, exported_readers());
  // Room per lane for the kept rows (budget 40 and the blocks masks pin) and a chunk of 32,
  // well under the trajectory (each reader's own rows in full, its residual rows in
  // base_shared).
  const int64_t rows_per_lane = 160;
  ASSERT_GT(static_cast<int64_t>(rows.tokens.size()), 2 * rows_per_lane);
  Engine restored(model(), pools(rows_per_lane, /*chunk=*/32));
  const ContextId ctx = restored.import_context(rows, readers());
  for (int32_t i = 0; i < num_readers(); ++i) {
    EXPECT_EQ(restored.kept_positions(ctx, i), original.kept_positions(saved_ctx, i));
  }
  // The whole trajectory in one chunk does not fit, and nothing is left behind.
  Engine one_chunk(model(), pools(rows_per_lane, /*chunk=*/4096));
  EXPECT_THROW(one_chunk.import_context(rows, readers()), CapacityError);
  EXPECT_EQ(one_chunk.memory().cache.bytes_in_use, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EngineSaveEviction,
    ::testing::Values(Case{"full_h2o", SharingMode::kFull, "h2o", 1, false, 1},
                      Case{"base_lr_shared_h2o_per_head", SharingMode::kBaseLrShared, "h2o", 2, true, 3},
                      Case{"base_shared_snapkv", SharingMode::kBaseShared, "snapkv", 1, false, 2},
                      Case{"full_shared_streaming_llm", SharingMode::kFullShared, "streaming_llm", 2, true, 2},
                      Case{"base_lr_shared_h2o_per_head_int8", SharingMode::kBaseLrShared, "h2o", 2, true, 3, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Lanes that are not a state eviction leaves are refused, naming the lane, before anything
// is created.
TEST(EngineSaveEvictionChecks, BadLanesAreRefusedBeforeAnythingIsCreated) {
  const TinyEngineModel tiny = tiny_model(1);
  EngineOptions eo;
  eo.base_rows = eo.residual_rows = 1024;
  Engine original(*tiny.model, eo);
  const ContextId ctx = original.create_context({SharingMode::kFull, SharedWriter::kFirst, policy("h2o")}, {nullptr});
  Script script(ctx, 1, 9);
  for (int s = 0; s < 80; ++s) ASSERT_TRUE(script.step(original).ok);
  script.settle(original);
  const ContextRows good = original.export_context(ctx, {0});
  ASSERT_TRUE(good.own[0] && !good.own[0]->lanes.empty());
  auto refusal = [&](const std::function<void(SequenceRows&)>& damage) -> std::string {
    ContextRows bad = good;
    damage(*bad.own[0]);
    Engine fresh(*tiny.model, eo);
    try {
      fresh.import_context(bad, {nullptr});
    } catch (const ConfigError& e) {
      EXPECT_EQ(fresh.memory().cache.bytes_in_use, 0);
      return e.what();
    }
    return "accepted";
  };
  auto has = [](const std::string& message, const std::string& part) { return message.find(part) != std::string::npos; };
  EXPECT_EQ(refusal([](SequenceRows&) {}), "accepted");
  const std::string unsorted = refusal([](SequenceRows& r) { std::swap(r.lanes[1].positions[2], r.lanes[1].positions[3]); });
  EXPECT_TRUE(has(unsorted, "positions must ascend") && has(unsorted, "lane 1")) << unsorted;
  const std::string past_end =
      refusal([](SequenceRows& r) { r.lanes[0].positions.back() = static_cast<int32_t>(r.tokens.size()); });
  EXPECT_TRUE(has(past_end, "positions must ascend")) << past_end;
  const std::string short_mask = refusal([](SequenceRows& r) { r.lanes[0].live.assign(3, 1); });
  EXPECT_TRUE(has(short_mask, "a mask of another length")) << short_mask;
  const std::string all_masked = refusal([](SequenceRows& r) {
    r.lanes[0].live.assign(r.lanes[0].positions.size(), 1);
    for (size_t i = 0; i < 16; ++i) r.lanes[0].live[i] = 0;
  });
  EXPECT_TRUE(has(all_masked, "all evicted")) << all_masked;
  const std::string short_scores = refusal([](SequenceRows& r) { r.lanes[0].scores.pop_back(); });
  EXPECT_TRUE(has(short_scores, "scores of another length")) << short_scores;
  const std::string wrong_k = refusal([](SequenceRows& r) { r.k[1] = r.k[1].narrow(0, 1, r.k[1].size(0) - 1); });
  EXPECT_TRUE(has(wrong_k, "K or V of another shape") && has(wrong_k, "lane 1")) << wrong_k;
  const std::string lost_lane = refusal([](SequenceRows& r) { r.lanes.pop_back(); });
  EXPECT_TRUE(has(lost_lane, "another number")) << lost_lane;
}

}  // namespace
}  // namespace lorakv::runtime
