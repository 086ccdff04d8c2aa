// tests/adapters/peft_parity_test.cpp: lorakv with LoRA adapters against PEFT on the real
// base model (tools/peft_oracle.py, run by CTest as the peft_oracle fixture): per adapter,
// for a mixed batch of equal lengths (three adapters and one sequence without, against
// PEFT's own mixed batch) and for a ragged mixed batch (prompts of 1 to 92 tokens, each
// with its own adapter or none, against PEFT run on each prompt alone), prefill logits
// within the float32 parity tolerance (lorakv::testing::kFloat32LogitsTolerance, 1e-5 of
// the largest logit) and 32-token greedy decodes (with its near-tie exception). Also: GGUF
// LoRA files written by llama.cpp's own converter, shared-A groups, and mixed batches whose
// adapter rows are not adjacent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/formats/safetensors_file.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/reference_values.h"
#include "tests/support/test_settings.h"

namespace lorakv::adapters {
namespace {

using runtime::LlamaModel;
using runtime::parse_weight_form;
using runtime::SequenceInput;

constexpr double kRelativeTolerance = lorakv::testing::kFloat32LogitsTolerance;

struct Reference {
  std::vector<int32_t> prompt;
  at::Tensor logits;  // float32 [T, vocab], a view into the reference file
  std::vector<int32_t> greedy_ids;
  std::vector<double> greedy_margins;
  std::string adapter;  // "" for the base model
};

using lorakv::testing::json_doubles;
using lorakv::testing::json_ints;
using lorakv::testing::relative_error;

class PeftParity : public ::testing::Test {
 protected:
  // A missing setting or file fails every test of the suite (SetUp), never skips it.
  static void SetUpTestSuite() {
    const std::string model_path = lorakv::testing::test_setting("LORAKV_MODEL");
    const std::string oracle_dir = lorakv::testing::test_setting("LORAKV_ORACLE_DIR");
    if (model_path.empty() || oracle_dir.empty()) {
      setup_error_ = "LORAKV_MODEL or LORAKV_ORACLE_DIR is not set: run the tests through ctest (tools/test.sh)";
      return;
    }
    dir_ = oracle_dir + "/peft";
    try {
      auto file = formats::GgufFile::open(model_path);
      model_ = LlamaModel::from_gguf(*file, at::kFloat,
                                     parse_weight_form(lorakv::testing::test_setting("LORAKV_TEST_WEIGHTS"))).release();
      reference_ = formats::SafetensorsFile::open(dir_ + "/peft_reference.safetensors").release();
      meta_ = new formats::JsonValue(formats::parse_json(reference_->metadata().at("oracle")));
      registry_ = new AdapterRegistry(model_->adapter_shape(), model_->dtype());
      for (const auto& [name, entry] : meta_->at("adapters").as_object()) {
        Reference r{json_ints(meta_->at("prompt")), logits(name + ".logits"), json_ints(entry.at("greedy_ids")),
                    json_doubles(entry.at("greedy_margins")), name};
        registry_->load(name, dir_ + "/" + name);
        singles_.push_back(std::move(r));
      }
      mixed_ = references("mixed");
      ragged_ = references("ragged");
    } catch (const std::exception& e) {
      setup_error_ = std::string("cannot load the model or the PEFT oracle's output (tools/peft_oracle.py): ") +
                     e.what();
    }
  }
  static void TearDownTestSuite() {
    singles_.clear();
    mixed_.clear();
    ragged_.clear();
    delete registry_;
    delete meta_;
    delete reference_;
    delete model_;
    registry_ = nullptr;
    meta_ = nullptr;
    reference_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_NE(model_, nullptr);
  }

  // The oracle's list `key` ("mixed", "ragged"): entry i's logits are "<key>.<i>.logits".
  static std::vector<Reference> references(const std::string& key) {
    std::vector<Reference> out;
    for (const formats::JsonValue& e : meta_->at(key).as_array()) {
      const std::string adapter = e.at("adapter").is_null() ? "" : e.at("adapter").as_string();
      out.push_back({json_ints(e.at("prompt")), logits(key + "." + std::to_string(out.size()) + ".logits"),
                     json_ints(e.at("greedy_ids")), json_doubles(e.at("greedy_margins")), adapter});
    }
    return out;
  }

  static at::Tensor logits(const std::string& name) { return lorakv::testing::float_tensor(*reference_, name); }

  static std::shared_ptr<const Adapter> adapter_of(const Reference& r) {
    return r.adapter.empty() ? nullptr : registry_->require(r.adapter);
  }

  // Greedy decoding of every reference in one batch, step by step against the reference
  // (each step continues from the reference's token; a differing argmax is accepted only
  // where the reference's own top-2 margin is below the tolerance, a near tie).
  static void check_greedy(const std::vector<const Reference*>& refs) {
    std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
    std::vector<std::shared_ptr<const Adapter>> pins;
    std::vector<SequenceInput> batch;
    for (size_t i = 0; i < refs.size(); ++i) {
      pins.push_back(adapter_of(*refs[i]));
      batch.push_back({SeqId(static_cast<int64_t>(i)), refs[i]->prompt, pins.back().get()});
    }
    at::Tensor logits = model_->forward(batch, *cache);
    const size_t steps = refs[0]->greedy_ids.size();
    ASSERT_GT(steps, 0u) << "the oracle recorded no greedy tokens";
    for (const Reference* r : refs) {
      ASSERT_EQ(r->greedy_ids.size(), steps) << r->adapter;
      ASSERT_EQ(r->greedy_margins.size(), steps) << r->adapter;
    }
    for (size_t step = 0; step < steps; ++step) {
      for (size_t i = 0; i < refs.size(); ++i) {
        const Reference& r = *refs[i];
        const at::Tensor row = logits[static_cast<int64_t>(i)];
        const int32_t ours = static_cast<int32_t>(row.argmax().item<int64_t>());
        if (ours != r.greedy_ids[step]) {
          const double tolerance = kRelativeTolerance * row.abs().max().item<double>();
          ASSERT_LT(r.greedy_margins[step], tolerance) << r.adapter << " step " << step << ": ours " << ours
                                                       << ", PEFT " << r.greedy_ids[step];
          std::printf("  near tie accepted: %s step %zu\n", r.adapter.c_str(), step);
        }
        batch[i].tokens = {r.greedy_ids[step]};
      }
      if (step + 1 < steps) logits = model_->forward(batch, *cache);
    }
  }

  // Logits of one batch (all_logits) against each reference's every position.
  static void check_batch_logits(const std::vector<Reference>& refs, const char* label) {
    std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
    std::vector<std::shared_ptr<const Adapter>> pins;
    std::vector<SequenceInput> batch;
    for (size_t i = 0; i < refs.size(); ++i) {
      pins.push_back(adapter_of(refs[i]));
      batch.push_back({SeqId(static_cast<int64_t>(i)), refs[i].prompt, pins.back().get()});
    }
    at::Tensor ours = model_->forward(batch, *cache, {/*all_logits=*/true});
    int64_t row = 0;
    for (const Reference& r : refs) {
      const int64_t n = static_cast<int64_t>(r.prompt.size());
      ASSERT_EQ(r.logits.size(0), n) << r.adapter;
      const double err = relative_error(ours.narrow(0, row, n), r.logits);
      std::printf("  %s %-15s %3lld tokens: relative error %.3g\n", label,
                  r.adapter.empty() ? "(base)" : r.adapter.c_str(), static_cast<long long>(n), err);
      EXPECT_LT(err, kRelativeTolerance) << r.adapter;
      row += n;
    }
    ASSERT_EQ(row, ours.size(0));
  }

  static std::string setup_error_;
  static std::string dir_;
  static LlamaModel* model_;
  static formats::SafetensorsFile* reference_;
  static formats::JsonValue* meta_;
  static AdapterRegistry* registry_;
  static std::vector<Reference> singles_, mixed_, ragged_;
};

std::string PeftParity::setup_error_;
std::string PeftParity::dir_;
LlamaModel* PeftParity::model_ = nullptr;
formats::SafetensorsFile* PeftParity::reference_ = nullptr;
formats::JsonValue* PeftParity::meta_ = nullptr;
AdapterRegistry* PeftParity::registry_ = nullptr;
std::vector<Reference> PeftParity::singles_, PeftParity::mixed_, PeftParity::ragged_;

TEST_F(PeftParity, EachAdapterMatchesPeftLogits) {
  const at::Tensor base = logits("base.logits");
  ASSERT_GE(singles_.size(), 13u);
  for (const Reference& r : singles_) {
    std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
    auto a = adapter_of(r);
    at::Tensor ours = model_->forward({{SeqId(0), r.prompt, a.get()}}, *cache, {/*all_logits=*/true});
    ASSERT_EQ(ours.sizes(), r.logits.sizes());
    const double err = relative_error(ours, r.logits), effect = relative_error(base, r.logits);
    std::printf("  %-15s rank %2lld..%-2lld %2zu modules x %zu: max |ours - peft| / max |peft| = %.3g (adapter moves "
                "logits by %.3g)\n", r.adapter.c_str(), static_cast<long long>(a->min_rank()),
                static_cast<long long>(a->max_rank()), a->target_names().size(), a->modules().size() / a->target_names().size(),
                err, effect);
    EXPECT_LT(err, kRelativeTolerance) << r.adapter;
    // The adapter has a real effect, far above the tolerance (a negative control).
    EXPECT_GT(effect, 100 * kRelativeTolerance) << r.adapter;
  }
}

TEST_F(PeftParity, EachAdapterGreedyDecodeMatchesPeft) {
  // All adapters decode as one batch (the batch rows equal running alone, tested below);
  // a 2-core CI runs 32 steps instead of 32 per adapter.
  std::vector<const Reference*> refs;
  for (const Reference& r : singles_) refs.push_back(&r);
  check_greedy(refs);
}

TEST_F(PeftParity, MixedBatchMatchesPeftAdapterNames) {
  ASSERT_EQ(mixed_.size(), 4u);
  check_batch_logits(mixed_, "mixed");
  std::vector<const Reference*> refs;
  for (const Reference& r : mixed_) refs.push_back(&r);
  check_greedy(refs);
}

// Prompts of different lengths in one batch (one token up to the longest), each with its
// own adapter or none and one adapter on two rows apart, against PEFT run on each prompt
// alone (no padding on either side): logits of every real position, then greedy decodes.
TEST_F(PeftParity, RaggedMixedBatchMatchesPeftRunPerPrompt) {
  ASSERT_GE(ragged_.size(), 5u);
  std::set<size_t> lengths;
  for (const Reference& r : ragged_) lengths.insert(r.prompt.size());
  ASSERT_EQ(lengths.size(), ragged_.size()) << "the ragged prompts must all differ in length";
  ASSERT_EQ(*lengths.begin(), 1u);
  check_batch_logits(ragged_, "ragged");
  std::vector<const Reference*> refs;
  for (const Reference& r : ragged_) refs.push_back(&r);
  check_greedy(refs);
}

// The generator's batched decode of the equal-length and the ragged mixed batches gives
// PEFT's tokens, unless a near tie diverged (check_greedy above reports those).
TEST_F(PeftParity, GeneratorDecodesMixedBatchesAsPeft) {
  constexpr size_t kTokens = 16;
  for (const std::vector<Reference>* refs : {&mixed_, &ragged_}) {
    ASSERT_FALSE(refs->empty());
    std::vector<runtime::GenerationRequest> requests(refs->size());
    for (size_t i = 0; i < refs->size(); ++i) {
      requests[i].prompt = (*refs)[i].prompt;
      requests[i].max_tokens = kTokens;
      requests[i].adapter = adapter_of((*refs)[i]);
    }
    const auto out = runtime::generate(*model_, nullptr, requests);
    ASSERT_EQ(out.size(), refs->size());
    for (size_t i = 0; i < refs->size(); ++i) {
      const Reference& r = (*refs)[i];
      ASSERT_EQ(out[i].tokens.size(), kTokens) << r.adapter;
      ASSERT_GE(r.greedy_ids.size(), kTokens) << r.adapter;
      size_t same = 0;
      while (same < kTokens && out[i].tokens[same] == r.greedy_ids[same]) ++same;
      if (same < kTokens) {
        const double near_tie = kRelativeTolerance * r.logits.abs().max().item<double>();
        EXPECT_LT(r.greedy_margins[same], near_tie) << r.adapter << " diverged from PEFT at token " << same;
      }
    }
  }
}

// Each sequence's result in a batch equals running it alone, also when one adapter's rows
// are not adjacent (index path) and the same adapter appears with the base in between.
TEST_F(PeftParity, BatchRowsEqualRunningAlone) {
  const Reference& r = singles_[0];
  const std::vector<std::string> names = {"qv_r8", "", "qv_r8", "all_linear_r64", "role_v_0"};
  std::vector<std::shared_ptr<const Adapter>> pins;
  std::vector<SequenceInput> batch;
  std::vector<at::Tensor> alone;
  for (size_t i = 0; i < names.size(); ++i) {
    pins.push_back(names[i].empty() ? nullptr : registry_->require(names[i]));
    std::vector<int32_t> prompt(r.prompt.begin(), r.prompt.begin() + 20 + static_cast<int64_t>(i));
    batch.push_back({SeqId(static_cast<int64_t>(i)), prompt, pins.back().get()});
    std::unique_ptr<runtime::KvCache> c = model_->make_cache();
    alone.push_back(model_->forward({batch.back()}, *c, {/*all_logits=*/true}));
  }
  std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
  at::Tensor together = model_->forward(batch, *cache, {/*all_logits=*/true});
  int64_t row = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t n = alone[i].size(0);
    EXPECT_LT(relative_error(together.narrow(0, row, n), alone[i]), 1e-5) << i;
    row += n;
  }
}

// A decode step of many same-rank adapters (the gathered, batched-matmul path of
// kernels::lora_add) equals each sequence decoded alone: with a base row in between (rows
// gathered and scattered), as the whole batch with one row per adapter (no gather), and
// with one adapter on two rows.
TEST_F(PeftParity, DecodeStepOfManyAdaptersEqualsRunningAlone) {
  const Reference& r = singles_[0];
  const std::vector<std::vector<std::string>> batches = {
      {"role_v_0", "qv_r8", "", "role_v_1", "role_v_2", "role_all_0"},
      {"role_v_0", "qv_r8", "role_v_1", "role_v_2"},
      {"role_v_0", "qv_r8", "role_v_0", "role_v_1"}};
  for (const std::vector<std::string>& names : batches) {
    std::vector<std::shared_ptr<const Adapter>> pins;
    std::vector<SequenceInput> batch;
    std::vector<at::Tensor> alone;
    for (size_t i = 0; i < names.size(); ++i) {
      pins.push_back(names[i].empty() ? nullptr : registry_->require(names[i]));
      std::vector<int32_t> prompt(r.prompt.begin(), r.prompt.begin() + 12 + static_cast<int64_t>(i));
      batch.push_back({SeqId(static_cast<int64_t>(i)), prompt, pins.back().get()});
      std::unique_ptr<runtime::KvCache> c = model_->make_cache();
      model_->forward({batch.back()}, *c);
      alone.push_back(model_->forward({{SeqId(static_cast<int64_t>(i)), {r.prompt[30]}, pins.back().get()}}, *c)[0]);
    }
    std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
    model_->forward(batch, *cache);
    for (SequenceInput& s : batch) s.tokens = {r.prompt[30]};
    at::Tensor together = model_->forward(batch, *cache);
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_LT(relative_error(together[static_cast<int64_t>(i)], alone[i]), 1e-5) << names.size() << " rows, row " << i;
    }
  }
}

// GGUF LoRA files written by llama.cpp's own convert_lora_to_gguf.py (--outtype f32) from
// the PEFT directories: lorakv's GGUF loader recovers PEFT's A and B exactly (the Q/K
// un-permutation only reorders B's rows, and the folded scales 2 and 0.5 are powers of
// two) and PEFT's logits.
TEST_F(PeftParity, GgufLoraFromLlamaCppConverterMatchesPeft) {
  const std::vector<formats::JsonValue>& files = meta_->at("gguf").as_array();
  ASSERT_GE(files.size(), 2u);
  for (const formats::JsonValue& f : files) {
    const std::string source = f.at("source").as_string();
    auto peft = registry_->require(source);
    auto gguf = load_adapter("gguf", dir_ + "/" + f.at("file").as_string(), model_->adapter_shape());
    ASSERT_EQ(gguf->modules().size(), peft->modules().size()) << source;
    EXPECT_EQ(gguf->target_names(), peft->target_names()) << source;
    for (const LoraModule& m : peft->modules()) {
      const LoraModule* g = gguf->find(m.layer, m.module);
      ASSERT_NE(g, nullptr) << source << " " << module_path(m.layer, m.module);
      EXPECT_TRUE(at::equal(g->a, m.a)) << source << " " << module_path(m.layer, m.module);
      EXPECT_TRUE(at::equal(g->b, m.b)) << source << " " << module_path(m.layer, m.module);
    }
    const auto r = std::find_if(singles_.begin(), singles_.end(), [&](const Reference& x) { return x.adapter == source; });
    ASSERT_NE(r, singles_.end()) << "no PEFT reference logits for " << source;
    std::unique_ptr<runtime::KvCache> cache = model_->make_cache();
    at::Tensor ours = model_->forward({{SeqId(0), r->prompt, gguf.get()}}, *cache, {/*all_logits=*/true});
    const double err = relative_error(ours, r->logits);
    std::printf("  gguf lora of %s (llama.cpp's converter): relative error %.3g\n", source.c_str(), err);
    EXPECT_LT(err, kRelativeTolerance) << source;
  }
}

TEST_F(PeftParity, SharedAGroupsAreDetected) {
  int v_groups = 0, all_groups = 0;
  for (const SharedAGroup& g : registry_->shared_a_groups()) {
    if (g.adapters == std::vector<std::string>{"role_v_0", "role_v_1", "role_v_2"}) {
      EXPECT_EQ(g.module, ModuleId::kV);
      ++v_groups;
    } else if (g.adapters == std::vector<std::string>{"role_all_0", "role_all_1", "role_all_2"}) {
      ++all_groups;
    } else {
      ADD_FAILURE() << "unexpected shared-A group at " << module_path(g.layer, g.module);
    }
  }
  const int64_t layers = model_->config().num_layers;
  EXPECT_EQ(v_groups, layers);
  EXPECT_EQ(all_groups, 4 * layers);
}

}  // namespace
}  // namespace lorakv::adapters
