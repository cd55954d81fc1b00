#include "route/kube_api_client.h"

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gecd/version.h"

namespace gecd::route {
namespace {

constexpr size_t kMaxBody = size_t{256} << 20;      // a list page; Kubernetes' are far smaller
constexpr size_t kMaxLine = size_t{64} << 20;       // one watch event
constexpr size_t kMaxErrorBody = size_t{64} << 10;  // a refused request's, for the message
constexpr absl::Duration kConnectTimeout = absl::Seconds(10);

CURLM* NewMulti() {
  // Thread-safe since 7.84 (Debian 12 ships 7.88); once is enough either way.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return curl_multi_init();
}

struct EasyDeleter {
  void operator()(CURL* easy) const { curl_easy_cleanup(easy); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

long Millis(absl::Duration d) { return static_cast<long>(absl::ToInt64Milliseconds(d)); }

void SetBlob(CURL* easy, CURLoption option, const std::string& pem) {
  curl_blob blob{.data = const_cast<char*>(pem.data()), .len = pem.size(), .flags = CURL_BLOB_COPY};
  curl_easy_setopt(easy, option, &blob);
}

}  // namespace

// What one request's write callback fills: the whole body, or lines for `on_line`.
struct KubeApiClient::Transfer {
  CURL* easy = nullptr;
  const std::function<bool(absl::string_view)>* on_line = nullptr;  // null: collect the body
  long status = 0;                                                  // known at the first byte
  std::string body;     // Get, or a Stream answer that is not 200
  std::string pending;  // a Stream's partial line
  bool reader_stopped = false;
  bool too_large = false;

  static size_t Write(char* data, size_t size, size_t n, void* self) {
    return static_cast<Transfer*>(self)->Take(absl::string_view(data, size * n));
  }

  size_t Take(absl::string_view data) {
    if (status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (on_line == nullptr || status != 200) {
      const size_t limit = on_line == nullptr ? kMaxBody : kMaxErrorBody;
      if (body.size() + data.size() > limit) {
        if (on_line != nullptr) {  // enough for the message: the rest is read, not kept
          body.append(data.data(), limit - body.size());
          return data.size();
        }
        too_large = true;
        return CURL_WRITEFUNC_ERROR;
      }
      body.append(data.data(), data.size());
      return data.size();
    }
    pending.append(data.data(), data.size());
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      absl::string_view line(pending.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!line.empty() && !(*on_line)(line)) {
        reader_stopped = true;
        return CURL_WRITEFUNC_ERROR;
      }
    }
    pending.erase(0, start);
    if (pending.size() > kMaxLine) {
      too_large = true;
      return CURL_WRITEFUNC_ERROR;
    }
    return data.size();
  }
};

KubeApiClient::KubeApiClient(KubeApiConfig config, absl::Duration token_refresh)
    : config_(std::move(config)), token_refresh_(token_refresh), multi_(NewMulti()) {}

KubeApiClient::~KubeApiClient() { curl_multi_cleanup(multi_); }

void KubeApiClient::Interrupt() {
  interrupted_.store(true);
  curl_multi_wakeup(multi_);  // thread-safe: the one multi call that is
}

absl::Status KubeApiClient::LoadToken() {
  if (config_.token_file.empty()) {
    token_ = config_.token;
    return absl::OkStatus();
  }
  const absl::Time now = absl::Now();
  if (now - token_read_ < token_refresh_) return absl::OkStatus();
  std::ifstream in(config_.token_file, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (!in || token.empty()) {
    // A token being rotated can be briefly absent: the old one may still be good.
    if (!token_.empty()) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("the token file ", config_.token_file, " cannot be read or is empty"));
  }
  token_ = std::move(token);
  token_read_ = now;
  return absl::OkStatus();
}

absl::StatusOr<KubeResponse> KubeApiClient::Get(const std::string& path_and_query,
                                                absl::Duration timeout) {
  Transfer transfer;
  return Perform(path_and_query, timeout, transfer);
}

absl::StatusOr<KubeResponse> KubeApiClient::Stream(
    const std::string& path_and_query, absl::Duration timeout,
    const std::function<bool(absl::string_view)>& on_line) {
  Transfer transfer;
  transfer.on_line = &on_line;
  absl::StatusOr<KubeResponse> response = Perform(path_and_query, timeout, transfer);
  // A clean end with a last line that lacks its "\n".
  if (response.ok() && response->status == 200 && !transfer.reader_stopped &&
      !transfer.pending.empty()) {
    on_line(transfer.pending);
  }
  return response;
}

absl::StatusOr<KubeResponse> KubeApiClient::Perform(const std::string& path_and_query,
                                                    absl::Duration timeout, Transfer& transfer) {
  if (interrupted_.load()) return absl::CancelledError("interrupted");
  if (absl::Status s = LoadToken(); !s.ok()) return s;
  const std::string url = config_.server + path_and_query;
  std::unique_ptr<CURL, EasyDeleter> easy(curl_easy_init());
  if (easy == nullptr || multi_ == nullptr) return absl::InternalError("curl initialisation");
  transfer.easy = easy.get();
  CURL* e = easy.get();
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https,http");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "gecd-route/" GECD_VERSION_STRING);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, Millis(std::min(kConnectTimeout, timeout)));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, Millis(timeout));
  // A watch is quiet for minutes: keepalive probes notice a peer that vanished.
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::Write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &transfer);
  if (!config_.ca_file.empty() || !config_.ca_pem.empty()) {
    // The cluster's CA alone, as kubectl: not the system's bundle or folder besides.
    curl_easy_setopt(e, CURLOPT_CAPATH, nullptr);
    curl_easy_setopt(e, CURLOPT_CAINFO,
                     config_.ca_file.empty() ? nullptr : config_.ca_file.c_str());
    if (!config_.ca_pem.empty()) SetBlob(e, CURLOPT_CAINFO_BLOB, config_.ca_pem);
  }
  if (config_.insecure_skip_tls_verify) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!config_.client_cert_file.empty()) {
    curl_easy_setopt(e, CURLOPT_SSLCERT, config_.client_cert_file.c_str());
  }
  if (!config_.client_cert_pem.empty()) SetBlob(e, CURLOPT_SSLCERT_BLOB, config_.client_cert_pem);
  if (!config_.client_key_file.empty()) {
    curl_easy_setopt(e, CURLOPT_SSLKEY, config_.client_key_file.c_str());
  }
  if (!config_.client_key_pem.empty()) SetBlob(e, CURLOPT_SSLKEY_BLOB, config_.client_key_pem);
  curl_slist* raw_headers = curl_slist_append(nullptr, "Accept: application/json");
  if (!token_.empty()) {
    raw_headers =
        curl_slist_append(raw_headers, absl::StrCat("Authorization: Bearer ", token_).c_str());
  }
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers.get());

  curl_multi_add_handle(multi_, e);
  CURLcode result = CURLE_OK;
  bool done = false;
  bool interrupted = false;
  while (!done) {
    int running = 0;
    if (CURLMcode m = curl_multi_perform(multi_, &running); m != CURLM_OK) {
      curl_multi_remove_handle(multi_, e);
      return absl::InternalError(absl::StrCat("GET ", url, ": ", curl_multi_strerror(m)));
    }
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg == CURLMSG_DONE && msg->easy_handle == e) {
        result = msg->data.result;
        done = true;
      }
    }
    if (done) break;
    if (interrupted_.load()) {
      interrupted = true;
      break;
    }
    curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
  }
  curl_multi_remove_handle(multi_, e);
  if (interrupted) return absl::CancelledError("interrupted");
  if (transfer.status == 0) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &transfer.status);
  if (transfer.too_large) {
    return absl::ResourceExhaustedError(
        absl::StrCat("GET ", url, ": ", transfer.on_line == nullptr ? "an answer" : "a line",
                     " over ", (transfer.on_line == nullptr ? kMaxBody : kMaxLine) >> 20, " MiB"));
  }
  if (result != CURLE_OK && !transfer.reader_stopped) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(result),
                                               error[0] != '\0' ? " (" : "", error,
                                               error[0] != '\0' ? ")" : ""));
  }
  return KubeResponse{.status = transfer.status, .body = std::move(transfer.body)};
}

}  // namespace gecd::route
