// tests/cli/cli_errors_test.cpp: the CLI's last line of defence: a lorakv error prints
// as it is (exit 2); a libtorch c10::Error prints its message without the C++ backtrace and
// with a hint that it is likely a bug (exit 3), as do lorakv internal errors.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

#include "lorakv/cli/cli.h"
#include "lorakv/cli/cli_args.h"
#include "lorakv/common/errors.h"

namespace lorakv::cli {
namespace {

struct Reported {
  int code = -1;
  std::string text;
};

template <typename Throw>
Reported report(Throw&& throw_it) {
  std::ostringstream err;
  try {
    throw_it();
  } catch (...) {
    const int code = report_error(std::current_exception(), err);
    return {code, err.str()};
  }
  return {};
}

TEST(CliErrors, TorchErrorLosesItsBacktraceAndGetsABugHint) {
  std::string full_what;
  try {
    TORCH_CHECK(false, "shape mismatch 17 vs 18");
  } catch (const c10::Error& e) {
    full_what = e.what();
  }
  // The point of the test: what() carries a backtrace the report must drop.
  ASSERT_NE(full_what.find("Exception raised from"), std::string::npos) << full_what;

  const Reported r = report([] { TORCH_CHECK(false, "shape mismatch 17 vs 18"); });
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_EQ(r.text.rfind("lorakv: unexpected libtorch error: shape mismatch 17 vs 18", 0), 0u) << r.text;
  EXPECT_NE(r.text.find("likely a lorakv bug"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("Exception raised from"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("frame #"), std::string::npos) << r.text;
  EXPECT_EQ(std::count(r.text.begin(), r.text.end(), '\n'), 1) << r.text;
}

TEST(CliErrors, LorakvErrorsPrintAsTheyAre) {
  const Reported r = report([] { throw ConfigError("bad thing", {"", "--flag", "", "", "fix it"}); });
  EXPECT_EQ(r.code, kExitError);
  EXPECT_EQ(r.text, "lorakv: config error: bad thing [--flag] (hint: fix it)\n");
  const Reported shape = report([] { throw InvalidArgumentError("lora_add: bad rows"); });
  EXPECT_EQ(shape.code, kExitError);
  const Reported usage = report([] { throw UsageError("unknown flag", {"", "--frob", "", "", "see 'lorakv run --help'"}); });
  EXPECT_EQ(usage.code, kExitUsage);
  EXPECT_EQ(usage.text, "lorakv: usage error: unknown flag [--frob] (hint: see 'lorakv run --help')\n");
  EXPECT_EQ(shape.text, "lorakv: invalid argument: lora_add: bad rows\n");
}

TEST(CliErrors, InternalAndUnknownErrorsAreReportedAsLikelyBugs) {
  const Reported internal = report([] { LORAKV_ASSERT(1 + 1 == 3, "arithmetic"); });
  EXPECT_EQ(internal.code, kExitFailure);
  EXPECT_NE(internal.text.find("lorakv internal error: 1 + 1 == 3 failed"), std::string::npos) << internal.text;
  EXPECT_NE(internal.text.find("likely a lorakv bug"), std::string::npos) << internal.text;
  const Reported other = report([] { throw std::out_of_range("vector::at"); });
  EXPECT_EQ(other.code, kExitFailure);
  EXPECT_NE(other.text.find("unexpected error: vector::at"), std::string::npos) << other.text;
  const Reported odd = report([] { throw 42; });
  EXPECT_EQ(odd.code, kExitFailure);
  EXPECT_NE(odd.text.find("unknown type"), std::string::npos) << odd.text;
}

TEST(CliErrors, RunCliMainTurnsThrowsIntoExitCodes) {
  std::ostringstream out, err;
  EXPECT_EQ(run_cli_main({"frobnicate"}, out, err), kExitUsage);
  EXPECT_NE(err.str().find("unknown command [frobnicate]"), std::string::npos) << err.str();
  std::ostringstream out2, err2;
  EXPECT_EQ(run_cli_main({"--help"}, out2, err2), 0);
  EXPECT_NE(out2.str().find("version"), std::string::npos);
}

}  // namespace
}  // namespace lorakv::cli
