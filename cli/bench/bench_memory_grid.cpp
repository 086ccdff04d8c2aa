// cli/bench/bench_memory_grid.cpp: KV bytes of N agents on one trajectory of T real tokens in
// each sharing mode, run for real and read from the pools, next to the closed form and the
// ratio against N full caches (the `full` run of the same N and T).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"

namespace lorakv::cli {

namespace {

using runtime::SharingMode;

struct ClosedForm {
  int64_t base_k = 0, base_v = 0, positions = 0, residual = 0;
  int64_t total() const { return base_k + base_v + positions + residual; }
};

// Whole blocks of rows; K and V of every KV head per row; one int32 position per row and
// lane; one rank-r C row per token per lane for each residual stream (N in base_shared,
// one in base_lr_shared) at every layer the adapters adapt v (q/v adapters: every layer).
ClosedForm closed_form(SharingMode mode, int64_t n, int64_t t, const runtime::ModelConfig& c, int64_t block_size,
                       bool per_head, int64_t rank, int64_t element_bytes) {
  const int64_t rows = (t + block_size - 1) / block_size * block_size;
  const int64_t lanes = per_head ? c.num_kv_heads : 1;
  const int64_t copies = mode == SharingMode::kFull ? n : 1;
  ClosedForm f;
  f.base_k = f.base_v = copies * c.num_layers * rows * c.num_kv_heads * c.head_dim * element_bytes;
  f.positions = copies * c.num_layers * lanes * rows * 4;
  const int64_t streams = mode == SharingMode::kBaseShared ? n : mode == SharingMode::kBaseLrShared ? 1 : 0;
  f.residual = streams * c.num_layers * lanes * rows * rank * element_bytes;
  return f;
}

// K/V and residual payload only (no positions, no block rounding): the ratio against N full
// caches that the layout promises, per token per layer.
double payload_ratio(SharingMode mode, int64_t n, const runtime::ModelConfig& c, bool per_head, int64_t rank) {
  const double kv = 2.0 * static_cast<double>(c.num_kv_heads * c.head_dim);
  const double residual = static_cast<double>(rank) * (per_head ? static_cast<double>(c.num_kv_heads) : 1.0);
  const double nn = static_cast<double>(n);
  switch (mode) {
    case SharingMode::kFull: return 1.0;
    case SharingMode::kFullShared: return nn;
    case SharingMode::kBaseShared: return nn * kv / (kv + nn * residual);
    case SharingMode::kBaseLrShared: return nn * kv / (kv + residual);
  }
  return 0;
}

struct GridRow {
  std::string layout;
  std::string adapters = "standard";  // or "alora": aLoRA twins (no residual rows, base rows shared)
  std::string eviction = "none";  // the context's policy and budget
  int64_t t = 0, n = 0;
  SharingMode mode = SharingMode::kFull;
  runtime::EngineMemory mem;
  ClosedForm closed;
  double ratio = 0, payload = 0, seconds = 0;
};

// aLoRA readers keep base rows only: one set in the shared modes; in `full` each keeps its own
// rows but adopts the first reader's whole blocks below its last token from the prefix index,
// so each further reader adds one block (the block holding its last token).
ClosedForm alora_closed_form(SharingMode mode, int64_t n, int64_t t, const runtime::ModelConfig& c, int64_t block_size,
                             int64_t element_bytes) {
  const int64_t blocks = (t + block_size - 1) / block_size + (mode == SharingMode::kFull ? n - 1 : 0);
  ClosedForm f;
  f.base_k = f.base_v = c.num_layers * blocks * block_size * c.num_kv_heads * c.head_dim * element_bytes;
  f.positions = c.num_layers * blocks * block_size * 4;
  return f;
}

GridRow run_one(BenchWorkload& w, int64_t t, int64_t n, SharingMode mode, bool per_head, const std::vector<int32_t>& text,
                const cache::eviction::EvictionConfig& eviction = {}, bool alora = false) {
  const runtime::ModelConfig& c = w.model().config();
  runtime::EngineOptions eo;
  const int64_t copies = mode == SharingMode::kFull ? n : 1;
  eo.base_rows = copies * (t + 2 * eo.block_size);
  eo.residual_rows = (mode == SharingMode::kBaseShared ? n : 1) * (t + 2 * eo.block_size);
  eo.per_head_token_sets = per_head;
  runtime::Engine engine(w.model(), eo);
  const runtime::ContextId ctx =
      engine.create_context({mode, runtime::SharedWriter::kFirst, eviction}, alora ? w.alora_agents(n) : w.shared_a_agents(n));
  engine.append(ctx, text);
  const double start = bench_seconds();
  for (int32_t r = 0; r < static_cast<int32_t>(n); ++r) runtime::prefill(engine, {ctx, r});
  GridRow row;
  row.layout = per_head ? "per_kv_head" : "per_layer";
  if (eviction.enabled()) row.eviction = eviction.policy + " " + std::to_string(eviction.budget_fraction).substr(0, 4);
  row.t = t;
  row.n = n;
  row.mode = mode;
  row.seconds = bench_seconds() - start;
  row.mem = engine.memory();
  const int64_t element = cache::storage_element_bytes(engine.cache().manager().config().base_dtype);
  row.closed = closed_form(mode, n, t, c, eo.block_size, per_head, w.shared_a.front()->max_rank(), element);
  row.payload = payload_ratio(mode, n, c, per_head, w.shared_a.front()->max_rank());
  if (alora) {
    row.adapters = "alora";
    row.closed = alora_closed_form(mode, n, t, c, eo.block_size, element);
    row.payload = static_cast<double>(n);
  }
  return row;
}

int64_t kv_bytes(const runtime::EngineMemory& m) { return m.cache.bytes_in_use; }

}  // namespace

void run_memory_grid(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  const std::vector<SharingMode> modes = {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared,
                                          SharingMode::kBaseLrShared};
  std::vector<GridRow> rows;
  auto add = [&](int64_t t, int64_t n, bool per_head, const std::vector<int32_t>& text) {
    int64_t full_bytes = 0;
    for (SharingMode m : modes) {
      std::fprintf(stderr, "[%7.1f s] memory: T=%lld N=%lld %s%s ...\n", bench_seconds(), static_cast<long long>(t),
                   static_cast<long long>(n), runtime::sharing_mode_name(m), per_head ? " (per KV head)" : "");
      GridRow row = run_one(w, t, n, m, per_head, text);
      if (m == SharingMode::kFull) full_bytes = kv_bytes(row.mem);
      row.ratio = static_cast<double>(full_bytes) / static_cast<double>(kv_bytes(row.mem));
      rows.push_back(row);
    }
  };
  for (int64_t t : o.lengths) {
    const std::vector<int32_t> text = w.real_text(t);
    for (int64_t n : o.agents) add(t, n, false, text);
  }
  add(o.lengths.front(), 8, true, w.real_text(o.lengths.front()));  // residuals kept per KV head
  // The shared base compressed too: base_lr_shared at a quarter of the tokens (StreamingLLM,
  // evicting after every prefill chunk), against 8 full caches of the whole trajectory.
  // Masked rows and partial blocks make its bytes a measurement, not a closed form.
  const int64_t t = o.lengths.back();
  cache::eviction::EvictionConfig quarter;
  quarter.policy = "streaming_llm";
  quarter.budget_fraction = 0.25;
  const std::vector<int32_t> text = w.real_text(t);
  const auto same = std::find_if(rows.begin(), rows.end(), [&](const GridRow& r) {
    return r.t == t && r.n == 8 && r.mode == SharingMode::kFull && r.layout == "per_layer";
  });
  const int64_t full_bytes = kv_bytes(same != rows.end() ? same->mem : run_one(w, t, 8, SharingMode::kFull, false, text).mem);
  std::fprintf(stderr, "[%7.1f s] memory: T=%lld N=8 base_lr_shared, streaming_llm at 1/4 ...\n", bench_seconds(),
               static_cast<long long>(t));
  GridRow evicted = run_one(w, t, 8, SharingMode::kBaseLrShared, false, text, quarter);
  evicted.ratio = static_cast<double>(full_bytes) / static_cast<double>(kv_bytes(evicted.mem));
  evicted.payload /= quarter.budget_fraction;
  rows.push_back(evicted);
  // aLoRA agents (exact sharing): N = 1..16 on the longest trajectory, in `full` (base rows
  // shared through the prefix index) and base_lr_shared, against N full caches of standard
  // adapters; the standard base_lr_shared rows beside them.
  for (int64_t n : {1, 2, 4, 8, 16}) {
    int64_t n_full = 0;
    for (SharingMode m : {SharingMode::kFull, SharingMode::kBaseLrShared}) {
      for (bool alora : {false, true}) {
        std::fprintf(stderr, "[%7.1f s] memory: T=%lld N=%lld %s, %s adapters ...\n", bench_seconds(), static_cast<long long>(t),
                     static_cast<long long>(n), runtime::sharing_mode_name(m), alora ? "aLoRA" : "standard");
        GridRow row = run_one(w, t, n, m, false, text, {}, alora);
        if (m == SharingMode::kFull && !alora) n_full = kv_bytes(row.mem);
        row.ratio = static_cast<double>(n_full) / static_cast<double>(kv_bytes(row.mem));
        if (alora) row.layout = "per_layer";
        const bool known = std::any_of(rows.begin(), rows.end(), [&](const GridRow& r) {
          return r.t == t && r.n == n && r.mode == m && r.layout == "per_layer" && r.eviction == "none" && r.adapters == row.adapters;
        });
        if (!known) rows.push_back(row);
      }
    }
  }

  const std::string path = o.out_dir + "/memory.csv";
  std::ofstream csv(path);
  csv << "layout,eviction,adapters,tokens,agents,mode,base_k_bytes,base_v_bytes,positions_bytes,residual_bytes,kv_bytes_measured,"
         "kv_bytes_closed_form,difference,ratio_vs_n_full_caches,payload_ratio_closed_form,metadata_bytes,"
         "adapter_bytes,model_bytes,peak_bytes,prefill_seconds\n";
  out << "\nKV memory, measured from the pools (bytes in use: base K + V + positions + residuals, whole blocks of 16 rows)\n";
  out << "| layout | eviction | adapters | T | N | mode | measured | closed form | ratio vs N full caches | payload-only closed form |\n"
         "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n";
  int64_t worst = 0;
  for (const GridRow& r : rows) {
    const int64_t measured = kv_bytes(r.mem), closed = r.closed.total();
    if (r.eviction == "none") worst = std::max<int64_t>(worst, std::llabs(measured - closed));
    csv << r.layout << "," << r.eviction << "," << r.adapters << "," << r.t << "," << r.n << "," << runtime::sharing_mode_name(r.mode) << "," << r.mem.cache.base_k_bytes
        << "," << r.mem.cache.base_v_bytes << "," << r.mem.cache.positions_bytes << "," << r.mem.cache.residual_bytes_total
        << "," << measured << "," << closed << "," << measured - closed << "," << r.ratio << "," << r.payload << ","
        << r.mem.cache.metadata_bytes << "," << r.mem.adapter_bytes << "," << r.mem.model_weight_bytes << ","
        << r.mem.cache.peak_bytes_in_use << "," << r.seconds << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %s | %lld | %lld | %s | %.2f MiB | %.2f MiB | %.2fx | %.2fx |\n", r.layout.c_str(),
                  r.eviction.c_str(), r.adapters.c_str(), static_cast<long long>(r.t), static_cast<long long>(r.n), runtime::sharing_mode_name(r.mode),
                  static_cast<double>(measured) / (1 << 20), static_cast<double>(closed) / (1 << 20), r.ratio, r.payload);
    out << line;
  }
  out << "measured bytes differ from the closed form by at most " << worst
      << " bytes (tolerance: 0, both count whole blocks; rows with eviction: the closed form is of the whole trajectory, "
         "the payload-only ratio assumes exactly the budget's rows)\n";
  out << "metadata (host tables, token ids, prefix index) is in the CSV; adapters and model: "
      << rows.back().mem.adapter_bytes << " and " << rows.back().mem.model_weight_bytes << " bytes in the last run\n";
  out << "wrote " << path << "\n";
  if (worst != 0) throw InternalError("measured KV bytes differ from the closed form");
}

}  // namespace lorakv::cli
