#include "eval/edit_kinds.h"

#include <cmath>
#include <string>
#include <vector>

#include "eval/eval_report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::eval {
namespace {

using text::EditKind;

const EditCounts& Kind(const EditKindScore& s, EditKind kind) {
  return s.by_kind[static_cast<int>(kind)];
}

TEST(EditKindsTest, ProposedEditsMatchTheReferencesEditsByKind) {
  const std::vector<std::string> sources = {"She go to school yesterday .",
                                            "He recieve the letter ."};
  // Sentence 0: the spelling is left, the word choice right. Sentence 1: the spelling right, a
  // punctuation edit the reference did not make, and the word form missed.
  const std::vector<std::string> hyps = {"She went to school yesterday .",
                                         "He recieve the letter !"};
  const std::vector<std::vector<std::string>> refs = {
      {"She went to school yesterday .", "He receives the letter ."}};
  auto score = ScoreEditKinds(sources, hyps, refs);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->sentences, 2);
  const EditCounts& choice = Kind(*score, EditKind::kWordChoice);
  EXPECT_EQ(choice.proposed, 1);
  EXPECT_EQ(choice.matched, 1);
  // "recieve" -> "receives" (three letters apart) is a word choice too, and nobody proposed it.
  EXPECT_EQ(choice.reference, 2);
  EXPECT_DOUBLE_EQ(choice.recall(), 0.5);
  EXPECT_DOUBLE_EQ(choice.precision(), 1);
  const EditCounts& punct = Kind(*score, EditKind::kPunctuation);
  EXPECT_EQ(punct.proposed, 1);
  EXPECT_EQ(punct.matched, 0);
  EXPECT_EQ(punct.reference, 0);
  EXPECT_DOUBLE_EQ(punct.precision(), 0);
  EXPECT_TRUE(std::isnan(punct.recall()));
  EXPECT_EQ(score->overall.proposed, 2);
  EXPECT_EQ(score->overall.matched, 1);
  EXPECT_EQ(score->overall.reference, 2);
  EXPECT_DOUBLE_EQ(score->overall.precision(), 0.5);
  EXPECT_DOUBLE_EQ(score->overall.recall(), 0.5);
  EXPECT_DOUBLE_EQ(score->overall.f05(), 0.5);
  int64_t proposed = 0, matched = 0, reference = 0;
  for (const EditCounts& c : score->by_kind) {
    proposed += c.proposed;
    matched += c.matched;
    reference += c.reference;
  }
  EXPECT_EQ(proposed, score->overall.proposed);
  EXPECT_EQ(matched, score->overall.matched);
  EXPECT_EQ(reference, score->overall.reference);
}

TEST(EditKindsTest, EachSentenceIsScoredAgainstItsBestReference) {
  const std::vector<std::string> sources = {"I has a cat .", "fine ."};
  const std::vector<std::string> hyps = {"I have a cat .", "fine ."};
  // Reference 0 leaves sentence 0 alone; reference 1 makes the model's edit. Sentence 1: one
  // reference capitalises, the other does not: the one without an edit the model missed wins.
  const std::vector<std::vector<std::string>> refs = {{"I has a cat .", "Fine ."},
                                                      {"I have a cat .", "fine ."}};
  auto score = ScoreEditKinds(sources, hyps, refs);
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(score->overall.proposed, 1);
  EXPECT_EQ(score->overall.matched, 1);
  EXPECT_EQ(score->overall.reference, 1);
  EXPECT_EQ(Kind(*score, EditKind::kCapitalization).reference, 0);
}

TEST(EditKindsTest, AnEditMatchesOnlyWithTheSameSpanAndReplacement) {
  auto score = ScoreEditKinds({"a big dog ."}, {"a large dog ."}, {{"a huge dog ."}});
  ASSERT_TRUE(score.ok());
  EXPECT_EQ(score->overall.proposed, 1);
  EXPECT_EQ(score->overall.matched, 0);
  EXPECT_EQ(score->overall.reference, 1);
  EXPECT_DOUBLE_EQ(score->overall.f05(), 0);
}

TEST(EditKindsTest, FailedSentencesAreLeftOutAndBadShapesAreErrors) {
  auto score = ScoreEditKinds({"x y .", "he go ."}, {"", "he goes ."}, {{"x z .", "he goes ."}},
                              {true, false});
  ASSERT_TRUE(score.ok());
  EXPECT_EQ(score->sentences, 1);
  EXPECT_EQ(score->skipped, 1);
  EXPECT_EQ(score->overall.proposed, 1);
  EXPECT_EQ(score->overall.matched, 1);
  EXPECT_EQ(score->overall.reference, 1);
  // No edits at all: nothing to divide by.
  auto none = ScoreEditKinds({"ok ."}, {"ok ."}, {{"ok ."}});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(std::isnan(none->overall.precision()));
  EXPECT_TRUE(std::isnan(none->overall.f05()));
  EXPECT_FALSE(ScoreEditKinds({"a"}, {}, {{"a"}}).ok());
  EXPECT_FALSE(ScoreEditKinds({"a"}, {"a"}, {}).ok());
  EXPECT_FALSE(ScoreEditKinds({"a"}, {"a"}, {{"a", "b"}}).ok());
}

// Through gecd eval's scoring: the report has each system's edits by kind on JFLEG (in
// Treebank tokens, with what tokenizing again alone proposes) and on the synthetic set.
TEST(EditKindsTest, TheReportScoresEditsByKindOnJflegAndTheSyntheticSet) {
  JflegSet jfleg;
  jfleg.dir = "jfleg";
  jfleg.split = "dev";
  jfleg.sources = {"She go to school .", "I do n't know ."};
  jfleg.references = {{"She went to school .", "I do n't know ."},
                      {"She goes to school .", "I did n't know ."}};
  const std::vector<SyntheticExample> synthetic = {
      {.error_type = "agreement", .source = "He go home.", .target = "He goes home.", .line = 1},
      {.error_type = "none", .source = "It is fine.", .target = "It is fine.", .line = 2}};
  EvalSets sets{.jfleg = &jfleg, .synthetic = &synthetic, .synthetic_path = "syn.tsv"};
  sets.texts = {"She go to school.", "I don't know.", "He go home.", "It is fine."};
  System model{.name = "model", .where = "test"};
  model.run.outputs = {"She goes to school.", "I don't know.", "He goes home.", "It is fine!"};
  model.run.errors.assign(4, "");
  nlohmann::ordered_json report;
  auto scored = ScoreSystems(sets, {model}, {.gleu_iterations = 5}, &report);
  ASSERT_TRUE(scored.ok()) << scored.status();
  const auto& jk = report["jfleg"]["model"]["edit_kinds"];
  EXPECT_EQ(jk["overall"]["proposed"], 1);
  EXPECT_EQ(jk["overall"]["matched"], 1);  // reference 1's "goes" (the better one)
  EXPECT_EQ(jk["by_kind"]["word form"]["matched"], 1);
  EXPECT_EQ(report["jfleg"]["source_roundtrip_edit_kinds"]["overall"]["proposed"], 0);
  const auto& sk = report["synthetic"]["model"]["edit_kinds"];
  EXPECT_EQ(sk["overall"]["proposed"], 2);
  EXPECT_EQ(sk["overall"]["matched"], 1);
  EXPECT_EQ(sk["overall"]["reference"], 1);
  EXPECT_EQ(sk["by_kind"]["punctuation"]["proposed"], 1);
  EXPECT_EQ(sk["by_kind"]["punctuation"]["matched"], 0);
  EXPECT_TRUE(sk["by_kind"]["punctuation"]["recall"].is_null() ||
              std::isnan(sk["by_kind"]["punctuation"]["recall"].get<double>()));
  EXPECT_THAT(scored->summary, ::testing::HasSubstr("edits by kind, model"));
  EXPECT_THAT(scored->summary, ::testing::HasSubstr("word form"));
}

}  // namespace
}  // namespace gecd::eval
