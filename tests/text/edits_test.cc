#include "text/edits.h"

#include <fstream>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::text {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

}  // namespace

void PrintTo(const TextEdit& e, std::ostream* os) {
  *os << "[" << e.start << ", " << e.end << ") -> \"" << e.replacement << "\"";
}

namespace {

TEST(EditsTest, IdenticalTextsHaveNoEdits) {
  EXPECT_THAT(ComputeEdits("She goes home.", "She goes home."), IsEmpty());
  EXPECT_THAT(ComputeEdits("", ""), IsEmpty());
}

TEST(EditsTest, ReplacedWordIsOneEditOnItsBytes) {
  EXPECT_THAT(ComputeEdits("She go home.", "She goes home."), ElementsAre(TextEdit{4, 6, "goes"}));
}

TEST(EditsTest, InsertionAndDeletion) {
  EXPECT_THAT(ComputeEdits("I went store.", "I went to store."),
              ElementsAre(TextEdit{7, 7, "to "}));
  EXPECT_THAT(ComputeEdits("I really have a cat.", "I have a cat."),
              ElementsAre(TextEdit{2, 9, ""}));
}

TEST(EditsTest, ChangesSeparatedOnlyBySpaceMerge) {
  EXPECT_THAT(ComputeEdits("he go to school", "He goes to school"),
              ElementsAre(TextEdit{0, 5, "He goes"}));
  // An unchanged word between two changes keeps them apart.
  EXPECT_THAT(ComputeEdits("he went to scool", "He went to school"),
              ElementsAre(TextEdit{0, 2, "He"}, TextEdit{11, 16, "school"}));
}

TEST(EditsTest, PunctuationIsItsOwnPiece) {
  EXPECT_THAT(ComputeEdits("Yes it is", "Yes, it is."),
              ElementsAre(TextEdit{3, 3, ","}, TextEdit{9, 9, "."}));
}

TEST(EditsTest, OffsetsAreBytesOfTheOriginalUtf8) {
  // "café" is 5 bytes; the edit after it starts at byte 6.
  EXPECT_THAT(ComputeEdits("café ist gut", "café is good"),
              ElementsAre(TextEdit{6, 13, "is good"}));
  EXPECT_THAT(ComputeEdits("naïve", "naive"), ElementsAre(TextEdit{0, 6, "naive"}));
}

TEST(EditsTest, EmptySides) {
  EXPECT_THAT(ComputeEdits("", "Hello."), ElementsAre(TextEdit{0, 0, "Hello."}));
  EXPECT_THAT(ComputeEdits("Hello.", ""), ElementsAre(TextEdit{0, 6, ""}));
}

void ExpectRoundTrip(const std::string& source, const std::string& target) {
  const std::vector<TextEdit> edits = ComputeEdits(source, target);
  ASSERT_EQ(ApplyEdits(source, edits), target) << "source: " << source << "\ntarget: " << target;
  for (size_t k = 0; k < edits.size(); ++k) {
    ASSERT_LE(edits[k].start, edits[k].end);
    ASSERT_LE(edits[k].end, source.size());
    if (k > 0) {
      ASSERT_LT(edits[k - 1].end, edits[k].start) << "adjacent edits are merged";
    }
  }
}

// Random texts over a small alphabet (so pieces repeat and the diff has work to do) that
// includes multi-byte UTF-8, whitespace runs and punctuation.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> kAtoms = {"a", "b", "cat", "the",  " ", " ",  "  ", "\n",
                                                  ",", ".", "é",   "日本", "'", "x1", "\t"};
  std::uniform_int_distribution<size_t> len(0, 24), pick(0, kAtoms.size() - 1);
  std::string s;
  for (size_t n = len(rng); n > 0; --n) s += kAtoms[pick(rng)];
  return s;
}

TEST(EditsPropertyTest, ApplyingEditsGivesTheTargetOnRandomPairs) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string source = RandomText(rng);
    // Half the pairs are small mutations of the source, as corrections are.
    std::string target = RandomText(rng);
    if (trial % 2 == 0 && !source.empty()) {
      target = source;
      std::uniform_int_distribution<size_t> at(0, source.size());
      const size_t p = at(rng);
      target.insert(p, RandomText(rng).substr(0, 4));
    }
    ExpectRoundTrip(source, target);
  }
}

TEST(EditsPropertyTest, ArbitraryBytesRoundTrip) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 40);
  for (int trial = 0; trial < 5000; ++trial) {
    std::string a(len(rng), '\0'), b(len(rng), '\0');
    for (char& c : a) c = static_cast<char>(byte(rng));
    for (char& c : b) c = static_cast<char>(byte(rng));
    ExpectRoundTrip(a, b);
  }
}

TEST(EditsPropertyTest, JflegSourcesAgainstReferences) {
  const auto src = gecd::testing::SharedDataPath("jfleg/dev.src");
  const auto ref = gecd::testing::SharedDataPath("jfleg/dev.ref0");
  if (!src || !ref) GTEST_SKIP() << "../shared/data/jfleg absent";
  std::ifstream src_in(*src), ref_in(*ref);
  std::string s, r;
  int pairs = 0, edited = 0;
  while (std::getline(src_in, s) && std::getline(ref_in, r)) {
    ExpectRoundTrip(s, r);
    ++pairs;
    edited += s != r;
  }
  EXPECT_GT(pairs, 500);
  EXPECT_GT(edited, pairs / 2);
}

}  // namespace
}  // namespace gecd::text
