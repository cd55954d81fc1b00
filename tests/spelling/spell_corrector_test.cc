// The spelling stage with Debian's en_US Hunspell dictionary (hunspell-en-us, installed by
// scripts/install_deps.sh) and a small lexicon.
#include "spelling/spell_corrector.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"

namespace gecd::model {
namespace {

using ::testing::HasSubstr;

constexpr char kDictionary[] = "/usr/share/hunspell/en_US";

class SpellCorrectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kDictionary) + ".dic")) {
      GTEST_SKIP() << kDictionary << ".dic not installed (Debian package hunspell-en-us)";
    }
    // "torquers" is a word of the training text that Hunspell does not know; "receive" and
    // "friend" are common enough to be corrections, "believe" is not (count 2 < 3).
    lexicon_ = Write("lexicon.tsv",
                     "the\t100\nfriend\t10\nreceived\t5\nletter\t7\ntorquers\t1\nbelieve\t2\n"
                     "conquer\t9\nlester\t0\n");
    auto corrector = SpellCorrector::Create(kDictionary, lexicon_, 3);
    ASSERT_TRUE(corrector.ok()) << corrector.status();
    corrector_ = *std::move(corrector);
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  gecd::testing::ScopedTempDir dir_;
  std::string lexicon_;
  std::unique_ptr<SpellCorrector> corrector_;
};

TEST_F(SpellCorrectorTest, ReplacesMisspelledWordsKeepingEverythingAround) {
  EXPECT_EQ(corrector_->Correct("My freind is here."), "My friend is here.");
  EXPECT_EQ(corrector_->Correct("He recieved the leter,  \"freind\"!"),
            "He received the letter,  \"friend\"!");
  EXPECT_EQ(corrector_->Correct(""), "");
  EXPECT_EQ(corrector_->Correct("the freind"), corrector_->Correct("the freind"));  // cached
}

TEST_F(SpellCorrectorTest, LeavesKnownRareAndUnfixableWordsAlone) {
  // Known to the lexicon though not to Hunspell.
  EXPECT_EQ(corrector_->Correct("The torquers turned."), "The torquers turned.");
  // Hunspell's fix is not common enough in the lexicon.
  EXPECT_EQ(corrector_->Correct("I beleive it."), "I beleive it.");
  // Correct English the lexicon lacks.
  EXPECT_EQ(corrector_->Correct("a quiet walk"), "a quiet walk");
  // A fix must keep the first letter: "conquer" is two edits from "torquer", but a guess.
  EXPECT_EQ(corrector_->Correct("the torquer"), "the torquer");
  // A listed word is kept even with count 0 (a name seen capitalized), and never offered.
  EXPECT_EQ(corrector_->Correct("lester"), "lester");
}

TEST_F(SpellCorrectorTest, NeverTouchesNamesNumbersUrlsOrNonAsciiWords) {
  for (const char* text : {"Freind", "FREIND", "freind2", "3rd", "www.freind.com",
                           "freind@example.com", "co-freind", "caf\xc3\xa9 freindé"}) {
    EXPECT_EQ(corrector_->Correct(text), text) << text;
  }
}

// Workers call it from every gRPC thread at once.
TEST_F(SpellCorrectorTest, ConcurrentCallsGiveTheSameAnswers) {
  const std::string text = "My freind recieved the leter; the torquers turned.";
  const std::string expected = corrector_->Correct(text);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        // Distinct unknown words too, so that threads miss the cache and ask Hunspell.
        std::string word = "zqx";
        for (int n = t * 100 + i; n > 0; n /= 26) word.push_back(static_cast<char>('a' + n % 26));
        const std::string mine = text + " " + word;
        if (corrector_->Correct(mine).rfind(expected, 0) != 0) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(SpellCorrectorTest, ServesWithTheFirstInstanceWhileTheOthersLoad) {
  auto corrector = SpellCorrector::Create(kDictionary, lexicon_, 3, /*instances=*/4);
  ASSERT_TRUE(corrector.ok()) << corrector.status();
  const int at_once = (*corrector)->instances_loaded();
  EXPECT_GE(at_once, 1);
  EXPECT_EQ((*corrector)->Correct("I recieved a leter."), "I received a letter.");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*corrector)->instances_loaded() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((*corrector)->instances_loaded(), 4);
  // Four calls at once, each holding an instance, all answer.
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 20; ++j) right += (*corrector)->Correct("my freind") == "my friend";
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(right.load(), 80);
}

TEST_F(SpellCorrectorTest, DestroyedWhileInstancesStillLoad) {
  // The destructor stops and joins the loader; nothing is left running on freed memory.
  for (int i = 0; i < 3; ++i) {
    auto corrector = SpellCorrector::Create(kDictionary, lexicon_, 3, /*instances=*/8);
    ASSERT_TRUE(corrector.ok()) << corrector.status();
  }
}

TEST_F(SpellCorrectorTest, BadFilesAreErrorsNamingThem) {
  auto missing = SpellCorrector::Create("/nonexistent/en_US", lexicon_, 3);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/en_US.aff"));

  auto no_lexicon = SpellCorrector::Create(kDictionary, dir_.path() + "/none.tsv", 3);
  ASSERT_FALSE(no_lexicon.ok());
  EXPECT_THAT(no_lexicon.status().message(), HasSubstr("none.tsv"));

  for (const char* bad : {"word\n", "word\tmany\n", "\t3\n", "word\t-1\n", ""}) {
    const std::string path = Write("bad.tsv", bad);
    auto c = SpellCorrector::Create(kDictionary, path, 3);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(c.status().message(), HasSubstr("bad.tsv")) << bad;
  }
}

}  // namespace
}  // namespace gecd::model
