#include "loadgen/typing_session.h"

#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "echo_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizer/utf8.h"

namespace gecd::loadgen {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Words(const std::string& sentence) {
  return absl::StrSplit(sentence, ' ');
}

// Distinct sentences whose only sentence end is the final period, as the echo server splits.
std::vector<std::string> Lines(int count) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(absl::StrCat("line ", i, " says that the cat sat on mat ", i, " ."));
  }
  return lines;
}

// The sentences as first typed: JFLEG's tokens joined back the PTB way (clitics, quotes,
// brackets, currency and percent), the first ASCII letter in upper case; blank lines dropped.
TEST(MakeTypingSessionsTest, SentencesAreTheLinesDetokenizedAndCapitalised) {
  const std::vector<std::string> lines = {
      "  he do n't know , he said ; it 's fine ! \n",
      "what ? yes : no .",
      " \t ",
      "\" is this the right thing to do ? \"",
      "`` yes , '' she said ( mostly ) .",
      "it costs $ 5 , or 10 % more ...",
      "in twenty years ' time .",
      "2 people came .",
      "été was hot .",
      "She likes cats.",
  };
  const TypingSessionOptions options{
      .sessions = 1, .edits = 0, .paragraphs = 1, .sentences_per_paragraph = 9};
  absl::StatusOr<std::vector<TypingSession>> sessions = MakeTypingSessions(lines, options);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 1u);
  ASSERT_EQ((*sessions)[0].versions.size(), 1u);
  EXPECT_EQ((*sessions)[0].versions[0], (std::vector<std::string>{
                                            "He don't know, he said; it's fine!",
                                            "What? yes: no.",
                                            "\"Is this the right thing to do?\"",
                                            "\"Yes,\" she said (mostly).",
                                            "It costs $5, or 10% more...",
                                            "In twenty years' time.",
                                            "2 people came.",
                                            "été was hot.",
                                            "She likes cats.",
                                        }));
}

TEST(MakeTypingSessionsTest, TheSameSeedGivesTheSameSessions) {
  const TypingSessionOptions options{.sessions = 5, .edits = 8, .seed = 7};
  absl::StatusOr<std::vector<TypingSession>> a = MakeTypingSessions(Lines(60), options);
  absl::StatusOr<std::vector<TypingSession>> b = MakeTypingSessions(Lines(60), options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (size_t s = 0; s < a->size(); ++s) EXPECT_EQ((*a)[s].versions, (*b)[s].versions);
  TypingSessionOptions other = options;
  other.seed = 8;
  absl::StatusOr<std::vector<TypingSession>> c = MakeTypingSessions(Lines(60), other);
  ASSERT_TRUE(c.ok()) << c.status();
  bool differs = false;
  for (size_t s = 0; s < a->size(); ++s) differs |= (*a)[s].versions != (*c)[s].versions;
  EXPECT_TRUE(differs);
}

TEST(MakeTypingSessionsTest, SessionsHaveTheirShapeAndStartFromConsecutiveLines) {
  const TypingSessionOptions options{
      .sessions = 4, .edits = 3, .paragraphs = 2, .sentences_per_paragraph = 4, .seed = 1};
  const std::vector<std::string> lines = Lines(20);
  absl::StatusOr<std::vector<TypingSession>> sessions = MakeTypingSessions(lines, options);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  ASSERT_EQ(sessions->size(), 4u);
  // 20 sentences hold 13 windows of 8: sessions start at 0, 8, 16 mod 13 = 3 and 24 mod 13 = 11.
  const size_t firsts[] = {0, 8, 3, 11};
  for (size_t s = 0; s < sessions->size(); ++s) {
    const TypingSession& session = (*sessions)[s];
    ASSERT_EQ(session.versions.size(), 4u);
    for (const auto& version : session.versions) EXPECT_EQ(version.size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      const size_t line = firsts[s] + i;
      EXPECT_EQ(session.versions[0][i],
                absl::StrCat("Line ", line, " says that the cat sat on mat ", line, "."))
          << s << " " << i;
    }
    // The text an editor sends: 2 paragraphs of 4 sentences.
    const std::string text = TypingText(session.versions.back(), options.sentences_per_paragraph);
    const std::vector<std::string> paragraphs = absl::StrSplit(text, "\n\n");
    ASSERT_EQ(paragraphs.size(), 2u) << text;
    for (size_t p = 0; p < 2; ++p) {
      const std::vector<std::string> sentences(session.versions.back().begin() + 4 * p,
                                               session.versions.back().begin() + 4 * (p + 1));
      EXPECT_EQ(paragraphs[p], absl::StrJoin(sentences, " "));
    }
  }
}

// How many edits of the sessions inserted, deleted and misspelt a word.
struct EditKinds {
  int inserted = 0;
  int deleted = 0;
  int misspelt = 0;
};

// Checks that every edit of `sessions` changed exactly one sentence, and in it one word, keeping
// the text valid UTF-8 and the sentence's first word (its capital) and, unless it had one word,
// its last (its end), so that the server splits every version of a text where it split the
// first.
EditKinds CheckEdits(const std::vector<TypingSession>& sessions) {
  EditKinds kinds;
  for (const TypingSession& session : sessions) {
    for (size_t e = 1; e < session.versions.size(); ++e) {
      const auto& before = session.versions[e - 1];
      const auto& after = session.versions[e];
      EXPECT_EQ(after.size(), before.size());
      std::vector<size_t> changed;
      for (size_t i = 0; i < before.size(); ++i) {
        if (before[i] != after[i]) changed.push_back(i);
      }
      EXPECT_EQ(changed.size(), 1u) << "edit " << e;
      if (changed.size() != 1) continue;
      const std::string& edited = after[changed[0]];
      const std::vector<std::string> was = Words(before[changed[0]]);
      const std::vector<std::string> is = Words(edited);
      EXPECT_TRUE(model::ValidateUtf8(edited).ok()) << edited;
      EXPECT_EQ(is.front(), was.front()) << edited;
      if (was.size() > 1) {
        EXPECT_EQ(is.back(), was.back()) << edited;
      }
      if (is.size() == was.size() + 1) {
        ++kinds.inserted;
      } else if (is.size() + 1 == was.size()) {
        ++kinds.deleted;
      } else {
        EXPECT_EQ(is.size(), was.size()) << edited;
        int differing = 0;
        for (size_t w = 0; w < std::min(is.size(), was.size()); ++w) differing += is[w] != was[w];
        EXPECT_EQ(differing, 1) << before[changed[0]] << " -> " << edited;
        ++kinds.misspelt;
      }
    }
  }
  return kinds;
}

TEST(MakeTypingSessionsTest, EachEditChangesOneWordOfExactlyOneSentence) {
  const TypingSessionOptions options{
      .sessions = 30, .edits = 20, .paragraphs = 3, .sentences_per_paragraph = 5, .seed = 3};
  absl::StatusOr<std::vector<TypingSession>> sessions = MakeTypingSessions(Lines(40), options);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  for (const TypingSession& session : *sessions) EXPECT_EQ(session.versions.size(), 21u);
  const EditKinds kinds = CheckEdits(*sessions);
  // 600 edits, about a third of each kind.
  EXPECT_EQ(kinds.inserted + kinds.deleted + kinds.misspelt, 600);
  EXPECT_GT(kinds.inserted, 150);
  EXPECT_GT(kinds.deleted, 150);
  EXPECT_GT(kinds.misspelt, 150);
}

// A sentence of one or two words only gets a word inserted; a misspelt word with multi-byte
// code points is reversed by code point, and one that reads the same reversed gets an "s". 50
// sessions of the same four sentences, so that each outcome is all but certain whatever the
// draws.
TEST(MakeTypingSessionsTest, ShortSentencesAndMultiByteWordsAreEditedToo) {
  const std::vector<std::string> lines = {"Hi .", "Short one .", "Le café parlé .",
                                          "See level here ."};
  const TypingSessionOptions options{
      .sessions = 50, .edits = 40, .paragraphs = 2, .sentences_per_paragraph = 2, .seed = 11};
  absl::StatusOr<std::vector<TypingSession>> sessions = MakeTypingSessions(lines, options);
  ASSERT_TRUE(sessions.ok()) << sessions.status();
  const EditKinds kinds = CheckEdits(*sessions);
  EXPECT_GT(kinds.deleted, 0);
  EXPECT_GT(kinds.misspelt, 0);
  bool short_ones_only_grew = true, reversed_multi_byte = false, palindrome_with_s = false;
  for (const TypingSession& session : *sessions) {
    for (size_t e = 1; e < session.versions.size(); ++e) {
      for (size_t i = 0; i < 4; ++i) {
        const size_t was = Words(session.versions[e - 1][i]).size();
        const size_t is = Words(session.versions[e][i]).size();
        if (was < 3 && is != was) short_ones_only_grew &= is == was + 1;
      }
      reversed_multi_byte |= session.versions[e][2] == "Le éfac parlé.";
      palindrome_with_s |= session.versions[e][3] == "See levels here.";
    }
  }
  EXPECT_TRUE(short_ones_only_grew);
  EXPECT_TRUE(reversed_multi_byte);
  EXPECT_TRUE(palindrome_with_s);
}

TEST(MakeTypingSessionsTest, RejectsTooFewLinesAndOptionsOutOfRange) {
  const TypingSessionOptions options{.sessions = 1, .paragraphs = 3, .sentences_per_paragraph = 5};
  std::vector<std::string> lines = Lines(14);
  lines.push_back("  ");  // blank: not a sentence
  absl::StatusOr<std::vector<TypingSession>> few = MakeTypingSessions(lines, options);
  ASSERT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(few.status().message()),
              HasSubstr("--input has 14 sentences; a typing session's text needs 15"));
  lines.back() = "One more.";
  EXPECT_TRUE(MakeTypingSessions(lines, options).ok());
  for (TypingSessionOptions bad :
       {TypingSessionOptions{.sessions = 0}, TypingSessionOptions{.sessions = 1, .edits = -1},
        TypingSessionOptions{.sessions = 1, .paragraphs = 0},
        TypingSessionOptions{.sessions = 1, .sentences_per_paragraph = 0}}) {
    EXPECT_EQ(MakeTypingSessions(lines, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(TypingTextTest, SentencesBySpacesParagraphsByABlankLine) {
  EXPECT_EQ(TypingText({"A.", "B.", "C.", "D.", "E.", "F."}, 3), "A. B. C.\n\nD. E. F.");
  EXPECT_EQ(TypingText({"A.", "B."}, 1), "A.\n\nB.");
}

// What the echo server with its sentence cache answers the runner's two passes, worked out
// here from the sessions alone: the passes one session after another, every reject_every-th
// call refused (and not cached).
TypingResult Expected(const std::vector<TypingSession>& sessions, uint64_t reject_every = 0) {
  TypingResult expected;
  std::set<std::string> cache;
  uint64_t calls = 0;
  for (bool use_cache : {false, true}) {
    TypingPass& pass = use_cache ? expected.cache_on : expected.cache_off;
    for (const TypingSession& session : sessions) {
      for (const auto& version : session.versions) {
        ++pass.requests;
        if (reject_every > 0 && ++calls % reject_every == 0) {
          ++pass.errors["RESOURCE_EXHAUSTED"];
          continue;
        }
        ++pass.ok;
        for (const std::string& sentence : version) {
          ++pass.sentences;
          if (use_cache && !cache.insert(sentence).second) {
            ++pass.cached;
          } else {
            pass.prompt_tokens += Words(sentence).size();
            pass.output_tokens += Words(sentence).size();
          }
        }
      }
    }
  }
  return expected;
}

void ExpectSameCounts(const TypingPass& got, const TypingPass& want) {
  EXPECT_EQ(got.requests, want.requests);
  EXPECT_EQ(got.ok, want.ok);
  EXPECT_EQ(got.errors, want.errors);
  EXPECT_EQ(got.sentences, want.sentences);
  EXPECT_EQ(got.cached, want.cached);
  EXPECT_EQ(got.prompt_tokens, want.prompt_tokens);
  EXPECT_EQ(got.output_tokens, want.output_tokens);
  EXPECT_EQ(got.ok_latency.count(), want.ok);
}

RunConfig ConfigFor(const testing::EchoServer& server) {
  RunConfig config;
  config.targets = {server.target()};
  config.channels = 2;
  return config;
}

class TypingRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<TypingSession>> sessions = MakeTypingSessions(Lines(40), options_);
    ASSERT_TRUE(sessions.ok()) << sessions.status();
    sessions_ = *std::move(sessions);
  }

  const TypingSessionOptions options_{
      .sessions = 3, .edits = 6, .paragraphs = 2, .sentences_per_paragraph = 3, .seed = 5};
  std::vector<TypingSession> sessions_;
};

TEST_F(TypingRunnerTest, SumsCachedSentencesAndTokensOfBothPasses) {
  testing::EchoServer server({.sentence_cache = true});
  absl::StatusOr<TypingResult> result =
      RunTypingSessions(ConfigFor(server), sessions_, options_.sentences_per_paragraph);
  ASSERT_TRUE(result.ok()) << result.status();
  const TypingResult expected = Expected(sessions_);
  ExpectSameCounts(result->cache_off, expected.cache_off);
  ExpectSameCounts(result->cache_on, expected.cache_on);
  // 3 sessions of 7 texts of 6 sentences each way; with `cache: false` nothing is cached, with
  // the cache every sentence but the edited one of each re-sent text is, at least.
  EXPECT_EQ(result->cache_off.requests, 21u);
  EXPECT_EQ(result->cache_off.sentences, 126u);
  EXPECT_EQ(result->cache_off.cached, 0u);
  EXPECT_GE(result->cache_on.cached, 3u * 6 * 5);
  EXPECT_EQ(server.answered(), 42u);
  EXPECT_GT(result->tokens_reduction(), 3.0);
}

TEST_F(TypingRunnerTest, SessionsInParallelSumTheSame) {
  testing::EchoServer server({.sentence_cache = true});
  RunConfig config = ConfigFor(server);
  config.concurrency = 3;
  absl::StatusOr<TypingResult> result =
      RunTypingSessions(config, sessions_, options_.sentences_per_paragraph);
  ASSERT_TRUE(result.ok()) << result.status();
  // The sessions share no sentence, so their order does not change what the cache finds.
  const TypingResult expected = Expected(sessions_);
  ExpectSameCounts(result->cache_off, expected.cache_off);
  ExpectSameCounts(result->cache_on, expected.cache_on);
}

TEST_F(TypingRunnerTest, FailedRequestsAreCountedByCodeAndAddNoSentences) {
  testing::EchoServer server({.reject_every = 4, .sentence_cache = true});
  absl::StatusOr<TypingResult> result =
      RunTypingSessions(ConfigFor(server), sessions_, options_.sentences_per_paragraph);
  ASSERT_TRUE(result.ok()) << result.status();
  const TypingResult expected = Expected(sessions_, 4);
  ExpectSameCounts(result->cache_off, expected.cache_off);
  ExpectSameCounts(result->cache_on, expected.cache_on);
  // Calls 4, 8, ..., 40 of 42 are refused: 5 of the first pass's 21, 5 of the second's.
  EXPECT_EQ(result->cache_off.errors.at("RESOURCE_EXHAUSTED"), 5u);
  EXPECT_EQ(result->cache_on.errors.at("RESOURCE_EXHAUSTED"), 5u);
  EXPECT_EQ(result->cache_on.sentences, 16u * 6);
}

TEST(TypingRunnerErrorsTest, AnUnreachableTargetIsNamed) {
  std::string target;
  {
    testing::EchoServer gone;
    target = gone.target();
  }
  RunConfig config;
  config.targets = {target};
  absl::StatusOr<TypingResult> result = RunTypingSessions(config, {TypingSession{}}, 1);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(target));
}

TypingResult ReportedResult() {
  TypingResult result;
  TypingPass& off = result.cache_off;
  off.requests = off.ok = 10;
  off.sentences = 100;
  off.prompt_tokens = 600;
  off.output_tokens = 400;
  TypingPass& on = result.cache_on;
  on.requests = 11;
  on.ok = 10;
  on.errors = {{"DEADLINE_EXCEEDED", 1}};
  on.sentences = 100;
  on.cached = 85;
  on.prompt_tokens = 120;
  on.output_tokens = 80;
  return result;
}

TEST(TypingReportTest, TableSaysTheCachedShareAndTokensSaved) {
  const TypingSessionOptions options{.sessions = 2, .edits = 4, .seed = 9};
  std::ostringstream table;
  WriteTypingTable(options, ReportedResult(), table);
  EXPECT_THAT(table.str(), HasSubstr("2 x 5 texts of 3 paragraphs x 5 sentences (seed 9)"));
  EXPECT_THAT(table.str(), HasSubstr("10 requests (10 OK), 100 sentences, 0 from the cache (0.0%), "
                                     "100.0 engine tokens/request"));
  EXPECT_THAT(table.str(), HasSubstr("11 requests (10 OK), 100 sentences, 85 from the cache "
                                     "(85.0%), 20.0 engine tokens/request"));
  EXPECT_THAT(table.str(), HasSubstr("DEADLINE_EXCEEDED 1"));
  EXPECT_THAT(table.str(), HasSubstr("5.0x fewer engine tokens per request"));
}

TEST(TypingReportTest, JsonHasEveryCountAndTheReduction) {
  const TypingSessionOptions options{.sessions = 2, .edits = 4, .seed = 9};
  const nlohmann::json json = TypingJson(options, ReportedResult());
  EXPECT_EQ(json["sessions"], 2);
  EXPECT_EQ(json["edits"], 4);
  EXPECT_EQ(json["paragraphs"], 3);
  EXPECT_EQ(json["sentences_per_paragraph"], 5);
  EXPECT_EQ(json["seed"], 9);
  EXPECT_EQ(json["cache_on"]["requests"], 11);
  EXPECT_EQ(json["cache_on"]["cached"], 85);
  EXPECT_DOUBLE_EQ(json["cache_on"]["cached_rate"].get<double>(), 0.85);
  EXPECT_DOUBLE_EQ(json["cache_on"]["tokens_per_request"].get<double>(), 20);
  EXPECT_EQ(json["cache_on"]["errors_by_code"]["DEADLINE_EXCEEDED"], 1);
  EXPECT_DOUBLE_EQ(json["cache_off"]["tokens_per_request"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(json["tokens_reduction"].get<double>(), 5);
  // Nothing left to the engine with the cache: no finite reduction to report.
  TypingResult all_cached = ReportedResult();
  all_cached.cache_on.prompt_tokens = all_cached.cache_on.output_tokens = 0;
  EXPECT_TRUE(TypingJson(options, all_cached)["tokens_reduction"].is_null());
}

}  // namespace
}  // namespace gecd::loadgen
