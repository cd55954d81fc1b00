#include "common/args.h"

#include "gtest/gtest.h"

namespace gecd {
namespace {

const std::vector<FlagSpec> kSpecs = {
    {"model", true, "model directory"}, {"set", true, "KEY=VALUE"}, {"verbose", false, "more"}};

TEST(ArgsTest, ValuesSwitchesAndPositionals) {
  absl::StatusOr<Args> args = Args::Parse(
      {"--model", "m", "--set=a=1", "text", "--verbose", "--set", "b=2", "--", "--model"}, kSpecs);
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->Get("model"), "m");
  EXPECT_EQ(args->GetAll("set"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(args->Get("set"), "b=2");  // the last one
  EXPECT_TRUE(args->Has("verbose"));
  EXPECT_FALSE(args->Get("missing").has_value());
  // After "--", everything is positional.
  EXPECT_EQ(args->positionals(), (std::vector<std::string>{"text", "--model"}));
  EXPECT_EQ(args->NoPositionals().message(), "unexpected argument 'text'");
}

TEST(ArgsTest, ErrorsNameTheFlag) {
  EXPECT_EQ(Args::Parse({"--modle", "m"}, kSpecs).status().message(), "unknown flag --modle");
  EXPECT_EQ(Args::Parse({"--model"}, kSpecs).status().message(), "flag --model needs a value");
  EXPECT_EQ(Args::Parse({"--verbose=yes"}, kSpecs).status().message(),
            "flag --verbose takes no value");
  absl::StatusOr<Args> args = Args::Parse({"--model", "x"}, kSpecs);
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->GetInt("model", 3).status().message(), "flag --model wants an integer, got 'x'");
  EXPECT_EQ(*args->GetInt("absent", 3), 3);
  EXPECT_EQ(args->Required("set").status().message(), "missing required flag --set");
}

TEST(ArgsTest, ToolsTakeNoPositionalsAndPointAtHelp) {
  const std::vector<FlagSpec> specs = {{"help", false, ""}, {"n", true, ""}};
  bool help = false;
  EXPECT_EQ(ParseToolArgs({"--m"}, specs, &help).status().message(),
            "unknown flag --m (see --help)");
  EXPECT_EQ(ParseToolArgs({"x"}, specs, &help).status().message(),
            "unexpected argument 'x' (see --help)");
  ASSERT_TRUE(ParseToolArgs({"--n", "1"}, specs, &help).ok());
  EXPECT_FALSE(help);
  ASSERT_TRUE(ParseToolArgs({"-h"}, specs, &help).ok());
  EXPECT_TRUE(help);
  help = false;
  ASSERT_TRUE(ParseToolArgs({"--help"}, specs, &help).ok());
  EXPECT_TRUE(help);
}

TEST(ArgsTest, HelpLinesListEveryFlag) {
  const std::string help = FlagHelp(kSpecs);
  EXPECT_NE(help.find("--model VALUE"), std::string::npos);
  EXPECT_NE(help.find("--verbose "), std::string::npos);
  EXPECT_NE(help.find("model directory"), std::string::npos);
}

}  // namespace
}  // namespace gecd
