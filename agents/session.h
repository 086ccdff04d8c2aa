// agents/session.h: one shared, append-only trajectory and the agents taking turns on it.
// Sessions come from a Runtime (agents/runtime.h), which batches every session's work into
// shared engine steps on its engine thread.
//
// Layout: the trajectory is ChatML as the role adapters were trained on it
// (agents/chat_layout.h). An agent's turn is its header "<|im_start|>{name}\n", the tokens
// it generates (with its <|im_end|>), then "\n": the header is run privately with the reply
// and the three become shared text when the reply ends (an unfinished turn is closed with
// <|im_end|>). An agent's instruction, when it has one, runs before its header as a private
// system turn and is never appended.
// Commit: in `full`, `full_shared` with writer `first` or `author`, and the residual modes
// with writer `author` (the rows the agent kept in the shared layout while it replied), an
// agent's reply rows become the trajectory's rows as they are (no reprocessing) when nothing
// was appended since the reply began and the agent has no instruction; otherwise the reply
// is processed again as appended text: by the next reader (writer `first`), the base model
// (`base`) or the agent itself (`author`) (docs/sharing_modes.md, "Commit").
//
// Threading: every method may be called from any thread; calls on one session take effect
// in the order they reach the engine thread. Blocking methods throw DeadlockError when
// called from a token callback. Batched steps are not bit-invariant to what else runs in
// them (GEMMs block differently by batch size): greedy replies equal a session run alone
// except where the top two logits are within rounding of each other.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "lorakv/agents/session_types.h"

namespace lorakv::agents {

struct RuntimeCore;  // runtime.cpp

class Session {
 public:
  ~Session();  // closes the session
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int64_t id() const { return id_; }

  // An agent joins (also while others generate). Throws ConfigError for a duplicate name,
  // UnknownAdapterError, or ConfigError naming the mode and module when the session's mode
  // cannot serve the adapter.
  void add_agent(const AgentOptions& agent);
  // The agent leaves: its reply in flight ends as kCancelled; its rows, residual streams and
  // B copies go. Throws UnknownAgentError.
  void remove_agent(const std::string& name);
  std::vector<std::string> agents() const;

  // Appends a whole turn ("user", "tool", "system", or an agent's name) to the trajectory.
  // The text is content: special-token spellings in it ("<|im_end|>") are plain text, so
  // untrusted text cannot end its turn or open another. A turn in an agent's name is that
  // agent's turn: with writer `author` the agent writes its rows, as for its replies.
  void append(const std::string& role, const std::string& text);
  // Appends text as it is, special tokens written in it parsed: the raw entry, for callers
  // that write the layout themselves (never for untrusted text).
  void append_text(const std::string& text);

  // The agent writes its next turn; waits for it. Throws UnknownAgentError, AgentBusyError,
  // ContextLengthError (the trajectory and the agent's private tokens over the model's
  // context), SessionCapacityError (the pools cannot hold it even alone).
  Reply generate(const std::string& agent, const GenerateOptions& options = {});
  // As generate, without waiting; errors arrive through the future.
  std::future<Reply> generate_async(const std::string& agent, const GenerateOptions& options = {});
  // Several agents write a turn each from the same trajectory, batched; their turns are
  // appended in the order given once all have ended.
  std::vector<Reply> generate_all(const std::vector<std::string>& agents, const GenerateOptions& options = {});

  // Ends every reply in flight as kCancelled, appending nothing. Does not wait; safe from a
  // token callback.
  void cancel();
  // A new session on a copy of this trajectory, with the same agents and options, to try
  // another plan: the two share every row copy-on-write (no KV is copied until one of them
  // writes into a shared block). Throws AgentBusyError while a reply is in flight.
  std::shared_ptr<Session> fork() const;

  // Writes the session to one file (agents/session_file.h, docs/sessions.md): replaced
  // atomically, so a crash during the save leaves the previous file intact. Restore it with
  // Runtime::restore_session. Throws AgentBusyError while a reply is in flight.
  void save(const std::string& path) const;

  // Cancels, then frees every row. Later calls throw SessionClosedError. Idempotent.
  void close();
  bool closed() const;

  SessionStats stats() const;
  std::vector<int32_t> tokens() const;  // the trajectory
  std::string text() const;             // the trajectory decoded, special tokens shown

 private:
  friend class Runtime;
  Session(std::shared_ptr<RuntimeCore> core, int64_t id) : core_(std::move(core)), id_(id) {}
  std::shared_ptr<RuntimeCore> core_;
  int64_t id_;
};

}  // namespace lorakv::agents
