// cli/bench/bench_requests.cpp: `lorakv bench requests`: the request path (Runtime::submit
// and its handle, agents/request.h) against the sessions API a caller would otherwise use
// for one-message requests (open_session, add_agent, append, generate), in one run with the
// sides alternated per repetition:
//   - time to first token of one request, from the first call to the first token, on an
//     idle engine and on one busy decoding other requests (where each blocking call of the
//     sessions side waits for the engine thread's current step);
//   - aggregate tokens/s of C concurrent requests (each its own thread on the sessions
//     side; one submitting thread and one reading thread per request on the handle side).
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "lorakv/agents/runtime.h"
#include "lorakv/cli/bench/bench_defaults.h"
#include "lorakv/cli/bench/bench_report.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/cli/commands.h"
#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

using Clock = std::chrono::steady_clock;

const char* kHelp = R"(usage: lorakv bench requests [flags]

One-message requests through the request path (Runtime::submit and its handle) against
the sessions API a caller would otherwise use (open_session, add_agent, append, generate),
the sides alternated per repetition in one run: time to first token of one request (from
the first call) on an idle engine and beside B requests decoding, and aggregate tokens/s
of C concurrent requests. Every request asks a
different question of the planner role adapter, so no side finds the other's rows. Writes
requests.csv and requests.png under --out. Run it with nothing else on the machine.

flags:
  --model FILE        GGUF model (default models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --assets DIR        role adapters (default assets)
  --out DIR           where the CSV and the PNG go (default bench_results/requests)
  --repetitions N     repetitions of each measure (default 10)
  --concurrent C      concurrent requests of the throughput measure (default 16)
  --tokens N          tokens per request of the throughput measure (default 64)
  --busy B            requests decoding while the busy time to first token is measured
                      (default 8)
  --python FILE       Python with matplotlib for the PNG (default the checkout's
                      .venv-bench/bin/python, else .venv/bin/python, else python3)
)";

const char* kSystem = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer].";

struct Options {
  std::string model, assets, out, python;
  int64_t repetitions = 10, concurrent = 16, tokens = 64, busy = 8;
};

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A question no other request of the run asks (its rows are computed, not found).
std::string question(int64_t n) {
  return "How many years passed between the founding of Quegou and the year " + std::to_string(1000 + n) + "?";
}

// Through the sessions API: the calls a caller makes for one request. Returns the seconds
// from the first call to the first token, and the tokens generated.
std::pair<double, int64_t> by_session(agents::Runtime& rt, const std::string& q, int64_t tokens) {
  const Clock::time_point start = Clock::now();
  auto s = rt.open_session();
  s->add_agent({"planner", "planner", ""});
  s->append("system", kSystem);
  s->append("user", q);
  agents::GenerateOptions g;
  g.max_tokens = tokens;
  g.ignore_end_tokens = true;
  const double before_generate = since(start);
  const agents::Reply r = s->generate("planner", g);
  s->close();
  return {before_generate + r.time_to_first_token_s, static_cast<int64_t>(r.tokens.size())};
}

agents::RequestOptions request_for(const std::string& q, int64_t tokens) {
  agents::RequestOptions r;
  r.adapter = "planner";
  r.role = "planner";
  r.messages = {{"system", kSystem}, {"user", q}};
  r.max_tokens = tokens;
  r.ignore_end_tokens = true;
  return r;
}

// Through a handle, read on this thread: from submit to the first token event.
std::pair<double, int64_t> by_handle(agents::Runtime& rt, const std::string& q, int64_t tokens) {
  const Clock::time_point start = Clock::now();
  std::shared_ptr<agents::RequestHandle> h = rt.submit(request_for(q, tokens));
  double first = -1;
  while (std::optional<agents::RequestEvent> e = h->next()) {
    if (first < 0 && e->kind == agents::RequestEvent::Kind::kToken) first = since(start);
  }
  return {first, h->result()->usage.completion_tokens};
}

// B requests decoding in the background until the returned handles are dropped.
std::vector<std::shared_ptr<agents::RequestHandle>> keep_busy(agents::Runtime& rt, int64_t first_question, int64_t n) {
  std::vector<std::shared_ptr<agents::RequestHandle>> busy;
  for (int64_t i = 0; i < n; ++i) {
    agents::RequestOptions r = request_for(question(first_question + i), 100000);
    r.max_pending_events = 1 << 20;  // nobody reads them: never paused
    busy.push_back(rt.submit(r));
  }
  for (auto& h : busy) (void)h->next();  // each is decoding
  return busy;
}

// C requests at once on one side: aggregate tokens/s over the wall time.
double concurrent_rate(agents::Runtime& rt, const std::string& side, int64_t first_question, const Options& o) {
  const Clock::time_point start = Clock::now();
  std::vector<std::future<int64_t>> done;
  for (int64_t i = 0; i < o.concurrent; ++i) {
    const std::string q = question(first_question + i);
    done.push_back(std::async(std::launch::async, [&rt, &side, q, &o] {
      return side == "handle" ? by_handle(rt, q, o.tokens).second : by_session(rt, q, o.tokens).second;
    }));
  }
  int64_t generated = 0;
  for (std::future<int64_t>& d : done) generated += d.get();
  return static_cast<double>(generated) / since(start);
}

Options parse(const CliArgs& a) {
  Options o;
  o.model = a.get("--model").value_or(default_bench_model());
  o.assets = a.get("--assets").value_or(default_bench_assets());
  o.out = a.get("--out").value_or("bench_results/requests");
  o.python = a.get("--python").value_or(default_bench_python());
  o.repetitions = a.get_int("--repetitions", 10, 1, 1000);
  o.concurrent = a.get_int("--concurrent", 16, 1, 256);
  o.tokens = a.get_int("--tokens", 64, 1, 1024);
  o.busy = a.get_int("--busy", 8, 0, 64);
  return o;
}

}  // namespace

int run_requests_bench(const std::vector<std::string>& args, std::ostream& out) {
  const CliArgs a(args, {"--model", "--assets", "--out", "--repetitions", "--concurrent", "--tokens", "--busy", "--python"},
                  {"--help"}, "bench requests");
  if (a.has("--help")) {
    out << kHelp;
    return 0;
  }
  const Options o = parse(a);
  std::filesystem::create_directories(o.out);
  agents::RuntimeOptions ro;
  ro.model = o.model;
  agents::Runtime rt(ro);
  rt.load_adapter("planner", o.assets + "/role_adapters/qv_shared_a/planner");
  const cpu::CpuFeatures& f = cpu::detected_cpu_features();
  out << "machine: " << cpu::cpu_model_name() << ", " << at::get_num_threads() << " threads, vector path "
      << cpu::vector_path_name(cpu::selected_vector_path()) << " (" << cpu::describe_features(f) << ")\n"
      << "device: CPU; model " << o.model << " (weights as stored, activations and cache float32), planner role "
      << "adapter (qv_shared_a), mode full; " << o.repetitions << " repetitions; time to first token of one "
      << "request with 1 token; " << o.concurrent << " concurrent requests of " << o.tokens << " tokens\n";

  const std::string csv_path = o.out + "/requests.csv";
  std::ofstream csv(csv_path);
  csv << "measure,side,repetition,value\n";
  std::map<std::string, std::vector<double>> ttft, busy_ttft, rate;
  int64_t next_question = 0;
  (void)by_handle(rt, question(next_question++), 1);  // warm-up: first-use costs on neither side
  for (int64_t rep = 0; rep < o.repetitions; ++rep) {
    const std::vector<std::string> order =
        rep % 2 == 0 ? std::vector<std::string>{"handle", "session"} : std::vector<std::string>{"session", "handle"};
    for (const std::string& side : order) {
      const std::string q = question(next_question++);
      const double t = side == "handle" ? by_handle(rt, q, 1).first : by_session(rt, q, 1).first;
      ttft[side].push_back(t);
      csv << "ttft_s," << side << "," << rep << "," << t << "\n" << std::flush;
    }
    if (o.busy > 0) {
      const auto background = keep_busy(rt, next_question, o.busy);  // cancelled when dropped
      next_question += o.busy;
      for (const std::string& side : order) {
        const std::string q = question(next_question++);
        const double t = side == "handle" ? by_handle(rt, q, 1).first : by_session(rt, q, 1).first;
        busy_ttft[side].push_back(t);
        csv << "busy_ttft_s," << side << "," << rep << "," << t << "\n" << std::flush;
      }
    }
    for (const std::string& side : order) {
      const double r = concurrent_rate(rt, side, next_question, o);
      next_question += o.concurrent;
      rate[side].push_back(r);
      csv << "tokens_per_s," << side << "," << rep << "," << r << "\n" << std::flush;
    }
  }
  char line[256];
  out << "side       ttft p50 (ms)  ttft p95 (ms)  busy ttft p50 (ms)  tokens/s (" << o.concurrent
      << " concurrent, median)\n";
  for (const std::string side : {"handle", "session"}) {
    std::snprintf(line, sizeof line, "%-9s  %13.2f  %13.2f  %18.2f  %8.1f\n", side.c_str(), 1e3 * median(ttft[side]),
                  1e3 * percentile(ttft[side], 0.95), 1e3 * median(busy_ttft[side]), median(rate[side]));
    out << line;
  }
  std::snprintf(line, sizeof line,
                "handle / session: time to first token %.3fx (busy: %.3fx), aggregate tokens/s %.3fx\n",
                median(ttft["handle"]) / median(ttft["session"]), median(busy_ttft["handle"]) / median(busy_ttft["session"]),
                median(rate["handle"]) / median(rate["session"]));
  out << line << "wrote " << csv_path << "\n";
  if (!o.python.empty()) draw_plot(o.python, "tools/plot_requests_bench.py", o.out, "requests.png", out);
  return 0;
}

}  // namespace lorakv::cli
