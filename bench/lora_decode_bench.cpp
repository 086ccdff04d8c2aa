// bench/lora_decode_bench.cpp: LoRA decode overhead. A batch of 8 sequences decodes with
// (a) no adapter, (b) one rank-8 adapter for all, (c) eight different rank-8 adapters
// (mixed batch); tokens/s and the ratio to (a). PEFT (transformers) does the same in the
// same run through tools/peft_decode_bench.py, which also creates the adapters once.
// Prints machine, model, sizes, dtype and device; writes CSV (default
// <build>/bench_results/lora_decode.csv).
//
// usage: lorakv_lora_decode_bench [--model FILE] [--adapters-dir DIR] [--steps N]
//        [--prompt-tokens N] [--repeats N] [--targets all-linear|qkvo] [--out CSV] [--python PY] [--no-peft]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/formats/gguf_file.h"
#include "lorakv/formats/json.h"
#include "lorakv/runtime/llama_model.h"

namespace {

using namespace lorakv;

constexpr int kBatch = 8;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Runs a helper with an argument vector (no shell) and returns its stdout.
std::string run_command(const std::vector<std::string>& argv) {
  lorakv::ProcessOptions capture;
  capture.capture_output = true;
  const lorakv::ProcessResult r = lorakv::run_process(argv, capture);
  if (r.exit_code != 0) std::cerr << "command failed: " << lorakv::describe_command(argv) << "\n";
  return r.output;
}

// Seconds for `steps` decode steps of the batch after a prefill and two warm-up steps.
double time_decode(const runtime::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                   const std::vector<const adapters::Adapter*>& adapters, int steps) {
  std::unique_ptr<runtime::KvCache> cache = model.make_cache();
  std::vector<runtime::SequenceInput> batch;
  for (int i = 0; i < kBatch; ++i) batch.push_back({SeqId(i), prompts[static_cast<size_t>(i)], adapters[static_cast<size_t>(i)]});
  at::Tensor logits = model.forward(batch, *cache);
  auto step = [&] {
    at::Tensor next = logits.argmax(-1);  // int64 [batch]
    for (int i = 0; i < kBatch; ++i) batch[static_cast<size_t>(i)].tokens = {static_cast<int32_t>(next[i].item<int64_t>())};
    logits = model.forward(batch, *cache);
  };
  for (int w = 0; w < 2; ++w) step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string src = LORAKV_BENCH_SOURCE_DIR;
  std::map<std::string, std::string> opt = {
      {"--model", src + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"},
      {"--adapters-dir", LORAKV_BENCH_RESULTS_DIR "/lora_decode_adapters"},
      {"--steps", "16"},
      {"--repeats", "3"},
      {"--prompt-tokens", "32"},
      {"--out", LORAKV_BENCH_RESULTS_DIR "/lora_decode.csv"},
      {"--python", src + "/.venv/bin/python"},
      {"--targets", "all-linear"},
  };
  bool peft = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-peft") {
      peft = false;
    } else if (opt.count(a) && i + 1 < argc) {
      opt[a] = argv[++i];
    } else {
      std::cerr << "unknown or incomplete flag " << a << "\n";
      return 2;
    }
  }
  const int steps = std::stoi(opt["--steps"]), prompt_tokens = std::stoi(opt["--prompt-tokens"]);
  const int repeats = std::stoi(opt["--repeats"]);
  try {
    std::vector<std::string> py = {opt["--python"], src + "/tools/peft_decode_bench.py", "--model", opt["--model"],
                                   "--adapters-dir", opt["--adapters-dir"], "--steps", opt["--steps"],
                                   "--prompt-tokens", opt["--prompt-tokens"], "--targets", opt["--targets"],
                                   "--repeats", opt["--repeats"], "--threads", std::to_string(at::get_num_threads())};
    // The PEFT script creates the adapters when they do not exist yet.
    std::map<std::string, double> peft_tps;
    if (peft) {
      std::istringstream lines(run_command(py));
      for (std::string line; std::getline(lines, line);) {
        if (line.empty() || line[0] != '{') continue;
        const formats::JsonValue v = formats::parse_json(line);
        peft_tps[v.at("scenario").as_string()] = v.at("tokens_per_s").as_double();
      }
    } else {
      py.push_back("--create-only");
      run_command(py);
    }

    auto file = formats::GgufFile::open(opt["--model"]);
    std::unique_ptr<runtime::LlamaModel> model = runtime::LlamaModel::from_gguf(*file);
    adapters::AdapterRegistry registry(model->adapter_shape(), model->dtype());
    std::vector<std::shared_ptr<const adapters::Adapter>> loaded;
    for (int i = 0; i < 8; ++i) {
      loaded.push_back(registry.load("adapter_" + std::to_string(i), opt["--adapters-dir"] + "/adapter_" + std::to_string(i)));
    }
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> prompts(kBatch);
    for (auto& p : prompts) {
      for (int t = 0; t < prompt_tokens; ++t) p.push_back(static_cast<int32_t>(100 + rng() % 39900));
    }
    const std::vector<std::pair<std::string, std::vector<const adapters::Adapter*>>> scenarios = {
        {"base", std::vector<const adapters::Adapter*>(kBatch, nullptr)},
        {"one_adapter", std::vector<const adapters::Adapter*>(kBatch, loaded[0].get())},
        {"eight_adapters", {loaded[0].get(), loaded[1].get(), loaded[2].get(), loaded[3].get(), loaded[4].get(),
                            loaded[5].get(), loaded[6].get(), loaded[7].get()}},
    };
    const std::string machine = cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores, " +
                                std::to_string(at::get_num_threads()) + " torch threads";
    std::printf("machine: %s\nmodel: %s (%s), batch %d, prompt %d tokens, %d decode steps (best of %d), adapters rank "
                "8 on %s (%lld bytes each), dtype float32, device cpu\n",
                machine.c_str(), opt["--model"].c_str(), model->config().name.c_str(), kBatch, prompt_tokens, steps, repeats,
                opt["--targets"].c_str(), static_cast<long long>(loaded[0]->num_bytes()));
    std::ofstream csv(opt["--out"]);
    csv << "impl,scenario,batch,rank,targets,prompt_tokens,decode_steps,tokens_per_s,overhead_vs_base,dtype,device,machine\n";
    // Scenarios interleaved, each repeated; the best run counts (the machine is shared, and
    // interference only ever slows a run down).
    std::map<std::string, double> ours;
    for (int r = 0; r < repeats; ++r) {
      for (const auto& [name, adapters] : scenarios) {
        ours[name] = std::max(ours[name], kBatch * steps / time_decode(*model, prompts, adapters, steps));
      }
    }
    for (const auto& [impl, tps] : std::vector<std::pair<std::string, std::map<std::string, double>>>{{"lorakv", ours},
                                                                                                      {"peft", peft_tps}}) {
      for (const auto& [name, adapters] : scenarios) {
        if (!tps.count(name)) continue;
        const double overhead = tps.at("base") / tps.at(name);
        std::printf("%-7s %-15s %8.1f tokens/s  overhead %.3fx\n", impl.c_str(), name.c_str(), tps.at(name), overhead);
        csv << impl << "," << name << "," << kBatch << ",8," << opt["--targets"] << "," << prompt_tokens << "," << steps
            << "," << tps.at(name) << "," << overhead << ",float32,cpu,\"" << machine << "\"\n";
      }
    }
    std::printf("wrote %s\n", opt["--out"].c_str());
  } catch (const std::exception& e) {
    std::cerr << "lora_decode_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
