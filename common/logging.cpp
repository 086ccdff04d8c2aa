// common/logging.cpp: spdlog-backed implementation of common/logging.h.
#include "lorakv/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "lorakv/common/errors.h"

namespace lorakv::log {
namespace {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("lorakv");
    l->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    l->set_level(spdlog::level::info);
    return l;
  }();
  return *instance;
}

Level g_level = Level::kInfo;

}  // namespace

Level parse_level(const std::string& name) {
  if (name == "trace") return Level::kTrace;
  if (name == "debug") return Level::kDebug;
  if (name == "info") return Level::kInfo;
  if (name == "warn" || name == "warning") return Level::kWarn;
  if (name == "error") return Level::kError;
  if (name == "off") return Level::kOff;
  throw ConfigError("unknown log level", {"", "--log-level", "one of trace, debug, info, warn, error, off",
                                          "'" + name + "'", ""});
}

void set_level(Level level) {
  g_level = level;
  static const spdlog::level::level_enum map[] = {spdlog::level::trace, spdlog::level::debug,
                                                  spdlog::level::info,  spdlog::level::warn,
                                                  spdlog::level::err,   spdlog::level::off};
  logger().set_level(map[static_cast<int>(level)]);
}

Level level() { return g_level; }

void debug(const std::string& message) { logger().debug(message); }
void info(const std::string& message) { logger().info(message); }
void warn(const std::string& message) { logger().warn(message); }
void error(const std::string& message) { logger().error(message); }

}  // namespace lorakv::log
