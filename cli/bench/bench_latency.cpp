// cli/bench/bench_latency.cpp: what sharing buys in time, as ratios against `full` measured in
// one run with the modes alternated per repetition:
//   - time to first token of an agent joining a context of real text another agent has
//     processed: it processes what its mode needs of the context, then its header as
//     private tokens, and has the logits of its first token (each repetition, another agent
//     with an adapter of its own joins the same context, so nothing of an earlier joiner
//     is reused);
//   - aggregate decode tokens/s of 8 agents (the shared-A role adapters and synthetic ones)
//     on one shared context, every agent's next token in one engine step.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

const std::vector<SharingMode> kModes = {SharingMode::kFull, SharingMode::kFullShared, SharingMode::kBaseShared,
                                         SharingMode::kBaseLrShared};

runtime::EngineOptions sized(int64_t base_rows, int64_t residual_rows) {
  runtime::EngineOptions eo;
  eo.base_rows = base_rows;
  eo.residual_rows = residual_rows;
  return eo;
}

double now() { return bench_seconds(); }

// The writer and the one agent joining (time_to_first_token removes each joiner again).
constexpr int64_t kAgentsAtJoin = 2;

// One context of real text another agent has processed; each joining agent is added to it,
// timed, and removed.
struct JoinSide {
  std::unique_ptr<runtime::Engine> engine;
  runtime::ContextId ctx;
};

JoinSide prepare_join(BenchWorkload& w, SharingMode mode, const std::vector<int32_t>& text, int64_t joins) {
  JoinSide s;
  const int64_t rows = (joins + 1) * (static_cast<int64_t>(text.size()) + 64);
  s.engine = std::make_unique<runtime::Engine>(w.model(), sized(rows, rows));
  s.ctx = s.engine->create_context({mode, SharedWriter::kFirst}, {w.shared_a[0]});
  s.engine->append(s.ctx, text);
  s.engine->prefill({s.ctx, 0});  // another agent processed the context (not timed)
  return s;
}

// Seconds from a new agent's joining to its first token's logits: it processes what its
// mode needs of the context, then its header as private tokens.
double time_to_first_token(BenchWorkload& w, JoinSide& s, const AdapterPtr& joiner) {
  const double start = now();
  const int32_t r = s.engine->add_reader(s.ctx, joiner);
  s.engine->prefill({s.ctx, r});
  runtime::StepWork work;
  work.reader = {s.ctx, r};
  work.kind = runtime::StepWork::Kind::kPrivate;
  work.tokens = w.encode("<|im_start|>actor\n");
  const runtime::StepResult res = s.engine->step({work});
  (void)res.outputs.at(0).logits.argmax().item<int64_t>();
  const double seconds = now() - start;
  // It leaves again (not timed): every repetition joins a context of two agents, the writer
  // and itself, as latency.csv's agents column says.
  s.engine->remove_reader({s.ctx, r});
  return seconds;
}

struct DecodeSide {
  std::unique_ptr<runtime::Engine> engine;
  runtime::ContextId ctx;
  std::vector<int32_t> next;  // each agent's next token
};

DecodeSide prepare_decode(BenchWorkload& w, SharingMode mode, const std::vector<int32_t>& text, int64_t agents) {
  DecodeSide s;
  const std::vector<AdapterPtr> readers = w.shared_a_agents(agents);
  const int64_t rows = static_cast<int64_t>(text.size()) + 512;
  const int64_t base_copies = mode == SharingMode::kFull ? agents : 1;
  const int64_t residual_copies = mode == SharingMode::kBaseShared ? agents : 1;
  s.engine = std::make_unique<runtime::Engine>(w.model(), sized(base_copies * rows + agents * 512, residual_copies * rows));
  s.ctx = s.engine->create_context({mode, SharedWriter::kFirst}, readers);
  s.engine->append(s.ctx, text);
  std::vector<runtime::StepWork> work;
  for (int32_t r = 0; r < static_cast<int32_t>(agents); ++r) {
    std::fprintf(stderr, "[%7.1f s] decode setup: %s, agent %d prefills %zu tokens ...\n", bench_seconds(),
                 runtime::sharing_mode_name(mode), r, text.size());
    s.engine->prefill({s.ctx, r});
    runtime::StepWork wk;
    wk.reader = {s.ctx, r};
    wk.kind = runtime::StepWork::Kind::kPrivate;
    wk.tokens = w.encode("<|im_start|>planner\n");
    work.push_back(wk);
  }
  const runtime::StepResult res = s.engine->step(work);
  for (const runtime::StepOutput& o : res.outputs) s.next.push_back(static_cast<int32_t>(o.logits[-1].argmax().item<int64_t>()));
  return s;
}

// Seconds for `steps` steps of every agent's next token (greedy).
double decode_steps(DecodeSide& s, int64_t steps) {
  const double start = now();
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<runtime::StepWork> work;
    for (size_t r = 0; r < s.next.size(); ++r) {
      runtime::StepWork wk;
      wk.reader = {s.ctx, static_cast<int32_t>(r)};
      wk.kind = runtime::StepWork::Kind::kPrivate;
      wk.tokens = {s.next[r]};
      work.push_back(wk);
    }
    const runtime::StepResult res = s.engine->step(work);
    LORAKV_CHECK(res.ok, InternalError, "decode benchmark ran out of cache");
    for (size_t r = 0; r < s.next.size(); ++r) s.next[r] = static_cast<int32_t>(res.outputs[r].logits[0].argmax().item<int64_t>());
  }
  return now() - start;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void run_latency(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  const std::string path = o.out_dir + "/latency.csv";
  std::ofstream csv(path);
  csv << "metric,context_tokens,agents,mode,median_seconds,tokens_per_second,ratio_vs_full,repetitions\n";

  // Time to first token of a joining agent, 2K context; the modes rotate per repetition.
  const std::vector<int32_t> text2k = w.real_text(2048);
  const std::vector<AdapterPtr> joiners = w.shared_a_agents(o.repetitions + 1);
  std::map<SharingMode, JoinSide> joins;
  for (SharingMode m : kModes) joins.emplace(m, prepare_join(w, m, text2k, o.repetitions));
  std::map<SharingMode, std::vector<double>> ttft;
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    for (size_t k = 0; k < kModes.size(); ++k) {
      const SharingMode m = kModes[(k + static_cast<size_t>(rep)) % kModes.size()];
      std::fprintf(stderr, "[%7.1f s] time to first token: repetition %lld, %s ...\n", bench_seconds(),
                   static_cast<long long>(rep + 1), runtime::sharing_mode_name(m));
      ttft[m].push_back(time_to_first_token(w, joins.at(m), joiners[static_cast<size_t>(rep) + 1]));
    }
  }
  out << "\nTime to first token of an agent joining a 2048-token context another agent processed (median of "
      << o.repetitions << ", modes alternated)\n| mode | seconds | ratio vs full | aim |\n| --- | ---: | ---: | --- |\n";
  const double full_ttft = median(ttft[SharingMode::kFull]);
  for (SharingMode m : kModes) {
    const double s = median(ttft[m]), ratio = s / full_ttft;
    csv << "ttft_join," << text2k.size() << "," << kAgentsAtJoin << "," << runtime::sharing_mode_name(m) << "," << s << ",," << ratio << ","
        << o.repetitions << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "| %s | %.3f | %.3fx | %s |\n", runtime::sharing_mode_name(m), s, ratio,
                  m == SharingMode::kBaseLrShared ? (ratio <= 0.1 ? "<= 0.1x: met" : "<= 0.1x: missed") : "");
    out << line;
  }

  // Aggregate decode of 8 agents on one context.
  const int64_t agents = 8, steps = 8;
  for (int64_t t : o.decode_lengths) {
    const std::vector<int32_t> text = w.real_text(t);
    std::map<SharingMode, DecodeSide> sides;
    for (SharingMode m : kModes) sides.emplace(m, prepare_decode(w, m, text, agents));
    std::map<SharingMode, std::vector<double>> secs;
    for (int64_t rep = 0; rep < o.repetitions; ++rep) {
      for (size_t k = 0; k < kModes.size(); ++k) {
        const SharingMode m = kModes[(k + static_cast<size_t>(rep)) % kModes.size()];
        secs[m].push_back(decode_steps(sides.at(m), steps));
      }
    }
    out << "\nAggregate decode, " << agents << " agents on one " << t << "-token context (" << steps
        << " steps per repetition, median of " << o.repetitions << ", modes alternated)\n"
        << "| mode | tokens/s | ratio vs full | aim |\n| --- | ---: | ---: | --- |\n";
    const double full_tps = static_cast<double>(agents * steps) / median(secs[SharingMode::kFull]);
    for (SharingMode m : kModes) {
      const double s = median(secs[m]), tps = static_cast<double>(agents * steps) / s, ratio = tps / full_tps;
      csv << "decode_aggregate," << t << "," << agents << "," << runtime::sharing_mode_name(m) << "," << s << "," << tps
          << "," << ratio << "," << o.repetitions << "\n";
      char line[200];
      std::snprintf(line, sizeof line, "| %s | %.1f | %.2fx | %s |\n", runtime::sharing_mode_name(m), tps, ratio,
                    m == SharingMode::kFull ? "" : (ratio >= 2.0 ? ">= 2x: met" : ">= 2x: missed"));
      out << line;
    }
  }
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
