// common/logging.h: lorakv's logging front door. spdlog stays behind this header so it
// never leaks into public includes. Messages go to stderr; stdout is for program output.
#pragma once

#include <chrono>
#include <string>

namespace lorakv::log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kOff };

// Parses "trace|debug|info|warn|error|off"; throws ConfigError naming the valid values.
Level parse_level(const std::string& name);
void set_level(Level level);
Level level();

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

// Measures wall time from construction; `seconds()` reads it.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace lorakv::log
