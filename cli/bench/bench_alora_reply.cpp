// cli/bench/bench_alora_reply.cpp: what an aLoRA reply's second pass costs, and what moving it
// into the decode steps would cost instead. An aLoRA agent's reply is generated with its
// adapter, but the shared context wants the base model's rows for it, so at commit the reply
// is processed again with the base weights, as a batch (`Engine::commit_private`). The
// alternative the sharing issue names is a base-weight row beside each adapted decode row, in
// the same step. Both are timed here on one context, alternated per repetition:
//   - commit pass: one aLoRA agent decodes its reply alone, then commits it and the base rows
//     are written (commit_private and the context work it leaves), per reply row;
//   - a base row in each step: the same agent decodes beside the base model (a reader with no
//     adapter), which runs one row per step over the same context and its own rows so far,
//     as a fused base pass would; the step's extra time over the agent alone, per reply row.
//     (The base reader also computes its row's logits, which a fused pass would not need: an
//     upper bound by one row of the output head.)
// Beside them, what keeping a standard agent's rows for its commit saves (writer `author`'s
// fast form, EngineOptions::keep_author_rows): the same reply by the qv_shared_a planner in
// `base_lr_shared:author`, processed again by its author at commit (the plain form) against
// adopted (the fast form), decode steps and commit timed on each.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/driver.h"

namespace lorakv::cli {
namespace {

using runtime::ContextId;
using runtime::SharedWriter;
using runtime::SharingMode;

constexpr int64_t kReplyTokens = 48;  // generated tokens after the turn header

// A fresh engine with the aLoRA planner (and, with_base_reader, the base model) reading a
// context of `text`, processed (not timed).
struct ReplySide {
  std::unique_ptr<runtime::Engine> engine;
  ContextId ctx;
};
ReplySide prepare(BenchWorkload& w, const std::vector<AdapterPtr>& readers, const std::vector<int32_t>& text,
                  SharedWriter writer = SharedWriter::kFirst, bool keep_author_rows = false) {
  ReplySide s;
  runtime::EngineOptions eo;
  eo.keep_author_rows = keep_author_rows;
  eo.base_rows = static_cast<int64_t>(text.size()) + 4 * (kReplyTokens + 64);
  eo.residual_rows = eo.base_rows;
  s.engine = std::make_unique<runtime::Engine>(w.model(), eo);
  s.ctx = s.engine->create_context({SharingMode::kBaseLrShared, writer}, readers);
  s.engine->append(s.ctx, text);
  for (int32_t r = 0; r < static_cast<int32_t>(readers.size()); ++r) runtime::prefill(*s.engine, {s.ctx, r});
  return s;
}

// Every reader of the side decodes kReplyTokens greedy tokens after `header`; returns the
// mean seconds of a decode step (the header's step excluded).
double decode_reply(ReplySide& s, const std::vector<int32_t>& header) {
  const auto readers = static_cast<int32_t>(s.engine->num_readers(s.ctx));
  std::vector<runtime::DriverJob> jobs(static_cast<size_t>(readers));
  for (int32_t r = 0; r < readers; ++r) {
    jobs[static_cast<size_t>(r)].reader = {s.ctx, r};
    jobs[static_cast<size_t>(r)].suffix = header;
    jobs[static_cast<size_t>(r)].next = [taken = int64_t{0}](const at::Tensor& logits) mutable -> std::optional<int32_t> {
      if (taken++ == kReplyTokens) return std::nullopt;
      return static_cast<int32_t>(logits.argmax().item<int64_t>());
    };
  }
  double start = 0;
  int64_t steps = 0;
  runtime::Driver driver(*s.engine, [&](runtime::Engine&, const runtime::StepResult& res) {
    LORAKV_CHECK(res.ok, InternalError, "aLoRA reply benchmark ran out of cache");
    if (steps++ == 0) start = bench_seconds();
  });
  driver.run(jobs);
  return (bench_seconds() - start) / static_cast<double>(std::max<int64_t>(1, steps - 1));
}

struct ReplyTimes {
  double step_alone = 0, step_with_base = 0, commit = 0, commit_rows = 0;
  // base_lr_shared:author, the standard planner: the plain and the fast form.
  double plain_step = 0, plain_commit = 0, fast_step = 0, fast_commit = 0;
};

// Commits reader 0's reply and runs the context work it leaves; the seconds, and the rows
// (checked to be the reply processed again, or with `adopted` adopted).
double timed_commit(ReplySide& s, double* rows, bool adopted = false) {
  const int64_t again = s.engine->committed_tokens_processed_again(), adoptions = s.engine->adopted_commits();
  const double start = bench_seconds();
  const int64_t committed = s.engine->commit_private({s.ctx, 0});
  runtime::prefill(*s.engine, {s.ctx, 0});
  const double seconds = bench_seconds() - start;
  if (rows != nullptr) *rows = static_cast<double>(committed);
  LORAKV_CHECK(s.engine->committed_tokens_processed_again() - again == (adopted ? 0 : committed) &&
                   s.engine->adopted_commits() - adoptions == (adopted ? 1 : 0),
               InternalError, (adopted ? "the reply was not adopted at commit" : "the reply was not processed again at commit"));
  return seconds;
}

// The three sides in an order rotated by `rep`.
ReplyTimes one_repetition(BenchWorkload& w, const std::vector<int32_t>& text, const std::vector<int32_t>& header,
                          int64_t rep) {
  const std::vector<AdapterPtr> planner = w.alora_agents(1, "planner");
  ReplyTimes t;
  auto alone_side = [&]() {
    ReplySide s = prepare(w, planner, text);
    t.step_alone = decode_reply(s, header);
    t.commit = timed_commit(s, &t.commit_rows);
  };
  auto base_side = [&]() {
    std::vector<AdapterPtr> readers = planner;
    readers.push_back(nullptr);  // the base model
    ReplySide s = prepare(w, readers, text);
    t.step_with_base = decode_reply(s, header);
  };
  auto author_side = [&](bool fast) {
    ReplySide s = prepare(w, {w.shared_a[0]}, text, SharedWriter::kAuthor, fast);  // the trained planner
    (fast ? t.fast_step : t.plain_step) = decode_reply(s, header);
    (fast ? t.fast_commit : t.plain_commit) = timed_commit(s, nullptr, fast);
  };
  const std::vector<std::function<void()>> sides = {alone_side, base_side, [&] { author_side(false); },
                                                    [&] { author_side(true); }};
  for (size_t k = 0; k < sides.size(); ++k) sides[(k + static_cast<size_t>(rep)) % sides.size()]();
  return t;
}

}  // namespace

void run_alora_reply(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  const std::string path = o.out_dir + "/alora_reply.csv";
  std::ofstream csv(path);
  csv << "context_tokens,reply_rows,commit_seconds,commit_seconds_per_row,step_alone_seconds,"
         "step_with_base_row_seconds,base_row_in_step_seconds,in_step_over_commit,author_plain_step_seconds,"
         "author_plain_commit_seconds,author_fast_step_seconds,author_fast_commit_seconds,author_fast_over_plain,"
         "repetitions\n";
  out << "\nAn aLoRA reply's base rows: the commit's batch pass against a base row beside each decode step ("
      << kReplyTokens << " generated tokens, base_lr_shared, median of " << o.repetitions << ", sides alternated)\n"
      << "| context | commit pass ms/row | decode step alone ms | with a base row ms | base row in the step ms | "
         "in step / commit |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n";
  const std::vector<int32_t> header = w.encode("<|im_start|>planner\n");
  struct AuthorRow {
    size_t context;
    double plain_step, plain_commit, fast_step, fast_commit, ratio;
  };
  std::vector<AuthorRow> authors;
  // A reply's time: its decode steps, then the commit and the work it leaves.
  const auto reply_seconds = [](double step, double commit) { return static_cast<double>(kReplyTokens) * step + commit; };
  for (int64_t tokens : o.decode_lengths) {
    const std::vector<int32_t> text = w.real_text(tokens);
    std::vector<double> commit, per_row, alone, with_base, in_step, plain_step, plain_commit, fast_step, fast_commit, ratio;
    double rows = 0;
    for (int64_t rep = 0; rep < o.repetitions; ++rep) {
      std::fprintf(stderr, "[%7.1f s] aLoRA reply on %lld tokens: repetition %lld ...\n", bench_seconds(),
                   static_cast<long long>(tokens), static_cast<long long>(rep + 1));
      const ReplyTimes t = one_repetition(w, text, header, rep);
      rows = t.commit_rows;
      commit.push_back(t.commit);
      per_row.push_back(t.commit / t.commit_rows);
      alone.push_back(t.step_alone);
      with_base.push_back(t.step_with_base);
      in_step.push_back(t.step_with_base - t.step_alone);
      plain_step.push_back(t.plain_step);
      plain_commit.push_back(t.plain_commit);
      fast_step.push_back(t.fast_step);
      fast_commit.push_back(t.fast_commit);
      ratio.push_back(reply_seconds(t.fast_step, t.fast_commit) / reply_seconds(t.plain_step, t.plain_commit));
    }
    authors.push_back({text.size(), median(plain_step), median(plain_commit), median(fast_step), median(fast_commit),
                       median(ratio)});
    const AuthorRow& a = authors.back();
    const double c = median(per_row), extra = median(in_step);
    csv << text.size() << "," << rows << "," << median(commit) << "," << c << "," << median(alone) << ","
        << median(with_base) << "," << extra << "," << extra / c << "," << a.plain_step << "," << a.plain_commit << ","
        << a.fast_step << "," << a.fast_commit << "," << a.ratio << "," << o.repetitions << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "| %zu | %.2f | %.2f | %.2f | %.2f | %.2fx |\n", text.size(), 1e3 * c,
                  1e3 * median(alone), 1e3 * median(with_base), 1e3 * extra, extra / c);
    out << line;
  }
  out << "\nWriter author: the same reply by the qv_shared_a planner in base_lr_shared:author, processed again by its "
         "author at commit (plain) or adopted (fast: keep_author_rows)\n"
      << "| context | plain: decode step ms | plain: commit ms | fast: decode step ms | fast: commit ms | "
         "fast / plain, the reply's time |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const AuthorRow& a : authors) {
    char line[200];
    std::snprintf(line, sizeof line, "| %zu | %.2f | %.1f | %.2f | %.1f | %.3f |\n", a.context, 1e3 * a.plain_step,
                  1e3 * a.plain_commit, 1e3 * a.fast_step, 1e3 * a.fast_commit, a.ratio);
    out << line;
  }
  out << "wrote " << path << "\n";
}

}  // namespace lorakv::cli
