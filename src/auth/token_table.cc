#include "auth/token_table.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"

namespace gecd::auth {
namespace {

constexpr size_t kMaxNameLength = 48;

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (const char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool ParseHash(absl::string_view hex, std::array<unsigned char, 32>* out) {
  if (hex.size() != 64) return false;
  for (const char c : hex) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  std::copy(bytes.begin(), bytes.end(), out->begin());
  return true;
}

}  // namespace

absl::StatusOr<std::vector<TokenTable::Entry>> TokenTable::Parse(std::string_view contents,
                                                                 const std::string& path) {
  std::vector<Entry> entries;
  int line_number = 0;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(contents.data(), contents.size()), '\n')) {
    ++line_number;
    if (const size_t hash = line.find('#'); hash != absl::string_view::npos) {
      line = line.substr(0, hash);
    }
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat("auth.tokens_file ", path, ":", line_number, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "expected 'name sha256-hex' (two fields), got ", fields.size(), " fields"));
    }
    Entry entry{.name = std::string(fields[0])};
    if (!ValidName(entry.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the name must be 1-", kMaxNameLength, " of [A-Za-z0-9._-], got '",
                       absl::CHexEscape(fields[0].substr(0, kMaxNameLength)), "'"));
    }
    if (!ParseHash(fields[1], &entry.sha256)) {
      // The field may be a token pasted by mistake: not repeated.
      return absl::InvalidArgumentError(absl::StrCat(
          where, "the second field must be the token's SHA-256 as 64 lowercase hex digits ",
          "(printf %s \"$TOKEN\" | sha256sum), not the token"));
    }
    for (const Entry& other : entries) {
      if (other.sha256 == entry.sha256) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "the same token hash as client '", other.name, "'"));
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

TokenTable::TokenTable(std::string path, std::vector<Entry> entries)
    : path_(std::move(path)),
      entries_(std::make_shared<const std::vector<Entry>>(std::move(entries))) {}

absl::StatusOr<std::vector<TokenTable::Entry>> TokenTable::FromReading(
    const daemon::FilePoller::Reading& files, const std::string& path) {
  if (!files[0].ok()) {
    return absl::Status(files[0].status().code(),
                        absl::StrCat("auth.tokens_file: ", files[0].status().message()));
  }
  return Parse(*files[0], path);
}

absl::StatusOr<std::vector<TokenTable::Entry>> TokenTable::Load(const config::AuthSection& auth) {
  return FromReading(daemon::FilePoller::Read({auth.tokens_file}), auth.tokens_file);
}

absl::StatusOr<std::unique_ptr<TokenTable>> TokenTable::Create(const config::AuthSection& auth) {
  daemon::FilePoller::Reading files = daemon::FilePoller::Read({auth.tokens_file});
  absl::StatusOr<std::vector<Entry>> entries = FromReading(files, auth.tokens_file);
  if (!entries.ok()) return entries.status();
  if (entries->empty()) {
    spdlog::warn("auth.tokens_file {}: no tokens, so every call is refused", auth.tokens_file);
  }
  std::unique_ptr<TokenTable> table(new TokenTable(auth.tokens_file, *std::move(entries)));
  TokenTable* self = table.get();
  table->poller_ = std::make_unique<daemon::FilePoller>(
      std::vector<std::string>{auth.tokens_file}, std::move(files),
      std::chrono::seconds(auth.refresh_s),
      [self](const daemon::FilePoller::Reading& now) { self->OnChange(now); });
  return table;
}

void TokenTable::OnChange(const daemon::FilePoller::Reading& files) {
  absl::StatusOr<std::vector<Entry>> entries = FromReading(files, path_);
  if (!entries.ok()) {
    spdlog::error("{}; the tokens in use are kept", std::string(entries.status().message()));
    return;
  }
  spdlog::info("auth.tokens_file {}: {} tokens", path_, entries->size());
  auto table = std::make_shared<const std::vector<Entry>>(*std::move(entries));
  MutexLock lock(&mu_);
  entries_ = std::move(table);
}

absl::StatusOr<std::string> TokenTable::Authenticate(std::string_view authorization) const {
  constexpr absl::string_view kScheme = "bearer ";
  const absl::string_view value(authorization.data(), authorization.size());
  if (value.empty()) {
    return absl::UnauthenticatedError(
        "no bearer token: send the metadata 'authorization: Bearer <token>'");
  }
  if (value.size() <= kScheme.size() || !absl::StartsWithIgnoreCase(value, kScheme)) {
    return absl::UnauthenticatedError("the authorization metadata is not 'Bearer <token>'");
  }
  const absl::string_view token = absl::StripAsciiWhitespace(value.substr(kScheme.size()));
  std::array<unsigned char, 32> digest{};
  unsigned int size = 0;
  if (EVP_Digest(token.data(), token.size(), digest.data(), &size, EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("cannot hash the bearer token");
  }
  std::shared_ptr<const std::vector<Entry>> entries;
  {
    MutexLock lock(&mu_);
    entries = entries_;
  }
  // Every entry is compared, in constant time, whichever matches: the time taken says nothing
  // about which hash, or how much of it, the token came close to.
  const Entry* match = nullptr;
  for (const Entry& entry : *entries) {
    const bool same = CRYPTO_memcmp(entry.sha256.data(), digest.data(), digest.size()) == 0;
    if (same) match = &entry;
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown or revoked bearer token");
  return match->name;
}

}  // namespace gecd::auth
