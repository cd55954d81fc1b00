#include "loadgen/load_options.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

absl::StatusOr<LoadOptions> Parse(std::vector<std::string> args) { return ParseLoadOptions(args); }

TEST(ParseDurationTest, AcceptsUnits) {
  EXPECT_DOUBLE_EQ(*ParseDuration("30"), 30);
  EXPECT_DOUBLE_EQ(*ParseDuration("1.5s"), 1.5);
  EXPECT_DOUBLE_EQ(*ParseDuration("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseDuration("2m"), 120);
  EXPECT_FALSE(ParseDuration("fast").ok());
  EXPECT_FALSE(ParseDuration("-1s").ok());
}

TEST(ParseLoadOptionsTest, OpenLoopDefaultsAndValues) {
  absl::StatusOr<LoadOptions> options =
      Parse({"--input", "s.txt", "--qps=250", "--duration", "3s", "--stream", "--json", "o.json"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->input_path, "s.txt");
  EXPECT_EQ(options->run.targets, (std::vector<std::string>{"127.0.0.1:50051"}));
  EXPECT_EQ(options->run.concurrency, 0);
  EXPECT_DOUBLE_EQ(options->run.profile.At(0), 250);
  EXPECT_DOUBLE_EQ(options->run.duration_s, 3);
  EXPECT_TRUE(options->run.stream);
  EXPECT_EQ(options->json_path, "o.json");
}

TEST(ParseLoadOptionsTest, SeveralTargets) {
  absl::StatusOr<LoadOptions> options =
      Parse({"--input", "s", "--target", "10.0.0.1:50051, [::1]:50052,localhost:7"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->run.targets,
            (std::vector<std::string>{"10.0.0.1:50051", "[::1]:50052", "localhost:7"}));
  for (const char* bad :
       {"a:1,b", "a:1,,b:2", "a:0", "a:65536", ":80", "::1:80", "[]:80", "", "a:1,"}) {
    absl::StatusOr<LoadOptions> e = Parse({"--input", "s", "--target", bad});
    ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(e.status().message()), ::testing::StartsWith("--target: '")) << bad;
  }
  EXPECT_THAT(std::string(Parse({"--input", "s", "--target", "a:1,b"}).status().message()),
              ::testing::HasSubstr("'b' in 'a:1,b' is not HOST:PORT"));
  // Every target needs a channel of its own.
  absl::StatusOr<LoadOptions> few =
      Parse({"--input", "s", "--target", "a:1,b:2,c:3", "--channels", "2"});
  ASSERT_EQ(few.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(few.status().message()),
              ::testing::HasSubstr("--channels 2 is fewer than the 3 --target addresses"));
}

TEST(ParseLoadOptionsTest, RampSpansTheDuration) {
  absl::StatusOr<LoadOptions> options =
      Parse({"--input", "s", "--profile", "ramp:0:1000", "--duration", "20"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_DOUBLE_EQ(options->run.profile.At(10), 500);
}

TEST(ParseLoadOptionsTest, FindMaxStartsAtQps) {
  absl::StatusOr<LoadOptions> options =
      Parse({"--input", "s", "--find-max", "--slo-p99", "500ms", "--qps", "800"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_TRUE(options->find_max);
  EXPECT_DOUBLE_EQ(options->find_max_options.slo_p99_s, 0.5);
  EXPECT_DOUBLE_EQ(options->find_max_options.start_qps, 800);
  // The SLO is also the objective that goodput counts against.
  EXPECT_EQ(options->run.objective, std::chrono::milliseconds(500));
}

TEST(ParseLoadOptionsTest, PriorityIsInteractiveOrBatch) {
  absl::StatusOr<LoadOptions> options = Parse({"--input", "s", "--priority", "batch"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->run.priority, "batch");
  EXPECT_EQ(Parse({"--input", "s"})->run.priority, "");
  EXPECT_FALSE(Parse({"--input", "s"})->run.honor_pushback);
  EXPECT_TRUE(Parse({"--input", "s", "--honor-pushback"})->run.honor_pushback);
  absl::StatusOr<LoadOptions> bad = Parse({"--input", "s", "--priority", "urgent"});
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("--priority"));
}

// --tls-ca and --token-file are read at once (the token from a file, never the command line);
// a file that cannot be read is an error naming the flag.
TEST(ParseLoadOptionsTest, TlsAndTokenFlagsReadTheirFiles) {
  const std::string ca = ::testing::TempDir() + "/gecd_load_ca.pem";
  const std::string token = ::testing::TempDir() + "/gecd_load_token";
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\n";
  std::ofstream(token) << "  s3cret \nignored\n";
  absl::StatusOr<LoadOptions> options = Parse(
      {"--input", "s", "--tls-ca", ca, "--tls-server-name", "gecd.example", "--token-file", token});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->run.tls_ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(options->run.tls_server_name, "gecd.example");
  EXPECT_EQ(options->run.authorization, "Bearer s3cret");
  EXPECT_EQ(Parse({"--input", "s"})->run.tls_ca_pem, "");
  std::remove(ca.c_str());
  absl::StatusOr<LoadOptions> missing = Parse({"--input", "s", "--tls-ca", ca});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), ::testing::HasSubstr("--tls-ca"));
  std::ofstream(token) << "\n";
  absl::StatusOr<LoadOptions> empty = Parse({"--input", "s", "--token-file", token});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), ::testing::HasSubstr("--token-file"));
  std::remove(token.c_str());
}

TEST(ParseLoadOptionsTest, RejectsConflictsAndBadValues) {
  const std::vector<std::vector<std::string>> bad = {
      {"--qps", "10"},  // no --input
      {"--input", "s", "--concurrency", "4", "--qps", "10"},
      {"--input", "s", "--concurrency", "4", "--find-max"},
      {"--input", "s", "--profile", "ramp:1:2", "--qps", "10"},
      {"--input", "s", "--profile", "ramp:1"},
      {"--input", "s", "--qps", "0"},
      {"--input", "s", "--channels", "0"},
      {"--input", "s", "--duration", "0"},
      {"--input", "s", "--max-error-rate", "2"},
      {"--input", "s", "--bogus", "1"},
      {"--input"},
      {"--input", "s", "stray"},
      {"--input", "s", "--stream=yes"},
      {"--input", "s", "--metrics-port", "0"},
      {"--input", "s", "--metrics-port", "65536"},
      {"--input", "s", "--metrics-port", "http://x"},
  };
  for (const auto& args : bad) {
    EXPECT_EQ(Parse(args).status().code(), absl::StatusCode::kInvalidArgument)
        << ::testing::PrintToString(args);
  }
}

TEST(ParseLoadOptionsTest, MetricsPort) {
  EXPECT_EQ(Parse({"--input", "s"})->metrics_port, 0);
  EXPECT_EQ(Parse({"--input", "s", "--metrics-port", "9090"})->metrics_port, 9090);
  EXPECT_THAT(std::string(Parse({"--input", "s", "--metrics-port", "x"}).status().message()),
              ::testing::HasSubstr("--metrics-port"));
}

TEST(ParseLoadOptionsTest, TypingSessions) {
  absl::StatusOr<LoadOptions> off = Parse({"--input", "s"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->typing.sessions, 0);
  absl::StatusOr<LoadOptions> options = Parse(
      {"--input", "s", "--typing-sessions", "20", "--typing-edits", "0", "--typing-paragraphs", "2",
       "--typing-sentences", "7", "--seed", "9", "--concurrency", "4", "--json", "t.json"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->typing.sessions, 20);
  EXPECT_EQ(options->typing.edits, 0);
  EXPECT_EQ(options->typing.paragraphs, 2);
  EXPECT_EQ(options->typing.sentences_per_paragraph, 7);
  EXPECT_EQ(options->typing.seed, 9u);
  EXPECT_EQ(options->run.concurrency, 4);  // sessions at a time
  absl::StatusOr<LoadOptions> defaults = Parse({"--input", "s", "--typing-sessions", "1"});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->typing.edits, 10);
  EXPECT_EQ(defaults->typing.paragraphs, 3);
  EXPECT_EQ(defaults->typing.sentences_per_paragraph, 5);
  EXPECT_EQ(defaults->typing.seed, 1u);
}

TEST(ParseLoadOptionsTest, TypingErrorsNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--typing-sessions", "0"}, "--typing-sessions: '0' is not an integer >= 1"},
      {{"--typing-sessions", "1", "--typing-edits", "-1"},
       "--typing-edits: '-1' is not an integer >= 0"},
      {{"--typing-sessions", "1", "--typing-paragraphs", "x"},
       "--typing-paragraphs: 'x' is not an integer >= 1"},
      {{"--typing-sessions", "1", "--typing-sentences", "0"},
       "--typing-sentences: '0' is not an integer >= 1"},
      {{"--typing-edits", "3"}, "--typing-edits needs --typing-sessions"},
      {{"--typing-sentences", "3"}, "--typing-sentences needs --typing-sessions"},
      {{"--typing-sessions", "1", "--qps", "10"}, "--typing-sessions excludes --qps"},
      {{"--typing-sessions", "1", "--find-max"}, "--typing-sessions excludes --find-max"},
      {{"--typing-sessions", "1", "--stream"}, "--typing-sessions excludes --stream"},
      {{"--typing-sessions", "1", "--duration", "5s"}, "--typing-sessions excludes --duration"},
      {{"--typing-sessions", "1", "--text-separator", "%%"},
       "--typing-sessions excludes --text-separator"},
  };
  for (const auto& [args, message] : bad) {
    std::vector<std::string> full = {"--input", "s"};
    full.insert(full.end(), args.begin(), args.end());
    absl::StatusOr<LoadOptions> options = Parse(full);
    ASSERT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument)
        << ::testing::PrintToString(args);
    EXPECT_EQ(options.status().message(), message);
  }
}

// gecd-load parses with the same parser as gecd's subcommands (common/args.h): errors name the
// flag and point at --help; -h and --help both ask for help.
TEST(ParseLoadOptionsTest, ErrorsNameTheFlagAndHelpIsHelp) {
  EXPECT_EQ(Parse({"--input", "s", "--bogus", "1"}).status().message(),
            "unknown flag --bogus (see --help)");
  EXPECT_EQ(Parse({"--input", "s", "--qps"}).status().message(),
            "flag --qps needs a value (see --help)");
  EXPECT_EQ(Parse({"--input", "s", "stray"}).status().message(),
            "unexpected argument 'stray' (see --help)");
  EXPECT_TRUE(Parse({"-h"})->help);
  EXPECT_TRUE(Parse({"--help"})->help);
  // The last of a repeated flag counts, as before.
  EXPECT_EQ(Parse({"--input", "a", "--input=b"})->input_path, "b");
}

TEST(ReadSentencesTest, ReadsNonEmptyLinesAndRejectsEmptyOrMissingFiles) {
  const std::string path = ::testing::TempDir() + "/gecd_load_sentences.txt";
  std::ofstream(path) << "He go home.\r\n\nShe like cats.\n";
  absl::StatusOr<std::vector<std::string>> sentences = ReadSentences(path);
  ASSERT_TRUE(sentences.ok()) << sentences.status();
  EXPECT_EQ(*sentences, (std::vector<std::string>{"He go home.", "She like cats."}));

  std::ofstream(path) << "\n\n";
  EXPECT_EQ(ReadSentences(path).status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
  EXPECT_EQ(ReadSentences(path).status().code(), absl::StatusCode::kNotFound);
}

TEST(ReadSentencesTest, WholeTextsBetweenSeparatorLinesKeepTheirParagraphs) {
  const std::string path = ::testing::TempDir() + "/gecd_load_texts.txt";
  std::ofstream(path) << "He go home. She like cats.\r\n\nNew paragraph.\n%%\n \n%%\nOne more.";
  absl::StatusOr<std::vector<std::string>> texts = ReadSentences(path, "%%");
  ASSERT_TRUE(texts.ok()) << texts.status();
  // A text of only whitespace is dropped; the last needs no separator after it.
  EXPECT_EQ(*texts, (std::vector<std::string>{"He go home. She like cats.\n\nNew paragraph.",
                                              "One more."}));
  std::ofstream(path) << "%%\n\n%%\n";
  EXPECT_EQ(ReadSentences(path, "%%").status().message(), "--input " + path + ": no texts");
  std::remove(path.c_str());
  EXPECT_EQ(Parse({"--input", "a", "--text-separator", "%%"})->text_separator, "%%");
  EXPECT_FALSE(Parse({"--input", "a", "--text-separator", ""}).ok());
}

}  // namespace
}  // namespace gecd::loadgen
