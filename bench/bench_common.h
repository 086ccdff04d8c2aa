// bench/bench_common.h: what every lorakv benchmark shares: timing of alternating
// variants (each repetition runs every side, in an order rotated per repetition, so drift
// in the machine's load falls on all sides alike), the median, and the machine's own
// limits (streaming-read bandwidth, a GEMM's FLOP/s, the last-level cache size).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace lorakv::bench {

int64_t last_level_cache_bytes() {
  for (int index = 4; index >= 0; --index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string size;
    if (!(in >> size) || size.empty()) continue;
    const int64_t n = std::stoll(size);
    const char unit = size.back();
    return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n;
  }
  return int64_t{32} << 20;
}

template <typename Fn>
double seconds_of(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One side of a comparison: fn(layer) runs one layer's call; each variant cycles its own
// layers (as many as fit its footprint) so every call reads memory, not cache.
struct Variant {
  std::string name;
  int64_t layers = 1;
  std::function<void(int64_t)> fn;
  double bytes = 0, flops = 0;  // per call; fused variants fill bytes from the kernel's stats
  int64_t next_layer = 0, calls_per_rep = 1;
  std::vector<double> per_call;  // seconds, one per repetition
  void call() {
    fn(next_layer);
    next_layer = (next_layer + 1) % layers;
  }
};

// Times every variant `reps` times, in an order rotated by one per repetition, so drift in
// the machine's load falls on all sides alike; each repetition of a variant runs enough calls
// for about min_seconds / reps. The figure reported is the median repetition.
void time_alternating(std::vector<Variant>& vs, double min_seconds, int reps) {
  for (Variant& v : vs) {
    v.call();  // warm-up: scratch, thread pool, first touch
    const double t = seconds_of([&] { v.call(); });
    v.calls_per_rep = std::max<int64_t>(1, static_cast<int64_t>(min_seconds / reps / std::max(t, 1e-7)));
  }
  const size_t n = vs.size();
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < n; ++k) {
      Variant& v = vs[(static_cast<size_t>(rep) + k) % n];
      const double total = seconds_of([&] {
        for (int64_t c = 0; c < v.calls_per_rep; ++c) v.call();
      });
      v.per_call.push_back(total / static_cast<double>(v.calls_per_rep));
    }
  }
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const size_t m = x.size() / 2;
  return x.size() % 2 ? x[m] : 0.5 * (x[m - 1] + x[m]);
}

// Streaming read: at::sum over a buffer of `bytes`, best of `repeats`.
double stream_read_gbps(int64_t bytes, int repeats) {
  const at::Tensor x = at::ones({bytes / 4}, at::kFloat);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) best = std::min(best, seconds_of([&] { (void)x.sum().item<float>(); }));
  return static_cast<double>(bytes) / best / 1e9;
}

// The practical float32 peak: an n^3 GEMM, best of 7 after a warm-up (the first calls pay
// for thread start-up and page faults; best of 3 read as low as half the peak).
double gemm_gflops(int64_t n) {
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  (void)at::mm(a, b).sum().item<float>();
  double best = 1e30;
  for (int i = 0; i < 7; ++i) best = std::min(best, seconds_of([&] { (void)at::mm(a, b).sum().item<float>(); }));
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}


}  // namespace lorakv::bench
