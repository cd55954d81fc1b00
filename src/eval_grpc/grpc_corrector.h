#ifndef GECD_EVAL_GRPC_GRPC_CORRECTOR_H_
#define GECD_EVAL_GRPC_GRPC_CORRECTOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "eval/corrector.h"

namespace gecd::eval {

struct GrpcCorrectorOptions {
  std::string target;         // HOST:PORT
  int in_flight = 64;         // unary Correct calls outstanding at once
  int channels = 4;           // TCP connections (spread over the server's SO_REUSEPORT workers)
  int deadline_ms = 120'000;  // per call
  int max_retries = 20;       // per sentence, for RESOURCE_EXHAUSTED and UNAVAILABLE, with backoff
};

// Sends every sentence to a gecd.v1.GrammarCorrection server as a unary Correct, `in_flight`
// at a time over `channels` connections (gRPC's callback API). The server applies its own
// prompt template and limits. Owns its channels.
class GrpcCorrector final : public Corrector {
 public:
  // Unavailable when the target does not accept a connection within 10 s.
  static absl::StatusOr<std::unique_ptr<GrpcCorrector>> Connect(GrpcCorrectorOptions options);
  ~GrpcCorrector() override;

  absl::StatusOr<CorrectionRun> CorrectAll(const std::vector<std::string>& texts,
                                           ProgressBar* progress) override;

 private:
  struct State;
  explicit GrpcCorrector(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace gecd::eval

#endif  // GECD_EVAL_GRPC_GRPC_CORRECTOR_H_
