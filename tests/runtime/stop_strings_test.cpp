// tests/runtime/stop_strings_test.cpp: runtime::StopStringFilter over hand-made streams:
// stop strings split across pushes, text that only starts like one, several stop strings,
// finish(), and UTF-8 (whole characters and bytes split mid-character).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lorakv/common/errors.h"
#include "lorakv/runtime/stop_strings.h"

namespace lorakv::runtime {
namespace {

// Pushes every piece, then finishes; returns everything released.
std::string run(StopStringFilter& f, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += f.push(p);
  return out + f.finish();
}

TEST(StopStringFilter, PassesTextThroughWithoutStopStrings) {
  StopStringFilter f({});
  EXPECT_EQ(f.push("Hello"), "Hello");
  EXPECT_EQ(f.push(", world"), ", world");
  EXPECT_EQ(f.finish(), "");
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilter, CatchesAStopStringSplitAcrossPushes) {
  StopStringFilter f({"###"});
  EXPECT_EQ(f.push("Hello #"), "Hello ");  // "#" could start the stop string: held back
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(f.push("#"), "");
  EXPECT_EQ(f.push("# and more"), "");     // completes it: nothing of it is released
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "###");
  EXPECT_EQ(f.push("later text"), "");     // nothing after the stop either
  EXPECT_EQ(f.finish(), "");
}

TEST(StopStringFilter, CatchesAStopStringSplitOneCharacterPerPush) {
  StopStringFilter f({"<end>"});
  EXPECT_EQ(run(f, {"a<", "e", "n", "d", ">b", "c"}), "a");
  EXPECT_TRUE(f.stopped());
}

TEST(StopStringFilter, ReleasesTextOnceItDiverges) {
  StopStringFilter f({"STOP"});
  EXPECT_EQ(f.push("ST"), "");
  EXPECT_EQ(f.push("O"), "");
  EXPECT_EQ(f.push("RM"), "STORM");  // no longer a possible start: everything goes out
  EXPECT_FALSE(f.stopped());
  EXPECT_EQ(f.push(" S"), " ");
  EXPECT_EQ(f.push("!"), "S!");
  EXPECT_EQ(f.finish(), "");
}

TEST(StopStringFilter, HoldsBackOnlyThePartThatCanStillMatch) {
  // "aab" overlaps itself: of "aaa" only the last "aa" can still start it.
  StopStringFilter f({"aab"});
  EXPECT_EQ(f.push("xaaa"), "xa");
  EXPECT_EQ(f.push("b"), "");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.matched(), "aab");
}

TEST(StopStringFilter, EarliestOfSeveralStopStringsWins) {
  {
    // Both complete in one push: the one that starts first in the text wins, whatever
    // the order of the list.
    StopStringFilter f({"three", "two"});
    EXPECT_EQ(run(f, {"one two three"}), "one ");
    EXPECT_EQ(f.matched(), "two");
  }
  {
    // Across pushes: a longer stop string pending while a shorter one completes.
    StopStringFilter f({"<|end|>", "\n\n"});
    EXPECT_EQ(f.push("done.<|en"), "done.");
    EXPECT_EQ(f.push("d|>\n\nmore"), "");
    EXPECT_EQ(f.matched(), "<|end|>");
  }
  {
    StopStringFilter f({"<|end|>", "\n\n"});
    EXPECT_EQ(run(f, {"done.\n", "\n<|end|>"}), "done.");
    EXPECT_EQ(f.matched(), "\n\n");
  }
}

TEST(StopStringFilter, FinishReleasesHeldBackText) {
  StopStringFilter f({"\n\nUser:"});
  EXPECT_EQ(f.push("The answer.\n"), "The answer.");
  EXPECT_EQ(f.push("\nUse"), "");
  EXPECT_EQ(f.finish(), "\n\nUse");  // the stream ended: "\n\nUse" can no longer stop it
  EXPECT_FALSE(f.stopped());
}

TEST(StopStringFilter, MultiByteCharactersAroundStopStrings) {
  {
    // A stop string with a multi-byte character, pushed as whole characters.
    StopStringFilter f({"é!"});
    EXPECT_EQ(f.push("café"), "caf");
    EXPECT_EQ(f.push("!"), "");
    EXPECT_TRUE(f.stopped());
  }
  {
    // A character sharing only its lead byte with the stop string's is released whole:
    // "è" is C3 A8, "é" is C3 A9.
    StopStringFilter f({"é"});
    EXPECT_EQ(f.push("très"), "très");
    // Bytes arriving one at a time: the lead byte is held, the full character released.
    EXPECT_EQ(f.push("\xC3"), "");
    EXPECT_EQ(f.push("\xA8"), "\xC3\xA8");
    EXPECT_FALSE(f.stopped());
    EXPECT_EQ(f.push("\xC3"), "");
    EXPECT_EQ(f.push("\xA9 x"), "");
    EXPECT_TRUE(f.stopped());
  }
  {
    // A three-byte character split across pushes, completing a stop string.
    StopStringFilter f({"€uro"});
    EXPECT_EQ(f.push("price: 5\xE2\x82"), "price: 5");
    EXPECT_EQ(f.push("\xAC"), "");
    EXPECT_EQ(f.push("ur"), "");
    EXPECT_EQ(f.push("o and"), "");
    EXPECT_TRUE(f.stopped());
    EXPECT_EQ(f.matched(), "€uro");
  }
  {
    StopStringFilter f({"日本"});
    EXPECT_EQ(run(f, {"東京は日", "本の首都"}), "東京は");
  }
}

TEST(StopStringFilter, RejectsAnEmptyStopString) {
  EXPECT_THROW(StopStringFilter({"ok", ""}), ConfigError);
}

}  // namespace
}  // namespace lorakv::runtime
