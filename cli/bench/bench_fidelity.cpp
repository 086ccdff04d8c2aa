// cli/bench/bench_fidelity.cpp: what sharing costs in answers. Held-out agentic QA
// trajectories are replayed teacher-forced, turn by turn, with the three trained role
// adapters of a set as the readers of one context: each role turn runs as the role's
// private tokens (header, text, <|im_end|>) after the shared context and is then committed
// to it; other turns are appended as text. Every mode and writer that can serve the set is
// compared with `full` (the exact per-agent baseline) on the logits of the role turns' text:
// per-token KL(full || mode) and top-1 agreement. The set `alora_twins` is the all-linear
// roles' factors as activated LoRA (invoked by their turn headers): `full` is then each
// agent's exact aLoRA forward, and the shared modes match it up to float32 rounding where the
// base model (or an aLoRA reader) writes the shared rows. Short contexts are single trajectories;
// long ones append several until about 2K tokens, to see the difference grow with length.
// The replays run on dense float32 weights: the reference semantics, and fast for the many
// short steps of a turn-by-turn replay.
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"

namespace lorakv::cli {

namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

int role_index(const std::string& role) {
  if (role == "planner") return 0;
  if (role == "actor") return 1;
  if (role == "reflector") return 2;
  return -1;
}

}  // namespace

at::Tensor replay_role_turns(BenchWorkload& w, const std::vector<AdapterPtr>& readers, runtime::ContextOptions mode,
                             const std::vector<const BenchTrajectory*>& trajectories, bool per_head_token_sets,
                             bool every_agent_reads) {
  runtime::EngineOptions eo;
  eo.per_head_token_sets = per_head_token_sets;
  eo.base_rows = 4 * 4096;
  eo.residual_rows = 4 * 4096;
  runtime::Engine engine(w.dense_model(), eo);
  const runtime::ContextId ctx = engine.create_context(mode, readers);
  const std::vector<int32_t> newline = w.encode("\n");
  std::vector<at::Tensor> turn_logits;
  for (const BenchTrajectory* t : trajectories) {
    for (const BenchTurn& turn : t->turns) {
      const std::vector<int32_t> header = w.encode("<|im_start|>" + turn.role + "\n");
      std::vector<int32_t> body = w.encode(turn.text);
      body.push_back(w.im_end);
      const int r = role_index(turn.role);
      if (r < 0) {
        std::vector<int32_t> all = header;
        all.insert(all.end(), body.begin(), body.end());
        all.insert(all.end(), newline.begin(), newline.end());
        engine.append(ctx, all);
        continue;
      }
      // The role's turn teacher-forced after the context, every row's logits; with
      // every_agent_reads the others run the same tokens beside it in the same step (each
      // has processed the context first, so the private work is all that is left).
      runtime::prefill(engine, {ctx, r});
      std::vector<runtime::DriverJob> jobs(1);
      jobs[0].reader = {ctx, r};
      jobs[0].suffix = header;
      jobs[0].suffix.insert(jobs[0].suffix.end(), body.begin(), body.end());
      jobs[0].all_logits = true;
      at::Tensor logits;  // float32 [header + body, vocab]
      jobs[0].on_output = [&](const runtime::StepOutput& out) { logits = out.logits; };
      for (int32_t other = 0; every_agent_reads && other < static_cast<int32_t>(readers.size()); ++other) {
        if (other == r) continue;
        runtime::prefill(engine, {ctx, other});
        runtime::DriverJob along;
        along.reader = {ctx, other};
        along.suffix = jobs[0].suffix;
        jobs.push_back(std::move(along));
      }
      runtime::Driver(engine).run(jobs);
      for (size_t i = 1; i < jobs.size(); ++i) engine.drop_private(jobs[i].reader);
      // Row i predicts token i + 1: the text's tokens are predicted from the header's last on.
      turn_logits.push_back(logits.narrow(0, static_cast<int64_t>(header.size()) - 1, static_cast<int64_t>(body.size())));
      engine.commit_private({ctx, r});
      engine.append(ctx, newline);
    }
  }
  return at::cat(turn_logits, 0);
}

void compare_logits(const at::Tensor& full, const at::Tensor& mode, Fidelity& f) {
  const at::Tensor lp = at::log_softmax(full.to(at::kDouble), -1), lq = at::log_softmax(mode.to(at::kDouble), -1);
  const at::Tensor kl = (lp.exp() * (lp - lq)).sum(-1);  // [tokens]
  f.kl_sum += kl.sum().item<double>();
  f.kl_max = std::max(f.kl_max, kl.max().item<double>());
  f.agree += full.argmax(-1).eq(mode.argmax(-1)).sum().item<int64_t>();
  f.tokens += full.size(0);
}

namespace {

// Held-out trajectories appended one after another until about `tokens` tokens.
std::vector<const BenchTrajectory*> trajectories_of_about(BenchWorkload& w, int64_t tokens, size_t& next) {
  std::vector<const BenchTrajectory*> group;
  int64_t total = 0;
  while (total < tokens) {
    const BenchTrajectory* t = &w.held_out[next++ % w.held_out.size()];
    for (const BenchTurn& turn : t->turns) total += static_cast<int64_t>(w.encode(turn.text).size()) + 6;
    group.push_back(t);
  }
  return group;
}

}  // namespace

std::vector<const BenchTrajectory*> long_trajectory(BenchWorkload& w, int64_t tokens, size_t first) {
  return trajectories_of_about(w, tokens, first);
}

void run_fidelity(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  // Short: single trajectories; long: consecutive trajectories appended to ~2K tokens.
  std::vector<std::pair<std::string, std::vector<const BenchTrajectory*>>> contexts;
  size_t next = 0;
  for (int64_t i = 0; i < o.fidelity_trajectories; ++i) contexts.push_back({"short", {&w.held_out[next++ % w.held_out.size()]}});
  for (int64_t l = 0; l < (o.full_grid ? 3 : 1); ++l) contexts.push_back({"long", trajectories_of_about(w, 2000, next)});
  struct Case {
    std::string set;
    runtime::ContextOptions mode;
  };
  std::vector<Case> cases;
  for (const std::string set : {"all_linear", "qv_shared_a", "alora_twins"}) {
    for (SharedWriter wr : {SharedWriter::kFirst, SharedWriter::kBase}) {
      cases.push_back({set, {SharingMode::kFullShared, wr}});
      cases.push_back({set, {SharingMode::kBaseShared, wr}});
      if (set != "all_linear") cases.push_back({set, {SharingMode::kBaseLrShared, wr}});
    }
  }
  std::map<std::string, Fidelity> results;  // set|mode|writer|length
  for (const auto& [length, trajs] : contexts) {
    for (const std::string set : {"all_linear", "qv_shared_a", "alora_twins"}) {
      // --quick: the long context with the shared-A set only (every mode can serve it), and
      // the aLoRA twins (every mode serves them; exact where the base model writes the rows).
      if (length == "long" && set == "all_linear" && !o.full_grid) continue;
      const std::vector<AdapterPtr> readers =
          set == "all_linear" ? w.all_linear : set == "qv_shared_a" ? w.shared_a : w.alora_roles();
      std::fprintf(stderr, "[%7.1f s] fidelity: %s context of %zu trajectories, set %s ...\n", bench_seconds(), length.c_str(),
                   trajs.size(), set.c_str());
      const at::Tensor full = replay_role_turns(w, readers, {SharingMode::kFull, SharedWriter::kFirst}, trajs);
      for (const Case& c : cases) {
        if (c.set != set) continue;
        const std::string key = set + "|" + runtime::sharing_mode_name(c.mode.mode) + "|" +
                                runtime::shared_writer_name(c.mode.writer) + "|" + length;
        compare_logits(full, replay_role_turns(w, readers, c.mode, trajs), results[key]);
      }
    }
  }
  const std::string path = o.out_dir + "/fidelity.csv";
  std::ofstream csv(path);
  csv << "adapter_set,mode,writer,context,tokens,mean_kl,max_kl,top1_agreement\n";
  out << "\nFidelity against full (teacher-forced role turns of held-out trajectories; KL(full || mode) in nats per token)\n"
         "| adapter set | mode | writer | context | tokens | mean KL | max KL | top-1 agreement |\n"
         "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const auto& [key, f] : results) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t p = key.find('|'); p != std::string::npos; start = p + 1, p = key.find('|', start)) parts.push_back(key.substr(start, p - start));
    parts.push_back(key.substr(start));
    const double mean = f.kl_sum / static_cast<double>(f.tokens), agree = static_cast<double>(f.agree) / static_cast<double>(f.tokens);
    csv << parts[0] << "," << parts[1] << "," << parts[2] << "," << parts[3] << "," << f.tokens << "," << mean << ","
        << f.kl_max << "," << agree << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %lld | %.4f | %.3f | %.4f |\n", parts[0].c_str(), parts[1].c_str(),
                  parts[2].c_str(), parts[3].c_str(), static_cast<long long>(f.tokens), mean, f.kl_max, agree);
    out << line;
  }
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
