#ifndef GECD_AUTH_TOKEN_TABLE_H_
#define GECD_AUTH_TOKEN_TABLE_H_

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "config/config.h"
#include "daemon/file_poller.h"

// The clients allowed in (auth.tokens_file) and the check of a call's bearer token against
// them. The file holds no token, only its SHA-256, one client a line:
//
//   # name    sha256 of the token, lowercase hex (printf %s "$TOKEN" | sha256sum)
//   frontend  9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//
// A name may have several lines (an old and a new token while clients move over); a name is
// 1-48 of [A-Za-z0-9._-], since it becomes a metrics label and a word of the access log. The
// file is re-read every auth.refresh_s: a valid new file replaces the table at once (a token
// removed from it is refused from then on); a bad one is logged, naming its lines, and the table
// in use kept. The presented token is hashed and compared with every entry in constant time,
// and never logged nor kept. Owns the FilePoller. Thread-safe.
namespace gecd::auth {

class TokenTable {
 public:
  struct Entry {
    std::string name;
    std::array<unsigned char, 32> sha256;
  };

  // The entries of a tokens file's `contents`; an error names `path`:line and what is wrong.
  static absl::StatusOr<std::vector<Entry>> Parse(std::string_view contents,
                                                  const std::string& path);
  // Reads and parses auth.tokens_file (an error names it): the check at start.
  static absl::StatusOr<std::vector<Entry>> Load(const config::AuthSection& auth);
  // Reads auth.tokens_file (an error names it) and follows it from then on.
  static absl::StatusOr<std::unique_ptr<TokenTable>> Create(const config::AuthSection& auth);
  TokenTable(const TokenTable&) = delete;
  TokenTable& operator=(const TokenTable&) = delete;

  // The client name of the token in an `authorization` metadata value ("Bearer <token>"), or
  // UNAUTHENTICATED saying what is missing or wrong (never repeating the token).
  absl::StatusOr<std::string> Authenticate(std::string_view authorization) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TokenTable(std::string path, std::vector<Entry> entries);
  static absl::StatusOr<std::vector<Entry>> FromReading(const daemon::FilePoller::Reading& files,
                                                        const std::string& path);
  void OnChange(const daemon::FilePoller::Reading& files) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;
  mutable Mutex mu_;
  std::shared_ptr<const std::vector<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<daemon::FilePoller> poller_;  // last: stops before the rest goes
};

}  // namespace gecd::auth

#endif  // GECD_AUTH_TOKEN_TABLE_H_
