#include "tokenizer/pcre_regex.h"

namespace gecd::model {

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern,
                                                      const std::string& label) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": bad regex at offset ", offset, ": ", ErrorMessage(error)));
  }
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(code, jit));
}

std::string Regex::ErrorMessage(int error) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

pcre2_match_data* Regex::ThreadMatchData() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace gecd::model
