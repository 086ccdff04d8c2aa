// bench/quant_matmul_bench.cpp: one projection y = x · W^T with the weight kept in 4- or
// 8-bit blocks (kernels/QuantMatrix) against dense float32 and bfloat16 at::linear, for the
// SmolLM2 shapes, M = 1, 8 and 16 rows, on every vector path this CPU has, with float32
// activations (<format>_<path>) and with int8 activations and integer dot products
// (<format>_int8_<path>, "vnni" appended where the path has the fused form; the activations'
// quantisation is timed with it), and against ATen's CPU int4 weight-only matmul
// (_weight_int4pack_mm_for_cpu, group 32) on the same q4 blocks. Many matrices of a shape are
// cycled (more bytes than the last-level cache) so every call reads memory. Reports µs per
// call, GB/s of weights read, share of the measured streaming bandwidth, and GFLOP/s;
// alternates the variants per repetition (bench_common.h); prints the int8 / float32 speed
// ratio per path. CSV to --csv; with --python (matplotlib), a PNG of GB/s against the
// streaming bandwidth beside it (--png).
//
// --resident uses one matrix per shape instead, so weights stay in cache: the kernels'
// compute limit, apart from memory. --quick: one short repetition (proves the binary runs).
//
// usage: lorakv_quant_matmul_bench [--reps 5] [--seconds 2] [--threads N] [--resident] [--quick]
//          [--csv FILE] [--python PY] [--png FILE]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/subprocess.h"
#include "lorakv/kernels/quant_matrix.h"

namespace {

using namespace lorakv;
using namespace lorakv::bench;

struct Shape {
  const char* name;
  int64_t rows, cols;
};

// SmolLM2-135M: fused q|k|v, o, fused gate|up, down, and the tied Q8_0 output head.
const Shape kShapes[] = {{"qkv", 960, 576},   {"o", 576, 576},        {"gate_up", 3072, 576},
                         {"down", 576, 1536}, {"lm_head", 49152, 576}};

struct Options {
  int reps = 5;
  double seconds = 2.0;
  int threads = 0;
  bool resident = false;  // one matrix per shape: weights come from cache (the compute limit)
  std::string csv = LORAKV_BENCH_RESULTS_DIR "/quant_matmul.csv";
  std::string python;  // with matplotlib, for the PNG
  std::string png;     // default: the CSV's name with .png
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--seconds") o.seconds = std::stod(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--csv") o.csv = next();
    else if (a == "--resident") o.resident = true;
    else if (a == "--quick") o.reps = 1, o.seconds = 0.01;
    else if (a == "--python") o.python = next();
    else if (a == "--png") o.png = next();
    else throw std::runtime_error("unknown option " + a + " (usage at the top of bench/quant_matmul_bench.cpp)");
  }
  if (o.png.empty()) o.png = o.csv.substr(0, o.csv.rfind('.')) + ".png";
  return o;
}

// GB/s per variant, one panel per shape and M, the streaming bandwidth as a line.
const char* kPlotScript = R"PY(import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
shapes = list(dict.fromkeys(r["shape"] for r in rows))
ms = list(dict.fromkeys(r["m"] for r in rows))
variants = list(dict.fromkeys(r["variant"] for r in rows))
stream = float(sys.argv[4])
fig, axes = plt.subplots(len(shapes), len(ms), figsize=(3.4 * len(ms), 2.9 * len(shapes)), squeeze=False)
for i, shape in enumerate(shapes):
    for j, m in enumerate(ms):
        ax = axes[i][j]
        rs = [r for r in rows if r["shape"] == shape and r["m"] == m]
        ax.bar(range(len(rs)), [float(r["gbps"]) for r in rs],
               color=["C%d" % (variants.index(r["variant"]) % 10) for r in rs])
        ax.axhline(stream, color="k", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([r["variant"] for r in rs], rotation=70, ha="right", fontsize=6)
        ax.set_title("%s (%s x %s), M=%s" % (shape, rs[0]["rows"], rs[0]["cols"], m), fontsize=8)
        if j == 0:
            ax.set_ylabel("GB/s of weights read", fontsize=7)
fig.suptitle(sys.argv[3] + "; dashed: streaming read %.1f GB/s" % stream, fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
)PY";

// `count` random matrices of one shape in every form, cycled by the variants.
struct Matrices {
  std::vector<at::Tensor> f32, bf16;
  std::vector<kernels::QuantMatrix> quant;
  // ATen's CPU int4 weight-only matmul on the same q4 blocks (group 32): packed codes, and
  // scales and zeros [cols / 32, rows, 2] per activation dtype, with zero = m + 8d since
  // ATen computes (q - 8)·scale + zero.
  std::vector<at::Tensor> int4_packed, int4_sz_f32, int4_sz_bf16;
};

// The q4 codes of `q` as int32 [rows, cols] in element order.
at::Tensor q4_codes(const kernels::QuantMatrix& q) {
  const kernels::QuantMatrixView v = q.view();
  at::Tensor out = at::empty({v.rows, v.cols}, at::kInt);
  int32_t* o = out.data_ptr<int32_t>();
  for (int64_t r = 0; r < v.rows; ++r) {
    const uint8_t* row = v.codes + r * v.code_bytes_per_row();
    for (int64_t b = 0; b < v.blocks_per_row(); ++b) {
      for (int j = 0; j < 32; ++j) o[r * v.cols + b * 32 + j] = kernels::q4_code(v, row, b, j);
    }
  }
  return out;
}

void add_aten_int4(Matrices& m, const kernels::QuantMatrix& q) {
  const kernels::QuantMatrixView v = q.view();
  const at::Tensor d = at::from_blob(const_cast<uint16_t*>(v.scales), {v.rows, v.blocks_per_row()}, at::kShort)
                           .view(at::kHalf).to(at::kFloat);
  const at::Tensor mn = at::from_blob(const_cast<uint16_t*>(v.mins), {v.rows, v.blocks_per_row()}, at::kShort)
                            .view(at::kHalf).to(at::kFloat);
  const at::Tensor sz = at::stack({d, mn + 8 * d}, 2).transpose(0, 1).contiguous();  // [nb, rows, 2]
  m.int4_packed.push_back(at::_convert_weight_to_int4pack_for_cpu(q4_codes(q), 2));
  m.int4_sz_f32.push_back(sz);
  m.int4_sz_bf16.push_back(sz.to(at::kBFloat16));
}

// "q4_int8_avx512vnni": the integer kernel linear() runs on `path` here.
std::string int8_variant(kernels::QuantFormat format, cpu::VectorPath path) {
  return std::string(kernels::quant_format_name(format)) + "_int8_" + cpu::vector_path_name(path) +
         (cpu::has_vnni(cpu::detected_cpu_features(), path) ? "vnni" : "");
}

Matrices make_matrices(const Shape& s, kernels::QuantFormat format, int64_t count) {
  Matrices m;
  for (int64_t i = 0; i < count; ++i) {
    const at::Tensor w = at::randn({s.rows, s.cols}) * 0.05;
    m.f32.push_back(w);
    m.bf16.push_back(w.to(at::kBFloat16));
    m.quant.push_back(kernels::QuantMatrix::quantize(w, format));
    if (format == kernels::QuantFormat::kQ4) add_aten_int4(m, m.quant.back());
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.threads > 0) at::set_num_threads(o.threads);
    const cpu::CpuFeatures& cpu_features = cpu::detected_cpu_features();
    const double stream = stream_read_gbps(int64_t{512} << 20, 5);
    const int64_t llc = last_level_cache_bytes();
    std::printf("machine: %s (%s), %d threads, streaming read %.1f GB/s, last-level cache %lld MiB\n",
                cpu::cpu_model_name().c_str(), cpu::describe_features(cpu_features).c_str(), at::get_num_threads(),
                stream, static_cast<long long>(llc >> 20));
    std::printf("device: cpu; activations float32; weights q4 (GGUF Q4_1 blocks) or q8 (lm_head, Q8_0) vs dense\n");
    std::ofstream csv(o.csv);
    csv << "cpu,threads,resident,shape,rows,cols,m,variant,us_per_call,us_min,us_max,weight_bytes,gbps,share_of_stream,gflops\n";
    for (const Shape& s : kShapes) {
      const kernels::QuantFormat format =
          std::string(s.name) == "lm_head" ? kernels::QuantFormat::kQ8 : kernels::QuantFormat::kQ4;
      // Enough copies that the float32 set is 4x the last-level cache (at least 2).
      const int64_t f32_bytes = s.rows * s.cols * 4;
      const int64_t count =
          o.resident ? 1 : std::max<int64_t>(2, std::min<int64_t>(64, 4 * llc / f32_bytes + 1));
      const Matrices mats = make_matrices(s, format, count);
      for (int64_t m : {1, 8, 16}) {
        const at::Tensor x = at::randn({m, s.cols});
        const at::Tensor xb = x.to(at::kBFloat16);
        std::vector<Variant> vs;
        auto add = [&](const std::string& name, double bytes, std::function<void(int64_t)> fn) {
          Variant v;
          v.name = name;
          v.layers = count;
          v.fn = std::move(fn);
          v.bytes = bytes;
          v.flops = 2.0 * double(m) * double(s.rows) * double(s.cols);
          vs.push_back(std::move(v));
        };
        add("dense_f32", double(f32_bytes), [&](int64_t i) { (void)at::linear(x, mats.f32[i]); });
        add("dense_bf16", double(f32_bytes) / 2, [&](int64_t i) { (void)at::linear(xb, mats.bf16[i]); });
        for (cpu::VectorPath p : cpu::supported_vector_paths(cpu_features)) {
          if (p == cpu::VectorPath::kScalar && s.rows > 4096) continue;  // minutes per call set
          add(std::string(kernels::quant_format_name(format)) + "_" + cpu::vector_path_name(p),
              double(mats.quant[0].nbytes()), [&, p](int64_t i) { (void)mats.quant[i].linear(x, p); });
          add(int8_variant(format, p), double(mats.quant[0].nbytes()),
              [&, p](int64_t i) { (void)mats.quant[i].linear(x, p, kernels::QuantActivations::kInt8); });
        }
        if (format == kernels::QuantFormat::kQ4) {
          const double bytes = double(mats.quant[0].nbytes());
          add("aten_int4_bf16", bytes,
              [&](int64_t i) { (void)at::_weight_int4pack_mm_for_cpu(xb, mats.int4_packed[i], 32, mats.int4_sz_bf16[i]); });
          add("aten_int4_f32", bytes,
              [&](int64_t i) { (void)at::_weight_int4pack_mm_for_cpu(x, mats.int4_packed[i], 32, mats.int4_sz_f32[i]); });
        }
        time_alternating(vs, o.seconds * double(vs.size()), o.reps);
        for (Variant& v : vs) {
          const double t = median(v.per_call);
          const double lo = *std::min_element(v.per_call.begin(), v.per_call.end());
          const double hi = *std::max_element(v.per_call.begin(), v.per_call.end());
          const double gbps = v.bytes / t / 1e9;
          std::printf("%-8s M=%lld %-12s %9.1f us  %6.2f GB/s (%3.0f%% of stream)  %6.1f GFLOP/s\n", s.name,
                      static_cast<long long>(m), v.name.c_str(), t * 1e6, gbps, 100 * gbps / stream,
                      v.flops / t / 1e9);
          csv << '"' << cpu::cpu_model_name() << "\"," << at::get_num_threads() << ',' << o.resident << ',' << s.name << ',' << s.rows
              << ',' << s.cols << ',' << m << ',' << v.name << ',' << t * 1e6 << ',' << lo * 1e6 << ',' << hi * 1e6
              << ',' << v.bytes << ',' << gbps << ',' << gbps / stream << ',' << v.flops / t / 1e9 << '\n';
        }
        // int8 against float32 activations per path, as ratios of medians measured in this run.
        for (const Variant& fv : vs) {
          for (const Variant& iv : vs) {
            for (cpu::VectorPath p : cpu::supported_vector_paths(cpu_features)) {
              if (fv.name != std::string(kernels::quant_format_name(format)) + "_" + cpu::vector_path_name(p) ||
                  iv.name != int8_variant(format, p)) {
                continue;
              }
              std::printf("%-8s M=%lld %s is %.2fx the speed of %s\n", s.name, static_cast<long long>(m),
                          iv.name.c_str(), median(fv.per_call) / median(iv.per_call), fv.name.c_str());
            }
          }
        }
      }
    }
    csv.close();
    std::printf("csv: %s\n", o.csv.c_str());
    if (!o.python.empty()) {
      const std::string script = o.csv + ".plot.py";
      std::ofstream(script) << kPlotScript;
      const std::string title = cpu::cpu_model_name() + ", " + std::to_string(at::get_num_threads()) +
                                " threads, cpu, float32 or int8 activations";
      int rc = -1;
      try {
        rc = lorakv::run_process({o.python, script, o.csv, o.png, title, std::to_string(stream)}).exit_code;
      } catch (const std::exception& e) {  // no such Python: the CSV stands alone
        std::printf("%s\n", e.what());
      }
      std::printf(rc == 0 ? "png: %s\n" : "no PNG (%s): the plot failed; does --python have matplotlib?\n", o.png.c_str());
      std::remove(script.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lorakv_quant_matmul_bench: %s\n", e.what());
    return 1;
  }
}
