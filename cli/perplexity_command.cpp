// cli/perplexity_command.cpp: `lorakv perplexity`: a model's perplexity on a text file, with
// or without KV eviction, and the KV bytes it took: how much quality a cache budget costs.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/cli/eviction_flags.h"
#include "lorakv/cli/json_line.h"
#include "lorakv/cli/perplexity_eval.h"
#include "lorakv/cli/perplexity_options.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/runtime/loaded_model.h"

namespace lorakv::cli {
namespace {

const char* kUsage = R"(usage: lorakv perplexity --model FILE --file TEXT [--policy NAME --budget N|F] [flags]

The model's perplexity on a text file, exp of the mean negative log-likelihood of its tokens,
computed through the engine's paged KV cache with an optional eviction policy: the quality a
KV budget costs, next to the KV bytes it saves.

The text is tokenized with the model's tokenizer (special-token text such as <|im_start|> is
scored as plain text; when the tokenizer asks for BOS, each window's first token is replaced
by it) and cut into consecutive windows of --context tokens. A shorter last window is scored
only when it holds at least min(--chunk, --context) tokens, or when it is the whole text.
Each window is a fresh context, processed --chunk tokens per step; the policy evicts after
every step, so later tokens are predicted from what is left (the whole window is appended
before its first step, so a --budget fraction is of the window). Every token of a window but
its first is scored.

Progress (one line per window) goes to stderr, the summary to stdout.

flags:
  --model FILE              GGUF model file (required), e.g. models/SmolLM2-135M-Instruct.Q4_1.gguf
  --file TEXT               the text file (required)
  --context N               tokens per window (default 1024, 2 .. the model's context length)
  --chunk N                 tokens per engine step (default 256); eviction runs between chunks
)";

const char* kMoreFlags = R"(  --per-head                each KV head keeps its own token set (per-head eviction); default:
                            one set per layer, all KV heads keeping the same tokens
  --dump-kept FILE          write, as JSON, which rows every lane (a layer, or a KV head of it
                            with --per-head) still holds after each window's last step: per
                            window its [begin, end), tokens, and per lane its layer, group (the
                            KV head, or 0), positions in the window and, under h2o, each
                            position's accumulated attention mass
  --threads N               CPU threads (default: libtorch's choice)
  --json                    also print one JSON object as the last line of stdout
  --dtype TYPE              float32 (default) or bfloat16 activations and compute
  --kv-dtype TYPE           float32, bfloat16 or int8 (a float32 scale per token and KV head)
                            for the K/V cache; default: the --dtype
  --rerotate                keys stored before RoPE, rotated to their index among the rows
                            kept (endless streaming; with --policy streaming_llm or none)
  --weights FORM            native (default), bfloat16 or float32 (see 'lorakv generate --help')
  --log-level LEVEL         trace, debug, info, warn, error or off (default info)
  --help                    this text
)";

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The model's tokens of the text, checked against the options the model bounds.
std::vector<int32_t> tokenize(const runtime::LoadedModel& loaded, const PerplexityOptions& o) {
  if (!loaded.tokenizer) {
    throw ConfigError("the model has no tokenizer",
                      {o.model_path, "tokenizer.json", "a tokenizer", "none", "add the checkpoint's tokenizer.json"});
  }
  const int64_t limit = loaded.model->config().context_length;
  if (o.context > limit) {
    throw ConfigError("--context is longer than the model's context",
                      {o.model_path, "--context", "at most " + std::to_string(limit), std::to_string(o.context),
                       "a smaller --context"});
  }
  std::vector<int32_t> tokens = loaded.tokenizer->encode(o.text, /*parse_special=*/false);
  if (tokens.size() < 2) {
    throw ConfigError("the text is too short to score",
                      {o.text_path, "--file", "at least 2 tokens", std::to_string(tokens.size()) + " token(s)", ""});
  }
  return tokens;
}

std::string machine_line() {
  return cpu::cpu_model_name() + ", " + std::to_string(at::get_num_threads()) + " threads, vector path " +
         cpu::vector_path_name(cpu::selected_vector_path());
}

void print_progress(int64_t window, int64_t windows, int64_t kv_peak, const PerplexityTotals& t, std::ostream& err) {
  char line[160];
  std::snprintf(line, sizeof line, "[window %lld/%lld] ppl so far %.4f, kv peak %.2f MiB, %.1f s\n",
                static_cast<long long>(window + 1), static_cast<long long>(windows), t.ppl(), mib(kv_peak), t.seconds);
  err << line << std::flush;
}

std::string kv_dtype_text(const PerplexityOptions& o) {
  return o.kv_dtype ? runtime::kv_dtype_name(*o.kv_dtype) : (o.dtype == at::kBFloat16 ? "bfloat16" : "float32");
}

void print_summary(const PerplexityOptions& o, size_t text_tokens, const PerplexityTotals& t, std::ostream& out) {
  char line[512];
  out << "model:       " << o.model_path << "\n";
  out << "text:        " << o.text_path << " (" << text_tokens << " tokens)\n";
  std::snprintf(line, sizeof line, "scored:      %lld tokens in %lld windows of up to %lld tokens, chunks of %lld\n",
                static_cast<long long>(t.tokens_scored), static_cast<long long>(t.windows),
                static_cast<long long>(o.context), static_cast<long long>(o.chunk));
  out << line << "eviction:    " << describe_eviction(o.eviction)
      << (o.eviction.enabled() && o.per_head_token_sets ? ", per KV head" : "") << "\n";
  out << "kv dtype:    " << kv_dtype_text(o) << (o.rerotate ? ", keys rerotated to their index among the rows kept" : "") << "\n";
  std::snprintf(line, sizeof line, "perplexity:  %.4f (mean NLL %.5f nats/token)\n", t.ppl(), t.nll_mean());
  out << line;
  std::snprintf(line, sizeof line,
                "kv cache:    peak %.3f MiB after a step (%.3f MiB inside a step, before eviction), final %.3f MiB; "
                "%lld rows evicted (summed over layers and head groups)\n",
                mib(t.kv_bytes_peak), mib(t.kv_bytes_high_water), mib(t.kv_bytes_final),
                static_cast<long long>(t.rows_evicted));
  out << line;
  if (o.eviction.loss_bound) {
    std::snprintf(line, sizeof line,
                  "loss bound:  %.4g mean over %lld (layer, head, query) terms of the steps that evicted: a bound on "
                  "||o - o'||_1 of one head's attention output\n",
                  t.loss_bound_mean(), static_cast<long long>(t.loss_bound_terms));
    out << line;
  }
  std::snprintf(line, sizeof line, "time:        %.2f s, %.1f tokens/s (eviction %.3f s, attention kernel %.2f s)\n",
                t.seconds, static_cast<double>(t.tokens_processed) / std::max(t.seconds, 1e-9), t.evict_seconds,
                t.kernel_seconds);
  out << line << "machine:     " << machine_line() << "\n";
}

// A number, or null when it is not finite (JSON has no inf or nan).
formats::JsonValue json_number(double x) {
  return std::isfinite(x) ? formats::JsonValue::make_number(x) : formats::JsonValue();
}

std::string summary_json(const PerplexityOptions& o, size_t text_tokens, const PerplexityTotals& t) {
  JsonLine j;
  j.add("kv_dtype", kv_dtype_text(o)).add("rerotate", o.rerotate);
  j.add("ppl", json_number(t.ppl())).add("nll_mean", json_number(t.nll_mean()));
  j.add("tokens", t.tokens_scored).add("text_tokens", static_cast<int64_t>(text_tokens)).add("windows", t.windows);
  j.add("context", o.context).add("chunk", o.chunk).add("policy", o.eviction.policy);
  j.add("budget_tokens", o.eviction.budget_tokens).add("budget_fraction", o.eviction.budget_fraction);
  j.add("sinks", o.eviction.sinks).add("window", o.eviction.window).add("per_head_token_sets", o.per_head_token_sets);
  // The peak is the pools' own, inside a step too (one chunk above the budget before it
  // is evicted); after_step is what stays between steps.
  j.add("kv_bytes_peak", t.kv_bytes_high_water).add("kv_bytes_peak_after_step", t.kv_bytes_peak);
  j.add("kv_bytes_final", t.kv_bytes_final).add("rows_evicted", t.rows_evicted);
  if (o.eviction.loss_bound) j.add("loss_bound_mean", t.loss_bound_mean()).add("loss_bound_terms", t.loss_bound_terms);
  j.add("seconds", t.seconds).add("evict_seconds", t.evict_seconds).add("kernel_seconds", t.kernel_seconds);
  j.add("model", o.model_path).add("file", o.text_path).add("threads", static_cast<int64_t>(at::get_num_threads()));
  j.add("vector_path", cpu::vector_path_name(cpu::selected_vector_path()));
  return j.str();
}

// The --dump-kept document: the settings, then each window's lanes as a WindowKept sees them.
class KeptDump {
 public:
  KeptDump(const PerplexityOptions& o, const runtime::ModelConfig& c) {
    head_.add("policy", o.eviction.policy).add("budget_tokens", o.eviction.budget_tokens);
    head_.add("budget_fraction", o.eviction.budget_fraction).add("sinks", o.eviction.sinks);
    head_.add("window", o.eviction.window).add("context", o.context).add("chunk", o.chunk);
    head_.add("per_head_token_sets", o.per_head_token_sets).add("num_layers", c.num_layers);
    head_.add("lanes_per_layer", o.per_head_token_sets ? c.num_kv_heads : int64_t{1});
  }
  void add(const std::pair<int64_t, int64_t>& range, const std::vector<int32_t>& tokens,
           const std::vector<KeptLane>& lanes) {
    JsonLine w;
    w.add("begin", range.first).add("end", range.second).add("tokens", tokens);
    std::vector<formats::JsonValue> items;
    for (const KeptLane& l : lanes) {
      JsonLine lane;
      lane.add("layer", l.layer).add("group", l.group).add("positions", l.positions);
      if (!l.scores.empty()) {
        std::vector<formats::JsonValue> scores;
        for (float x : l.scores) scores.push_back(formats::JsonValue::make_number(static_cast<double>(x)));
        lane.add("scores", formats::JsonValue::make_array(std::move(scores)));
      }
      items.push_back(lane.value());
    }
    w.add("lanes", formats::JsonValue::make_array(std::move(items)));
    windows_.push_back(w.value());
  }
  void write(const std::string& path) const {
    JsonLine doc = head_;
    doc.add("windows", formats::JsonValue::make_array(windows_));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << doc.str() << "\n";
    out.flush();
    if (!out) throw ConfigError("cannot write the file", {path, "--dump-kept", "a writable file", "", ""});
  }

 private:
  JsonLine head_;
  std::vector<formats::JsonValue> windows_;
};

}  // namespace

int run_perplexity(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const CliArgs a(args, perplexity_value_flags(), perplexity_bool_flags(), "perplexity");
  if (a.has("--help")) {
    out << kUsage << eviction_flags_help() << kMoreFlags;
    return 0;
  }
  // Every flag is checked and the text read before the model loads.
  const PerplexityOptions o = parse_perplexity_options(a);
  if (o.log_level) log::set_level(*o.log_level);
  if (o.threads > 0) at::set_num_threads(static_cast<int>(o.threads));
  const runtime::LoadedModel loaded = runtime::load_model(o.model_path, o.dtype, o.weights);
  const std::vector<int32_t> tokens = tokenize(loaded, o);

  PerplexitySettings settings;
  settings.windows = plan_windows(static_cast<int64_t>(tokens.size()), o.context, o.chunk);
  settings.chunk = o.chunk;
  settings.eviction = o.eviction;
  settings.per_head_token_sets = o.per_head_token_sets;
  settings.kv_dtype = o.kv_dtype;
  settings.rerotate = o.rerotate;
  const formats::BpeTokenizer& tok = *loaded.tokenizer;
  if (tok.add_bos() && tok.bos_id() >= 0) settings.bos = tok.bos_id();
  const auto windows = static_cast<int64_t>(settings.windows.size());
  KeptDump dump(o, loaded.model->config());
  WindowKept on_kept;
  if (!o.dump_kept_path.empty()) {
    on_kept = [&](int64_t i, const std::vector<int32_t>& window, const std::vector<KeptLane>& lanes) {
      dump.add(settings.windows[static_cast<size_t>(i)], window, lanes);
    };
  }
  const PerplexityTotals totals = score_perplexity(
      *loaded.model, tokens, settings,
      [&](int64_t i, int64_t kv_peak, const PerplexityTotals& t) { print_progress(i, windows, kv_peak, t, err); },
      on_kept);
  if (!o.dump_kept_path.empty()) dump.write(o.dump_kept_path);
  print_summary(o, tokens.size(), totals, out);
  if (o.json) out << summary_json(o, tokens.size(), totals) << "\n";
  return 0;
}

}  // namespace lorakv::cli
