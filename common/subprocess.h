// common/subprocess.h: runs a helper program (a Python plot or setup script) with an
// argument vector, never through a shell: paths with quotes, spaces or "$(...)" reach the
// program as they are and run nothing else.
#pragma once

#include <string>
#include <vector>

namespace lorakv {

struct ProcessResult {
  int exit_code = -1;  // the program's exit status; 128 + signal when a signal ended it
  std::string output;  // its standard output, when asked to capture it
};

struct ProcessOptions {
  bool capture_output = false;  // collect stdout into ProcessResult::output (else inherited)
  bool silence_stderr = false;  // send the program's stderr to /dev/null
};

// Runs argv[0] (looked up on PATH when it has no '/') with argv[1..] and waits for it.
// Throws Error when argv is empty or the program cannot be started (not found, not
// executable); a program that runs and fails is an exit code, not an exception.
ProcessResult run_process(const std::vector<std::string>& argv, ProcessOptions options = {});

// "'a b' c": argv as a shell would need it quoted, for messages only.
std::string describe_command(const std::vector<std::string>& argv);

}  // namespace lorakv
