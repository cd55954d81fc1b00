// The synthetic test set's format, its errors, and exact-match scoring per error type.
#include "eval/synthetic.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::eval {
namespace {

using ::testing::HasSubstr;

constexpr char kTsv[] =
    "# error_type<TAB>source<TAB>target\n"
    "agreement\tShe go home.\tShe goes home.\n"
    "\n"
    "none\tThe cat sat.\tThe cat sat.\n"
    "article\tI saw cat.\tI saw a cat.\r\n"
    "agreement\tThey goes.\tThey go.\n"
    "none\tAll is well.\tAll is well.\n";

TEST(SyntheticTest, ParsesExamplesSkippingCommentsAndBlankLines) {
  auto ex = ParseSyntheticTsv(kTsv, "s.tsv");
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ(ex->size(), 5u);
  EXPECT_EQ((*ex)[0].error_type, "agreement");
  EXPECT_EQ((*ex)[0].source, "She go home.");
  EXPECT_EQ((*ex)[0].target, "She goes home.");
  EXPECT_EQ((*ex)[0].line, 2);
  EXPECT_EQ((*ex)[2].target, "I saw a cat.");  // \r stripped
  EXPECT_EQ((*ex)[2].line, 5);
}

TEST(SyntheticTest, BadLinesAreErrorsNamingFileAndLine) {
  auto r = ParseSyntheticTsv("none\tonly two\n", "s.tsv");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("s.tsv:1: expected error_type<TAB>source<TAB>target, found 2"));
  r = ParseSyntheticTsv("# c\nagreement\tA\t\n", "s.tsv");
  EXPECT_THAT(r.status().message(), HasSubstr("s.tsv:2: empty field"));
  r = ParseSyntheticTsv("none\tA b.\tA c.\n", "s.tsv");
  EXPECT_THAT(r.status().message(), HasSubstr("target differs"));
  r = ParseSyntheticTsv("# only a comment\n\n", "s.tsv");
  EXPECT_THAT(r.status().message(), HasSubstr("s.tsv: no examples"));
  auto missing = LoadSyntheticFile("/nonexistent/s.tsv");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(SyntheticTest, LoadsAFileWithALimit) {
  const std::string path = gecd::testing::MakeTempDir() + "/s.tsv";
  std::ofstream(path) << kTsv;
  auto all = LoadSyntheticFile(path);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 5u);
  auto two = LoadSyntheticFile(path, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
}

TEST(SyntheticTest, ScoresExactMatchPerTypeAndFalseChanges) {
  auto ex = ParseSyntheticTsv(kTsv, "s.tsv");
  ASSERT_TRUE(ex.ok());
  // agreement: 1 of 2 right (whitespace differences do not count); article: wrong;
  // none: one left alone, one changed.
  const std::vector<std::string> outputs = {"She  goes home. ", "The cat sat.", "I saw cat.",
                                            "They goes.", "All is good."};
  auto s = ScoreSynthetic(*ex, outputs);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->by_type.size(), 3u);
  EXPECT_EQ(s->by_type[0].error_type, "agreement");
  EXPECT_EQ(s->by_type[0].sentences, 2);
  EXPECT_EQ(s->by_type[0].exact, 1);
  EXPECT_DOUBLE_EQ(s->by_type[0].accuracy(), 0.5);
  EXPECT_EQ(s->by_type[1].error_type, "article");
  EXPECT_EQ(s->by_type[1].exact, 0);
  EXPECT_EQ(s->by_type[2].error_type, "none");
  EXPECT_EQ(s->by_type[2].exact, 1);
  EXPECT_EQ(s->overall.sentences, 5);
  EXPECT_EQ(s->overall.exact, 2);
  EXPECT_EQ(s->none_sentences, 2);
  EXPECT_EQ(s->false_changes, 1);
  EXPECT_DOUBLE_EQ(s->false_change_rate(), 0.5);
  // Copying the sources: no false changes, only "none" right.
  std::vector<std::string> copies;
  for (const auto& e : *ex) copies.push_back(e.source);
  s = ScoreSynthetic(*ex, copies);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->false_changes, 0);
  EXPECT_EQ(s->overall.exact, 2);
  EXPECT_FALSE(ScoreSynthetic(*ex, {"x"}).ok());
}

// The held-out set the training script writes beside the default model, when it is there.
TEST(SyntheticTest, ParsesTheHeldOutSetBesideTheDefaultModel) {
  const std::string path = gecd::testing::SourceDir() + "/models/heldout_synthetic.tsv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto ex = LoadSyntheticFile(path);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_GT(ex->size(), 100u);
  // Copying the sources changes nothing: every "none" sentence is right.
  std::vector<std::string> copies;
  for (const auto& e : *ex) copies.push_back(e.source);
  auto s = ScoreSynthetic(*ex, copies);
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->none_sentences, 0);
  EXPECT_EQ(s->false_changes, 0);
  std::printf("%s: %zu examples, %zu error types, copy exact match %.3f\n", path.c_str(),
              ex->size(), s->by_type.size(), s->overall.accuracy());
}

TEST(SyntheticTest, AgreementRate) {
  EXPECT_DOUBLE_EQ(*AgreementRate({"a b", "c", "d"}, {"a  b", "c", "e"}), 2.0 / 3);
  EXPECT_DOUBLE_EQ(*AgreementRate({}, {}), 1.0);
  EXPECT_FALSE(AgreementRate({"a"}, {}).ok());
}

}  // namespace
}  // namespace gecd::eval
