// tests/kernels/lora_attention_path_test.cpp: the fused attention's vector paths. It prints
// this CPU and the paths it runs, checks that each runs when asked, and that an unset path
// follows LORAKV_CPU_PATH (tests/kernels/CMakeLists.txt runs this test once per path with
// the variable set, so every path the machine has is also reached through the variable).
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "lorakv/common/cpu_features.h"
#include "lorakv/common/errors.h"
#include "lorakv/kernels/lora_attention.h"
#include "tests/kernels/lora_attention_case.h"

namespace lorakv::testing {
namespace {

CaseSpec small_spec() {
  CaseSpec s;
  s.seed = 300;
  s.context = 70;
  AgentSpec a;
  a.num_queries = 3;
  a.v_rank = 8;
  a.k_rank = 4;
  a.private_rows = 3;
  s.agents = {a, AgentSpec{}};
  return s;
}

TEST(LoraAttentionPath, EveryPathThisCpuHasRunsWhenAsked) {
  const cpu::CpuFeatures& f = cpu::detected_cpu_features();
  std::cout << "[ cpu      ] " << f.model_name << " (" << cpu::describe_features(f) << ")\n";
  LoraAttentionCase c(small_spec());
  for (const KernelForm& form : runnable_forms()) {
    kernels::LoraAttentionStats stats;
    c.run(form.path, 2, &stats, nullptr, form.integer_qk);
    std::cout << "[ path     ] " << form.name() << " ran\n";
    EXPECT_EQ(stats.path, form.path);
    EXPECT_EQ(stats.integer_qk, form.integer_qk);
    EXPECT_EQ(compare_with_reference(c, tolerance_for(c.spec())), "") << form.name();
  }
}

TEST(LoraAttentionPath, UnsetPathFollowsTheEnvironment) {
  const char* value = std::getenv(cpu::kCpuPathVariable);
  const std::string requested = value ? value : "";
  const cpu::CpuFeatures& f = cpu::detected_cpu_features();
  const std::optional<cpu::VectorPath> named = cpu::parse_vector_path(requested);
  LoraAttentionCase c(small_spec());
  kernels::LoraAttentionStats stats;
  if (!requested.empty() && (!named || !cpu::supports(f, *named))) {
    EXPECT_THROW(c.run(std::nullopt, 1, &stats), ConfigError) << cpu::kCpuPathVariable << "=" << requested;
    std::cout << "[ path     ] " << cpu::kCpuPathVariable << "=" << requested << " refused on this CPU, as it must be\n";
    return;
  }
  c.run(std::nullopt, 1, &stats);
  const cpu::VectorPath expected = named ? *named : cpu::best_vector_path(f);
  std::cout << "[ path     ] " << cpu::kCpuPathVariable << "='" << requested << "': " << cpu::vector_path_name(stats.path)
            << " ran\n";
  EXPECT_EQ(stats.path, expected);
  EXPECT_EQ(compare_with_reference(c, tolerance_for(c.spec())), "");
}

}  // namespace
}  // namespace lorakv::testing
