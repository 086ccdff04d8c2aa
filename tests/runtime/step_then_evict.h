// tests/runtime/step_then_evict.h: one engine step and the eviction phase after it, as the
// driver runs them (runtime/driver.cpp), for the tests that drive Engine::step by hand.
#pragma once

#include <vector>

#include "lorakv/runtime/engine.h"

namespace lorakv::testing {

inline runtime::StepResult step_then_evict(runtime::Engine& engine, const std::vector<runtime::StepWork>& work) {
  runtime::StepResult result = engine.step(work);
  engine.evict(result.stats);
  return result;
}

}  // namespace lorakv::testing
