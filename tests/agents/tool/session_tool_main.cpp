// tests/agents/tool/session_tool_main.cpp: a second process for the save/restore tests
// (tests/agents/session_save_test.cpp).
//   lorakv_session_tool save-loop MODEL ADAPTERS PATH   builds the test session, then saves it
//                                                       to PATH again and again until killed
//   lorakv_session_tool restore MODEL ADAPTERS PATH     restores PATH and prints the planner's
//                                                       next 8 greedy token ids
#include <cstdio>
#include <string>

#include "lorakv/agents/runtime.h"
#include "lorakv/common/errors.h"
#include "tests/agents/session_save_scenario.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: lorakv_session_tool save-loop|restore MODEL ADAPTERS PATH\n");
    return 2;
  }
  const std::string mode = argv[1], path = argv[4];
  try {
    lorakv::agents::Runtime rt(lorakv::agents::testing::scenario_options(argv[2]));
    lorakv::agents::testing::load_scenario_adapters(rt, argv[3]);
    if (mode == "save-loop") {
      auto session = lorakv::agents::testing::scenario_session(rt);
      for (long n = 1;; ++n) {
        session->save(path);
        std::printf("saved %ld\n", n);
        std::fflush(stdout);
      }
    }
    if (mode == "restore") {
      auto session = rt.restore_session(path);
      for (int32_t id : lorakv::agents::testing::scenario_next_turn(*session).tokens) std::printf("%d ", id);
      std::printf("\n");
      return 0;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const lorakv::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
