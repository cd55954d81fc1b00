#include "model/safetensors.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::model {
namespace {

using ::gecd::testing::MakeTempDir;
using ::testing::HasSubstr;

// A safetensors image: the little-endian header length, `header`, then `data_bytes` bytes.
std::vector<uint8_t> Image(const std::string& header, size_t data_bytes,
                           uint64_t header_len_override = 0) {
  const uint64_t len = header_len_override ? header_len_override : header.size();
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(len >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

std::string ParseError(const std::vector<uint8_t>& image) {
  auto h = ParseSafetensorsHeader(image, "w.safetensors");
  EXPECT_FALSE(h.ok());
  return h.ok() ? "" : std::string(h.status().message());
}

TEST(SafetensorsHeaderTest, ParsesValidHeader) {
  auto h =
      ParseSafetensorsHeader(Image(R"({"__metadata__":{"format":"pt"},)"
                                   R"("a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                                   R"("b":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[12,16]},)"
                                   R"("s":{"dtype":"F32","shape":[],"data_offsets":[16,20]}})",
                                   20),
                             "w.safetensors");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->metadata.at("format"), "pt");
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors.at("a").dtype, DType::kBF16);
  EXPECT_EQ(h->tensors.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->tensors.at("b").begin, 12u);
  EXPECT_EQ(h->tensors.at("s").shape, std::vector<int64_t>{});
}

struct Malformed {
  const char* name;
  std::vector<uint8_t> image;
  std::vector<std::string> expected;  // substrings of the error besides the file name
};

class SafetensorsMalformedTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(SafetensorsMalformedTest, ErrorNamesFileAndCause) {
  const std::string error = ParseError(GetParam().image);
  EXPECT_THAT(error, HasSubstr("w.safetensors"));
  for (const std::string& s : GetParam().expected) EXPECT_THAT(error, HasSubstr(s));
}

// A header holding one tensor "t" with these fields, written as JSON text so that malformed
// values can be spelled out.
std::string OneTensor(const std::string& shape, const std::string& data_offsets,
                      const std::string& dtype = "F32") {
  return R"({"t":{"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" +
         data_offsets + "}}";
}

const std::string kOne = OneTensor("[2]", "[0,8]");

INSTANTIATE_TEST_SUITE_P(
    All, SafetensorsMalformedTest,
    ::testing::Values(
        Malformed{"TooShort", {1, 2, 3}, {"truncated"}},
        Malformed{"HeaderBeyondFile", Image(kOne, 8, 1000), {"header length 1000"}},
        Malformed{"HeaderLengthHuge", Image(kOne, 8, ~uint64_t{0}), {"header length"}},
        Malformed{"TruncatedData", Image(kOne, 5), {"'t'", "data_offsets"}},
        Malformed{"BadJson", Image(R"({"t":{"dtype":"F32",)", 0), {"not valid JSON"}},
        Malformed{"NotObject", Image("[1,2,3]", 0), {"not a JSON object"}},
        Malformed{"UnknownDtype",
                  Image(OneTensor("[1]", "[0,8]", "I64"), 8),
                  {"'t'", "unsupported dtype 'I64'"}},
        Malformed{
            "WrongSize", Image(OneTensor("[3]", "[0,8]"), 8), {"'t'", "need 12 bytes", "span 8"}},
        Malformed{
            "OffsetsOutOfRange", Image(OneTensor("[2]", "[8,16]"), 8), {"'t'", "data_offsets"}},
        Malformed{
            "OffsetsReversed", Image(OneTensor("[0]", "[8,0]"), 8), {"'t'", "begin after end"}},
        Malformed{"NegativeOffset", Image(OneTensor("[2]", "[-8,0]"), 8), {"'t'", "data_offsets"}},
        Malformed{"Overlap",
                  Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        12),
                  {"'b'", "overlaps tensor 'a'"}},
        Malformed{"ShapeOverflow",
                  Image(OneTensor("[4294967296,4294967296,16]", "[0,8]"), 8),
                  {"'t'", "overflows"}},
        Malformed{"NegativeDim", Image(OneTensor("[-2]", "[0,8]"), 8), {"'t'", "shape[0]"}},
        Malformed{"FloatDim", Image(OneTensor("[2.0]", "[0,8]"), 8), {"'t'", "shape[0]"}},
        Malformed{"MissingOffsets",
                  Image(R"({"t":{"dtype":"F32","shape":[2]}})", 8),
                  {"'t'", "data_offsets"}},
        Malformed{"MetadataNotString",
                  Image(R"({"__metadata__":{"format":3}})", 0),
                  {"__metadata__.format"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SafetensorsFileTest, WriterRoundTripsThroughOpen) {
  const std::string path = MakeTempDir() + "/w.safetensors";
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  // Odd-sized tensors so the alignment of later ones depends on the writer padding the header.
  w.Add("z.bias", DType::kBF16, {3}, {1, 2, 3, 4, 5, 6});
  w.Add("a.weight", DType::kF8E4M3, {2, 3}, {9, 8, 7, 6, 5, 4});
  w.Add("m.scale", DType::kF32, {1, 1}, {0, 0, 128, 63});
  ASSERT_TRUE(w.Write(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(getpid())));

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->TensorNames(), (std::vector<std::string>{"a.weight", "m.scale", "z.bias"}));
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  auto a = (*f)->Get("a.weight");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kF8E4M3);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<uint8_t>(a->data.begin(), a->data.end()),
            (std::vector<uint8_t>{9, 8, 7, 6, 5, 4}));
  EXPECT_EQ(a->file, path);
  auto z = (*f)->Get("z.bias");
  EXPECT_EQ(std::vector<uint8_t>(z->data.begin(), z->data.end()),
            (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));

  std::ifstream in(path, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0) << "header not padded to 8 bytes";

  auto missing = (*f)->Get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'nope'"));
}

TEST(SafetensorsFileTest, WriterRejectsSizeMismatch) {
  SafetensorsWriter w;
  w.Add("t", DType::kF32, {2}, {1, 2, 3});
  const absl::Status s = w.Write(MakeTempDir() + "/w.safetensors");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("'t'"));
}

TEST(SafetensorsFileTest, OpenReportsTruncatedFile) {
  const std::string path = MakeTempDir() + "/w.safetensors";
  SafetensorsWriter w;
  w.Add("t", DType::kF32, {4}, std::vector<uint8_t>(16, 1));
  ASSERT_TRUE(w.Write(path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("'t'"));
}

TEST(SafetensorsFileTest, ReadsHuggingFaceWrittenFile) {
  auto f = SafetensorsFile::Open(
      gecd::testing::FixturePath("models/tiny-llama-fp8-llmcompressor/model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto w = (*f)->Get("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{64, 128}));
  auto s = (*f)->Get("model.layers.0.mlp.down_proj.weight_scale");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dtype, DType::kBF16);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{64, 1}));
}

}  // namespace
}  // namespace gecd::model
