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
// short steps of a turn-by-turn replay (cli/bench/role_turn_replay.h).
// Beside the totals: KL and top-1 per role and per the role's turn ordinal; on the short
// contexts, per layer the relative error of the K and V rows each reader sees against its
// `full` rows, and with --swap the swap ablation (cli/bench/fidelity_layers.h).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "lorakv/cli/bench/bench_memory.h"
#include "lorakv/cli/bench/fidelity_layers.h"
#include "lorakv/cli/bench/role_turn_replay.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

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

namespace {

using runtime::SharedWriter;
using runtime::SharingMode;

// A mode of one adapter set in the grid.
struct Case {
  std::string set;
  runtime::ContextOptions mode;
  std::string key() const {
    return set + "," + runtime::sharing_mode_name(mode.mode) + "," + runtime::shared_writer_name(mode.writer);
  }
};

// What the fidelity part measures, keyed by CSV row prefix ("set,mode,writer,...").
struct FidelityTables {
  std::map<std::string, Fidelity> totals;    // ...,context
  std::map<std::string, Fidelity> turns;     // ...,context,role,ordinal (ordinal "all": the role's turns)
  std::map<std::string, LayerRowError> layers;  // ...,role (short contexts)
  std::map<std::string, Fidelity> swaps;     // ...,role,first_layer,last_layer ("-,-": no swap)
};

std::vector<Case> fidelity_cases(const std::vector<std::string>& sets) {
  std::vector<Case> cases;
  for (const std::string& set : sets) {
    for (SharedWriter wr : {SharedWriter::kFirst, SharedWriter::kBase, SharedWriter::kAuthor}) {
      cases.push_back({set, {SharingMode::kFullShared, wr}});
      cases.push_back({set, {SharingMode::kBaseShared, wr}});
      if (set != "all_linear") cases.push_back({set, {SharingMode::kBaseLrShared, wr}});
    }
  }
  return cases;
}

// The layer bands of the swap ablation: every layer alone (or `band` at a time), then all
// layers at once, which must recover the whole KL (the swap's own check).
std::vector<std::pair<int64_t, int64_t>> swap_bands(int64_t layers, int64_t band) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t first = 0; first < layers; first += band) out.push_back({first, std::min(layers, first + band)});
  out.push_back({0, layers});
  return out;
}

// One mode's replay of a short context, compared with `full` turn by turn before each turn:
// per layer the rows the reader sees against `own` (its full rows at that turn), and with
// `swap` the turn again over the mode's rows with each band of layers swapped for its own.
ReplayOptions layer_probes(const Case& c, const std::vector<AdapterPtr>& readers,
                           const std::vector<TurnLogits>& full, const std::vector<runtime::SequenceRows>& own,
                           bool swap, int64_t band, FidelityTables& t) {
  ReplayOptions options;
  options.before_turn = [&, c, swap, band](const RoleTurnInfo& turn, runtime::Engine& engine, runtime::ContextId ctx) {
    const runtime::ContextRows rows = export_every_reader(engine, ctx);
    const LayerRows seen = rows_reader_sees(*rows.shared, readers[turn.reader].get(), engine.model());
    t.layers[c.key() + "," + turn.role].add(seen, own_rows(own[turn.index]));
    if (!swap) return;
    for (const auto& [first, last] : swap_bands(engine.model().config().num_layers, band)) {
      const at::Tensor logits =
          turn_over_rows(engine.model(), with_own_layers(rows, own[turn.index], first, last), readers, turn);
      const std::string bounds = "," + std::to_string(first) + "," + std::to_string(last - 1);
      compare_logits(full[turn.index].logits, logits, t.swaps[c.key() + "," + turn.role + bounds]);
      compare_logits(full[turn.index].logits, logits, t.swaps[c.key() + ",all" + bounds]);
    }
  };
  return options;
}

void compare_turns(const std::string& prefix, const std::vector<TurnLogits>& full, const std::vector<TurnLogits>& mode,
                   std::map<std::string, Fidelity>& turns) {
  for (size_t i = 0; i < full.size(); ++i) {
    compare_logits(full[i].logits, mode[i].logits, turns[prefix + "," + full[i].role + "," + std::to_string(full[i].ordinal)]);
    compare_logits(full[i].logits, mode[i].logits, turns[prefix + "," + full[i].role + ",all"]);
  }
}

// One context of one adapter set: `full`, then every mode of the set against it.
void measure_context(BenchWorkload& w, const MemoryBenchOptions& o, const std::string& set, const std::string& length,
                     const std::vector<const BenchTrajectory*>& trajs, FidelityTables& t) {
  const std::vector<AdapterPtr> readers =
      set == "all_linear" ? w.all_linear : set == "qv_shared_a" ? w.shared_a : w.alora_roles();
  const bool short_context = length == "short";
  // Short contexts: each reader's own rows just before each of its turns, for the layer probes.
  std::vector<runtime::SequenceRows> own;
  const std::vector<TurnLogits> full = replay_turns(w, readers, {SharingMode::kFull, SharedWriter::kFirst}, trajs,
                                                    short_context ? keep_own_rows(own) : ReplayOptions{});
  for (const Case& c : fidelity_cases({set})) {
    const bool swap = short_context && o.swap_mode && o.swap_mode->mode == c.mode.mode &&
                      o.swap_mode->writer == c.mode.writer;
    const ReplayOptions options =
        short_context ? layer_probes(c, readers, full, own, swap, o.swap_band, t) : ReplayOptions{};
    const std::vector<TurnLogits> mode = replay_turns(w, readers, c.mode, trajs, options);
    for (size_t i = 0; i < full.size(); ++i) {
      compare_logits(full[i].logits, mode[i].logits, t.totals[c.key() + "," + length]);
      if (swap) compare_logits(full[i].logits, mode[i].logits, t.swaps[c.key() + "," + full[i].role + ",-,-"]);
      if (swap) compare_logits(full[i].logits, mode[i].logits, t.swaps[c.key() + ",all,-,-"]);
    }
    compare_turns(c.key() + "," + length, full, mode, t.turns);
  }
}

// "a,b,c" -> "a | b | c": a CSV key as markdown cells.
std::string cells(std::string key) {
  for (size_t at = key.find(','); at != std::string::npos; at = key.find(',', at)) key.replace(at, 1, " | ");
  return key;
}

double mean_kl(const Fidelity& f) { return f.kl_sum / static_cast<double>(f.tokens); }
double agreement(const Fidelity& f) { return static_cast<double>(f.agree) / static_cast<double>(f.tokens); }

// Rows "<key>,tokens,mean_kl,max_kl,top1_agreement".
void write_fidelity_csv(const std::string& path, const std::string& header, const std::map<std::string, Fidelity>& rows) {
  std::ofstream csv(path);
  csv << header << ",tokens,mean_kl,max_kl,top1_agreement\n";
  for (const auto& [key, f] : rows) csv << key << "," << f.tokens << "," << mean_kl(f) << "," << f.kl_max << "," << agreement(f) << "\n";
}

void write_layers_csv(const std::string& path, const std::map<std::string, LayerRowError>& layers) {
  std::ofstream csv(path);
  csv << "adapter_set,mode,writer,role,layer,k_relative_error,v_relative_error\n";
  for (const auto& [key, e] : layers) {
    for (size_t l = 0; l < e.k_own.size(); ++l) csv << key << "," << l << "," << e.k_relative(l) << "," << e.v_relative(l) << "\n";
  }
}

// The swap rows with the share of the mode's KL each band recovers: 1 - KL(swapped) / KL(mode).
void write_swap_csv(const std::string& path, const std::map<std::string, Fidelity>& swaps, std::ostream& out) {
  std::ofstream csv(path);
  csv << "adapter_set,mode,writer,role,first_layer,last_layer,tokens,mean_kl,mode_mean_kl,kl_recovered,top1_agreement\n";
  out << "\nSwap ablation (short contexts): the mode's rows with layers first..last replaced by each reader's own "
         "full rows; share of the mode's KL recovered\n"
         "| set | mode | writer | role | first layer | last layer | mean KL | recovered | top-1 |\n"
         "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& [key, f] : swaps) {
    const size_t band_at = key.rfind(',', key.rfind(',') - 1);  // before first_layer
    const std::string prefix = key.substr(0, band_at);
    if (key.substr(band_at) == ",-,-") continue;
    const double mode_kl = mean_kl(swaps.at(prefix + ",-,-")), kl = mean_kl(f);
    csv << key << "," << f.tokens << "," << kl << "," << mode_kl << "," << 1.0 - kl / mode_kl << "," << agreement(f) << "\n";
    if (prefix.substr(prefix.rfind(',') + 1) != "all") continue;
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %.4f | %.3f | %.4f |\n", cells(prefix).c_str(),
                  cells(key.substr(band_at + 1)).c_str(), kl, 1.0 - kl / mode_kl, agreement(f));
    out << line;
  }
}

void print_totals(const std::map<std::string, Fidelity>& totals, std::ostream& out) {
  out << "\nFidelity against full (teacher-forced role turns of held-out trajectories; KL(full || mode) in nats per token)\n"
         "| adapter set | mode | writer | context | tokens | mean KL | max KL | top-1 agreement |\n"
         "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n";
  for (const auto& [key, f] : totals) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %lld | %.4f | %.3f | %.4f |\n", cells(key).c_str(), static_cast<long long>(f.tokens),
                  mean_kl(f), f.kl_max, agreement(f));
    out << line;
  }
}

}  // namespace

void run_fidelity(BenchWorkload& w, const MemoryBenchOptions& o, std::ostream& out) {
  // Short: single trajectories; long: consecutive trajectories appended to ~2K tokens.
  std::vector<std::pair<std::string, std::vector<const BenchTrajectory*>>> contexts;
  size_t next = 0;
  for (int64_t i = 0; i < o.fidelity_trajectories; ++i) contexts.push_back({"short", {&w.held_out[next++ % w.held_out.size()]}});
  for (int64_t l = 0; l < o.fidelity_long; ++l) contexts.push_back({"long", trajectories_of_about(w, 2000, next)});
  FidelityTables t;
  for (const auto& [length, trajs] : contexts) {
    for (const std::string& set : o.fidelity_sets) {
      // --quick: the long context with the shared-A set only (every mode can serve it), and
      // the aLoRA twins (every mode serves them; exact where the base model writes the rows).
      if (length == "long" && set == "all_linear" && !o.full_grid) continue;
      std::fprintf(stderr, "[%7.1f s] fidelity: %s context of %zu trajectories, set %s ...\n", bench_seconds(), length.c_str(),
                   trajs.size(), set.c_str());
      measure_context(w, o, set, length, trajs, t);
    }
  }
  print_totals(t.totals, out);
  write_fidelity_csv(o.out_dir + "/fidelity.csv", "adapter_set,mode,writer,context", t.totals);
  write_fidelity_csv(o.out_dir + "/fidelity_turns.csv", "adapter_set,mode,writer,context,role,ordinal", t.turns);
  write_layers_csv(o.out_dir + "/fidelity_layers.csv", t.layers);
  out << "wrote " << o.out_dir << "/fidelity.csv, fidelity_turns.csv, fidelity_layers.csv";
  if (o.swap_mode) {
    write_swap_csv(o.out_dir + "/fidelity_swap.csv", t.swaps, out);
    out << "wrote " << o.out_dir << "/fidelity_swap.csv";
  }
  out << "\n";
}

}  // namespace lorakv::cli
