// common/subprocess.cpp: posix_spawnp with a pipe for stdout; see subprocess.h.
#include "lorakv/common/subprocess.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lorakv/common/errors.h"

extern char** environ;

namespace lorakv {

namespace {

// Closes the descriptors it holds on every exit path.
struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void close_end(int i) {
    ::close(fd[i]);
    fd[i] = -1;
  }
};

struct SpawnActions {
  posix_spawn_file_actions_t actions;
  SpawnActions() { posix_spawn_file_actions_init(&actions); }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions); }
};

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv, ProcessOptions options) {
  if (argv.empty() || argv.front().empty()) throw Error(ErrorCode::kSystem, "cannot run a program", "no program given");
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  Pipe out;
  SpawnActions spawn;
  if (options.capture_output) {
    if (::pipe2(out.fd, O_CLOEXEC) != 0) throw Error(ErrorCode::kSystem, "cannot run a program", std::strerror(errno), {argv.front()});
    posix_spawn_file_actions_adddup2(&spawn.actions, out.fd[1], STDOUT_FILENO);
  }
  if (options.silence_stderr) {
    posix_spawn_file_actions_addopen(&spawn.actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args.front(), &spawn.actions, nullptr, args.data(), environ);
  if (rc != 0) {
    throw Error(ErrorCode::kSystem, "cannot run a program", std::strerror(rc),
                {argv.front(), "", "an executable file or a program on PATH", "", describe_command(argv)});
  }
  ProcessResult result;
  if (options.capture_output) {
    out.close_end(1);
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out.fd[0], buf, sizeof buf);
      if (n > 0) {
        result.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        break;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(ErrorCode::kSystem, "cannot run a program", std::strerror(errno), {argv.front()});
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

std::string describe_command(const std::vector<std::string>& argv) {
  std::string text;
  for (const std::string& a : argv) {
    if (!text.empty()) text += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?[]{}()<>|&;#~") == std::string::npos;
    if (plain) {
      text += a;
      continue;
    }
    text += '\'';
    for (char ch : a) text += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    text += '\'';
  }
  return text;
}

}  // namespace lorakv
