// bench/generate_bench.cpp: CPU prefill and decode throughput of lorakv's forward pass
// next to Hugging Face transformers on the same model, prompt ids, dtype and thread count,
// measured in one run (bench/hf_generate_bench.py is the transformers side; this program
// runs it and reads its CSV back).
//
// Metrics (tokens per second, median of --reps timed runs after --warmup untimed ones):
//   prefill_512       one forward over a fresh 512-token prompt
//   decode_b1         blocks of --decode-tokens greedy steps of 1 sequence after its
//                     512-token prompt (one prefill, then warmup + reps consecutive blocks)
//   decode_b8         the same for 8 sequences (8 different 512-token prompts) in one batch
// Decode timing excludes the prompt's forward (which yields the first token); each timed
// step is a one-token forward per sequence over the KV cache plus the argmax, both sides.
//
// usage: generate_bench --model FILE [--python PATH] [--threads N] [--prompt-tokens 512]
//                       [--decode-tokens 32] [--reps 5] [--warmup 1] [--csv FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "common/logging.h"
#include "runtime/loaded_model.h"

namespace {

using lorakv::runtime::LlamaModel;
using lorakv::runtime::SequenceInput;

struct Options {
  std::string model;
  std::string python;  // empty: lorakv only
  std::string script = LORAKV_SOURCE_DIR "/bench/hf_generate_bench.py";
  std::string csv = LORAKV_BENCH_RESULTS_DIR "/generate_cpu.csv";  // the build folder unless --csv
  int threads = 0;  // 0: libtorch's default
  int prompt_tokens = 512;
  int decode_tokens = 32;
  int batch = 8;
  int reps = 5;
  int warmup = 1;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::printf("usage: generate_bench --model FILE [--python PATH] [--script FILE] [--threads N]\n"
                  "       [--prompt-tokens 512] [--decode-tokens 32] [--batch 8] [--reps 5] [--warmup 1]\n"
                  "       [--csv FILE]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw lorakv::ConfigError("missing value", {"", flag, "a value", "nothing", ""});
    const std::string v = argv[++i];
    if (flag == "--model") o.model = v;
    else if (flag == "--python") o.python = v;
    else if (flag == "--script") o.script = v;
    else if (flag == "--csv") o.csv = v;
    else if (flag == "--threads") o.threads = std::stoi(v);
    else if (flag == "--prompt-tokens") o.prompt_tokens = std::stoi(v);
    else if (flag == "--decode-tokens") o.decode_tokens = std::stoi(v);
    else if (flag == "--batch") o.batch = std::stoi(v);
    else if (flag == "--reps") o.reps = std::stoi(v);
    else if (flag == "--warmup") o.warmup = std::stoi(v);
    else throw lorakv::ConfigError("unknown flag", {"", flag, "see --help", "", ""});
  }
  if (o.model.empty()) throw lorakv::ConfigError("--model is required", {"", "--model", "a GGUF file", "nothing", ""});
  return o;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// `batch` prompts of exactly `n` tokens: windows of one long deterministic text.
std::vector<std::vector<int32_t>> make_prompts(const lorakv::formats::BpeTokenizer& tok, int n, int batch) {
  std::string text;
  const char* topics[] = {"rivers",    "bridges",  "markets", "railways",
                          "libraries", "harbours", "gardens", "observatories"};
  for (int i = 0; static_cast<int>(tok.encode(text).size()) < n + 64 * batch; ++i) {
    text += "Field note " + std::to_string(i + 1) + ": the town's " + topics[i % 8] + " were surveyed at " +
            std::to_string(7 + i % 12) + ":" + std::to_string(10 + (13 * i) % 50) + ", covering " +
            std::to_string(120 + 37 * i) + " km and " + std::to_string(3 * i + 2) +
            " sites; the engineer noted that maintenance every " + std::to_string(6 + i % 3) +
            " years keeps costs low.\n";
  }
  const std::vector<int32_t> ids = tok.encode(text);
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < batch; ++b) prompts.emplace_back(ids.begin() + 64 * b, ids.begin() + 64 * b + n);
  return prompts;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs `body` warmup + reps times; returns the median of the timed runs' seconds.
template <typename Body>
double time_median(const Options& o, Body body) {
  std::vector<double> seconds;
  for (int r = 0; r < o.warmup + o.reps; ++r) {
    const double s = body();
    if (r >= o.warmup) seconds.push_back(s);
  }
  return median(seconds);
}

double prefill_seconds(const LlamaModel& model, const std::vector<int32_t>& prompt) {
  auto cache = model.make_cache();
  lorakv::log::Stopwatch watch;
  const at::Tensor logits = model.forward({{lorakv::SeqId(0), prompt}}, *cache);
  (void)logits.argmax().item<int64_t>();
  return watch.seconds();
}

// Prefills every prompt once (untimed; it yields the first token), then times
// warmup + reps consecutive blocks of `steps` greedy one-token steps of the whole batch
// (the context grows by `steps` per block). Returns the median block's seconds; `tokens`
// receives the first sequence's greedy ids of the prefill and the first block.
double decode_seconds(const Options& o, const LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                      std::vector<int32_t>* tokens) {
  auto cache = model.make_cache();
  std::vector<SequenceInput> batch;
  for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({lorakv::SeqId(static_cast<int64_t>(i)), prompts[i]});
  at::Tensor next = model.forward(batch, *cache).argmax(1);  // int64 [B]
  if (tokens) tokens->assign(1, static_cast<int32_t>(next[0].item<int64_t>()));
  return time_median(o, [&] {
    lorakv::log::Stopwatch watch;
    for (int s = 0; s < o.decode_tokens; ++s) {
      const at::Tensor ids = next.contiguous();
      const int64_t* p = ids.data_ptr<int64_t>();
      for (size_t i = 0; i < batch.size(); ++i) batch[i].tokens = {static_cast<int32_t>(p[i])};
      next = model.forward(batch, *cache).argmax(1);
      if (tokens && static_cast<int>(tokens->size()) <= o.decode_tokens) {
        tokens->push_back(static_cast<int32_t>(next[0].item<int64_t>()));
      }
    }
    return watch.seconds();
  });
}

// metric -> value rows of the transformers side's CSV ("metric,value").
std::map<std::string, std::string> run_python(const Options& o, const std::vector<std::vector<int32_t>>& prompts,
                                              int threads) {
  // Scratch files outside the results folder, so they never end up next to the CSV.
  const std::string base =
      (std::filesystem::temp_directory_path() / ("lorakv_generate_bench_" + std::to_string(::getpid()))).string();
  const std::string ids_path = base + ".ids.txt", out_path = base + ".hf.csv";
  {
    std::ofstream ids(ids_path);
    for (const auto& p : prompts) {
      for (size_t i = 0; i < p.size(); ++i) ids << (i ? " " : "") << p[i];
      ids << "\n";
    }
  }
  std::ostringstream cmd;
  cmd << "'" << o.python << "' '" << o.script << "' --model '" << o.model << "' --ids '" << ids_path
      << "' --threads " << threads << " --decode-tokens " << o.decode_tokens << " --reps " << o.reps
      << " --warmup " << o.warmup << " --out '" << out_path << "'";
  std::printf("running transformers: %s\n", cmd.str().c_str());
  std::fflush(stdout);
  if (std::system(cmd.str().c_str()) != 0) {
    throw lorakv::ConfigError("the transformers benchmark failed", {o.script, "", "exit code 0", "non-zero", ""});
  }
  std::map<std::string, std::string> rows;
  std::ifstream f(out_path);
  for (std::string line; std::getline(f, line);) {
    const size_t comma = line.find(',');
    if (comma != std::string::npos) rows[line.substr(0, comma)] = line.substr(comma + 1);
  }
  std::remove(ids_path.c_str());
  std::remove(out_path.c_str());
  return rows;
}

int run(const Options& o) {
  if (o.threads > 0) at::set_num_threads(o.threads);
  const int threads = at::get_num_threads();
  lorakv::log::set_level(lorakv::log::Level::kWarn);
  lorakv::runtime::LoadedModel loaded = lorakv::runtime::load_model(o.model, at::kFloat);
  const LlamaModel& model = *loaded.model;
  const auto& c = model.config();
  const auto prompts = make_prompts(*loaded.tokenizer, o.prompt_tokens, o.batch);

  std::printf("machine: %s, %u logical cores, torch threads %d\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), threads);
  std::printf("model: %s (%s '%s'), %lld layers, hidden %lld, heads %lld/%lld, vocab %lld\n", o.model.c_str(),
              c.architecture.c_str(), c.name.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_dim), static_cast<long long>(c.num_heads),
              static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.vocab_size));
  std::printf("dtype float32, device cpu; prompt %d tokens, decode %d tokens, batch 1 and %d; median of %d "
              "(warm-up %d)\n",
              o.prompt_tokens, o.decode_tokens, o.batch, o.reps, o.warmup);
  std::fflush(stdout);

  std::map<std::string, double> ours;
  const std::string prefill_name = "prefill_" + std::to_string(o.prompt_tokens) + "_tok_s";
  const std::string b1_name = "decode_b1_tok_s", bn_name = "decode_b" + std::to_string(o.batch) + "_tok_s";
  ours[prefill_name] = o.prompt_tokens / time_median(o, [&] { return prefill_seconds(model, prompts[0]); });
  std::vector<int32_t> greedy;
  const int steps = o.decode_tokens;
  ours[b1_name] = steps / decode_seconds(o, model, {prompts[0]}, &greedy);
  ours[bn_name] = o.batch * steps / decode_seconds(o, model, prompts, nullptr);

  for (const auto& [name, value] : ours) std::printf("lorakv %s = %.2f\n", name.c_str(), value);
  std::fflush(stdout);

  std::map<std::string, std::string> hf;
  if (!o.python.empty()) hf = run_python(o, prompts, threads);

  std::ofstream csv(o.csv);
  csv << "metric,lorakv,transformers,ratio\n";
  std::printf("\n%-22s %12s %14s %8s\n", "metric", "lorakv", "transformers", "ratio");
  for (const std::string& name : {prefill_name, b1_name, bn_name}) {
    const double a = ours[name];
    const double b = hf.count(name) ? std::stod(hf[name]) : 0.0;
    char line[160];
    if (b > 0) {
      std::snprintf(line, sizeof line, "%-22s %12.1f %14.1f %8.2f", name.c_str(), a, b, a / b);
      csv << name << "," << a << "," << b << "," << a / b << "\n";
    } else {
      std::snprintf(line, sizeof line, "%-22s %12.1f %14s %8s", name.c_str(), a, "n/a", "n/a");
      csv << name << "," << a << ",,\n";
    }
    std::printf("%s\n", line);
  }
  if (hf.count("decode_b1_ids")) {
    std::ostringstream ids;
    for (size_t i = 0; i < greedy.size(); ++i) ids << (i ? " " : "") << greedy[i];
    const bool same = ids.str() == hf["decode_b1_ids"];
    std::printf("greedy tokens of batch 1 (%zu): %s\n", greedy.size(),
                same ? "identical on both sides" : "DIFFER between the two sides");
  }
  std::printf("ratio = lorakv / transformers tokens per second (> 1: lorakv faster); wrote %s\n", o.csv.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate_bench: %s\n", e.what());
    return 2;
  }
}
