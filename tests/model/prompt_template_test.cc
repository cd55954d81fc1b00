// The prompt template every path (server, generate, eval) builds prompts with.
#include "model/prompt_template.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::model {
namespace {

TEST(PromptTemplateTest, WrapsTheTextInPrefixAndSuffix) {
  auto t = PromptTemplate::Parse("<s>{text}<sep>");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prefix(), "<s>");
  EXPECT_EQ(t->suffix(), "<sep>");
  EXPECT_EQ(t->Apply("She go home."), "<s>She go home.<sep>");
  EXPECT_EQ(PromptTemplate::Parse("{text}")->Apply("x"), "x");
}

TEST(PromptTemplateTest, OnlyTheFirstPlaceholderIsReplaced) {
  // As the server always did: a later "{text}" is literal text of the suffix.
  EXPECT_EQ(PromptTemplate::Parse("A {text} B {text}")->Apply("x"), "A x B {text}");
  // Placeholder-like text inside the user's sentence is not expanded either.
  EXPECT_EQ(PromptTemplate::Parse("[{text}]")->Apply("{text}"), "[{text}]");
}

TEST(PromptTemplateTest, NeedsThePlaceholder) {
  auto t = PromptTemplate::Parse("no slot");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("{text}"));
}

}  // namespace
}  // namespace gecd::model
