// tests/adapters/adapter_registry_test.cpp: the registry's contract: load/replace/unload
// by name, listing and memory, pinning (an adapter in use cannot be unloaded), and a real
// race: threads loading, replacing, unloading and pinning while another generates on the
// real model, checked for invariants a missing lock breaks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <ATen/Parallel.h>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/runtime/generator.h"
#include "lorakv/runtime/llama_model.h"
#include "tests/support/safetensors_builder.h"
#include "tests/support/test_settings.h"

namespace lorakv::testing {
std::string temp_path(const std::string& name);
}

namespace lorakv::adapters {
namespace {

namespace fs = std::filesystem;

BaseModelShape tiny() { return {"llama", 2, 8, 2, 1, 4, 12, true}; }

// A PEFT q_proj adapter of rank r on the tiny shape, values offset by `seed`.
std::string write_q_adapter(const std::string& name, int64_t r, float seed) {
  testing::SafetensorsBuilder b;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "base_model.model.model.layers." + std::to_string(l) + ".self_attn.q_proj.lora_";
    b.add_f32(p + "A.weight", {r, 8}, std::vector<float>(static_cast<size_t>(r * 8), seed));
    b.add_f32(p + "B.weight", {8, r}, std::vector<float>(static_cast<size_t>(r * 8), 0.5f));
  }
  const fs::path dir = testing::temp_path("registry_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << R"({"r": )" << r << R"(, "lora_alpha": 2, "target_modules": ["q_proj"]})";
  b.write((dir / "adapter_model.safetensors").string());
  return dir.string();
}

TEST(AdapterRegistry, LoadListUnloadAndMemory) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("b", write_q_adapter("b", 2, 0.1f));
  reg.load("a", write_q_adapter("a", 4, 0.2f));
  const std::vector<AdapterInfo> list = reg.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[0].max_rank, 4);
  EXPECT_EQ(list[0].targets, std::vector<std::string>{"q_proj"});
  EXPECT_EQ(list[0].num_bytes, 2 * (4 * 8 + 8 * 4) * 4);
  EXPECT_EQ(list[0].identity.hex().size(), 64u);
  EXPECT_EQ(reg.num_bytes(), list[0].num_bytes + list[1].num_bytes);
  EXPECT_EQ(reg.unload("a").status, UnloadStatus::kUnloaded);
  EXPECT_EQ(reg.unload("a").status, UnloadStatus::kNotFound);
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg.acquire("a"), nullptr);
  EXPECT_THROW(reg.require("a"), ConfigError);
}

TEST(AdapterRegistry, ExistingNameNeedsReplaceAndGetsANewIdentity) {
  AdapterRegistry reg(tiny(), at::kFloat);
  const std::string dir = write_q_adapter("x", 2, 0.1f);
  auto first = reg.load("x", dir);
  EXPECT_THROW(reg.load("x", dir), ConfigError);
  auto pinned = reg.acquire("x");  // a running sequence holds the old one
  auto second = reg.load("x", write_q_adapter("x2", 2, 0.3f), /*replace=*/true);
  EXPECT_NE(first->identity(), second->identity());
  EXPECT_NE(first->content_hash(), second->content_hash());
  EXPECT_EQ(pinned->identity(), first->identity());  // the running sequence keeps its adapter
  EXPECT_EQ(reg.acquire("x")->identity(), second->identity());
  // Reloading identical bytes: the identity is the content's, so it is the same.
  auto third = reg.load("x", write_q_adapter("x3", 2, 0.3f), /*replace=*/true);
  EXPECT_EQ(third->content_hash(), second->content_hash());
  EXPECT_EQ(third->identity(), second->identity());
}

TEST(AdapterRegistry, AnAdapterInUseCannotBeUnloaded) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("x", write_q_adapter("inuse", 2, 0.1f));
  {
    std::shared_ptr<const Adapter> pin = reg.acquire("x");
    const UnloadResult r = reg.unload("x");
    EXPECT_EQ(r.status, UnloadStatus::kInUse);
    EXPECT_NE(r.message.find("in use"), std::string::npos) << r.message;
    EXPECT_TRUE(reg.list()[0].in_use);
    EXPECT_EQ(pin->find(0, ModuleId::kQ)->rank, 2);  // nothing broke
  }
  EXPECT_EQ(reg.unload("x").status, UnloadStatus::kUnloaded);
}

TEST(AdapterRegistry, SharedAGroupsNeedBitwiseEqualA) {
  AdapterRegistry reg(tiny(), at::kFloat);
  reg.load("a", write_q_adapter("sa", 2, 0.1f));
  reg.load("b", write_q_adapter("sb", 2, 0.1f));
  reg.load("c", write_q_adapter("sc", 2, 0.2f));
  const auto groups = reg.shared_a_groups();
  ASSERT_EQ(groups.size(), 2u);  // q_proj of layers 0 and 1
  EXPECT_EQ(groups[0].adapters, (std::vector<std::string>{"a", "b"}));
}

TEST(AdapterRegistry, ModuleOrderMatchesTheRuntime) {
  for (int i = 0; i < kNumModules; ++i) {
    EXPECT_STREQ(module_name(static_cast<ModuleId>(i)), runtime::module_name(static_cast<runtime::Module>(i)));
  }
}

// ---- The race: churning threads, pinning threads and a generating thread at once. ----
// Names 0 and 1 are replaced at any version; "stable" names 2 and 3 are only unloaded and
// loaded again, never replaced, so while a thread pins one the registry must keep handing
// out exactly that adapter. Every adapter has the same size, and every A element of
// (name n, version v) is race_a_value(n, v), so an adapter's content tells its version.
constexpr int kRaceNames = 4;
constexpr int kRaceVersions = 2;
constexpr int64_t kRaceLayers = 4;   // layers_to_transform 0..3, q_proj and v_proj
constexpr int64_t kRaceRank = 2;
constexpr int kRaceGenerations = 4;  // generations that ran with an adapter during the race
constexpr int kMinCyclesPerThread = 200;

std::string race_name(int n) { return "race" + std::to_string(n); }
bool is_stable(int n) { return n >= 2; }
float race_a_value(int n, int v) { return static_cast<float>(1 + n * kRaceVersions + v) / 64.0f; }

std::string write_race_adapter(const BaseModelShape& shape, int n, int v) {
  testing::SafetensorsBuilder b;
  for (int64_t l = 0; l < kRaceLayers; ++l) {
    for (ModuleId m : {ModuleId::kQ, ModuleId::kV}) {
      const std::string p = "base_model.model." + module_path(l, m) + ".lora_";
      const int64_t in = shape.in_dim(m), out = shape.out_dim(m);
      b.add_f32(p + "A.weight", {kRaceRank, in}, std::vector<float>(static_cast<size_t>(kRaceRank * in), race_a_value(n, v)));
      b.add_f32(p + "B.weight", {out, kRaceRank}, std::vector<float>(static_cast<size_t>(out * kRaceRank), 0.25f));
    }
  }
  const fs::path dir = testing::temp_path("registry_race_" + std::to_string(n) + "_" + std::to_string(v));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "adapter_config.json") << R"({"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"],)"
                                             << R"( "layers_to_transform": [0, 1, 2, 3]})";
  b.write((dir / "adapter_model.safetensors").string());
  return dir.string();
}

// Every (name, version): its folder, the adapter loaded alone before the race, and the
// greedy tokens the model generates with it.
struct RaceAdapters {
  std::string path[kRaceNames][kRaceVersions];
  std::shared_ptr<const Adapter> ref[kRaceNames][kRaceVersions];
  std::vector<int32_t> tokens[kRaceNames][kRaceVersions];
  int64_t bytes = 0;  // of each adapter

  // The version whose folder `source` is, or -1.
  int version_of(int n, const std::string& source) const {
    for (int v = 0; v < kRaceVersions; ++v) {
      if (path[n][v] == source) return v;
    }
    return -1;
  }
};

// Broken invariants, gathered from every thread (the lock is taken only to record one, so
// it orders nothing the registry does).
class Problems {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (list_.size() < 20) list_.push_back(what);
    ++count_;
  }
  std::string summary() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string s = std::to_string(count_) + " broken invariant(s):";
    for (const std::string& p : list_) s += "\n  " + p;
    return s;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return count_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> list_;
  size_t count_ = 0;
};

// An acquired adapter is complete and is, bit for bit, the version its source names.
void check_adapter(const Adapter& a, int n, const RaceAdapters& ad, Problems& problems) {
  const std::string what = "acquired " + race_name(n) + " from '" + a.source() + "': ";
  const int v = ad.version_of(n, a.source());
  if (a.name() != race_name(n) || v < 0) return problems.add(what + "wrong name '" + a.name() + "' or source");
  const Adapter& ref = *ad.ref[n][v];
  if (a.identity() != ref.identity()) return problems.add(what + "identity differs from its version's");
  if (a.modules().size() != ref.modules().size()) return problems.add(what + "incomplete: wrong module count");
  for (size_t i = 0; i < ref.modules().size(); ++i) {
    const LoraModule& m = a.modules()[i];
    const LoraModule& want = ref.modules()[i];
    if (m.layer != want.layer || m.module != want.module || !at::equal(m.a, want.a) || !at::equal(m.b, want.b)) {
      return problems.add(what + "module " + std::to_string(i) + " differs from its version's");
    }
  }
  if (a.modules()[0].a.flatten()[0].item<float>() != race_a_value(n, v)) problems.add(what + "A is another version's");
}

// One list() is sorted, names only known adapters, and each entry matches its version;
// size() and num_bytes() stay within what the names allow.
void check_views(const AdapterRegistry& reg, const RaceAdapters& ad, Problems& problems) {
  const std::vector<AdapterInfo> list = reg.list();
  if (list.size() > static_cast<size_t>(kRaceNames)) problems.add("list() has " + std::to_string(list.size()) + " entries");
  for (size_t i = 0; i < list.size(); ++i) {
    const AdapterInfo& info = list[i];
    if (i > 0 && !(list[i - 1].name < info.name)) problems.add("list() not strictly sorted at '" + info.name + "'");
    int n = -1;
    for (int k = 0; k < kRaceNames; ++k) n = info.name == race_name(k) ? k : n;
    const int v = n < 0 ? -1 : ad.version_of(n, info.source);
    if (v < 0) {
      problems.add("list() names an unknown adapter '" + info.name + "' from '" + info.source + "'");
      continue;
    }
    if (info.identity != ad.ref[n][v]->identity() || info.num_bytes != ad.bytes ||
        info.num_modules != 2 * kRaceLayers || info.max_rank != kRaceRank) {
      problems.add("list() entry for '" + info.name + "' does not match its version");
    }
  }
  const size_t size = reg.size();
  const int64_t bytes = reg.num_bytes();
  if (size > static_cast<size_t>(kRaceNames)) problems.add("size() is " + std::to_string(size));
  if (bytes % ad.bytes != 0 || bytes / ad.bytes > kRaceNames) problems.add("num_bytes() is " + std::to_string(bytes));
}

// While this thread pins a stable name, nobody may unload or replace it: the registry keeps
// handing out this very adapter, refuses to unload it and lists it as in use.
void check_pin_holds(AdapterRegistry& reg, const std::shared_ptr<const Adapter>& pin, int n, Problems& problems) {
  const std::string name = race_name(n);
  const UnloadResult r = reg.unload(name);
  if (r.status != UnloadStatus::kInUse) problems.add(name + " was unloadable while pinned: " + r.message);
  if (reg.acquire(name) != pin) problems.add(name + " was unloaded or replaced while pinned");
  for (const AdapterInfo& info : reg.list()) {
    if (info.name == name && !info.in_use) problems.add(name + " listed as not in use while pinned");
  }
}

struct RaceCounts {
  int64_t cycles = 0, replaces = 0, loads = 0, load_refusals = 0, unloads = 0, unload_refusals = 0, not_found = 0;
  int64_t pins = 0, misses = 0, stable_pin_checks = 0;
  void add(const RaceCounts& o) {
    cycles += o.cycles, replaces += o.replaces, loads += o.loads, load_refusals += o.load_refusals;
    unloads += o.unloads, unload_refusals += o.unload_refusals, not_found += o.not_found;
    pins += o.pins, misses += o.misses, stable_pin_checks += o.stable_pin_checks;
  }
};

// The four racing threads share two cores with the generating one: a short sleep per
// cycle leaves it CPU time while the cycles still interleave thousands of times a second.
void pause_between_cycles() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

// Intra-op threads of torch, one for the test's duration: OpenMP's barriers stall whenever
// a worker is preempted, and on a busy machine (the racing threads, parallel builds) that
// made each generation several times slower.
class OneTorchThread {
 public:
  OneTorchThread() : saved_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneTorchThread() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

// Loads, replaces (never a stable name), unloads and checks the views, at random.
void churn(AdapterRegistry& reg, const RaceAdapters& ad, unsigned seed, const std::atomic<bool>& stop,
           Problems& problems, RaceCounts& c) {
  std::mt19937 rng(seed);
  while (!stop.load(std::memory_order_relaxed) || c.cycles < kMinCyclesPerThread) {
    const int n = static_cast<int>(rng() % kRaceNames), v = static_cast<int>(rng() % kRaceVersions);
    // Loading takes far longer than unloading: few unloads keep most names loaded.
    const unsigned op = rng() % 8;
    if (op <= 2 && !is_stable(n)) {
      reg.load(race_name(n), ad.path[n][v], /*replace=*/true);
      ++c.replaces;
    } else if (op <= 4) {
      try {
        reg.load(race_name(n), ad.path[n][v]);
        ++c.loads;
      } catch (const ConfigError&) {
        ++c.load_refusals;  // the name is loaded
      }
    } else if (op == 5) {
      const UnloadStatus s = reg.unload(race_name(n)).status;
      ++(s == UnloadStatus::kUnloaded ? c.unloads : s == UnloadStatus::kInUse ? c.unload_refusals : c.not_found);
    } else {
      check_views(reg, ad, problems);
    }
    ++c.cycles;
    pause_between_cycles();
  }
}

// Holds up to three pins at a time, checks each acquired adapter, and checks again when
// releasing it (a pin keeps its adapter intact across other threads' replaces).
void pin(AdapterRegistry& reg, const RaceAdapters& ad, unsigned seed, const std::atomic<bool>& stop,
         Problems& problems, RaceCounts& c) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int, std::shared_ptr<const Adapter>>> pins;
  while (!stop.load(std::memory_order_relaxed) || c.cycles < kMinCyclesPerThread) {
    const int n = static_cast<int>(rng() % kRaceNames);
    if (std::shared_ptr<const Adapter> p = reg.acquire(race_name(n))) {
      ++c.pins;
      check_adapter(*p, n, ad, problems);
      pins.emplace_back(n, std::move(p));
    } else {
      ++c.misses;
      std::this_thread::yield();  // let a loader bring it back
    }
    if (!pins.empty()) {
      const auto& [held, p] = pins[rng() % pins.size()];
      if (is_stable(held)) {
        check_pin_holds(reg, p, held, problems);
        ++c.stable_pin_checks;
      }
    }
    if (pins.size() > 3 || (!pins.empty() && rng() % 2 == 0)) {
      const size_t i = rng() % pins.size();
      check_adapter(*pins[i].second, pins[i].first, ad, problems);
      pins.erase(pins.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ++c.cycles;
    pause_between_cycles();
  }
}

runtime::GenerationRequest race_request() {
  runtime::GenerationRequest req;
  req.prompt = {1, 9690, 198, 2683, 359, 253};
  req.max_tokens = 3;
  return req;
}

// Two threads load, replace and unload, two acquire and hold pins, while this thread
// acquires adapters, generates with them and releases them. Without the registry's lock
// this fails an invariant or crashes (and ThreadSanitizer reports the race).
TEST(AdapterRegistry, ConcurrentLoadReplaceUnloadAndPinsWhileGenerating) {
  const std::string model_path = testing::test_setting("LORAKV_MODEL");
  ASSERT_FALSE(model_path.empty());
  auto file = formats::GgufFile::open(model_path);
  std::unique_ptr<runtime::LlamaModel> model = runtime::LlamaModel::from_gguf(*file);
  const OneTorchThread one_torch_thread;
  const auto setup_start = std::chrono::steady_clock::now();
  RaceAdapters ad;
  std::set<std::vector<int32_t>> distinct;
  for (int n = 0; n < kRaceNames; ++n) {
    for (int v = 0; v < kRaceVersions; ++v) {
      ad.path[n][v] = write_race_adapter(model->adapter_shape(), n, v);
      ad.ref[n][v] = load_adapter(race_name(n), ad.path[n][v], model->adapter_shape(), {model->dtype()});
      runtime::GenerationRequest req = race_request();
      req.adapter = ad.ref[n][v];
      ad.tokens[n][v] = runtime::generate(*model, nullptr, {req})[0].tokens;
      distinct.insert(ad.tokens[n][v]);
    }
  }
  ad.bytes = ad.ref[0][0]->num_bytes();
  AdapterRegistry reg(model->adapter_shape(), model->dtype());
  for (int n = 0; n < kRaceNames; ++n) reg.load(race_name(n), ad.path[n][0]);

  const auto race_start = std::chrono::steady_clock::now();
  const double setup_s = std::chrono::duration<double>(race_start - setup_start).count();
  Problems problems;
  std::atomic<bool> stop{false};
  RaceCounts counts[4];
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] { churn(reg, ad, 11 + t, stop, problems, counts[t]); });
    threads.emplace_back([&, t] { pin(reg, ad, 21 + t, stop, problems, counts[2 + t]); });
  }
  for (int generated = 0; generated < kRaceGenerations; ++generated) {
    const int n = generated % kRaceNames;
    runtime::GenerationRequest req = race_request();
    while ((req.adapter = reg.acquire(race_name(n))) == nullptr) {  // unloaded just now: load it again
      try {
        reg.load(race_name(n), ad.path[n][0]);
      } catch (const ConfigError&) {  // someone else did
      }
    }
    check_adapter(*req.adapter, n, ad, problems);
    const int v = std::max(0, ad.version_of(n, req.adapter->source()));
    if (runtime::generate(*model, nullptr, {req})[0].tokens != ad.tokens[n][v]) {
      problems.add("generation with " + race_name(n) + " version " + std::to_string(v) + " gave other tokens");
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  const double race_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - race_start).count();
  RaceCounts total;
  for (const RaceCounts& c : counts) total.add(c);

  EXPECT_EQ(problems.count(), 0u) << problems.summary();
  // Quiet now: the three views agree.
  const std::vector<AdapterInfo> list = reg.list();
  EXPECT_EQ(list.size(), reg.size());
  EXPECT_EQ(reg.num_bytes(), static_cast<int64_t>(list.size()) * ad.bytes);
  // The race really mixed every kind of operation.
  EXPECT_GT(total.replaces, 0);
  EXPECT_GT(total.loads, 0);
  EXPECT_GT(total.load_refusals, 0);
  EXPECT_GT(total.unloads, 0);
  EXPECT_GT(total.unload_refusals, 0);
  EXPECT_GT(total.misses, 0);
  EXPECT_GT(total.stable_pin_checks, 0);
  std::printf("  setup %.1f s, race %.1f s: %d generations (%zu distinct token sequences over %d versions) beside %lld churn/pin cycles: "
              "%lld replaces, %lld loads (%lld refused), %lld unloads (%lld refused in use), %lld pins "
              "(%lld misses), %lld stable-pin checks\n",
              setup_s, race_s, kRaceGenerations, distinct.size(), kRaceNames * kRaceVersions, static_cast<long long>(total.cycles),
              static_cast<long long>(total.replaces), static_cast<long long>(total.loads),
              static_cast<long long>(total.load_refusals), static_cast<long long>(total.unloads),
              static_cast<long long>(total.unload_refusals), static_cast<long long>(total.pins),
              static_cast<long long>(total.misses), static_cast<long long>(total.stable_pin_checks));
}

}  // namespace
}  // namespace lorakv::adapters
