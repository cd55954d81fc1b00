// PTB detokenization and tokenization: constructed cases and round trips on JFLEG dev.src.
#include "ptb_text/ptb_text.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::ptb_text {
namespace {

// The lines of `path` (a JFLEG file: one tokenized sentence a line); empty when unreadable.
std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(PtbTextTest, SplitsTokensOnAnyWhitespace) {
  EXPECT_EQ(SplitTokens("  a b\tc \n\r\f\vd"), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_TRUE(SplitTokens(" \t ").empty());
  EXPECT_TRUE(SplitTokens("").empty());
}

TEST(PtbTextTest, DetokenizesPunctuationCliticsAndQuotes) {
  EXPECT_EQ(PtbDetokenize("I do n't know , she said ."), "I don't know, she said.");
  EXPECT_EQ(PtbDetokenize("It 's the cat 's toy ; I 'm sure ( mostly ) !"),
            "It's the cat's toy; I'm sure (mostly)!");
  EXPECT_EQ(PtbDetokenize("He said \" we 'll go \" and left ."), "He said \"we'll go\" and left.");
  EXPECT_EQ(PtbDetokenize("in twenty years ' time"), "in twenty years' time");
  EXPECT_EQ(PtbDetokenize("It costs $ 5 , or 10 % more ..."), "It costs $5, or 10% more...");
  EXPECT_EQ(PtbDetokenize("`` Yes , '' he said ."), "\"Yes,\" he said.");
  EXPECT_EQ(PtbDetokenize("  a   b  "), "a b");
  EXPECT_EQ(PtbDetokenize(""), "");
}

TEST(PtbTextTest, TokenizesLikeTheReferences) {
  EXPECT_EQ(PtbTokenize("I don't know, she said."), "I do n't know , she said .");
  EXPECT_EQ(PtbTokenize("It's the cat's toy; I'm sure (mostly)!"),
            "It 's the cat 's toy ; I 'm sure ( mostly ) !");
  EXPECT_EQ(PtbTokenize("We can't, won't and they've."), "We ca n't , wo n't and they 've .");
  // Only the final period splits; inner periods of words stay.
  EXPECT_EQ(PtbTokenize("Mr. Smith lives in the U.S. today."),
            "Mr. Smith lives in the U.S. today .");
  EXPECT_EQ(PtbTokenize("He said \"go.\""), "He said \" go . \"");
  EXPECT_EQ(PtbTokenize("1,000 people at 10:30, then: more..."),
            "1,000 people at 10:30 , then : more ...");
  EXPECT_EQ(PtbTokenize("in twenty years' time"), "in twenty years ' time");
  EXPECT_EQ(PtbTokenize("and so on etc.."), "and so on etc. .");
  EXPECT_EQ(PtbTokenize("he is &raspsquo;fluent&raspsquo; ..."),
            "he is &raspsquo;fluent&raspsquo; ...");
  EXPECT_EQ(PtbTokenize("self-driving he/she cars"), "self-driving he/she cars");
  // Curly quotes and apostrophes become ASCII first.
  EXPECT_EQ(PtbTokenize("\xE2\x80\x9CIt\xE2\x80\x99s fine.\xE2\x80\x9D"), "\" It 's fine . \"");
  EXPECT_EQ(PtbTokenize("  "), "");
}

TEST(PtbTextTest, ConstructedRoundTrips) {
  for (const std::string line : {
           "So I think we can not live if old people could not find siences .",
           "Or , \" Is this the right thing to do ? \"",
           "It 's normal : propose something , is the best way ( and it 's legal ! ! ! )",
           "I believe that the number of cars may decrease in twenty years ' time .",
           "As the cities were smallers , it was less violence , noise , traffic ...",
           "They do n't know what I 'm doing , but we 'll see .",
       }) {
    EXPECT_EQ(PtbTokenize(PtbDetokenize(line)), line) << PtbDetokenize(line);
  }
}

TEST(PtbTextTest, NormalizesWhitespace) {
  EXPECT_EQ(NormalizeWhitespace("  a \t b\n c  "), "a b c");
  EXPECT_EQ(NormalizeWhitespace(""), "");
}

// Nearly every JFLEG dev source survives detokenize → tokenize (750 of 754); the few that do
// not have punctuation glued to a word in the source itself ("4:they", "heat(energy)").
TEST(PtbTextJflegTest, DevSourcesRoundTrip) {
  const auto dir = gecd::testing::SharedDataPath("jfleg");
  if (!dir) GTEST_SKIP() << "../shared/data/jfleg is absent";
  const std::vector<std::string> sources = ReadLines(*dir + "/dev.src");
  const std::vector<std::string> references = ReadLines(*dir + "/dev.ref0");
  ASSERT_EQ(sources.size(), 754u);
  ASSERT_EQ(references.size(), 754u);
  size_t same = 0;
  std::vector<std::string> differ;
  for (const std::string& line : sources) {
    const std::string normalized = NormalizeWhitespace(line);
    if (PtbTokenize(PtbDetokenize(line)) == normalized) {
      ++same;
    } else if (differ.size() < 20) {
      differ.push_back(normalized + "\n   -> " + PtbDetokenize(line) + "\n   -> " +
                       PtbTokenize(PtbDetokenize(line)));
    }
  }
  std::printf("dev.src: %zu of %zu round-trip\n", same, sources.size());
  std::string report;
  for (const auto& d : differ) report += d + "\n";
  EXPECT_GE(same, sources.size() * 99 / 100)
      << same << " of " << sources.size() << " round-trip; first that do not:\n"
      << report;
  // The references too (tokenized by the same conventions).
  size_t ref_same = 0;
  for (const std::string& line : references) {
    ref_same += PtbTokenize(PtbDetokenize(line)) == NormalizeWhitespace(line);
  }
  std::printf("dev.ref0: %zu of %zu round-trip\n", ref_same, references.size());
  EXPECT_GE(ref_same, references.size() * 98 / 100);
}

}  // namespace
}  // namespace gecd::ptb_text
