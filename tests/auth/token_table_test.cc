#include "auth/token_table.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::auth {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::WriteTestFile;

// SHA-256 test vectors (FIPS 180-2): the tokens "abc" and "test".
constexpr char kAbcHash[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr char kTestHash[] = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

std::string Who(const TokenTable& table, std::string_view authorization) {
  absl::StatusOr<std::string> name = table.Authenticate(authorization);
  if (name.ok()) return *name;
  EXPECT_EQ(name.status().code(), absl::StatusCode::kUnauthenticated);
  return "refused: " + std::string(name.status().message());
}

TEST(TokenTableTest, ParsesNamesAndHashesSkippingCommentsAndBlankLines) {
  absl::StatusOr<std::vector<TokenTable::Entry>> entries =
      TokenTable::Parse(absl::StrCat("# clients\n\nfrontend ", kAbcHash,
                                     "  # the web app\n\tbatch-jobs.v2\t", kTestHash, "\r\n"),
                        "tokens");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "frontend");
  EXPECT_EQ((*entries)[1].name, "batch-jobs.v2");
  EXPECT_EQ((*entries)[0].sha256[0], 0xba);
}

TEST(TokenTableTest, BadLinesAreNamedByLineNumber) {
  const std::pair<std::string, std::string> bad[] = {
      {absl::StrCat("a ", kAbcHash, "\n\nb\n"), "tokens:3: expected 'name sha256-hex'"},
      {absl::StrCat("a ", kAbcHash, " extra\n"), "tokens:1: expected"},
      {absl::StrCat("a{b} ", kAbcHash, "\n"), "tokens:1: the name must be"},
      {absl::StrCat(std::string(49, 'n'), " ", kAbcHash, "\n"), "tokens:1: the name must be"},
      {"a ABCDEF\n", "tokens:1: the second field must be the token's SHA-256"},
      {absl::StrCat("a ", std::string(kAbcHash).substr(0, 63), "G\n"), "tokens:1: the second"},
      {absl::StrCat("a ", kAbcHash, "\nb ", kAbcHash, "\n"), "tokens:2: the same token hash"},
  };
  for (const auto& [contents, message] : bad) {
    absl::StatusOr<std::vector<TokenTable::Entry>> entries = TokenTable::Parse(contents, "tokens");
    ASSERT_FALSE(entries.ok()) << contents;
    EXPECT_THAT(entries.status().message(),
                AllOf(HasSubstr("auth.tokens_file"), HasSubstr(message)))
        << contents;
  }
  // A token pasted where its hash belongs is not repeated in the error (nor the log).
  absl::StatusOr<std::vector<TokenTable::Entry>> pasted =
      TokenTable::Parse("a s3cr3t-t0ken-value\n", "tokens");
  ASSERT_FALSE(pasted.ok());
  EXPECT_THAT(pasted.status().message(), Not(HasSubstr("s3cr3t")));
}

TEST(TokenTableTest, AuthenticatesBearerTokensAndRefusesTheRest) {
  gecd::testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/tokens";
  WriteTestFile(path, absl::StrCat("frontend ", kAbcHash, "\nfrontend ", kTestHash, "\n"));
  absl::StatusOr<std::unique_ptr<TokenTable>> table = TokenTable::Create({.tokens_file = path});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(Who(**table, "Bearer abc"), "frontend");
  EXPECT_EQ(Who(**table, "bearer test"), "frontend");  // the scheme is case-insensitive
  EXPECT_THAT(Who(**table, ""), HasSubstr("no bearer token"));
  EXPECT_THAT(Who(**table, "Basic YWJjOg=="), HasSubstr("not 'Bearer <token>'"));
  EXPECT_THAT(Who(**table, "Bearer "), HasSubstr("not 'Bearer <token>'"));
  const std::string wrong = Who(**table, "Bearer abd");
  EXPECT_THAT(wrong, HasSubstr("unknown or revoked"));
  EXPECT_THAT(wrong, Not(HasSubstr("abd")));
  EXPECT_THAT(Who(**table, "Bearer ABC"), HasSubstr("unknown or revoked"));
}

TEST(TokenTableTest, FollowsTheFileAndKeepsTheTableWhenTheNewFileIsBad) {
  gecd::testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/tokens";
  WriteTestFile(path, absl::StrCat("frontend ", kAbcHash, "\n"));
  absl::StatusOr<std::unique_ptr<TokenTable>> table =
      TokenTable::Create({.tokens_file = path, .refresh_s = 1});
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(Who(**table, "Bearer abc"), "frontend");
  // abc revoked, test added.
  WriteTestFile(path, absl::StrCat("jobs ", kTestHash, "\n"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Who(**table, "Bearer test") != "jobs" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Who(**table, "Bearer test"), "jobs");
  EXPECT_THAT(Who(**table, "Bearer abc"), HasSubstr("unknown or revoked"));
  // A bad file, then a missing one: the table in use stays.
  WriteTestFile(path, "jobs\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(Who(**table, "Bearer test"), "jobs");
  ASSERT_EQ(std::remove(path.c_str()), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(Who(**table, "Bearer test"), "jobs");
}

TEST(TokenTableTest, AMissingOrBadFileAtStartIsAnErrorNamingIt) {
  gecd::testing::ScopedTempDir dir;
  const std::string path = dir.path() + "/tokens";
  absl::StatusOr<std::unique_ptr<TokenTable>> table = TokenTable::Create({.tokens_file = path});
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), AllOf(HasSubstr("auth.tokens_file"), HasSubstr(path)));
  WriteTestFile(path, "x y z\n");
  table = TokenTable::Create({.tokens_file = path});
  ASSERT_FALSE(table.ok());
  EXPECT_THAT(table.status().message(), HasSubstr(path + ":1:"));
}

}  // namespace
}  // namespace gecd::auth
