// agents/main.cpp: the `lorakv` command line. The one place that catches lorakv's errors
// and turns them into a message and an exit code.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "agents/cli.h"
#include "common/errors.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return lorakv::agents::run_cli(args, std::cout, std::cerr);
  } catch (const lorakv::Error& e) {
    std::cerr << "lorakv: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "lorakv: unexpected error: " << e.what() << "\n";
    return 3;
  }
}
