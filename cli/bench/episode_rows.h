// cli/bench/episode_rows.h: the rows of `lorakv bench episodes`' CSV (episodes_by_mode_SET.csv),
// written one episode at a time as each ends and read back, so a run that stops (killed,
// out of time) keeps what it measured and `--resume` runs only the episodes it lacks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lorakv::cli {

// What one episode gave, in one mode.
struct EpisodeResult {
  std::string answer, verdict, transcript;
  bool success = false, finished = false, consistent = true;
  int64_t rounds = 0, tokens = 0, kv_bytes = 0, full_caches_bytes = 0;
  double min_margin = 1e9;  // smallest top-1 margin over every generated token (logprobs)
  // Per transcript turn (agents' and tools'), its smallest top-1 margin; tools: -1. Empty
  // in rows written before the column existed.
  std::vector<std::pair<std::string, double>> turn_margins;
  // The run that measured it (its start, UTC seconds) and the seconds from that start to the
  // episode's end: a mode's wall time is the sum over its runs of their last end. Rows
  // written before these columns existed read as "" and 0.
  std::string run;
  double elapsed_s = 0;
};

struct EpisodeRow {
  std::string set, mode, id, gold;
  int64_t kind = 0;
  EpisodeResult result;
};

// The CSV's header line and one row's line (RFC 4180 quoting; both end with a newline).
std::string episode_csv_header();
std::string episode_csv_line(const EpisodeRow& row);

// Every row of the file; no file: none. Columns are found by name, so files written before
// run, elapsed_s and turn_margins existed read with their defaults. Throws ConfigError naming
// the file, the line and the column when a row is malformed.
std::vector<EpisodeRow> read_episode_rows(const std::string& path);

// Writes the rows to a temporary file beside `path`, then renames it over `path`.
void write_episode_rows(const std::string& path, const std::vector<EpisodeRow>& rows);

// RFC 4180 records of a file (quotes, doubled quotes, newlines inside quotes).
std::vector<std::vector<std::string>> read_csv_records(const std::string& path);

}  // namespace lorakv::cli
