// runtime/stop_strings.h: stop strings over streamed text. Text is released only when no
// stop string can still start inside it, so a stop string split across tokens is caught
// and never printed. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace lorakv::runtime {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stop_strings);

  // Adds decoded text; returns what may now be shown. After a stop string is found,
  // stopped() is true and nothing from the stop string on is ever returned.
  std::string push(const std::string& text);
  // End of stream: releases whatever is held back (no stop string can complete now).
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace lorakv::runtime
