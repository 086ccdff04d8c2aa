// cli/bench/bench_workload.cpp: what `lorakv bench memory` runs on: the model, the trained role
// adapters, synthetic shared-A agents beyond three, and held-out trajectories as real text.
#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"
#include "lorakv/formats/json.h"

namespace lorakv::cli {

namespace {

const auto kStart = std::chrono::steady_clock::now();

std::vector<BenchTrajectory> read_trajectories(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw ConfigError("cannot read the held-out trajectories", {path, "", "the agentic QA test split", "no file",
                                                                "pass --assets DIR (the repository's assets/)"});
  }
  std::vector<BenchTrajectory> out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    formats::JsonParseOptions po;
    po.source = path + " line " + std::to_string(line_no);
    const formats::JsonValue rec = formats::parse_json(line, po);
    BenchTrajectory t;
    t.id = rec.at("id").as_string();
    for (const formats::JsonValue& turn : rec.at("turns").as_array()) {
      t.turns.push_back({turn.at("role").as_string(), turn.at("text").as_string()});
    }
    out.push_back(std::move(t));
  }
  if (out.empty()) throw ConfigError("no trajectories in the test split", {path, "", "jsonl records", "none", ""});
  return out;
}

}  // namespace

double bench_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
}

BenchWorkload load_workload(const MemoryBenchOptions& o, std::ostream& log) {
  BenchWorkload w;
  w.model_path = o.model_path;
  w.loaded = runtime::load_model(o.model_path);
  if (!w.loaded.tokenizer) throw ConfigError("the benchmark needs a model with a tokenizer", {o.model_path, "", "", "", ""});
  w.registry = std::make_unique<adapters::AdapterRegistry>(w.model().adapter_shape(), w.model().dtype());
  for (const char* role : {"planner", "actor", "reflector"}) {
    const std::string dir = o.assets_dir + "/role_adapters/";
    w.all_linear.push_back(w.registry->load(std::string("all_linear.") + role, dir + "all_linear/" + role));
    w.shared_a.push_back(w.registry->load(std::string("qv_shared_a.") + role, dir + "qv_shared_a/" + role));
  }
  w.held_out = read_trajectories(o.assets_dir + "/agentic_qa/test.jsonl");
  const std::vector<int32_t> end = w.encode("<|im_end|>");
  LORAKV_CHECK(end.size() == 1, ConfigError, "the tokenizer has no <|im_end|> token");
  w.im_end = end[0];
  log << "workload: " << w.held_out.size() << " held-out trajectories, role adapters all_linear (q k v o gate up down, r 8) "
      << "and qv_shared_a (q v, shared A, r 8)\n";
  return w;
}

const runtime::LlamaModel& BenchWorkload::dense_model() {
  if (!dense) dense = std::move(runtime::load_model(model_path, at::kFloat, runtime::WeightForm::kFloat32).model);
  return *dense;
}

std::vector<int32_t> BenchWorkload::real_text(int64_t tokens) const {
  std::vector<int32_t> out;
  for (size_t i = 0; static_cast<int64_t>(out.size()) < tokens; ++i) {
    const BenchTrajectory& t = held_out[i % held_out.size()];
    std::string text;
    for (const BenchTurn& turn : t.turns) text += "<|im_start|>" + turn.role + "\n" + turn.text + "<|im_end|>\n";
    const std::vector<int32_t> ids = encode(text);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  out.resize(static_cast<size_t>(tokens));
  return out;
}

std::vector<AdapterPtr> BenchWorkload::shared_a_agents(int64_t n) {
  std::vector<AdapterPtr> out(shared_a.begin(), shared_a.begin() + std::min<int64_t>(n, 3));
  const adapters::Adapter& first = *shared_a.front();
  for (int64_t i = static_cast<int64_t>(out.size()); i < n; ++i) {
    const std::string name = "synthetic_shared_a." + std::to_string(i);
    if (AdapterPtr known = registry->acquire(name)) {
      out.push_back(known);
      continue;
    }
    at::manual_seed(static_cast<uint64_t>(1000 + i));
    std::vector<adapters::LoraModule> modules;
    for (const adapters::LoraModule& m : first.modules()) {
      // B: Gaussian, scaled to the trained adapters' mean Frobenius norm at this (layer, module).
      double norm = 0;
      for (const AdapterPtr& a : shared_a) norm += a->find(m.layer, m.module)->b.to(at::kFloat).norm().item<double>();
      norm /= static_cast<double>(shared_a.size());
      at::Tensor b = at::randn(m.b.sizes(), at::kFloat);
      b = b * (norm / b.norm().item<double>());
      modules.push_back(adapters::make_lora_module(first.base_shape(), m.layer, m.module, m.a.to(at::kFloat), b,
                                                   static_cast<double>(m.rank), 1.0, m.a.scalar_type(), name, ""));
    }
    out.push_back(registry->add(std::make_shared<adapters::Adapter>(name, "synthetic", adapters::AdapterFormat::kPeft,
                                                                    first.base_shape(), std::move(modules))));
  }
  return out;
}

namespace {

// `standard`'s factors under `name`, activated by `header`'s tokens; registered once.
AdapterPtr alora_twin(BenchWorkload& w, const AdapterPtr& standard, const std::string& name, const std::string& header) {
  if (AdapterPtr known = w.registry->acquire(name)) return known;
  return w.registry->add(std::make_shared<adapters::Adapter>(name, "alora twin of " + standard->name(),
                                                             adapters::AdapterFormat::kPeft, standard->base_shape(),
                                                             standard->modules(), w.encode(header)));
}

}  // namespace

std::vector<AdapterPtr> BenchWorkload::alora_agents(int64_t n, const std::string& role) {
  const std::vector<AdapterPtr> standard = shared_a_agents(n);
  std::vector<AdapterPtr> out;
  for (int64_t i = 0; i < n; ++i) {
    const std::string turn = role.empty() ? "agent" + std::to_string(i) : role;
    out.push_back(alora_twin(*this, standard[static_cast<size_t>(i)], "alora." + turn + "." + std::to_string(i),
                             "<|im_start|>" + turn + "\n"));
  }
  return out;
}

std::vector<AdapterPtr> BenchWorkload::alora_roles() {
  std::vector<AdapterPtr> out;
  const char* roles[] = {"planner", "actor", "reflector"};
  for (size_t i = 0; i < 3; ++i) {
    out.push_back(alora_twin(*this, all_linear[i], std::string("alora.") + roles[i], std::string("<|im_start|>") + roles[i] + "\n"));
  }
  return out;
}

}  // namespace lorakv::cli
