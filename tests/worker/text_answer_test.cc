#include "worker/text_answer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::worker {
namespace {

TEST(TextAnswerTest, CorrectionsGoInPlaceAndEditsAreInTheTextsCoordinates) {
  const std::string text = "She go home.\n\n  \U0001F600 It fine. Ok.";
  const std::vector<sentences::SentenceSpan> spans = {{0, 12}, {16, 29}, {30, 33}};
  std::vector<SentenceOutcome> outcomes(3);
  outcomes[0] = {.corrected = "She goes home.",
                 .prompt_tokens = 5,
                 .output_tokens = 6,
                 .queue_us = 10,
                 .engine_us = 30};
  outcomes[1] = {.corrected = "\U0001F600 It is fine.",
                 .prompt_tokens = 7,
                 .output_tokens = 8,
                 .queue_us = 20,
                 .engine_us = 25};
  outcomes[2] = {.corrected = "Ok.", .cached = true};
  const gecd::v1::CorrectResponse bytes =
      AssembleAnswer(text, spans, outcomes, text::OffsetUnit::kUtf8Bytes);
  EXPECT_EQ(bytes.corrected_text(), "She goes home.\n\n  \U0001F600 It is fine. Ok.");
  ASSERT_EQ(bytes.edits_size(), 2);
  EXPECT_EQ(bytes.edits(0).start(), 4u);  // "go" -> "goes"
  EXPECT_EQ(bytes.edits(0).end(), 6u);
  EXPECT_EQ(bytes.edits(0).replacement(), "goes");
  EXPECT_EQ(bytes.edits(0).sentence(), 0u);
  EXPECT_EQ(bytes.edits(0).kind(), gecd::v1::EDIT_KIND_WORD_FORM);
  EXPECT_EQ(bytes.edits(1).kind(), gecd::v1::EDIT_KIND_MISSING_WORD);
  EXPECT_EQ(bytes.edits(1).sentence(), 1u);
  EXPECT_GE(bytes.edits(1).start(), 23u);  // the insertion of "is" between "It" and "fine"
  EXPECT_LE(bytes.edits(1).end(), 24u);
  ASSERT_EQ(bytes.sentences_size(), 3);
  EXPECT_TRUE(bytes.sentences(0).changed());
  EXPECT_TRUE(bytes.sentences(1).changed());
  EXPECT_FALSE(bytes.sentences(2).changed());
  EXPECT_TRUE(bytes.sentences(2).cached());
  EXPECT_EQ(bytes.prompt_tokens(), 12u);
  EXPECT_EQ(bytes.output_tokens(), 14u);
  EXPECT_EQ(bytes.queue_time_us(), 20u);
  EXPECT_EQ(bytes.engine_time_us(), 30u);

  // UTF-16: the emoji counts 2 units where it counted 4 bytes.
  const gecd::v1::CorrectResponse utf16 =
      AssembleAnswer(text, spans, outcomes, text::OffsetUnit::kUtf16CodeUnits);
  EXPECT_EQ(utf16.sentences(1).start(), 16u);
  EXPECT_EQ(utf16.sentences(1).end(), 27u);
  EXPECT_EQ(utf16.edits(1).start(), bytes.edits(1).start() - 2);
  EXPECT_EQ(utf16.edits(0).start(), 4u);
}

// A sentence answered alone (CorrectStream's stream_sentences) says what the whole answer says
// of that sentence, in the same unit.
TEST(TextAnswerTest, ASentenceAnswerIsItsPartOfTheWholeAnswer) {
  const std::string text = "She go home.\n\n  \U0001F600 It fine. Ok.";
  const std::vector<sentences::SentenceSpan> spans = {{0, 12}, {16, 29}, {30, 33}};
  std::vector<SentenceOutcome> outcomes(3);
  outcomes[0] = {.corrected = "She goes home."};
  outcomes[1] = {.corrected = "\U0001F600 It is fine."};
  outcomes[2] = {.corrected = "Ok.", .cached = true};
  for (const auto unit : {text::OffsetUnit::kUtf8Bytes, text::OffsetUnit::kCodePoints,
                          text::OffsetUnit::kUtf16CodeUnits}) {
    const gecd::v1::CorrectResponse whole = AssembleAnswer(text, spans, outcomes, unit);
    const text::OffsetConverter offset(text, unit);
    int next_edit = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      const gecd::v1::SentenceAnswer part = AnswerSentence(text, spans, i, outcomes[i], offset);
      EXPECT_EQ(part.index(), i);
      EXPECT_EQ(part.sentence_count(), 3u);
      EXPECT_EQ(part.corrected(), outcomes[i].corrected);
      EXPECT_EQ(part.sentence().SerializeAsString(),
                whole.sentences(static_cast<int>(i)).SerializeAsString());
      for (const gecd::v1::Edit& e : part.edits()) {
        ASSERT_LT(next_edit, whole.edits_size());
        EXPECT_EQ(e.SerializeAsString(), whole.edits(next_edit++).SerializeAsString());
      }
    }
    EXPECT_EQ(next_edit, whole.edits_size());
  }
}

TEST(TextAnswerTest, NoSentencesGiveTheTextBack) {
  const gecd::v1::CorrectResponse r = AssembleAnswer(" \n ", {}, {}, text::OffsetUnit::kUtf8Bytes);
  EXPECT_EQ(r.corrected_text(), " \n ");
  EXPECT_EQ(r.sentences_size(), 0);
  EXPECT_EQ(r.edits_size(), 0);
}

}  // namespace
}  // namespace gecd::worker
