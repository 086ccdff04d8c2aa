// cli/main.cpp: the `lorakv` command line. Errors become a message and an exit code in
// run_cli_main (cli/cli.cpp).
#include <iostream>
#include <string>
#include <vector>

#include "lorakv/cli/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return lorakv::cli::run_cli_main(args, std::cout, std::cerr);
}
