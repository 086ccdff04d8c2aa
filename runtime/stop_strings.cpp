// runtime/stop_strings.cpp: hold-back matching of stop strings.
#include "lorakv/runtime/stop_strings.h"

#include "lorakv/common/errors.h"

namespace lorakv::runtime {

StopStringFilter::StopStringFilter(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  for (const auto& s : stops_) {
    if (s.empty()) throw ConfigError("empty stop string", {"", "--stop", "a non-empty string", "\"\"", ""});
  }
}

std::string StopStringFilter::push(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  // The earliest complete stop string wins.
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at != std::string::npos && at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::finish() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? "" : out;
}

}  // namespace lorakv::runtime
