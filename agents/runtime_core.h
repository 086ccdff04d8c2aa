// agents/runtime_core.h: the state behind Runtime and Session (not part of the API: the
// public headers do not include it). Everything here but the scheduler's queue is touched
// on the engine thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <deque>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lorakv/adapters/adapter_registry.h"
#include "lorakv/agents/chat_layout.h"
#include "lorakv/agents/request.h"
#include "lorakv/agents/scheduler.h"
#include "lorakv/agents/session_types.h"
#include "lorakv/formats/bpe_tokenizer.h"
#include "lorakv/runtime/driver.h"
#include "lorakv/runtime/engine.h"
#include "lorakv/runtime/loaded_model.h"
#include "lorakv/runtime/reply_decoder.h"

namespace lorakv::agents {

using Clock = std::chrono::steady_clock;

struct AgentState {
  AgentOptions options;
  runtime::ReaderRef reader;
  AdapterIdentity adapter;  // its content identity; base_model() for none (saved with the session)
  bool busy = false;  // a reply in flight
};

struct GenerationGroup;
struct RequestState;

// One reply in flight.
struct Generation {
  int64_t session = 0;
  std::string agent;
  runtime::ReaderRef reader;
  GenerateOptions options;
  std::vector<int32_t> header;  // the agent's turn header: private now, shared at commit
  std::vector<int32_t> suffix;  // run privately before the reply: instruction turn, header
  bool has_instruction = false;
  // The reply token by token; its max_tokens is the options' less where the model's
  // context ends first, and it has seen the trajectory and the private tokens.
  std::unique_ptr<runtime::ReplyDecoder> decoder;
  runtime::JobId job = -1;
  Clock::time_point started, first_token, last_token;
  std::optional<Clock::time_point> deadline;
  std::optional<ReplyEnd> forced_end;  // cancelled or past its deadline: nothing is appended
  std::exception_ptr error;
  bool ended = false;
  Reply reply;
  // A request handle's reply (agents/request.h): its events go to the request's channel,
  // it is never appended, and a completion request runs raw_suffix instead of a header.
  std::shared_ptr<RequestState> request;
  int64_t choice = 0;
  std::optional<std::vector<int32_t>> raw_suffix;
  std::optional<Clock::time_point> paused_since;  // its reader let the events pile up
  bool appends = true;  // the reply joins the trajectory when it ends (not a request's)
  std::promise<Reply> promise;             // alone
  std::shared_ptr<GenerationGroup> group;  // or one of generate_all's
  size_t group_index = 0;
};

// The engine thread's side of a request handle: its sessions (one per reply: the first, and
// forks of it), its replies, and what the caller's side reads (the channel).
struct RequestState {
  int64_t id = 0;
  RequestOptions options;
  std::vector<int32_t> prompt;  // the messages' turns, or the completion prompt (encoded by submit)
  std::shared_ptr<RequestChannel> channel;
  Clock::time_point submitted;
  std::vector<int64_t> sessions;
  std::vector<std::shared_ptr<Generation>> replies;
  size_t ended = 0;
  bool first_token = false;
  RequestResult result;
};

// The caller's side of a request: its events, filled on the engine thread, taken by the
// handle (agents/request.h) under the mutex.
struct RequestChannel {
  explicit RequestChannel(size_t capacity) : capacity(capacity) {}
  // Engine thread.
  void push(RequestEvent event);
  void accept(std::exception_ptr refused = nullptr);
  void finish(RequestResult result);  // queues kDone; result() from then on
  bool full() const;                  // the reader has let `capacity` events pile up

  const size_t capacity;
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::deque<RequestEvent> events;
  bool accepted = false;
  std::exception_ptr refused;
  std::optional<RequestResult> result;
  bool done_taken = false;  // the reader took kDone
};

// generate_all's replies: appended in order once all have ended.
struct GenerationGroup {
  std::vector<std::shared_ptr<Generation>> members;
  size_t ended = 0;
  std::promise<std::vector<Reply>> promise;
};

// Blocks per lane a whole-session reservation holds: in the base pool, and in each residual
// pool (by rank). Also the pools' capacity in the same unit.
struct Reservation {
  int64_t base_blocks = 0;
  std::map<int64_t, int64_t> residual_blocks;  // by rank
};

// A generate call waiting for its session's admission.
struct WaitingStart {
  int64_t session = 0;
  std::vector<std::string> agents;
  GenerateOptions options;
  Clock::time_point started;
  std::shared_ptr<Generation> alone;
  std::shared_ptr<GenerationGroup> group;
};

struct SessionState {
  SessionOptions options;
  runtime::ContextId context;
  std::map<std::string, AgentState> agents;
  std::vector<std::shared_ptr<Generation>> in_flight;
  SessionStats stats;
  double decode_seconds = 0;
  int64_t decode_tokens = 0;
  bool admitted = false;    // holds `reserved` (agents/admission.cpp)
  Reservation reserved;
};

// Every failure a reply or a request reports as a lorakv::Error: the engine's CapacityError
// as SessionCapacityError, any other exception (libtorch's, std::bad_alloc) as InternalError.
std::exception_ptr as_session_error(std::exception_ptr error);

// Throws ConfigError for session options out of range (open_session and submit).
void check_session_options(const SessionOptions& options);

// The engine a Runtime with these options creates: pools, dtypes, rerotate, per-head token
// sets (agents/runtime.cpp); also what the config check tests contexts against.
runtime::EngineOptions engine_options(const RuntimeOptions& options);

struct RuntimeCore : StepSource {
  explicit RuntimeCore(RuntimeOptions options);
  ~RuntimeCore() override;

  // StepSource (the engine thread).
  bool has_work() override;
  std::optional<Clock::time_point> next_deadline() override;
  void step() override { driver->step(); }
  void fail_all(std::exception_ptr error) override;

  // Engine-thread operations behind Session's methods (session.cpp, generation.cpp).
  SessionState& session(int64_t id, const std::string& call);  // SessionClosedError when gone
  AgentState& agent(SessionState& s, int64_t id, const std::string& name);
  void start(int64_t session, const std::vector<std::string>& agents, const GenerateOptions& options,
             Clock::time_point started, std::shared_ptr<Generation> alone, std::shared_ptr<GenerationGroup> group);
  std::optional<int32_t> on_logits(Generation& g, const at::Tensor& logits);
  void on_ended(const std::shared_ptr<Generation>& g);
  void end_in_flight(SessionState& s, ReplyEnd end, const std::string& only_agent = "");
  void close_session(int64_t id);
  // Admission (admission.cpp). submit starts the call now, or queues it until the session's
  // reservation fits; admit_waiting starts what fits now, in arrival order.
  void submit(WaitingStart call);
  void admit_waiting();
  void update_reservation(SessionState& s);  // after agents join or leave an admitted session
  void release_reservation(SessionState& s);
  void end_waiting(int64_t session, ReplyEnd end);
  // Request replies whose reader let the events pile up for stall_timeout end (kStalled).
  void end_stalled(Clock::time_point now);
  void expire_waiting(Clock::time_point now);
  // Request handles (request.cpp): open the request's sessions and start its replies (or
  // refuse it through its channel), end it, and route a reply's tokens and end.
  void open_request(const std::shared_ptr<RequestState>& request);
  void cancel_request(int64_t id);
  void request_token(Generation& g, const runtime::DecodedToken& token);
  void request_reply_ended(const std::shared_ptr<Generation>& g);
  // "one of: a, b" / "none loaded": what an UnknownAdapterError lists.
  std::string loaded_adapters() const;
  // The model files' identity (agents/session_file.h), hashed once on first use.
  const std::string& model_identity();

  RuntimeOptions options;
  runtime::LoadedModel loaded;
  std::unique_ptr<adapters::AdapterRegistry> registry;
  std::unique_ptr<ChatLayout> layout;
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<runtime::Driver> driver;
  std::map<int64_t, SessionState> sessions;
  int64_t next_session = 0;
  std::string model_sha256;  // model_identity(), once computed
  std::deque<WaitingStart> waiting;  // generate calls waiting for admission, in arrival order
  Reservation reserved_total;        // every admitted session's reservation
  int64_t admitted_sessions = 0, peak_admitted_sessions = 0;
  std::map<int64_t, std::shared_ptr<RequestState>> requests;  // open request handles, by id
  std::atomic<int64_t> next_request{0};                       // taken by submit on any thread
  // Last: started once everything above exists, stopped (in ~Runtime) before it goes.
  std::unique_ptr<Scheduler> scheduler;

 private:
  void commit(SessionState& s, Generation& g);
  void finish(SessionState* s, const std::shared_ptr<Generation>& g);
  void resolve_unstarted(WaitingStart& call, ReplyEnd end);
  void fail_unstarted(WaitingStart& call, std::exception_ptr error);
  // Blocks for a trajectory of `trajectory_tokens` in the session's mode, plus private blocks.
  Reservation rows_for(const SessionState& s, int64_t trajectory_tokens, int64_t private_blocks) const;
  Reservation reservation_for(const SessionState& s) const;  // what reserve_tokens declares
  // A call of a session without reserve_tokens: its trajectory, every reply in flight and
  // the call's replies (each also as private rows).
  Reservation demand_of(const SessionState& s, const WaitingStart& call) const;
  std::optional<Reservation> still_needed(const SessionState& s, const WaitingStart& call) const;
  Reservation capacity_for(const Reservation& wanted) const;  // the pools wanted uses
  bool try_hold(SessionState& s, const Reservation& wanted);  // grows s's reservation to wanted if it fits
};

}  // namespace lorakv::agents
