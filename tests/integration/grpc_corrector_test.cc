// The gRPC corrector behind `gecd eval --server`, against an echo daemon: outputs equal inputs,
// in order; RESOURCE_EXHAUSTED is retried; refused sentences fail alone. Built with the daemon.
#include "eval_grpc/grpc_corrector.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/test_paths.h"

namespace gecd::eval {
namespace {

using ::testing::HasSubstr;

CorrectionRun RunAll(Corrector& corrector, const std::vector<std::string>& texts) {
  absl::StatusOr<CorrectionRun> run = corrector.CorrectAll(texts, nullptr);
  EXPECT_TRUE(run.ok()) << run.status();
  return run.ok() ? *std::move(run) : CorrectionRun{};
}

TEST(GrpcCorrectorTest, EchoOutputsEqualInputsInOrderDespiteBackpressure) {
  // Two requests admitted per worker, 32 sent at once: the rest come back RESOURCE_EXHAUSTED
  // and are retried until they pass.
  gecd::testing::DaemonProcess daemon({"server.max_in_flight=2"});
  ASSERT_TRUE(daemon.WaitReady());
  GrpcCorrectorOptions options;
  options.target = daemon.grpc_target();
  options.in_flight = 32;
  options.max_retries = 1000;
  auto corrector = GrpcCorrector::Connect(options);
  ASSERT_TRUE(corrector.ok()) << corrector.status();
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) texts.push_back("Sentence number " + std::to_string(i) + ".");
  texts.push_back("");  // INVALID_ARGUMENT: fails alone, not retried
  const CorrectionRun run = RunAll(**corrector, texts);
  ASSERT_EQ(run.outputs.size(), texts.size());
  EXPECT_EQ(run.failed, 1);
  EXPECT_THAT(run.errors.back(), HasSubstr("INVALID_ARGUMENT"));
  for (size_t i = 0; i + 1 < texts.size(); ++i) {
    EXPECT_EQ(run.outputs[i], texts[i]) << i;
    EXPECT_EQ(run.errors[i], "") << i;
  }
  EXPECT_GT(run.generated_tokens, 300 * 10);  // echo: one token per byte
  const auto rejected = daemon.Metric("gecd_requests_total{code=\"RESOURCE_EXHAUSTED\"}");
  EXPECT_TRUE(rejected.has_value() && *rejected > 0) << "no backpressure was exercised";
}

TEST(GrpcCorrectorTest, ConnectFailsClearly) {
  GrpcCorrectorOptions options;
  options.target = "127.0.0.1:" + std::to_string(gecd::testing::FreeTcpPort());
  auto corrector = GrpcCorrector::Connect(options);
  ASSERT_FALSE(corrector.ok());
  EXPECT_EQ(corrector.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(corrector.status().message(), HasSubstr("cannot connect to " + options.target));
}

}  // namespace
}  // namespace gecd::eval
