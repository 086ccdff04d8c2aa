// cli/bench/bench_eviction_kv_dtype.cpp: the shared base's storage dtype against the float32
// cache, and the composed figure (sharing + int8 + a token budget).
#include "lorakv/cli/bench/bench_eviction_kv_dtype.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/cli/perplexity_eval.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"

namespace lorakv::cli {
namespace {

using cache::StorageDtype;

const std::vector<StorageDtype> kDtypes = {StorageDtype::kFloat32, StorageDtype::kBFloat16, StorageDtype::kInt8};

// Sums over the scored tokens of one dtype, against the float32 cache's logits.
struct DtypeFidelity {
  double nll = 0, kl = 0;
  int64_t tokens = 0, agree = 0;
  int64_t kv_bytes = 0;  // the most the pools held after a step
  double ppl() const { return std::exp(nll / static_cast<double>(tokens)); }
  double mean_kl() const { return kl / static_cast<double>(tokens); }
  double top1() const { return static_cast<double>(agree) / static_cast<double>(tokens); }
};

// The window's tokens through one engine per dtype, chunk by chunk side by side (one model,
// one thread pool; the logits of a chunk are compared and dropped before the next), each a
// `full` context of the base model without eviction.
void compare_window(const runtime::LlamaModel& model, const std::vector<int32_t>& window, int64_t chunk,
                    std::vector<DtypeFidelity>& f) {
  std::vector<std::unique_ptr<runtime::Engine>> engines;
  std::vector<std::unique_ptr<runtime::Driver>> drivers;  // one teacher-forced job each
  std::vector<at::Tensor> chunk_logits(kDtypes.size());  // float32 [chunk rows, vocab], the last step's
  for (StorageDtype d : kDtypes) {
    runtime::EngineOptions eo;
    eo.base_rows = static_cast<int64_t>(window.size()) + 2 * eo.block_size;
    eo.prefill_chunk = chunk;
    eo.kv_dtype = d;
    engines.push_back(std::make_unique<runtime::Engine>(model, eo));
    const runtime::ContextId ctx =
        engines.back()->create_context({runtime::SharingMode::kFull, runtime::SharedWriter::kFirst}, {nullptr});
    engines.back()->append(ctx, window);
    runtime::DriverJob job;
    job.reader = {ctx, 0};
    job.max_chunk = chunk;
    job.all_logits = true;
    job.on_output = [&chunk_logits, i = drivers.size()](const runtime::StepOutput& out) { chunk_logits[i] = out.logits; };
    drivers.push_back(std::make_unique<runtime::Driver>(*engines.back()));
    drivers.back()->add(std::move(job));
  }
  for (int64_t begin = 0; begin + 1 < static_cast<int64_t>(window.size()); begin += chunk) {
    const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(window.size()) - 1 - begin);  // rows that predict a token
    std::vector<at::Tensor> logp;
    for (size_t i = 0; i < engines.size(); ++i) {
      LORAKV_CHECK(drivers[i]->step() && chunk_logits[i].size(0) >= n, InternalError,
                   "a kv_dtype window step did not run its chunk");
      logp.push_back(chunk_logits[i].narrow(0, 0, n).log_softmax(-1));  // float32 [n, vocab]
      f[i].kv_bytes = std::max(f[i].kv_bytes, engines[i]->memory().cache.bytes_in_use);
    }
    const at::Tensor targets =
        at::tensor(std::vector<int64_t>(window.begin() + begin + 1, window.begin() + begin + 1 + n), at::kLong).unsqueeze(1);
    const at::Tensor p_ref = logp[0].exp();
    for (size_t i = 0; i < engines.size(); ++i) {
      f[i].nll -= logp[i].gather(1, targets).to(at::kDouble).sum().item<double>();
      f[i].kl += (p_ref * (logp[0] - logp[i])).sum(-1).to(at::kDouble).sum().item<double>();
      f[i].agree += logp[i].argmax(-1).eq(logp[0].argmax(-1)).sum().item<int64_t>();
      f[i].tokens += n;
    }
  }
}

cache::eviction::EvictionConfig policy_config(const KvDtypeBenchOptions& o) {
  cache::eviction::EvictionConfig c;
  c.policy = o.policy;
  c.budget_fraction = o.budget;
  return c;
}

std::string budget_text(double budget) {
  char b[16];
  std::snprintf(b, sizeof b, "1/%g", 1.0 / budget);
  return b;
}

// N agents (the qv_shared_a role adapters, then synthetic ones with their A) reading one
// trajectory in base_lr_shared: the pools' bytes in use after every agent processed it.
runtime::EngineMemory composed_run(BenchWorkload& w, const std::vector<int32_t>& text, int64_t agents,
                                   std::optional<StorageDtype> kv_dtype, const cache::eviction::EvictionConfig& eviction) {
  runtime::EngineOptions eo;
  eo.base_rows = eo.residual_rows = static_cast<int64_t>(text.size()) + 2 * eo.block_size;
  eo.kv_dtype = kv_dtype;
  runtime::Engine engine(w.model(), eo);
  const runtime::ContextId ctx =
      engine.create_context({runtime::SharingMode::kBaseLrShared, runtime::SharedWriter::kFirst, eviction}, w.shared_a_agents(agents));
  engine.append(ctx, text);
  for (int32_t r = 0; r < static_cast<int32_t>(agents); ++r) runtime::prefill(engine, {ctx, r});
  return engine.memory();
}

void run_composed(const KvDtypeBenchOptions& o, std::ostream& out) {
  MemoryBenchOptions mo;
  mo.model_path = o.model_path;
  mo.assets_dir = o.assets_dir;
  BenchWorkload w = load_workload(mo, out);
  const runtime::ModelConfig& c = w.model().config();
  const std::vector<int32_t> text = w.real_text(o.composed_tokens);
  const auto t = static_cast<int64_t>(text.size());
  // N full float32 caches of the trajectory: K and V of every KV head per token and layer, an
  // int32 position per row, whole blocks of 16 (the closed form `bench memory` checks byte for
  // byte against the pools).
  const int64_t rows = (t + 15) / 16 * 16;
  const int64_t full = o.composed_agents * c.num_layers * rows * (2 * c.num_kv_heads * c.head_dim * 4 + 4);
  struct Variant {
    std::string name;
    std::optional<StorageDtype> kv_dtype;
    bool evict;
  };
  const std::vector<Variant> variants = {{"base_lr_shared", std::nullopt, false},
                                         {"base_lr_shared + int8", StorageDtype::kInt8, false},
                                         {"base_lr_shared + budget", std::nullopt, true},
                                         {"base_lr_shared + int8 + budget", StorageDtype::kInt8, true}};
  const std::string path = o.out_dir + "/eviction_composed.csv";
  std::ofstream csv(path);
  csv << "variant,kv_dtype,policy,budget,agents,tokens,base_k_bytes,base_v_bytes,positions_bytes,residual_bytes,kv_bytes,"
         "full_caches_bytes,ratio\n";
  out << "\nComposed: " << o.composed_agents << " agents on one " << t << "-token trajectory, against "
      << o.composed_agents << " full float32 caches (" << static_cast<double>(full) / (1 << 20) << " MiB)\n"
      << "| variant | KV MiB | ratio |\n| --- | ---: | ---: |\n";
  for (const Variant& v : variants) {
    std::fprintf(stderr, "[%7.1f s] composed: %s ...\n", bench_seconds(), v.name.c_str());
    const cache::eviction::EvictionConfig eviction = v.evict ? policy_config(o) : cache::eviction::EvictionConfig{};
    const runtime::EngineMemory m = composed_run(w, text, o.composed_agents, v.kv_dtype, eviction);
    const int64_t bytes = m.cache.bytes_in_use;
    const double ratio = static_cast<double>(full) / static_cast<double>(bytes);
    csv << v.name << "," << runtime::kv_dtype_name(v.kv_dtype.value_or(StorageDtype::kFloat32)) << ","
        << (v.evict ? o.policy : "none") << "," << (v.evict ? o.budget : 1.0) << "," << o.composed_agents << "," << t << ","
        << m.cache.base_k_bytes << "," << m.cache.base_v_bytes << "," << m.cache.positions_bytes << ","
        << m.cache.residual_bytes_total << "," << bytes << "," << full << "," << ratio << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "| %s%s | %.2f | %.1fx |\n", v.name.c_str(),
                  v.evict ? (" (" + o.policy + " " + budget_text(o.budget) + ")").c_str() : "",
                  static_cast<double>(bytes) / (1 << 20), ratio);
    out << line << std::flush;
  }
  out << "wrote " << path << "\n";
}

}  // namespace

void run_kv_dtype_part(const runtime::LlamaModel& model, const formats::BpeTokenizer& tokenizer,
                       const std::vector<int32_t>& tokens, const KvDtypeBenchOptions& o, std::ostream& out) {
  std::filesystem::create_directories(o.out_dir);
  // DtypeFidelity of the full cache per dtype.
  std::vector<DtypeFidelity> f(kDtypes.size());
  for (size_t i = 0; i < o.windows.size(); ++i) {
    std::fprintf(stderr, "[%7.1f s] kv_dtype: window %zu/%zu, three caches side by side ...\n", bench_seconds(), i + 1,
                 o.windows.size());
    const auto [begin, end] = o.windows[i];
    compare_window(model, std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end), o.chunk, f);
  }
  const std::string path = o.out_dir + "/eviction_kv_dtype.csv";
  std::ofstream csv(path);
  csv << "kv_dtype,policy,budget,tokens,ppl,mean_kl_vs_float32,top1_vs_float32,kv_bytes_peak_after_step\n";
  out << "\nThe shared base's dtype (" << o.windows.size() << " windows; KL and top-1 against the float32 cache, same "
      << "windows)\n| kv dtype | policy | ppl | mean KL vs float32 | top-1 vs float32 | KV MiB after a step |\n"
         "| --- | --- | ---: | ---: | ---: | ---: |\n";
  char line[240];
  for (size_t i = 0; i < kDtypes.size(); ++i) {
    const char* name = runtime::kv_dtype_name(kDtypes[i]);
    // The evicted cache of this dtype, through the perplexity part's loop.
    PerplexitySettings s;
    s.windows = o.windows;
    s.chunk = o.chunk;
    s.eviction = policy_config(o);
    s.kv_dtype = kDtypes[i];
    std::fprintf(stderr, "[%7.1f s] kv_dtype: %s with %s at %g ...\n", bench_seconds(), name, o.policy.c_str(), o.budget);
    const PerplexityTotals t = score_perplexity(model, tokens, s);
    csv << name << ",none,1," << f[i].tokens << "," << f[i].ppl() << "," << f[i].mean_kl() << "," << f[i].top1() << ","
        << f[i].kv_bytes << "\n";
    csv << name << "," << o.policy << "," << o.budget << "," << t.tokens_scored << "," << t.ppl() << ",,," << t.kv_bytes_peak << "\n";
    std::snprintf(line, sizeof line, "| %s | none | %.4f | %.6f | %.4f | %.2f |\n| %s | %s %s | %.4f | | | %.2f |\n", name,
                  f[i].ppl(), f[i].mean_kl(), f[i].top1(), static_cast<double>(f[i].kv_bytes) / (1 << 20), name,
                  o.policy.c_str(), budget_text(o.budget).c_str(), t.ppl(),
                  static_cast<double>(t.kv_bytes_peak) / (1 << 20));
    out << line << std::flush;
  }
  out << "wrote " << path << "\n";
  if (o.run_retrieval) {
    for (StorageDtype d : kDtypes) {
      RetrievalGrid grid = o.retrieval;
      grid.kv_dtype = d;
      out << "\nretrieval with a " << runtime::kv_dtype_name(d) << " cache:\n";
      run_retrieval_part(model, tokenizer, tokens, {{"-", {}}, {budget_text(o.budget), policy_config(o)}}, grid, o.chunk,
                         o.out_dir + "/kv_dtype_" + runtime::kv_dtype_name(d), out);
    }
  }
  run_composed(o, out);
}

}  // namespace lorakv::cli
