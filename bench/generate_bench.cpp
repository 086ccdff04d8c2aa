// bench/generate_bench.cpp: CPU prefill and decode throughput of lorakv's forward pass, for
// each way it keeps the weights (native 4/8-bit blocks, bfloat16, float32), next to
// llama.cpp (llama-cpp-python built for this CPU, timed around its eval loop) and transformers
// (float32) on the same GGUF file, prompt ids and thread count, in one run. The reference
// sides stay loaded in their own processes (bench/generate_side.py) and every repetition
// runs each side once, in an order rotated per repetition, so drift in the machine's load
// falls on all sides alike.
//
// Metrics (tokens per second; median, min and max over --reps repetitions after one warm-up):
//   prefill_<N>       one forward over a fresh N-token prompt
//   decode_b1         --decode-tokens greedy steps of 1 sequence after its N-token prompt
//                     (the prompt's forward, which yields the first token, is not timed)
//   decode_b<B>       the same for B sequences with B different prompts; lorakv and
//                     transformers decode them as one batch, llama.cpp one after another
//   decode_b<B>_lora  lorakv only: the B sequences with B different rank-8 adapters on all
//                     seven projections (made once by tools/peft_decode_bench.py)
// With each decode figure: the bytes of weights one step reads, the machine's streaming-read
// bandwidth (measured here), the rate that bandwidth allows (bandwidth / bytes per step,
// times B) and the share of it reached, and GFLOP/s (2 x parameters per token).
//
// usage: generate_bench --model FILE [--python PY] [--llama-python PY] [--threads N]
//          [--prompt-tokens 512] [--decode-tokens 32] [--batch 8] [--reps 5]
//          [--sides lorakv_native,lorakv_native_int8,lorakv_native_bf16,lorakv_bfloat16,lorakv_float32,llama_cpp,transformers]
// (lorakv_native_bf16: native weights with bfloat16 activations; lorakv_native_int8: native
// weights, the decode GEMV with int8 activations and integer dot products (kernels/
// quant_matrix.h; prefill's GEMM is float32 as in lorakv_native); lorakv_native: the same
// with float32 activations throughout; the other lorakv sides compute in float32)
//          [--adapters-dir DIR] [--csv FILE] [--png FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "bench_common.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/common/logging.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/kernels/quant_matrix.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/loaded_model.h"

namespace {

using lorakv::runtime::LlamaModel;
using lorakv::runtime::SequenceInput;
using lorakv::runtime::WeightForm;

struct Options {
  std::string model;
  std::string python;        // the test environment's Python (transformers, peft)
  std::string llama_python;  // the benchmark environment's Python (llama.cpp built for this CPU)
  std::string sides =
      "lorakv_native,lorakv_native_int8,lorakv_native_bf16,lorakv_bfloat16,lorakv_float32,llama_cpp,transformers";
  std::string adapters_dir = LORAKV_BENCH_RESULTS_DIR "/generate_adapters";
  std::string csv = LORAKV_BENCH_RESULTS_DIR "/generate_cpu.csv";
  std::string png;  // default: the CSV's name with .png
  int threads = 0;  // 0: libtorch's default
  int prompt_tokens = 512;
  int decode_tokens = 32;
  int batch = 8;
  int reps = 5;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::printf("usage: generate_bench --model FILE [--python PY] [--llama-python PY] [--threads N]\n"
                  "       [--prompt-tokens 512] [--decode-tokens 32] [--batch 8] [--reps 5] [--sides LIST]\n"
                  "       [--adapters-dir DIR] [--csv FILE] [--png FILE]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw lorakv::ConfigError("missing value", {"", flag, "a value", "nothing", ""});
    const std::string v = argv[++i];
    if (flag == "--model") o.model = v;
    else if (flag == "--python") o.python = v;
    else if (flag == "--llama-python") o.llama_python = v;
    else if (flag == "--sides") o.sides = v;
    else if (flag == "--adapters-dir") o.adapters_dir = v;
    else if (flag == "--csv") o.csv = v;
    else if (flag == "--png") o.png = v;
    else if (flag == "--threads") o.threads = std::stoi(v);
    else if (flag == "--prompt-tokens") o.prompt_tokens = std::stoi(v);
    else if (flag == "--decode-tokens") o.decode_tokens = std::stoi(v);
    else if (flag == "--batch") o.batch = std::stoi(v);
    else if (flag == "--reps") o.reps = std::stoi(v);
    else throw lorakv::ConfigError("unknown flag", {"", flag, "see --help", "", ""});
  }
  if (o.model.empty()) throw lorakv::ConfigError("--model is required", {"", "--model", "a GGUF file", "nothing", ""});
  if (o.png.empty()) o.png = std::filesystem::path(o.csv).replace_extension(".png").string();
  return o;
}

bool wanted(const Options& o, const std::string& side) { return ("," + o.sides + ",").find("," + side + ",") != std::string::npos; }

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

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One decode measurement: seconds of the timed steps and sequence 0's greedy ids.
struct DecodeResult {
  double seconds = 0;
  std::vector<int32_t> ids;
};

// One side of the comparison.
struct Side {
  std::string name;
  std::string description;
  double bytes_per_token = 0;  // weights one decode step reads (0: not known)
  double params = 0;           // parameters per token (for FLOP/s)
  std::function<double()> prefill;
  std::function<DecodeResult(int batch, int steps, bool adapters)> decode;
  bool adapters = false;  // serves decode with B different adapters
};

// lorakv in this process, weights kept as `form`.
struct LorakvSide {
  std::unique_ptr<LlamaModel> model;
  lorakv::kernels::QuantActivations gemv = lorakv::kernels::QuantActivations::kFloat32;  // set before each run
  std::vector<std::shared_ptr<const lorakv::adapters::Adapter>> adapters;
};

// Through the engine's driver: each sequence a context of its own with one reader (mode
// full), its prompt processed in one step with every other's, then one step per token for
// all. Timed from the end of the prompt step.
DecodeResult lorakv_decode(const LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts, int batch,
                           int steps, const std::vector<std::shared_ptr<const lorakv::adapters::Adapter>>* adapters) {
  namespace rt = lorakv::runtime;
  rt::EngineOptions eo;
  int64_t rows = 0;
  for (int i = 0; i < batch; ++i) rows += static_cast<int64_t>(prompts[static_cast<size_t>(i)].size()) + steps + 64;
  eo.kv_pool_bytes = rt::Engine::base_row_bytes(model, eo) * rows;
  eo.prefill_chunk = 4096;
  rt::Engine engine(model, eo);
  DecodeResult r;
  std::vector<rt::DriverJob> jobs(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    const auto ctx = engine.create_context({rt::SharingMode::kFull, rt::SharedWriter::kFirst},
                                           {adapters ? (*adapters)[static_cast<size_t>(i)] : nullptr});
    engine.append(ctx, prompts[static_cast<size_t>(i)]);
    jobs[static_cast<size_t>(i)].reader = {ctx, 0};
    // Greedy; `steps` tokens run after the prompt's (the first comes from the prompt step).
    jobs[static_cast<size_t>(i)].next = [&r, i, steps, taken = 0](const at::Tensor& logits) mutable -> std::optional<int32_t> {
      const auto id = static_cast<int32_t>(logits.argmax().item<int64_t>());
      if (i == 0) r.ids.push_back(id);
      if (taken++ == steps) return std::nullopt;
      return id;
    };
  }
  std::chrono::steady_clock::time_point t0;
  int64_t step = 0;
  rt::Driver(engine, [&](rt::Engine&, const rt::StepResult&) {
    if (step++ == 0) t0 = std::chrono::steady_clock::now();
  }).run(jobs);
  r.seconds = seconds_since(t0);
  return r;
}

// A reference side in its own process (bench/generate_side.py), spoken to over pipes.
class PythonSide {
 public:
  PythonSide(const std::string& command) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
    const std::string ready = read_line();
    if (ready.rfind("ready ", 0) != 0) throw std::runtime_error("reference side did not start: " + command);
    description_ = ready.substr(6);
  }
  ~PythonSide() {
    std::fprintf(to_, "quit\n");
    std::fclose(to_);
    std::fclose(from_);
    waitpid(pid_, nullptr, 0);
  }
  PythonSide(const PythonSide&) = delete;
  PythonSide& operator=(const PythonSide&) = delete;

  const std::string& description() const { return description_; }
  std::vector<double> request(const std::string& line) {
    std::fprintf(to_, "%s\n", line.c_str());
    std::fflush(to_);
    std::istringstream reply(read_line());
    std::vector<double> values;
    for (double v; reply >> v;) values.push_back(v);
    if (values.empty()) throw std::runtime_error("reference side failed on '" + line + "'");
    return values;
  }

 private:
  std::string read_line() {
    std::string line;
    for (int c; (c = std::fgetc(from_)) != EOF && c != '\n';) line += static_cast<char>(c);
    return line;
  }
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::string description_;
};

struct Metric {
  std::string name;
  int batch = 0;  // 0: prefill
  bool adapters = false;
};

struct Row {
  std::string metric, side;
  double median = 0, lo = 0, hi = 0;
  double bytes_per_step = 0, limit = 0, share = 0, gflops = 0;
};

std::string write_ids_file(const std::vector<std::vector<int32_t>>& prompts) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lorakv_generate_bench_" + std::to_string(::getpid()) + ".ids"))
          .string();
  std::ofstream ids(path);
  for (const auto& p : prompts) {
    for (size_t i = 0; i < p.size(); ++i) ids << (i ? " " : "") << p[i];
    ids << "\n";
  }
  return path;
}

const char* kPlotScript = R"(import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
metrics = list(dict.fromkeys(r["metric"] for r in rows))
sides = list(dict.fromkeys(r["side"] for r in rows))
fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4.5))
for ax, m in zip(axes, metrics):
    rs = [r for r in rows if r["metric"] == m]
    names = [r["side"] for r in rs]
    vals = [float(r["tok_s"]) for r in rs]
    errs = [[float(r["tok_s"]) - float(r["tok_s_min"]) for r in rs], [float(r["tok_s_max"]) - float(r["tok_s"]) for r in rs]]
    ax.bar(range(len(rs)), vals, yerr=errs, color=["C%d" % sides.index(n) for n in names])
    ax.set_xticks(range(len(rs)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_title(m)
    ax.set_ylabel("tokens/s")
fig.suptitle(sys.argv[3], fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)";

int run(const Options& o) {
  if (o.threads > 0) at::set_num_threads(o.threads);
  const int threads = at::get_num_threads();
  lorakv::log::set_level(lorakv::log::Level::kWarn);
  const double stream = lorakv::bench::stream_read_gbps(int64_t{1} << 30, 5);
  const std::string machine = lorakv::cpu::cpu_model_name() + " (" +
                              lorakv::cpu::describe_features(lorakv::cpu::detected_cpu_features()) + "), " +
                              std::to_string(std::thread::hardware_concurrency()) + " logical cores, " +
                              std::to_string(threads) + " threads, vector path " +
                              lorakv::cpu::vector_path_name(lorakv::cpu::selected_vector_path());
  std::printf("machine: %s\nstreaming read: %.1f GB/s (at::sum over 1 GiB, best of 5)\n", machine.c_str(), stream);

  // lorakv sides, one model per weight form.
  std::map<std::string, LorakvSide> lorakv;
  std::vector<std::vector<int32_t>> prompts;
  using lorakv::kernels::QuantActivations;
  struct Form {
    const char* name;
    WeightForm form;
    at::ScalarType activations;
    QuantActivations gemv;  // the quantised GEMV's activations (native weights)
  };
  const Form forms[] = {{"lorakv_native", WeightForm::kNative, at::kFloat, QuantActivations::kFloat32},
                        {"lorakv_native_int8", WeightForm::kNative, at::kFloat, QuantActivations::kInt8},
                        {"lorakv_native_bf16", WeightForm::kNative, at::kBFloat16, QuantActivations::kFloat32},
                        {"lorakv_bfloat16", WeightForm::kBFloat16, at::kFloat, QuantActivations::kFloat32},
                        {"lorakv_float32", WeightForm::kFloat32, at::kFloat, QuantActivations::kFloat32}};
  double params = 0;
  for (const auto& [name, form, activations, gemv] : forms) {
    if (!wanted(o, name)) continue;
    lorakv::runtime::LoadedModel loaded = lorakv::runtime::load_model(o.model, activations, form);
    if (prompts.empty()) prompts = make_prompts(*loaded.tokenizer, o.prompt_tokens, o.batch);
    const auto& c = loaded.model->config();
    params = static_cast<double>(c.num_layers) *
                 static_cast<double>(c.hidden_dim * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim +
                                     c.num_heads * c.head_dim * c.hidden_dim + 3 * c.hidden_dim * c.intermediate_dim) +
             static_cast<double>(c.vocab_size * c.hidden_dim);
    lorakv[name].model = std::move(loaded.model);
    lorakv[name].gemv = gemv;
  }
  if (prompts.empty()) throw lorakv::ConfigError("no lorakv side selected", {"", "--sides", "at least one lorakv_* side", o.sides, ""});
  const LlamaModel& any_model = *lorakv.begin()->second.model;
  // Eight different adapters for the mixed-adapter decode.
  const std::string marker = o.adapters_dir + "/adapter_" + std::to_string(o.batch - 1) + "/adapter_model.safetensors";
  if (!o.python.empty() && !std::filesystem::exists(marker)) {
    const std::vector<std::string> cmd = {o.python, LORAKV_SOURCE_DIR "/tools/peft_decode_bench.py", "--model", o.model,
                                          "--adapters-dir", o.adapters_dir, "--create-only"};
    std::printf("creating %d rank-8 adapters: %s\n", o.batch, lorakv::describe_command(cmd).c_str());
    if (lorakv::run_process(cmd).exit_code != 0) throw std::runtime_error("creating the adapters failed");
  }
  const bool have_adapters = std::filesystem::exists(marker);
  if (have_adapters) {
    for (auto& [name, side] : lorakv) {
      lorakv::adapters::AdapterRegistry registry(side.model->adapter_shape(), side.model->dtype());
      for (int i = 0; i < o.batch; ++i) {
        side.adapters.push_back(
            registry.load("adapter_" + std::to_string(i), o.adapters_dir + "/adapter_" + std::to_string(i)));
      }
    }
  }

  std::vector<Side> sides;
  for (auto& [name, ls] : lorakv) {
    const LlamaModel* model = ls.model.get();
    const auto* adapters = &ls.adapters;
    const QuantActivations gemv = ls.gemv;
    Side s;
    s.name = name;
    s.description = "lorakv, weights " + std::string(lorakv::runtime::weight_form_name(model->weights().form)) + " (" +
                    model->weights().layers[0].qkv.form_name() + " projections, " +
                    model->weights().embed_tokens.form_name() + " output head), " +
                    (model->dtype() == at::kFloat ? "float32" : "bfloat16") + " activations" +
                    (gemv == QuantActivations::kInt8 ? ", the decode GEMV on int8 activations (integer dot products" +
                                                           std::string(lorakv::cpu::has_vnni(lorakv::cpu::detected_cpu_features(),
                                                                                             lorakv::cpu::selected_vector_path())
                                                                           ? ", VNNI)"
                                                                           : ")")
                                                     : "");
    s.bytes_per_token = static_cast<double>(model->weights().num_bytes);
    s.params = params;
    s.prefill = [model, gemv, &prompts] {
      lorakv::kernels::set_quant_activations(gemv);
      lorakv::runtime::EngineOptions eo;
      eo.kv_pool_bytes = lorakv::runtime::Engine::base_row_bytes(*model) * (static_cast<int64_t>(prompts[0].size()) + 64);
      eo.prefill_chunk = 4096;  // the whole prompt in one step, as the other sides run it
      lorakv::runtime::Engine engine(*model, eo);
      const auto ctx = engine.create_context({lorakv::runtime::SharingMode::kFull, lorakv::runtime::SharedWriter::kFirst},
                                             {nullptr});
      engine.append(ctx, prompts[0]);
      const auto t0 = std::chrono::steady_clock::now();
      (void)lorakv::runtime::prefill(engine, {ctx, 0}).argmax().item<int64_t>();
      return seconds_since(t0);
    };
    s.decode = [model, adapters, gemv, &prompts](int batch, int steps, bool with_adapters) {
      lorakv::kernels::set_quant_activations(gemv);
      return lorakv_decode(*model, prompts, batch, steps, with_adapters ? adapters : nullptr);
    };
    s.adapters = have_adapters;
    sides.push_back(std::move(s));
  }
  const std::string ids_path = write_ids_file(prompts);
  std::vector<std::unique_ptr<PythonSide>> processes;
  auto add_python_side = [&](const std::string& name, const std::string& python, double bytes) {
    if (!wanted(o, name) || python.empty()) return;
    std::ostringstream cmd;
    cmd << "'" << python << "' '" LORAKV_SOURCE_DIR "/bench/generate_side.py' " << name << " --model '" << o.model
        << "' --ids '" << ids_path << "' --threads " << threads;
    std::printf("starting %s: %s\n", name.c_str(), cmd.str().c_str());
    std::fflush(stdout);
    processes.push_back(std::make_unique<PythonSide>(cmd.str()));
    PythonSide* p = processes.back().get();
    Side s;
    s.name = name;
    s.description = p->description();
    s.bytes_per_token = bytes;
    s.params = params;
    s.prefill = [p] { return p->request("prefill")[0]; };
    s.decode = [p](int batch, int steps, bool) {
      const std::vector<double> v = p->request("decode " + std::to_string(batch) + " " + std::to_string(steps));
      DecodeResult r{v[0], {}};
      for (size_t i = 1; i < v.size(); ++i) r.ids.push_back(static_cast<int32_t>(v[i]));
      return r;
    };
    sides.push_back(std::move(s));
  };
  // llama.cpp reads the file's own blocks (the bytes lorakv's native form holds); transformers
  // reads float32 weights (the float32 form's bytes).
  const double native_bytes = lorakv.count("lorakv_native") ? lorakv["lorakv_native"].model->weights().num_bytes : 0;
  const double f32_bytes = lorakv.count("lorakv_float32") ? lorakv["lorakv_float32"].model->weights().num_bytes : 0;
  add_python_side("llama_cpp", o.llama_python, native_bytes);
  add_python_side("transformers", o.python, f32_bytes);

  const auto& c = any_model.config();
  std::printf("model: %s ('%s'), %lld layers, hidden %lld, heads %lld/%lld, vocab %lld, %.1fM parameters per token\n",
              o.model.c_str(), c.name.c_str(), static_cast<long long>(c.num_layers),
              static_cast<long long>(c.hidden_dim), static_cast<long long>(c.num_heads),
              static_cast<long long>(c.num_kv_heads), static_cast<long long>(c.vocab_size), params / 1e6);
  std::printf("device cpu; prompt %d tokens, decode %d steps, batch 1 and %d; %d repetitions (sides rotated) after "
              "one warm-up\nsides:\n",
              o.prompt_tokens, o.decode_tokens, o.batch, o.reps);
  for (const Side& s : sides) std::printf("  %-16s %s\n", s.name.c_str(), s.description.c_str());
  std::fflush(stdout);

  const std::string b = std::to_string(o.batch);
  const std::vector<Metric> metrics = {{"prefill_" + std::to_string(o.prompt_tokens), 0, false},
                                       {"decode_b1", 1, false},
                                       {"decode_b" + b, o.batch, false},
                                       {"decode_b" + b + "_lora", o.batch, true}};
  std::vector<Row> rows;
  std::map<std::string, std::vector<int32_t>> b1_ids;
  for (const Metric& m : metrics) {
    std::vector<Side*> active;
    for (Side& s : sides) {
      if (!m.adapters || s.adapters) active.push_back(&s);
    }
    if (active.empty()) continue;
    auto measure = [&](Side& s) {
      if (m.batch == 0) return o.prompt_tokens / s.prefill();
      const DecodeResult r = s.decode(m.batch, o.decode_tokens, m.adapters);
      if (m.batch == 1) b1_ids[s.name] = r.ids;
      return m.batch * o.decode_tokens / r.seconds;
    };
    std::map<std::string, std::vector<double>> rates;
    for (Side* s : active) (void)measure(*s);  // warm-up
    for (int rep = 0; rep < o.reps; ++rep) {
      for (size_t k = 0; k < active.size(); ++k) {
        Side& s = *active[(static_cast<size_t>(rep) + k) % active.size()];
        // Let the previous side's spinning worker threads go idle first.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        rates[s.name].push_back(measure(s));
      }
      std::printf("  %s: repetition %d/%d done\n", m.name.c_str(), rep + 1, o.reps);
      std::fflush(stdout);
    }
    for (Side* s : active) {
      std::vector<double>& v = rates[s->name];
      Row r{m.name, s->name, lorakv::bench::median(v), *std::min_element(v.begin(), v.end()),
            *std::max_element(v.begin(), v.end())};
      if (m.batch > 0 && s->bytes_per_token > 0) {
        r.bytes_per_step = s->bytes_per_token;
        r.limit = m.batch * stream * 1e9 / s->bytes_per_token;  // one read of the weights per step
        r.share = r.median / r.limit;
      }
      r.gflops = 2.0 * s->params * r.median / 1e9;
      rows.push_back(r);
    }
  }
  std::remove(ids_path.c_str());

  std::ofstream csv(o.csv);
  csv << "machine,threads,metric,side,tok_s,tok_s_min,tok_s_max,weight_bytes_per_step,stream_gbps,"
         "bandwidth_limit_tok_s,share_of_limit,gflops\n";
  std::printf("\n%-16s %-16s %9s %17s %12s %8s %8s\n", "metric", "side", "tok/s", "(min - max)", "limit tok/s",
              "share", "GFLOP/s");
  for (const Row& r : rows) {
    std::printf("%-16s %-16s %9.1f  (%6.1f - %6.1f) %12.0f %7.0f%% %8.1f\n", r.metric.c_str(), r.side.c_str(),
                r.median, r.lo, r.hi, r.limit, 100 * r.share, r.gflops);
    csv << '"' << machine << "\"," << threads << ',' << r.metric << ',' << r.side << ',' << r.median << ',' << r.lo
        << ',' << r.hi << ',' << r.bytes_per_step << ',' << stream << ',' << r.limit << ',' << r.share << ','
        << r.gflops << '\n';
  }
  csv.close();
  // Ratios against the references, measured in this run.
  std::printf("\nratios (median / median):\n");
  for (const Row& r : rows) {
    if (r.side.rfind("lorakv", 0) != 0) continue;
    for (const Row& ref : rows) {
      const bool same_metric = ref.metric == r.metric || (r.metric.find("_lora") != std::string::npos &&
                                                          ref.metric == "decode_b1");
      if (!same_metric || ref.side.rfind("lorakv", 0) == 0) continue;
      std::printf("  %-16s %-16s / %-12s %-10s = %.2fx\n", r.metric.c_str(), r.side.c_str(), ref.side.c_str(),
                  ref.metric.c_str(), r.median / ref.median);
    }
  }
  // The integer GEMV against the float32 one, same weights, same run.
  for (const Row& r : rows) {
    if (r.side != "lorakv_native_int8") continue;
    for (const Row& ref : rows) {
      if (ref.side == "lorakv_native" && ref.metric == r.metric) {
        std::printf("  %-16s %-16s / %-16s = %.2fx\n", r.metric.c_str(), r.side.c_str(), ref.side.c_str(),
                    r.median / ref.median);
      }
    }
  }
  for (const auto& [name, ids] : b1_ids) {
    const bool same = ids == b1_ids.begin()->second;
    std::printf("greedy batch-1 tokens of %s: %s %s\n", name.c_str(), same ? "equal to" : "DIFFER from",
                b1_ids.begin()->first.c_str());
  }
  std::printf("wrote %s\n", o.csv.c_str());
  const std::string plot_python = !o.llama_python.empty() ? o.llama_python : o.python;
  if (!plot_python.empty()) {
    const std::string script = o.csv + ".plot.py";
    std::ofstream(script) << kPlotScript;
    lorakv::ProcessOptions quiet;
    quiet.silence_stderr = true;
    if (lorakv::run_process({plot_python, script, o.csv, o.png, machine}, quiet).exit_code == 0) std::printf("wrote %s\n", o.png.c_str());
    else std::printf("no PNG: %s has no matplotlib (tools/setup_python.sh bench)\n", plot_python.c_str());
    std::remove(script.c_str());
  }
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
