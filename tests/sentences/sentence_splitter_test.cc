#include "sentences/sentence_splitter.h"

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/test_paths.h"

namespace gecd::sentences {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct GoldenCase {
  std::string kind;
  std::string text;
  std::vector<std::string> sentences;
};

std::vector<GoldenCase> LoadGolden() {
  std::ifstream in(testing::FixturePath("sentences/golden.jsonl"));
  std::vector<GoldenCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    cases.push_back({j.at("kind"), j.at("text"), j.at("sentences")});
  }
  return cases;
}

std::vector<std::string> Texts(std::string_view text, const std::vector<SentenceSpan>& spans) {
  std::vector<std::string> out;
  for (const SentenceSpan& s : spans) out.emplace_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

std::vector<std::string> SplitTexts(std::string_view text) {
  return Texts(text, SentenceSplitter::Create().value().Split(text));
}

// The golden set (tests/fixtures/sentences/golden.jsonl): every case must come out exactly as
// listed. Plain ICU's score on the same set is logged, so the fixes' worth stays measured.
TEST(SentenceSplitterTest, GoldenSet) {
  const std::vector<GoldenCase> cases = LoadGolden();
  ASSERT_GE(cases.size(), 60u);
  const SentenceSplitter gecd = SentenceSplitter::Create().value();
  const SentenceSplitter icu = SentenceSplitter::Create({.fixes = false}).value();
  int gecd_right = 0, icu_right = 0;
  for (const GoldenCase& c : cases) {
    const std::vector<std::string> got = Texts(c.text, gecd.Split(c.text));
    EXPECT_EQ(got, c.sentences) << c.kind << ": " << c.text;
    gecd_right += got == c.sentences;
    icu_right += Texts(c.text, icu.Split(c.text)) == c.sentences;
  }
  std::printf("golden set: gecd %d/%zu, plain ICU (en@ss=standard) %d/%zu\n", gecd_right,
              cases.size(), icu_right, cases.size());
  RecordProperty("gecd_right", gecd_right);
  RecordProperty("icu_right", icu_right);
  EXPECT_GT(gecd_right, icu_right);
}

TEST(SentenceSplitterTest, SpansAreTrimmedDisjointAndInOrder) {
  const std::string text = "  One.  Two?\n\nThree!\t";
  const std::vector<SentenceSpan> spans = SentenceSplitter::Create().value().Split(text);
  EXPECT_THAT(spans, ElementsAre(SentenceSpan{2, 6}, SentenceSpan{8, 12}, SentenceSpan{14, 20}));
}

TEST(SentenceSplitterTest, NothingButWhitespaceHasNoSentences) {
  EXPECT_THAT(SplitTexts(""), IsEmpty());
  EXPECT_THAT(SplitTexts(" \r\n\t\u00a0"), IsEmpty());
}

TEST(SentenceSplitterTest, LongTextWithoutSentenceEndIsOneSentence) {
  std::string text;
  while (text.size() < 20000) text += "word ";
  text.pop_back();
  EXPECT_THAT(SplitTexts(text), ElementsAre(text));
}

TEST(SentenceSplitterTest, InvalidUtf8IsSplitWithoutCrashing) {
  const std::string text = "Bad \xff\xfe bytes. Next \xc3 one.";
  EXPECT_THAT(SplitTexts(text), ElementsAre("Bad \xff\xfe bytes.", "Next \xc3 one."));
}

TEST(SentenceSplitterTest, ConcurrentSplitsAgree) {
  const SentenceSplitter splitter = SentenceSplitter::Create().value();
  const std::string text = "Dr. Brown came. The U.S. Army left. I was thinking\u2026 Maybe not.";
  const std::vector<SentenceSpan> expected = splitter.Split(text);
  ASSERT_EQ(expected.size(), 4u);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) wrong += splitter.Split(text) != expected;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace gecd::sentences
