// bench/lora_attention_bench.cpp: the fused base + low-rank attention (kernels/lora_attention.h)
// against what N agents cost without it, one layer call at a time, for decode (one query per
// agent) and prefill chunks (256 queries per agent):
//   fused          (a) lorakv's kernel, all agents in one call (each base tile read once)
//   fused_each     (b) the same kernel called once per agent
//   sdpa_full      (c) at::scaled_dot_product_attention per agent over N full K/V caches that exist
//   sdpa_rebuild   (c') each agent's V (and K with K-LoRA) materialised from base + C.B, then SDPA
//   fused_mass     (a) plus the attention-mass output
//   fused_klora    (a) with K-LoRA (C_k B_k expanded and rotated per tile) at the same rank
//   fused_kdelta   (a) with each agent's K delta stored at full width instead of expanded
//   fused_prerope  (a) with base keys stored before RoPE, rotated on chip
//   fused_base / sdpa_base (d), one agent without adapter: the kernel and SDPA on the same rows
//   fused_shared_a (a) with every agent reading one C (a shared-A group, base_lr_shared)
//   fused_int8 / fused_base_int8 / fused_shared_a_int8  (a), (d) and the shared-A group over an
//                  int8 copy of the base (float32 rows only),
//                  in the same repetitions: int8 reads a quarter of the bytes, converts on chip
//                  (with integer QK where the CPU has the int16 dot product, VNNI)
//   fused_int8_float_qk / fused_shared_a_int8_float_qk  the same with float32 QK (where the
//                  CPU has VNNI: integer QK against float32 QK, side by side)
// The KV footprint is cycled over enough layers' buffers to exceed the last-level cache, so
// the figures are memory-bound as in a real step (each variant cycles its own buffers: N full
// caches or stored deltas fit fewer layers in the same footprint). Every variant of a
// configuration is timed in each of --reps repetitions, in an order rotated per repetition,
// and the median repetition is reported (the CSV has the fastest and slowest too). It
// measures the machine's streaming-read bandwidth and a GEMM's FLOP/s (the practical peak)
// and reports each variant against them. Prints the machine and the vector path; writes CSV
// and, with the benchmark environment's matplotlib (tools/setup_python.sh bench), a PNG
// (default <build>/bench_results/lora_attention.{csv,png}). Run it on an idle machine: other
// load changes every figure.
//
// i8: the base rows int8 as the engine stores them (a float32 scale per row and KV head,
// Hadamard-rotated), queries, outputs and residual rows float32; the SDPA variants need
// float rows and are skipped.
// usage: lorakv_lora_attention_bench [--quick] [--shapes smol,llama] [--dtypes f32,bf16,i8]
//        [--modes decode,prefill] [--contexts 512,1024,...] [--agents 1,8] [--ranks 8,64]
//        [--variants fused,sdpa_full,...] [--reps N] [--footprint-mb N] [--min-seconds S]
//        [--threads N] [--csv FILE] [--png FILE] [--python PY]
// --quick is a smoke run (one small configuration, calibration cut short): it shows the
// bench works, its figures are not measurements.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/kernels/lora_attention.h"

namespace {

using namespace lorakv;
using namespace lorakv::bench;
using kernels::ElementType;

constexpr int64_t kBlock = 16;
constexpr int64_t kPrefillChunk = 256;

struct Shape {
  std::string name;
  int64_t heads, kv_heads, dim;
};

struct Options {
  std::vector<Shape> shapes{{"smol", 9, 3, 64}, {"llama", 32, 8, 128}};
  std::vector<ElementType> dtypes{ElementType::kFloat32, ElementType::kBFloat16};
  std::vector<std::string> modes{"decode", "prefill"};
  std::vector<int64_t> contexts{512, 1024, 2048, 4096, 8192};
  std::vector<int64_t> agents{1, 8};
  std::vector<int64_t> ranks{8, 64};
  int64_t footprint_mb = 0;  // 0: 4x the last-level cache, at least 256 MiB, at most 2 GiB
  double min_seconds = 0.3;  // per variant and configuration, over all repetitions
  int reps = 5;
  std::vector<std::string> variants;  // empty: all
  bool quick = false;
  int64_t threads = 0;
  std::string csv = std::string(LORAKV_BENCH_RESULTS_DIR) + "/lora_attention.csv";
  std::string png = std::string(LORAKV_BENCH_RESULTS_DIR) + "/lora_attention.png";
  std::string python = std::string(LORAKV_BENCH_SOURCE_DIR) + "/.venv-bench/bin/python";
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  for (const std::string& item : split(s)) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--quick") {  // a smoke run of a second or two, not a measurement
      o.shapes = {{"smol", 9, 3, 64}};
      o.dtypes = {ElementType::kFloat32};
      o.modes = {"decode"};
      o.contexts = {512};
      o.ranks = {8};
      o.footprint_mb = 16;
      o.min_seconds = 0.02;
      o.reps = 2;
      o.quick = true;
    } else if (a == "--shapes") {
      std::vector<Shape> all = o.shapes, chosen;
      for (const std::string& n : split(next())) {
        for (const Shape& s : all) {
          if (s.name == n) chosen.push_back(s);
        }
      }
      o.shapes = chosen;
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const std::string& n : split(next())) {
        o.dtypes.push_back(n == "bf16" ? ElementType::kBFloat16 : n == "i8" ? ElementType::kInt8 : ElementType::kFloat32);
      }
    } else if (a == "--modes") {
      o.modes = split(next());
    } else if (a == "--contexts") {
      o.contexts = split_ints(next());
    } else if (a == "--agents") {
      o.agents = split_ints(next());
    } else if (a == "--ranks") {
      o.ranks = split_ints(next());
    } else if (a == "--footprint-mb") {
      o.footprint_mb = std::stoll(next());
    } else if (a == "--min-seconds") {
      o.min_seconds = std::stod(next());
    } else if (a == "--reps") {
      o.reps = std::max(1, std::stoi(next()));
    } else if (a == "--variants") {
      o.variants = split(next());
    } else if (a == "--threads") {
      o.threads = std::stoll(next());
    } else if (a == "--csv") {
      o.csv = next();
    } else if (a == "--png") {
      o.png = next();
    } else if (a == "--python") {
      o.python = next();
    } else {
      throw std::runtime_error("unknown option " + a + " (see the usage at the top of bench/lora_attention_bench.cpp)");
    }
  }
  return o;
}

at::ScalarType scalar(ElementType t) {
  return t == ElementType::kFloat32 ? at::kFloat : t == ElementType::kBFloat16 ? at::kBFloat16 : at::kChar;
}
// Queries, outputs and residual rows: int8 is for base rows only, float32 beside them (as the engine runs).
ElementType activations(ElementType t) { return t == ElementType::kInt8 ? ElementType::kFloat32 : t; }

struct Config {
  Shape shape;
  ElementType dtype;
  std::string mode;
  int64_t context, agents, rank;
  int64_t queries() const { return mode == "decode" ? 1 : kPrefillChunk; }
};

// One layer of the base and every agent's residual, in the cache's paged layout (blocks in
// order, so the dense SDPA variants can view the same rows).
struct Layer {
  at::Tensor k, v, positions;           // [blocks, 16, kv_heads, dim], int32 [blocks, 16]
  at::Tensor k_scales, v_scales;        // int8: float [blocks, 16, kv_heads]
  std::vector<int32_t> table;
  kernels::PagedStorage base, base_prerope;
  kernels::LaneRows lane;
  std::vector<at::Tensor> c;            // per agent [blocks, 16, rank] (used for v and, with K-LoRA, k)
  std::vector<kernels::PagedStorage> c_storage;
  std::vector<kernels::LaneRows> c_lane;
  std::vector<at::Tensor> kd;  // per agent [blocks, 16, kv_heads, dim]: stored K deltas (first sdpa_layers layers)
  std::vector<kernels::PagedStorage> kd_storage;
};

struct Bench {
  Config cfg;
  int64_t layers = 1, sdpa_layers = 1;
  std::deque<Layer> data;
  std::vector<at::Tensor> q, out, b;       // per agent: [Tq, H, D], [Tq, H, D], float [kv_heads, rank, D]
  std::vector<at::Tensor> q_positions;     // per agent int64 [Tq]
  at::Tensor rope_cos, rope_sin, mask;     // [context, D/2]; bool [Tq, context] for prefill
  std::vector<std::vector<at::Tensor>> full_k, full_v;  // (c): [sdpa layer][agent] [1, kv_heads, ctx, D]
  std::vector<float> mass;

  int64_t blocks() const { return (cfg.context + kBlock - 1) / kBlock; }
  int64_t layer_bytes() const {
    const int64_t scale = cfg.dtype == ElementType::kInt8 ? 4 : 0;  // an int8 row's float32 scale
    return 2 * blocks() * kBlock * cfg.shape.kv_heads * (cfg.shape.dim * kernels::element_bytes(cfg.dtype) + scale);
  }

  void build(int64_t footprint_bytes) {
    const Shape& s = cfg.shape;
    layers = std::max<int64_t>(1, (footprint_bytes + layer_bytes() - 1) / layer_bytes());
    sdpa_layers = std::max<int64_t>(1, layers / cfg.agents);  // (c) holds N full caches: same footprint
    const auto opts = at::TensorOptions().dtype(scalar(activations(cfg.dtype)));
    const bool int8 = cfg.dtype == ElementType::kInt8;
    const at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, s.dim, 2, at::kLong).to(at::kFloat) / double(s.dim));
    const at::Tensor angles = at::arange(cfg.context, at::kLong).to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
    rope_cos = angles.cos().contiguous();
    rope_sin = angles.sin().contiguous();
    for (int64_t l = 0; l < layers; ++l) {
      Layer& L = data.emplace_back();
      if (int8) {  // as the engine stores them: Hadamard-rotated int8 rows, a scale per row and head
        L.k = at::randint(-127, 128, {blocks(), kBlock, s.kv_heads, s.dim}, at::kChar);
        L.v = at::randint(-127, 128, {blocks(), kBlock, s.kv_heads, s.dim}, at::kChar);
        L.k_scales = at::rand({blocks(), kBlock, s.kv_heads}) * 0.02f;
        L.v_scales = at::rand({blocks(), kBlock, s.kv_heads}) * 0.02f;
      } else {
        L.k = at::randn({blocks(), kBlock, s.kv_heads, s.dim}, opts);
        L.v = at::randn({blocks(), kBlock, s.kv_heads, s.dim}, opts);
      }
      L.positions = at::arange(blocks() * kBlock, at::kInt).view({blocks(), kBlock});
      for (int32_t i = 0; i < blocks(); ++i) L.table.push_back(i);
      L.base = {L.k.data_ptr(), L.v.data_ptr(), cfg.dtype, blocks(), kBlock, kBlock * s.kv_heads * s.dim,
                s.kv_heads * s.dim, s.dim, L.positions.data_ptr<int32_t>(), nullptr, false};
      if (int8) {
        L.base.k_scales = L.k_scales.data_ptr<float>();
        L.base.v_scales = L.v_scales.data_ptr<float>();
        L.base.scale_row_stride = s.kv_heads;
        L.base.hadamard = (s.dim & (s.dim - 1)) == 0;
      }
      L.base_prerope = L.base;
      L.base_prerope.keys_before_rope = true;
      L.lane = {L.table.data(), cfg.context};
      L.c_storage.reserve(static_cast<size_t>(cfg.agents));
      for (int64_t a = 0; a < cfg.agents; ++a) {
        L.c.push_back(at::randn({blocks(), kBlock, cfg.rank}, opts));
        L.c_storage.push_back({L.c.back().data_ptr(), nullptr, activations(cfg.dtype), blocks(), kBlock, kBlock * cfg.rank,
                               cfg.rank, 0, nullptr, nullptr, false});
        L.c_lane.push_back({L.table.data(), cfg.context});
      }
    }
    const int64_t tq = cfg.queries();
    for (int64_t a = 0; a < cfg.agents; ++a) {
      q.push_back(at::randn({tq, s.heads, s.dim}, opts));
      out.push_back(at::empty({tq, s.heads, s.dim}, opts));
      b.push_back(at::randn({s.kv_heads, cfg.rank, s.dim}) * (0.5 / std::sqrt(double(cfg.rank))));
      q_positions.push_back(at::arange(cfg.context - tq, cfg.context, at::kLong));
    }
    if (tq > 1) {
      mask = q_positions[0].unsqueeze(1) >= at::arange(cfg.context, at::kLong).unsqueeze(0);
    }
    mass.resize(static_cast<size_t>(s.kv_heads * cfg.context));
  }

  void build_full_caches() {  // (c): each agent's K and V at full width, as N caches would hold them
    for (int64_t l = 0; l < sdpa_layers; ++l) {
      full_k.emplace_back();
      full_v.emplace_back();
      for (int64_t a = 0; a < cfg.agents; ++a) {
        full_k.back().push_back(dense(data[l].k).clone());
        full_v.back().push_back(rebuilt_v(l, a));
      }
    }
  }

  void build_key_deltas() {  // the stored-delta alternative to K-LoRA, in as many layers as (c)
    const Shape& s = cfg.shape;
    for (int64_t l = 0; l < sdpa_layers; ++l) {
      Layer& L = data[static_cast<size_t>(l)];
      L.kd_storage.reserve(static_cast<size_t>(cfg.agents));
      for (int64_t a = 0; a < cfg.agents; ++a) {
        L.kd.push_back(at::randn({blocks(), kBlock, s.kv_heads, s.dim}, at::TensorOptions().dtype(scalar(activations(cfg.dtype)))) * 0.1);
        kernels::PagedStorage st = L.base;
        st.dtype = activations(cfg.dtype);
        st.k_scales = st.v_scales = nullptr;
        st.hadamard = false;
        st.k = L.kd.back().data_ptr();
        st.v = nullptr;
        st.positions = nullptr;
        L.kd_storage.push_back(st);
      }
    }
  }

  // [1, kv_heads, context, D] view of a pool's rows.
  at::Tensor dense(const at::Tensor& pool) const {
    return pool.view({-1, cfg.shape.kv_heads, cfg.shape.dim}).narrow(0, 0, cfg.context).permute({1, 0, 2}).unsqueeze(0);
  }
  at::Tensor delta(int64_t l, int64_t a) const {  // C B per KV head: [1, kv_heads, context, D]
    const at::Tensor c = data[l].c[a].view({-1, cfg.rank}).narrow(0, 0, cfg.context);
    return at::einsum("nr,hrd->hnd", {c, b[a].to(c.scalar_type())}).unsqueeze(0);
  }
  at::Tensor rebuilt_v(int64_t l, int64_t a) const { return dense(data[l].v) + delta(l, a); }
  at::Tensor rebuilt_k(int64_t l, int64_t a) const {  // base + RoPE(C_k B_k), rotate_half
    const at::Tensor d = delta(l, a);
    const int64_t half = cfg.shape.dim / 2;
    const at::Tensor c = rope_cos.to(d.scalar_type()), s = rope_sin.to(d.scalar_type());
    const at::Tensor d1 = d.narrow(3, 0, half), d2 = d.narrow(3, half, half);
    return dense(data[l].k) + at::cat({d1 * c - d2 * s, d2 * c + d1 * s}, 3);
  }

  // The views of one layer's call: agents [first, first + count), with or without adapters.
  struct Call {
    std::vector<kernels::AgentAttention> agents;
    kernels::SharedBase base;
    kernels::LoraAttentionParams params;
  };
  // shared_a: every agent reads agent 0's C rows with its own B (a shared-A group, as in
  // base_lr_shared); else each its own C (base_shared).
  Call call(int64_t l, int64_t first, int64_t count, bool adapters, bool k_lora, bool prerope,
            kernels::AttentionMass mass_mode, bool k_delta = false, bool shared_a = false) {
    Call c;
    Layer& L = data[l];
    const Shape& s = cfg.shape;
    for (int64_t a = first; a < first + count; ++a) {
      kernels::AgentAttention ag;
      ag.num_queries = cfg.queries();
      ag.q = q[a].data_ptr();
      ag.q_dtype = activations(cfg.dtype);
      ag.q_row_stride = s.heads * s.dim;
      ag.q_head_stride = s.dim;
      ag.q_positions = q_positions[a].data_ptr<int64_t>();
      const int64_t c_of = shared_a ? 0 : a;
      const kernels::LowRankStream stream{cfg.rank, &L.c_storage[c_of], &L.c_lane[c_of], b[a].data_ptr<float>(), cfg.rank * s.dim, s.dim};
      if (adapters) ag.v = stream;
      if (k_lora) ag.k = stream;
      if (k_delta) ag.k_delta = {&L.kd_storage[static_cast<size_t>(a)], &L.lane};
      ag.out = out[a].data_ptr();
      ag.out_dtype = activations(cfg.dtype);
      ag.out_row_stride = s.heads * s.dim;
      ag.out_head_stride = s.dim;
      c.agents.push_back(ag);
    }
    c.base.rows = {prerope ? &L.base_prerope : &L.base, &L.lane, s.kv_heads};
    c.base.num_agents = count;
    c.base.mass = mass.data();
    c.base.mass_head_stride = cfg.context;
    kernels::LoraAttentionParams& p = c.params;
    p.num_heads = s.heads;
    p.num_kv_heads = s.kv_heads;
    p.head_dim = s.dim;
    p.scale = static_cast<float>(1.0 / std::sqrt(double(s.dim)));
    p.rope_cos = rope_cos.data_ptr<float>();
    p.rope_sin = rope_sin.data_ptr<float>();
    p.rope_rows = cfg.context;
    p.num_bases = 1;
    p.num_agents = count;
    p.mass = mass_mode;
    return c;
  }
  static void run(Call& c, kernels::LoraAttentionStats* stats) {
    c.params.bases = &c.base;
    c.params.agents = c.agents.data();
    c.params.stats = stats;
    kernels::lora_attention(c.params);
  }

  at::Tensor sdpa(int64_t a, const at::Tensor& k, const at::Tensor& v) const {
    const at::Tensor qa = q[a].transpose(0, 1).unsqueeze(0);  // [1, H, Tq, D]
    std::optional<at::Tensor> m;
    if (mask.defined()) m = mask;
    return at::scaled_dot_product_attention(qa, k, v, m, 0.0, false, std::nullopt, /*enable_gqa=*/true);
  }
};

struct Row {
  Config cfg;
  std::string variant;
  double seconds = 0, min_seconds = 0, max_seconds = 0;  // median, fastest and slowest repetition
  double bytes = 0, flops = 0;
};

// FLOPs of one call: QK and PV over every visible key, P.C and the epilogue per agent, and
// the K-LoRA expansion; causal prefill sees about context - chunk/2 keys per query.
double flops_of(const Config& c, int64_t agents, bool adapters, bool k_lora) {
  const double d = double(c.shape.dim), r = adapters ? double(c.rank) : 0.0;
  const double keys = c.queries() == 1 ? double(c.context) : double(c.context) - c.queries() / 2.0;
  const double rows = double(agents) * c.queries() * c.shape.heads;
  double f = rows * keys * (4 * d + 2 * r) + rows * 2 * r * d;
  if (k_lora) f += double(agents) * c.shape.kv_heads * double(c.context) * 2 * r * d;
  return f;
}

std::vector<Row> bench_config(const Config& cfg, int64_t footprint, double min_seconds, int reps,
                              const std::vector<std::string>& only) {
  Bench bn;
  bn.cfg = cfg;
  bn.build(footprint);
  const bool int8 = cfg.dtype == ElementType::kInt8;  // SDPA takes no int8 rows: fused variants only
  if (!int8) bn.build_full_caches();
  bn.build_key_deltas();
  const int64_t n = cfg.agents;
  std::vector<Variant> vs;
  std::deque<kernels::LoraAttentionStats> stats;  // one per fused variant, addresses stable
  std::map<std::string, kernels::LoraAttentionStats*> stats_of;
  using Mass = kernels::AttentionMass;
  auto fused = [&](const std::string& name, bool adapters, bool k_lora, bool prerope, Mass mass, bool k_delta,
                   int64_t layers, bool shared_a = false) {
    kernels::LoraAttentionStats* st = &stats.emplace_back();
    stats_of[name] = st;
    vs.push_back({name, layers, [&bn, st, n, adapters, k_lora, prerope, mass, k_delta, shared_a](int64_t l) {
                    Bench::Call c = bn.call(l, 0, n, adapters, k_lora, prerope, mass, k_delta, shared_a);
                    Bench::run(c, st);
                  },
                  0, flops_of(cfg, n, adapters, k_lora || k_delta)});
  };
  if (n == 1) {  // (d): no adapter, the kernel against SDPA on the same rows
    fused("fused_base", false, false, false, Mass::kNone, false, bn.layers);
  }
  if (n == 1 && !int8) {
    vs.push_back({"sdpa_base", bn.layers, [&bn](int64_t l) { (void)bn.sdpa(0, bn.dense(bn.data[l].k), bn.dense(bn.data[l].v)); },
                  double(bn.layer_bytes()), flops_of(cfg, 1, false, false)});
  }
  fused("fused", true, false, false, Mass::kNone, false, bn.layers);
  if (n > 1) fused("fused_shared_a", true, false, false, Mass::kNone, false, bn.layers, true);
  fused("fused_mass", true, false, false, Mass::kSumOverAgents, false, bn.layers);
  fused("fused_klora", true, true, false, Mass::kNone, false, bn.layers);
  fused("fused_kdelta", true, false, false, Mass::kNone, true, bn.sdpa_layers);
  fused("fused_prerope", true, false, true, Mass::kNone, false, bn.layers);
  double each_bytes = 0;
  if (n > 1) {
    kernels::LoraAttentionStats* st = &stats.emplace_back();
    vs.push_back({"fused_each", bn.layers, [&bn, st, n, &each_bytes](int64_t l) {
                    each_bytes = 0;
                    for (int64_t a = 0; a < n; ++a) {
                      Bench::Call c = bn.call(l, a, 1, true, false, false, Mass::kNone);
                      c.base.first_agent = 0;
                      Bench::run(c, st);
                      each_bytes += double(st->base_bytes_read + st->residual_bytes_read);
                    }
                  },
                  0, flops_of(cfg, n, true, false)});
  }
  if (!int8) {
    vs.push_back({"sdpa_rebuild", bn.layers, [&bn, n](int64_t l) {
                    for (int64_t a = 0; a < n; ++a) (void)bn.sdpa(a, bn.rebuilt_k(l, a), bn.rebuilt_v(l, a));
                  },
                  double(bn.layer_bytes()), flops_of(cfg, n, false, false)});
    vs.push_back({"sdpa_full", bn.sdpa_layers, [&bn, n](int64_t l) {
                    for (int64_t a = 0; a < n; ++a) (void)bn.sdpa(a, bn.full_k[l][a], bn.full_v[l][a]);
                  },
                  double(n * bn.layer_bytes()), flops_of(cfg, n, false, false)});
  }
  // The same calls over an int8 copy of the base (fused_int8, fused_base_int8), timed in the
  // same repetitions as the float32 ones: their ratio is measured side by side.
  Bench bn8;
  if (cfg.dtype == ElementType::kFloat32) {
    bn8.cfg = cfg;
    bn8.cfg.dtype = ElementType::kInt8;
    bn8.build(footprint);
    auto fused8 = [&](const std::string& name, bool adapters, bool shared_a, std::optional<bool> integer_qk) {
      kernels::LoraAttentionStats* st = &stats.emplace_back();
      stats_of[name] = st;
      vs.push_back({name, bn8.layers, [&bn8, st, n, adapters, shared_a, integer_qk](int64_t l) {
                      Bench::Call c = bn8.call(l, 0, n, adapters, false, false, Mass::kNone, false, shared_a);
                      c.params.integer_qk = integer_qk;
                      Bench::run(c, st);
                    },
                    0, flops_of(cfg, n, adapters, false)});
    };
    if (n == 1) fused8("fused_base_int8", false, false, std::nullopt);
    fused8("fused_int8", true, false, std::nullopt);
    if (n > 1) fused8("fused_shared_a_int8", true, true, std::nullopt);
    if (cpu::has_vnni(cpu::detected_cpu_features(), cpu::selected_vector_path())) {
      fused8("fused_int8_float_qk", true, false, false);
      if (n > 1) fused8("fused_shared_a_int8_float_qk", true, true, false);
    }
  }
  if (!only.empty()) {
    vs.erase(std::remove_if(vs.begin(), vs.end(),
                            [&](const Variant& v) { return std::find(only.begin(), only.end(), v.name) == only.end(); }),
             vs.end());
  }
  time_alternating(vs, min_seconds, reps);
  std::vector<Row> rows;
  for (Variant& v : vs) {
    if (v.name == "fused_each") v.bytes = each_bytes;
    if (stats_of.count(v.name)) {
      const kernels::LoraAttentionStats& st = *stats_of[v.name];
      v.bytes = double(st.base_bytes_read + st.residual_bytes_read + st.mass_bytes_read);
    }
    rows.push_back({cfg, v.name, median(v.per_call), *std::min_element(v.per_call.begin(), v.per_call.end()),
                    *std::max_element(v.per_call.begin(), v.per_call.end()), v.bytes, v.flops});
  }
  return rows;
}

// The plot, one column per shape, mode and dtype (the first rank only, so it stays readable):
// top, microseconds per call against context for the main comparisons (solid: 8 agents or
// the most benchmarked, dashed: 1 agent); bottom, what each option costs against plain
// fused at the same agents (mass, K-LoRA, stored K deltas, keys before RoPE), and integer QK
// against float32 QK on the int8 base.
const char* kPlotScript = R"PY(
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
rank = min(int(r["rank"]) for r in rows)
rows = [r for r in rows if int(r["rank"]) == rank]
panels = sorted({(r["shape"], r["mode"], r["dtype"]) for r in rows})
main = ["fused", "fused_each", "sdpa_full", "sdpa_rebuild", "fused_base", "sdpa_base", "fused_shared_a",
        "fused_int8", "fused_shared_a_int8", "fused_base_int8"]
extra = [(v, "fused") for v in ["fused_mass", "fused_klora", "fused_kdelta", "fused_prerope"]]
extra += [("fused_int8", "fused_int8_float_qk"), ("fused_shared_a_int8", "fused_shared_a_int8_float_qk")]
most = max(int(r["agents"]) for r in rows)
fig, axes = plt.subplots(2, len(panels), figsize=(6 * len(panels), 8), squeeze=False)
for col, panel in enumerate(panels):
    sel = [r for r in rows if (r["shape"], r["mode"], r["dtype"]) == panel]
    us = {(r["variant"], int(r["agents"]), int(r["context"])): float(r["us_per_call"]) for r in sel}
    contexts = sorted({int(r["context"]) for r in sel})
    agents = sorted({int(r["agents"]) for r in sel})
    ax = axes[0][col]
    for i, v in enumerate(main):
        for n in agents:
            pts = [(c, us[(v, n, c)]) for c in contexts if (v, n, c) in us]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}",
                        linestyle="-" if n == most else "--", label=f"{v} x{n}")
    ax.set_xscale("log", base=2); ax.set_yscale("log")
    ax.set_xlabel("context"); ax.set_ylabel("us per layer call")
    ax.set_title(f"{panel[0]} {panel[1]} {panel[2]}, rank {rank}")
    ax.legend(fontsize=7)
    ax = axes[1][col]
    for i, (v, against) in enumerate(extra):
        for n in agents:
            pts = [(c, us[(v, n, c)] / us[(against, n, c)]) for c in contexts if (v, n, c) in us and (against, n, c) in us]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}",
                        linestyle="-" if n == most else "--",
                        label=f"{v} x{n}" + ("" if against == "fused" else f" / {against}"))
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context"); ax.set_ylabel("time / fused (or as labelled) at the same agents")
    ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
)PY";

void plot(const Options& o) {
  std::ifstream py(o.python);
  if (!py) {
    std::cout << "no PNG: " << o.python << " not found (tools/setup_python.sh bench makes it; the CSV has every figure)\n";
    return;
  }
  const std::string script = o.png + ".py";
  std::ofstream(script) << kPlotScript;
  if (lorakv::run_process({o.python, script, o.csv, o.png}).exit_code == 0) {
    std::cout << "plot: " << o.png << "\n";
  } else {
    std::cout << "no PNG: the plot script failed (matplotlib missing?); the CSV has every figure\n";
  }
  std::remove(script.c_str());
}

const char* dtype_name(ElementType t) {
  return t == ElementType::kFloat32 ? "f32" : t == ElementType::kBFloat16 ? "bf16" : "i8";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
    const int64_t llc = last_level_cache_bytes();
    const int64_t footprint = o.footprint_mb > 0 ? o.footprint_mb << 20
                                                 : std::min<int64_t>(std::max<int64_t>(4 * llc, int64_t{256} << 20), int64_t{2} << 30);
    const cpu::CpuFeatures& f = cpu::detected_cpu_features();
    const double stream = o.quick ? stream_read_gbps(int64_t{64} << 20, 1)
                                  : stream_read_gbps(std::max<int64_t>(footprint, int64_t{256} << 20), 5);
    const double peak = gemm_gflops(o.quick ? 512 : 2048);
    std::cout << "machine: " << f.model_name << " (" << cpu::describe_features(f) << ")\n"
              << "vector path: " << cpu::vector_path_name(cpu::selected_vector_path())
              << (cpu::has_vnni(f, cpu::selected_vector_path()) ? " (int8 variants: integer QK, VNNI)" : "") << ", threads "
              << at::get_num_threads() << ", last-level cache " << (llc >> 20) << " MiB, KV footprint cycled "
              << (footprint >> 20) << " MiB\n"
              << "streaming read " << stream << " GB/s, float32 GEMM " << peak << " GFLOP/s (the peak used below)\n"
              << "run it on an idle machine: other load changes every figure\n";
    std::ofstream csv(o.csv);
    if (!csv) throw std::runtime_error("cannot write " + o.csv);
    csv << "shape,dtype,mode,context,agents,rank,variant,us_per_call,us_min,us_max,bytes_per_call,gbps,share_of_stream,gflops,"
           "share_of_peak,path,threads\n";
    for (const Shape& s : o.shapes) {
      for (ElementType dt : o.dtypes) {
        for (const std::string& mode : o.modes) {
          for (int64_t ctx : o.contexts) {
            for (int64_t n : o.agents) {
              for (int64_t r : o.ranks) {
                const Config cfg{s, dt, mode, ctx, n, r};
                std::map<std::string, double> us;
                for (const Row& row : bench_config(cfg, footprint, o.min_seconds, o.reps, o.variants)) {
                  const double gbps = row.bytes / row.seconds / 1e9, gflops = row.flops / row.seconds / 1e9;
                  us[row.variant] = row.seconds * 1e6;
                  csv << s.name << "," << dtype_name(dt) << "," << mode << "," << ctx << "," << n << "," << r << ","
                      << row.variant << "," << row.seconds * 1e6 << "," << row.min_seconds * 1e6 << ","
                      << row.max_seconds * 1e6 << "," << row.bytes << "," << gbps << ","
                      << gbps / stream << "," << gflops << "," << gflops / peak << ","
                      << cpu::vector_path_name(cpu::selected_vector_path()) << "," << at::get_num_threads() << "\n";
                }
                // Speedups are other / fused (> 1: the fused kernel is faster); costs are fused_x / fused - 1.
                std::printf("%-5s %-4s %-7s ctx %5lld agents %lld rank %3lld: fused %9.1f us | sdpa_full/fused %5.2fx"
                            " | sdpa_rebuild/fused %5.2fx | mass %+4.0f%% | klora %+5.0f%% | prerope %+4.0f%%",
                            s.name.c_str(), dtype_name(dt), mode.c_str(), static_cast<long long>(ctx),
                            static_cast<long long>(n), static_cast<long long>(r), us["fused"],
                            us["sdpa_full"] / us["fused"], us["sdpa_rebuild"] / us["fused"],
                            100 * (us["fused_mass"] / us["fused"] - 1), 100 * (us["fused_klora"] / us["fused"] - 1),
                            100 * (us["fused_prerope"] / us["fused"] - 1));
                std::printf(" | kdelta/klora %4.2fx", us["fused_kdelta"] / us["fused_klora"]);
                if (n > 1) std::printf(" | each/one-call %4.2fx", us["fused_each"] / us["fused"]);
                if (n == 1) std::printf(" | base: sdpa/fused %4.2fx", us["sdpa_base"] / us["fused_base"]);
                std::printf("\n");
              }
            }
          }
        }
      }
    }
    csv.close();
    std::cout << "csv: " << o.csv << "\n";
    plot(o);
  } catch (const std::exception& e) {
    std::cerr << "lora_attention_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
