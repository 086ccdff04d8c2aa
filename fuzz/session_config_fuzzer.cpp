// fuzz/session_config_fuzzer.cpp: a session config (agents/config/) as `lorakv run` reads
// it: byte checks, YAML parsing under limits, the schema walk, path resolution against a
// scratch folder that holds what the seeds name (model.gguf with GGUF's magic, PEFT
// folders adapters/planner and adapters/actor, adapters/coder.gguf, kb.jsonl; the same
// layout as tests/agents/config/config_test_util.h), and the effective config printed and
// read back. The expected answer to bad input is a ConfigFileError; any other exception,
// lorakv::Error subclasses included, is a finding, and so is a printed config that does
// not read back.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>

#include "lorakv/agents/config/config_error.h"
#include "lorakv/agents/config/load_session_config.h"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

void remove_scratch_folder();

// The folder relative paths resolve against, made once per process, removed at exit.
std::string scratch_folder() {
  static const std::string folder = [] {
    const fs::path dir = fs::temp_directory_path() / ("lorakv-fuzz-session-config-" + std::to_string(::getpid()));
    std::atexit(remove_scratch_folder);
    write_file(dir / "model.gguf", std::string("GGUF") + std::string(60, '\0'));
    write_file(dir / "adapters" / "planner" / "adapter_config.json", "{}");
    write_file(dir / "adapters" / "actor" / "adapter_config.json", "{}");
    write_file(dir / "adapters" / "coder.gguf", std::string("GGUF") + std::string(60, '\0'));
    write_file(dir / "kb.jsonl", "{\"document\": \"Dok Gramein: born 1914, lives in Gramfal.\", \"name\": \"Dok Gramein\"}\n"
                                 "{\"text\": \"Gramfal: city founded 1402, mayor Dok Gramein.\"}\n");
    return dir.string();
  }();
  return folder;
}

void remove_scratch_folder() {
  std::error_code ignored;
  fs::remove_all(fs::temp_directory_path() / ("lorakv-fuzz-session-config-" + std::to_string(::getpid())), ignored);
}

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "session_config: FINDING: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lorakv::agents::config;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const SessionConfig config = load_session_config_from_string(text, "fuzz.yaml", scratch_folder());
    const std::string printed = effective_config_yaml(config);
    const SessionConfig again = load_session_config_from_string(printed, "fuzz.yaml", "/");
    if (effective_config_yaml(again) != printed) finding("the effective config does not read back", printed);
  } catch (const ConfigFileError&) {
    // Bad input refused the documented way, with its place in the file.
  } catch (const std::exception& e) {
    finding((std::string("exception other than ConfigFileError: ") + typeid(e).name()).c_str(), e.what());
  } catch (...) {
    finding("exception of unknown type", "");
  }
  return 0;
}
