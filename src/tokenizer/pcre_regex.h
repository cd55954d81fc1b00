#ifndef GECD_TOKENIZER_PCRE_REGEX_H_
#define GECD_TOKENIZER_PCRE_REGEX_H_

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "tokenizer/utf8.h"

namespace gecd::model {

// A compiled, JIT-compiled PCRE2 pattern (UTF + UCP, as Oniguruma's Unicode classes behave).
// Immutable; matching uses per-thread match data, so one Regex serves all threads.
class Regex {
 public:
  // `label` names the pattern's source in errors.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern,
                                                        const std::string& label);

  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls on_match(begin, end) -> absl::Status for each non-empty match in `text`, left to
  // right. After an empty match the search resumes one character later, as Oniguruma's does.
  template <typename F>
  absl::Status ForEachMatch(std::string_view text, F&& on_match) const {
    pcre2_match_data* md = ThreadMatchData();
    if (md == nullptr) return absl::ResourceExhaustedError("cannot allocate regex match data");
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start < text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), start, 0, md, nullptr)
                    : PCRE2_ERROR_JIT_STACKLIMIT;
      // The interpreter keeps its backtracking state on the heap, so it copes with inputs that
      // overflow the JIT's fixed stack.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) return absl::InternalError(absl::StrCat("regex match: ", ErrorMessage(rc)));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (end > begin) {
        RETURN_IF_ERROR(on_match(begin, end));
        start = end;
      } else if (begin < text.size()) {
        start = begin + Utf8SequenceLength(static_cast<unsigned char>(text[begin]));
      } else {
        break;
      }
    }
    return absl::OkStatus();
  }

 private:
  Regex(pcre2_code* code, bool jit) : code_(code), jit_(jit) {}

  static std::string ErrorMessage(int error);
  // Only the whole-match offsets are read, so one pair suffices for every pattern.
  static pcre2_match_data* ThreadMatchData();

  pcre2_code* code_;
  bool jit_;
};

}  // namespace gecd::model

#endif  // GECD_TOKENIZER_PCRE_REGEX_H_
