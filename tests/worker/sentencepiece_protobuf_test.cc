// SentencePiece and gRPC's protobuf in one process, as in a worker serving a model with a
// tokenizer.model. Debian's libsentencepiece embeds its own protobuf-lite; linked into this
// binary it either crashed the generated messages' registration before main or failed
// protobuf's version check when parsing the model. The shim keeps the two apart.

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gecd/v1/grammar.pb.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"
#include "testing/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace gecd {
namespace {

// Sanitizer builds load the shim without RTLD_DEEPBIND, which ASan does not support (see
// src/tokenizer/sentencepiece_tokenizer.cc), so there SentencePiece still meets libprotobuf.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

TEST(SentencePieceProtobufTest, TokenizerModelLoadsBesideGeneratedMessages) {
  if (kAsan) GTEST_SKIP() << "the SentencePiece shim needs RTLD_DEEPBIND, which ASan lacks";
  v1::CorrectRequest request;
  request.set_text("She go to school.");
  const std::string wire = request.SerializeAsString();

  testing::ScopedTempDir dir;
  std::filesystem::copy_file(testing::FixturePath("tokenizers/sp_brown/tokenizer.model"),
                             dir.path() + "/tokenizer.model");
  auto tokenizer = model::Tokenizer::LoadFromModelDir(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string text = "The jury further said that the city's election was well conducted.";
  auto ids = (*tokenizer)->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_FALSE(ids->empty());
  EXPECT_EQ((*tokenizer)->Decode(*ids), text);

  // gRPC's libprotobuf still serves the generated messages after SentencePiece parsed its model.
  v1::CorrectRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_EQ(parsed.text(), "She go to school.");
  // libsentencepiece stays out of the global symbol namespace, so it cannot capture libprotobuf.
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"), nullptr);
}

}  // namespace
}  // namespace gecd
