// tests/runtime/engine_alora_test.cpp: activated LoRA (aLoRA) readers in the engine, on the
// tiny model. The reference is PEFT's rule written with the plain forward (no engine): one
// KvCache sequence runs the tokens before the invocation with the base weights and the rest
// with the same factors as a standard LoRA. In every mode and writer where the base rows come
// from the base model (or from aLoRA readers, whose context work is the base model's), the
// engine's logits for aLoRA readers taking turns (chunked context, private turns with and
// without an instruction before the invocation, commits, batched decode of two readers) equal
// that reference within the float32 tolerance; moving the activation one token earlier or
// later breaks it by far more. Also: no residual rows for aLoRA readers, their context rows
// shared with base readers through the prefix index in `full`, the inexact combination the
// docs name (a standard reader writing first), and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/generator.h"
#include "tests/runtime/tiny_engine_model.h"
#include "tests/support/reference_values.h"

namespace lorakv::runtime {
namespace {

using AdapterPtr = std::shared_ptr<const adapters::Adapter>;
using Tokens = std::vector<int32_t>;

constexpr double kTolerance = lorakv::testing::kFloat32LogitsTolerance;

// The same factors as `standard`, with invocation tokens.
AdapterPtr activated_copy(const adapters::Adapter& standard, Tokens invocation) {
  return std::make_shared<const adapters::Adapter>(standard.name() + ".alora", "alora.gguf",
                                                   adapters::AdapterFormat::kGgufLora, standard.base_shape(),
                                                   standard.modules(), std::move(invocation));
}

Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// float32 [tokens, vocab]: every token's logits, tokens [0, active) with the base weights and
// the rest with `twin` (the aLoRA's factors as a standard LoRA), through the plain KvCache path.
at::Tensor reference(const LlamaModel& model, const adapters::Adapter* twin, const Tokens& tokens, int64_t active) {
  std::unique_ptr<KvCache> cache = model.make_cache();
  ForwardOptions all;
  all.all_logits = true;
  std::vector<at::Tensor> parts;
  if (active > 0) parts.push_back(model.forward({{SeqId(0), Tokens(tokens.begin(), tokens.begin() + active), nullptr}}, *cache, all));
  parts.push_back(model.forward({{SeqId(0), Tokens(tokens.begin() + active, tokens.end()), twin}}, *cache, all));
  return at::cat(parts);
}

struct Agent {
  AdapterPtr twin, alora;
  Tokens invocation;
};

class EngineAlora : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = lorakv::testing::make_tiny_engine_model();
    const AdapterPtr p = lorakv::testing::make_tiny_adapter(*tiny_.model, "planner", 1, 11);
    const AdapterPtr a = lorakv::testing::make_tiny_adapter(*tiny_.model, "actor", 2, 12);
    agents_ = {{p, activated_copy(*p, {5, 6}), {5, 6}}, {a, activated_copy(*a, {7, 8, 9}), {7, 8, 9}}};
  }
  const LlamaModel& model() const { return *tiny_.model; }

  lorakv::testing::TinyEngineModel tiny_;
  std::vector<Agent> agents_;
};

// Records each aLoRA output beside its reference: the reader's whole sequence so far and
// where its adapted span began.
struct Checks {
  struct Check {
    std::string label;
    at::Tensor logits;  // the engine's rows
    int agent;
    Tokens sequence;    // context + private tokens up to the last row
    int64_t active;
  };
  std::vector<Check> all;
  void add(std::string label, const at::Tensor& logits, int agent, Tokens sequence, int64_t active) {
    all.push_back({std::move(label), logits, agent, std::move(sequence), active});
  }
  // Worst relative error over the checks, with the reference's activation moved by `shift`.
  double worst(const LlamaModel& model, const std::vector<Agent>& agents, int64_t shift = 0) const {
    double worst = 0;
    for (const Check& c : all) {
      const at::Tensor ref = reference(model, agents[static_cast<size_t>(c.agent)].twin.get(), c.sequence, c.active + shift);
      const at::Tensor rows = ref.narrow(0, ref.size(0) - c.logits.size(0), c.logits.size(0));
      const double e = lorakv::testing::relative_error(c.logits, rows);
      if (shift == 0) {
        EXPECT_LE(e, kTolerance) << c.label;
      }
      worst = std::max(worst, e);
    }
    return worst;
  }
};

StepWork context_work(ContextId c, int32_t reader) {
  StepWork w;
  w.reader = {c, reader};
  w.kind = StepWork::Kind::kContext;
  w.max_tokens = 7;  // chunks of 7
  return w;
}

StepWork private_work(ContextId c, int32_t reader, Tokens tokens, bool all_logits) {
  return StepWork::private_tokens({c, reader}, std::move(tokens), all_logits);
}

// Runs context work for the readers until none has pending tokens.
void process_all(Engine& e, ContextId c, const std::vector<int32_t>& readers) {
  for (int guard = 0; guard < 100; ++guard) {
    std::vector<StepWork> work;
    for (int32_t r : readers) {
      if (e.pending_tokens({c, r}) > 0) work.push_back(context_work(c, r));
    }
    if (work.empty()) return;
    ASSERT_TRUE(e.step(work).ok);
  }
  FAIL() << "context processing did not finish";
}

// The scenario: readers 0 and 1 are the two aLoRA agents; `extra` readers (the base model,
// a standard adapter) process the context beside them and run private tokens in the decode
// steps. Returns the aLoRA checks.
Checks run_scenario(Engine& e, ContextId c, const std::vector<Agent>& agents, const std::vector<int32_t>& extra) {
  Checks checks;
  const Tokens t0 = {1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  e.append(c, t0);
  std::vector<int32_t> everyone = {0, 1};
  everyone.insert(everyone.end(), extra.begin(), extra.end());
  process_all(e, c, everyone);
  // Reader 0: its invocation opens the private work; then two decode steps.
  Tokens traj = e.context_tokens(c);
  Tokens priv = cat(agents[0].invocation, {30, 31, 32});
  StepResult r = e.step({private_work(c, 0, priv, true)});
  checks.add("r0 turn", r.outputs[0].logits, 0, cat(traj, priv), static_cast<int64_t>(traj.size()));
  for (int32_t t : {33, 34}) {
    priv.push_back(t);
    r = e.step({private_work(c, 0, {t}, false)});
    checks.add("r0 decode", r.outputs[0].logits, 0, cat(traj, priv), static_cast<int64_t>(traj.size()));
  }
  EXPECT_EQ(e.commit_private({c, 0}), static_cast<int64_t>(priv.size()));
  process_all(e, c, everyone);
  // Reader 1: an instruction before its invocation (base weights), in one private work.
  traj = e.context_tokens(c);
  const Tokens instruction = {40, 41, 42, 43};
  priv = cat(cat(instruction, agents[1].invocation), {35, 36});
  r = e.step({private_work(c, 1, priv, true)});
  checks.add("r1 turn after an instruction", r.outputs[0].logits, 1, cat(traj, priv),
             static_cast<int64_t>(traj.size() + instruction.size()));
  e.commit_private({c, 1});
  e.append(c, {26, 27, 28});  // a tool result
  process_all(e, c, everyone);
  // Both start a turn in one step, then decode side by side with the other readers' work.
  traj = e.context_tokens(c);
  Tokens p0 = cat(agents[0].invocation, {37}), p1 = cat(agents[1].invocation, {38});
  std::vector<StepWork> start = {private_work(c, 0, p0, false), private_work(c, 1, p1, false)};
  for (int32_t x : extra) start.push_back(private_work(c, x, {44, 45}, false));
  r = e.step(start);
  checks.add("r0 batched start", r.outputs[0].logits, 0, cat(traj, p0), static_cast<int64_t>(traj.size()));
  checks.add("r1 batched start", r.outputs[1].logits, 1, cat(traj, p1), static_cast<int64_t>(traj.size()));
  for (int step = 0; step < 3; ++step) {
    const int32_t t0 = 20 + step, t1 = 30 + step;
    p0.push_back(t0);
    p1.push_back(t1);
    std::vector<StepWork> w = {private_work(c, 0, {t0}, false), private_work(c, 1, {t1}, false)};
    for (int32_t x : extra) w.push_back(private_work(c, x, {46}, false));
    r = e.step(w);
    checks.add("r0 batched decode", r.outputs[0].logits, 0, cat(traj, p0), static_cast<int64_t>(traj.size()));
    checks.add("r1 batched decode", r.outputs[1].logits, 1, cat(traj, p1), static_cast<int64_t>(traj.size()));
  }
  return checks;
}

struct ModeCase {
  SharingMode mode;
  SharedWriter writer;
};

std::string name_of(const ModeCase& m) {
  return std::string(sharing_mode_name(m.mode)) + "/" + shared_writer_name(m.writer);
}

const ModeCase kEveryMode[] = {{SharingMode::kFull, SharedWriter::kFirst},
                               {SharingMode::kFullShared, SharedWriter::kFirst},
                               {SharingMode::kFullShared, SharedWriter::kBase},
                               {SharingMode::kBaseShared, SharedWriter::kFirst},
                               {SharingMode::kBaseShared, SharedWriter::kBase},
                               {SharingMode::kBaseLrShared, SharedWriter::kFirst},
                               {SharingMode::kBaseLrShared, SharedWriter::kBase},
                               {SharingMode::kFullShared, SharedWriter::kAuthor},
                               {SharingMode::kBaseShared, SharedWriter::kAuthor},
                               {SharingMode::kBaseLrShared, SharedWriter::kAuthor}};

// aLoRA readers and a base-model reader: every mode is exact, with no residual rows (with
// writer author too: an aLoRA agent's turns, like text, are the base model's to write).
TEST_F(EngineAlora, EveryModeEqualsThePeftRuleAndKeepsNoResidualRows) {
  for (const ModeCase& m : kEveryMode) {
    SCOPED_TRACE(name_of(m));
    Engine e(model());
    const ContextId c = e.create_context({m.mode, m.writer}, {agents_[0].alora, agents_[1].alora, nullptr});
    const Checks checks = run_scenario(e, c, agents_, {2});
    EXPECT_EQ(checks.all.size(), 12u);
    checks.worst(model(), agents_);
    EXPECT_EQ(e.context_memory(c).residual_bytes, 0) << "aLoRA readers keep residual rows";
    EXPECT_EQ(e.adopted_commits(), 0) << "an aLoRA reply's adapter rows were adopted as context rows";
  }
}

// The comparison is sensitive to where the span starts: one token early or late breaks it.
TEST_F(EngineAlora, ActivationOneTokenEarlyOrLateIsCaught) {
  Engine e(model());
  const ContextId c = e.create_context({SharingMode::kBaseLrShared, SharedWriter::kBase},
                                       {agents_[0].alora, agents_[1].alora});
  const Checks checks = run_scenario(e, c, agents_, {});
  EXPECT_LE(checks.worst(model(), agents_), kTolerance);
  for (int64_t shift : {-1, 1}) {
    const double moved = checks.worst(model(), agents_, shift);
    EXPECT_GT(moved, 100 * kTolerance) << "activation moved by " << shift;
  }
}

// aLoRA readers beside a standard reader with residual rows, in one step: exact when the
// base model writes the base rows; not exact when the standard reader writes them first
// (its hidden states fill them), as docs/sharing_modes.md says.
TEST_F(EngineAlora, MixedWithAStandardReader) {
  const AdapterPtr standard = lorakv::testing::make_tiny_adapter(model(), "critic", 3, 13);
  for (SharingMode mode : {SharingMode::kBaseShared, SharingMode::kBaseLrShared}) {
    SCOPED_TRACE(sharing_mode_name(mode));
    {
      Engine e(model());
      const ContextId c = e.create_context({mode, SharedWriter::kBase}, {agents_[0].alora, agents_[1].alora, standard});
      const Checks checks = run_scenario(e, c, agents_, {2});
      checks.worst(model(), agents_);
      EXPECT_GT(e.context_memory(c).residual_bytes, 0) << "the standard reader's residual rows";
    }
    Engine e(model());
    const ContextId c = e.create_context({mode, SharedWriter::kFirst}, {standard, agents_[0].alora, agents_[1].alora});
    e.append(c, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    process_all(e, c, {0});  // the standard reader writes the base rows
    ASSERT_EQ(e.pending_tokens({c, 1}), 0);
    const Tokens priv = cat(agents_[0].invocation, {30, 31});
    const StepResult r = e.step({private_work(c, 1, priv, true)});
    const Tokens seq = cat(e.context_tokens(c), priv);
    const at::Tensor ref = reference(model(), agents_[0].twin.get(), seq, 10);
    EXPECT_GT(lorakv::testing::relative_error(r.outputs[0].logits, ref.narrow(0, 10, 4)), 100 * kTolerance);
  }
}

// In `full`, an aLoRA reader's context rows are keyed as base rows: a base reader of another
// context adopts them from the prefix index, and the aLoRA reader adopts a base reader's.
TEST_F(EngineAlora, FullModeSharesContextRowsWithBaseReadersAcrossContexts) {
  Tokens text;
  for (int i = 0; i < 40; ++i) text.push_back(static_cast<int32_t>(10 + i % 30));
  Engine e(model());
  const ContextId a = e.create_context({SharingMode::kFull, SharedWriter::kFirst}, {agents_[0].alora});
  e.append(a, text);
  process_all(e, a, {0});
  const ContextId b = e.create_context({SharingMode::kFull, SharedWriter::kFirst}, {nullptr, agents_[1].alora});
  e.append(b, text);
  StepResult r = e.step({context_work(b, 0)});
  EXPECT_EQ(r.outputs[0].prefix_hit_tokens, 32) << "whole blocks of 16 below the last token";
  process_all(e, b, {0});
  r = e.step({context_work(b, 1)});
  EXPECT_EQ(r.outputs[0].prefix_hit_tokens, 32);
  // A standard reader's rows are its own: nothing to adopt.
  const ContextId s = e.create_context({SharingMode::kFull, SharedWriter::kFirst}, {agents_[0].twin});
  e.append(s, text);
  r = e.step({context_work(s, 0)});
  EXPECT_EQ(r.outputs[0].prefix_hit_tokens, 0);
}

TEST_F(EngineAlora, PrivateWorkWithoutTheInvocationIsRefused) {
  Engine e(model());
  const ContextId c = e.create_context({SharingMode::kBaseShared, SharedWriter::kBase}, {agents_[0].alora});
  e.append(c, {1, 2, 3, 5, 6});  // the invocation in the context does not count
  process_all(e, c, {0});
  try {
    e.step({private_work(c, 0, {30, 31, 5}, false)});
    ADD_FAILURE() << "ran an aLoRA reply with the base weights";
  } catch (const ConfigError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("must hold its invocation tokens"), std::string::npos) << m;
    EXPECT_NE(m.find("planner.alora"), std::string::npos) << m;
    EXPECT_NE(m.find("alora.gguf"), std::string::npos) << m;
  }
  EXPECT_TRUE(e.private_tokens({c, 0}).empty()) << "a refused step changed the reader";
  // Once activated, later private work needs no invocation: the reply is adapted.
  EXPECT_TRUE(e.step({private_work(c, 0, {5, 6, 30}, false)}).ok);
  EXPECT_TRUE(e.step({private_work(c, 0, {31}, false)}).ok);
}

// The generator splits an aLoRA request's prompt at its last invocation: what precedes is
// context, the rest private work; greedy tokens follow the reference's argmax. Everything
// else refuses: no invocation, eviction's commits, the engine-less path, a plain forward.
TEST_F(EngineAlora, GeneratorRunsThePromptFromItsInvocation) {
  GenerationRequest req;
  req.prompt = {1, 2, 5, 6, 3, 4, 5, 6, 30};
  req.max_tokens = 3;
  req.adapter = agents_[0].alora;
  const std::vector<GenerationOutput> out = generate(model(), nullptr, {req});
  ASSERT_EQ(out[0].tokens.size(), 3u);
  Tokens seq = req.prompt;
  for (int32_t t : out[0].tokens) {
    const at::Tensor ref = reference(model(), agents_[0].twin.get(), seq, 6);
    EXPECT_EQ(ref[-1].argmax().item<int64_t>(), t);
    seq.push_back(t);
  }
  auto expect_config_error = [](const std::function<void()>& fn, const std::string& says) {
    try {
      fn();
      ADD_FAILURE() << "not refused: " << says;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  GenerationRequest none = req;
  none.prompt = {1, 2, 3, 6, 5};
  expect_config_error([&] { generate(model(), nullptr, {none}); }, "does not hold the activated LoRA's invocation");
  GeneratorOptions evicting;
  evicting.eviction.policy = "streaming_llm";
  evicting.eviction.budget_tokens = 64;
  expect_config_error([&] { generate(model(), nullptr, {req}, nullptr, evicting); }, "committed as it goes");
  GeneratorOptions plain;
  plain.use_cache = false;
  expect_config_error([&] { generate(model(), nullptr, {req}, nullptr, plain); }, "runs only in the engine");
  std::unique_ptr<KvCache> cache = model().make_cache();
  expect_config_error([&] { model().forward({{SeqId(0), {5, 6, 7}, agents_[0].alora.get()}}, *cache); },
                      "runs only in the engine");
}

}  // namespace
}  // namespace lorakv::runtime
