#ifndef GECD_ROUTE_KUBE_API_CLIENT_H_
#define GECD_ROUTE_KUBE_API_CLIENT_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "curl/curl.h"
#include "route/kube_config.h"

// HTTPS GETs to one Kubernetes API server through libcurl (OpenSSL): whole answers (lists) and
// newline-delimited streams (watches), with the bearer token kept fresh.
namespace gecd::route {

// One answer: the HTTP status and, for Get and for a Stream that was not 200, the body
// (a refused request's body is cut at 64 KiB: it is only for the error message).
struct KubeResponse {
  long status = 0;
  std::string body;
};

// Owns a curl multi handle (its connection cache keeps the API server's connection between
// requests) and the token. Requests come from one thread; Interrupt() may come from any and
// ends the request in progress at once: curl_multi_poll is woken, no timer has to run out.
class KubeApiClient {
 public:
  // `token_refresh`: how long a token read from config.token_file is used before re-reading.
  KubeApiClient(KubeApiConfig config, absl::Duration token_refresh);
  ~KubeApiClient();
  KubeApiClient(const KubeApiClient&) = delete;
  KubeApiClient& operator=(const KubeApiClient&) = delete;

  // GET server + path_and_query; the whole body of any status. Errors: Unavailable (connect,
  // TLS, timeout, a dropped connection), ResourceExhausted (a body over 256 MiB), Cancelled
  // (Interrupt).
  absl::StatusOr<KubeResponse> Get(const std::string& path_and_query, absl::Duration timeout);

  // GET server + path_and_query; a 200 answer's body goes to `on_line` one line at a time
  // ("\n"-terminated, without it; empty lines skipped) as it arrives. `on_line` returning false
  // ends the request (an OK result). A clean end of the stream returns OK, a connection dropped
  // mid-stream Unavailable, after the lines that did arrive.
  absl::StatusOr<KubeResponse> Stream(const std::string& path_and_query, absl::Duration timeout,
                                      const std::function<bool(absl::string_view)>& on_line);

  // The token is re-read before the next request (after a 401: a rotated bound token).
  void RefreshToken() { token_read_ = absl::InfinitePast(); }

  // Any thread: ends the request in progress and fails every later one with Cancelled.
  void Interrupt();

 private:
  struct Transfer;
  absl::StatusOr<KubeResponse> Perform(const std::string& path_and_query, absl::Duration timeout,
                                       Transfer& transfer);
  absl::Status LoadToken();

  const KubeApiConfig config_;
  const absl::Duration token_refresh_;
  std::string token_;
  absl::Time token_read_ = absl::InfinitePast();
  CURLM* const multi_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace gecd::route

#endif  // GECD_ROUTE_KUBE_API_CLIENT_H_
