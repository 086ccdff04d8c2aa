// cli/bench/episode_rows.cpp: the bench episodes CSV, written and read back.
#include "lorakv/cli/bench/episode_rows.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "lorakv/common/errors.h"

namespace lorakv::cli {

namespace {

const char* const kColumns[] = {"set",     "mode",     "id",       "kind",    "gold",
                                "answer",  "success",  "finished", "rounds",  "verdict",
                                "planner_actor_consistent", "tokens", "kv_bytes", "full_caches_bytes",
                                "min_margin", "transcript", "run", "elapsed_s", "turn_margins"};
// Columns a row needs; the last three came later and default when absent.
constexpr size_t kRequiredColumns = 16;

double parse_number(const std::string& s, const std::string& path, const std::string& where) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) throw ConfigError("an episodes field is not a number", {path, where, "a number", s});
  return v;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// "planner:1.25 tool:-1 ..." (roles have no spaces or colons).
std::string margins_text(const std::vector<std::pair<std::string, double>>& margins) {
  std::ostringstream out;
  for (size_t i = 0; i < margins.size(); ++i) out << (i ? " " : "") << margins[i].first << ":" << margins[i].second;
  return out.str();
}

}  // namespace

std::string episode_csv_header() {
  std::string out;
  for (const char* c : kColumns) out += (out.empty() ? "" : ",") + std::string(c);
  return out + "\n";
}

std::string episode_csv_line(const EpisodeRow& row) {
  const EpisodeResult& e = row.result;
  std::ostringstream out;
  out << row.set << "," << row.mode << "," << row.id << "," << row.kind << "," << quoted(row.gold) << ","
      << quoted(e.answer) << "," << e.success << "," << e.finished << "," << e.rounds << "," << quoted(e.verdict) << ","
      << e.consistent << "," << e.tokens << "," << e.kv_bytes << "," << e.full_caches_bytes << "," << e.min_margin << ","
      << quoted(e.transcript) << "," << e.run << "," << e.elapsed_s << "," << quoted(margins_text(e.turn_margins)) << "\n";
  return out.str();
}

std::vector<std::vector<std::string>> read_csv_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read a CSV file", {path});
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted_field = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted_field) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (ch == '"') {
        quoted_field = false;
      } else {
        field += ch;
      }
    } else if (ch == '"') {
      quoted_field = true;
    } else if (ch == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (ch == '\n') {
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else if (ch != '\r') {
      field += ch;
    }
  }
  if (!field.empty() || !rows.back().empty()) rows.back().push_back(field);
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

std::vector<EpisodeRow> read_episode_rows(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  const std::vector<std::vector<std::string>> records = read_csv_records(path);
  if (records.empty()) return {};
  std::map<std::string, size_t> column;
  for (size_t i = 0; i < records.front().size(); ++i) column[records.front()[i]] = i;
  for (size_t c = 0; c < kRequiredColumns; ++c) {
    if (!column.count(kColumns[c])) {
      throw ConfigError("an episodes file lacks a column", {path, kColumns[c], "", "", "was it written by lorakv bench episodes?"});
    }
  }
  std::vector<EpisodeRow> out;
  for (size_t r = 1; r < records.size(); ++r) {
    const std::vector<std::string>& rec = records[r];
    const std::string where = "record " + std::to_string(r + 1);
    if (rec.size() != records.front().size()) {
      throw ConfigError("an episodes row has another number of fields than the header",
                        {path, where, std::to_string(records.front().size()), std::to_string(rec.size()),
                         "the file was cut short: rerun with --resume after removing its last line"});
    }
    const auto get = [&](const char* name) -> std::string {
      const auto it = column.find(name);
      return it == column.end() ? std::string() : rec[it->second];
    };
    const auto number = [&](const char* name) -> double {
      const std::string s = get(name);
      return s.empty() ? 0 : parse_number(s, path, where + ", " + name);
    };
    EpisodeRow row;
    row.set = get("set");
    row.mode = get("mode");
    row.id = get("id");
    row.gold = get("gold");
    row.kind = static_cast<int64_t>(number("kind"));
    EpisodeResult& e = row.result;
    e.answer = get("answer");
    e.verdict = get("verdict");
    e.transcript = get("transcript");
    e.success = number("success") != 0;
    e.finished = number("finished") != 0;
    e.consistent = number("planner_actor_consistent") != 0;
    e.rounds = static_cast<int64_t>(number("rounds"));
    e.tokens = static_cast<int64_t>(number("tokens"));
    e.kv_bytes = static_cast<int64_t>(number("kv_bytes"));
    e.full_caches_bytes = static_cast<int64_t>(number("full_caches_bytes"));
    e.min_margin = number("min_margin");
    e.run = get("run");
    e.elapsed_s = number("elapsed_s");
    std::istringstream margins(get("turn_margins"));
    for (std::string item; margins >> item;) {
      const size_t colon = item.rfind(':');
      if (colon == std::string::npos) throw ConfigError("a turn margin is not role:margin", {path, where + ", turn_margins", "", item});
      e.turn_margins.emplace_back(item.substr(0, colon), parse_number(item.substr(colon + 1), path, where + ", turn_margins"));
    }
    out.push_back(std::move(row));
  }
  return out;
}

void write_episode_rows(const std::string& path, const std::vector<EpisodeRow>& rows) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError("cannot write the episodes file", {tmp});
    out << episode_csv_header();
    for (const EpisodeRow& r : rows) out << episode_csv_line(r);
    if (!out.flush()) throw ConfigError("cannot write the episodes file", {tmp, "", "", "", "is the disk full?"});
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace lorakv::cli
