// agents/session_file_eviction.cpp: the eviction keys and the lanes of a session file.
#include "lorakv/agents/session_file_eviction.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "lorakv/agents/errors.h"

namespace lorakv::agents {

namespace {

using cache::eviction::EvictionConfig;
using formats::JsonObject;
using formats::JsonValue;
using Lane = runtime::SequenceRows::Lane;

const char* kDamaged = "the file is damaged, or not a lorakv session";

void put(JsonObject& o, const std::string& key, JsonValue v) {
  o.index[key] = o.members.size();
  o.members.emplace_back(key, std::move(v));
}
JsonValue integer(int64_t v) { return JsonValue::make_number(static_cast<double>(v), v); }
JsonValue real(double v) { return JsonValue::make_number(v); }
template <class T, class Make>
JsonValue array(const std::vector<T>& values, Make make) {
  std::vector<JsonValue> out;
  for (const T& v : values) out.push_back(make(v));
  return JsonValue::make_array(std::move(out));
}

// A tensor of the lanes of `dtype` and `elements` elements, copied out of the file.
template <class T>
std::vector<T> lane_values(const std::string& path, const formats::SafetensorsTensorInfo& info,
                           formats::SafetensorsDtype dtype, int64_t elements) {
  if (info.dtype != dtype || info.shape != std::vector<int64_t>{elements}) {
    throw SessionFileError("a lanes tensor of another dtype or size than its header says",
                           {path, info.name, std::string(safetensors_dtype_name(dtype)) + " of " + std::to_string(elements),
                            std::string(info.dtype_name()) + " of " + std::to_string(info.num_elements), kDamaged});
  }
  std::vector<T> out(static_cast<size_t>(elements));
  if (elements > 0) std::memcpy(out.data(), info.data, out.size() * sizeof(T));
  return out;
}

// Per lane, a non-negative count (rows) or a 0/1 flag (scored), one per lane.
std::vector<int64_t> lane_counts(const std::string& path, const JsonValue& json, const char* key, size_t lanes,
                                 int64_t most) {
  std::vector<int64_t> out;
  for (const JsonValue& v : json.at(key).as_array()) {
    const int64_t x = v.as_int();
    if (x < 0 || x > most) {
      throw SessionFileError("a lane count out of range",
                             {path, v.path(), "0.." + std::to_string(most), std::to_string(x), kDamaged});
    }
    out.push_back(x);
  }
  if (lanes != SIZE_MAX && out.size() != lanes) {
    throw SessionFileError("lanes of another number",
                           {path, json.at(key).path(), std::to_string(lanes), std::to_string(out.size()), kDamaged});
  }
  return out;
}

void check_lane(const std::string& path, const std::string& field, const Lane& lane, int64_t tokens) {
  for (size_t r = 0; r < lane.positions.size(); ++r) {
    const int32_t p = lane.positions[r];
    if (p < 0 || p >= tokens || (r > 0 && p <= lane.positions[r - 1])) {
      throw SessionFileError("a lane's positions do not ascend within the sequence's tokens",
                             {path, field + ".positions", "ascending in 0.." + std::to_string(tokens - 1),
                              std::to_string(p) + " at row " + std::to_string(r), kDamaged});
    }
  }
  for (uint8_t x : lane.live) {
    if (x > 1) {
      throw SessionFileError("a mask value other than 0 or 1", {path, field + ".live", "0 or 1", std::to_string(x), kDamaged});
    }
  }
  for (float x : lane.scores) {
    if (!std::isfinite(x)) {
      throw SessionFileError("a score that is not a finite number", {path, field + ".scores", "", "", kDamaged});
    }
  }
}

}  // namespace

JsonValue eviction_json(const EvictionConfig& c) {
  JsonObject o;
  put(o, "policy", JsonValue::make_string(c.policy));
  put(o, "budget_tokens", integer(c.budget_tokens));
  put(o, "budget_fraction", real(c.budget_fraction));
  put(o, "sinks", integer(c.sinks));
  put(o, "window", integer(c.window));
  put(o, "protected_spans", array(c.protected_spans, [](const std::pair<int64_t, int64_t>& s) {
        return JsonValue::make_array({integer(s.first), integer(s.second)});
      }));
  put(o, "scoring", JsonValue::make_string(c.scoring));
  put(o, "layer_budgets", JsonValue::make_string(c.layer_budgets));
  put(o, "layer_weights", array(c.layer_weights, real));
  put(o, "pyramid_beta", real(c.pyramid_beta));
  put(o, "head_floor", real(c.head_floor));
  put(o, "leverage_rank", integer(c.leverage_rank));
  put(o, "capkv_tau", real(c.capkv_tau));
  put(o, "capkv_future_positions", integer(c.capkv_future_positions));
  put(o, "window_growth", real(c.window_growth));
  put(o, "loss_bound", JsonValue::make_bool(c.loss_bound));
  return JsonValue::make_object(std::move(o));
}

EvictionConfig eviction_from_json(const std::string& path, const JsonValue& o) {
  EvictionConfig c;
  c.policy = o.at("policy").as_string();
  c.budget_tokens = o.at("budget_tokens").as_int();
  c.budget_fraction = o.at("budget_fraction").as_double();
  c.sinks = o.at("sinks").as_int();
  c.window = o.at("window").as_int();
  c.protected_spans.clear();
  for (const JsonValue& span : o.at("protected_spans").as_array()) {
    if (span.size() != 2) {
      throw SessionFileError("a protected span is [begin, end)", {path, span.path(), "2 numbers", span.describe(), kDamaged});
    }
    c.protected_spans.emplace_back(span.at(size_t{0}).as_int(), span.at(size_t{1}).as_int());
  }
  c.scoring = o.at("scoring").as_string();
  c.layer_budgets = o.at("layer_budgets").as_string();
  c.layer_weights.clear();
  for (const JsonValue& w : o.at("layer_weights").as_array()) c.layer_weights.push_back(w.as_double());
  c.pyramid_beta = o.at("pyramid_beta").as_double();
  c.head_floor = o.at("head_floor").as_double();
  c.leverage_rank = o.at("leverage_rank").as_int();
  c.capkv_tau = o.at("capkv_tau").as_double();
  c.capkv_future_positions = o.at("capkv_future_positions").as_int();
  // Added after format 2 first shipped; a file without them had neither.
  if (const JsonValue* g = o.find("window_growth")) c.window_growth = g->as_double();
  if (const JsonValue* b = o.find("loss_bound")) c.loss_bound = b->as_bool();
  try {
    c.check("eviction");
  } catch (const ConfigError& e) {
    ErrorContext where = e.context();
    where.file = path;
    where.hint = kDamaged;
    throw SessionFileError("the saved eviction keys are invalid: " + e.message(), where);
  }
  return c;
}

JsonValue encode_lanes(const std::string& prefix, const std::vector<Lane>& lanes,
                       const std::function<void(const std::string&, const at::Tensor&)>& add) {
  std::vector<int32_t> positions;
  std::vector<uint8_t> live;
  std::vector<float> scores;
  std::vector<int64_t> rows, scored;
  for (const Lane& l : lanes) {
    positions.insert(positions.end(), l.positions.begin(), l.positions.end());
    if (l.live.empty()) {
      live.insert(live.end(), l.positions.size(), uint8_t{1});
    } else {
      live.insert(live.end(), l.live.begin(), l.live.end());
    }
    scores.insert(scores.end(), l.scores.begin(), l.scores.end());
    rows.push_back(static_cast<int64_t>(l.positions.size()));
    scored.push_back(l.scores.empty() ? 0 : 1);
  }
  add(prefix + ".lanes.positions", at::tensor(positions, at::kInt));
  add(prefix + ".lanes.live", at::tensor(live, at::kByte));
  add(prefix + ".lanes.scores", at::tensor(scores, at::kFloat));
  JsonObject o;
  put(o, "rows", array(rows, integer));
  put(o, "scored", array(scored, integer));
  return JsonValue::make_object(std::move(o));
}

std::vector<Lane> decode_lanes(const std::string& path, const std::string& prefix, const JsonValue& json,
                               int64_t tokens, const CheckedTensor& tensor) {
  const std::vector<int64_t> rows = lane_counts(path, json, "rows", SIZE_MAX, tokens);
  const std::vector<int64_t> scored = lane_counts(path, json, "scored", rows.size(), 1);
  int64_t total = 0, total_scored = 0;
  for (size_t lane = 0; lane < rows.size(); ++lane) {
    total += rows[lane];
    total_scored += scored[lane] * rows[lane];
  }
  using formats::SafetensorsDtype;
  const std::vector<int32_t> positions =
      lane_values<int32_t>(path, tensor(prefix + ".lanes.positions"), SafetensorsDtype::kI32, total);
  const std::vector<uint8_t> live = lane_values<uint8_t>(path, tensor(prefix + ".lanes.live"), SafetensorsDtype::kU8, total);
  const std::vector<float> scores =
      lane_values<float>(path, tensor(prefix + ".lanes.scores"), SafetensorsDtype::kF32, total_scored);
  std::vector<Lane> lanes(rows.size());
  int64_t at = 0, at_scored = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    Lane& l = lanes[i];
    l.positions.assign(positions.begin() + at, positions.begin() + at + rows[i]);
    l.live.assign(live.begin() + at, live.begin() + at + rows[i]);
    if (std::all_of(l.live.begin(), l.live.end(), [](uint8_t x) { return x == 1; })) l.live.clear();
    if (scored[i]) {
      l.scores.assign(scores.begin() + at_scored, scores.begin() + at_scored + rows[i]);
      at_scored += rows[i];
    }
    at += rows[i];
    check_lane(path, prefix + ".lanes[" + std::to_string(i) + "]", l, tokens);
  }
  return lanes;
}

}  // namespace lorakv::agents
