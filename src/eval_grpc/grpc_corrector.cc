#include "eval_grpc/grpc_corrector.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gecd::eval {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::system_clock::time_point DeadlineIn(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    default:
      return absl::StrCat("code ", static_cast<int>(code));
  }
}

}  // namespace

struct GrpcCorrector::State {
  GrpcCorrectorOptions options;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::GrammarCorrection::Stub>> stubs;
};

GrpcCorrector::GrpcCorrector(std::unique_ptr<State> state) : state_(std::move(state)) {}
GrpcCorrector::~GrpcCorrector() = default;

absl::StatusOr<std::unique_ptr<GrpcCorrector>> GrpcCorrector::Connect(
    GrpcCorrectorOptions options) {
  if (options.in_flight < 1 || options.channels < 1) {
    return absl::InvalidArgumentError("in-flight calls and channels must be positive");
  }
  auto state = std::make_unique<State>();
  for (int i = 0; i < options.channels; ++i) {
    grpc::ChannelArguments args;
    // Distinct args and a private subchannel pool: one TCP connection per channel.
    args.SetInt("gecd.eval.channel", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(64 << 20);
    auto channel =
        grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(DeadlineIn(10'000))) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", options.target, " within 10 s"));
    }
    state->stubs.push_back(v1::GrammarCorrection::NewStub(channel));
    state->channels.push_back(std::move(channel));
  }
  state->options = std::move(options);
  return std::unique_ptr<GrpcCorrector>(new GrpcCorrector(std::move(state)));
}

absl::StatusOr<CorrectionRun> GrpcCorrector::CorrectAll(const std::vector<std::string>& texts,
                                                        ProgressBar* progress) {
  const GrpcCorrectorOptions& opt = state_->options;
  const size_t n = texts.size();
  CorrectionRun run;
  run.outputs.assign(n, "");
  run.errors.assign(n, "");

  struct Call {
    size_t index = 0;
    int attempt = 0;
    grpc::ClientContext context;
    v1::CorrectRequest request;
    v1::CorrectResponse response;
  };
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;
  size_t finished = 0;
  int in_flight = 0;
  // Sentences to send again (RESOURCE_EXHAUSTED, UNAVAILABLE) once their backoff is over.
  std::multimap<Clock::time_point, std::pair<size_t, int>> retries;

  // Runs on a gRPC thread. `in_flight` drops last, under the lock, so once the loop below
  // sees it at 0 no callback touches this frame again.
  const auto on_done = [&](Call* call, const grpc::Status& status) {
    bool advance = false;
    {
      std::lock_guard lock(mu);
      const auto code = status.error_code();
      if (status.ok()) {
        run.outputs[call->index] = call->response.corrected_text();
        run.generated_tokens += call->response.output_tokens();
        advance = true;
      } else if ((code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                  code == grpc::StatusCode::UNAVAILABLE) &&
                 call->attempt < opt.max_retries) {
        const auto backoff =
            std::chrono::milliseconds(std::min(2000, 20 << std::min(call->attempt, 7)));
        retries.emplace(Clock::now() + backoff, std::make_pair(call->index, call->attempt + 1));
      } else {
        run.errors[call->index] = absl::StrCat(CodeName(code), ": ", status.error_message());
        ++run.failed;
        advance = true;
      }
    }
    delete call;
    if (advance && progress != nullptr) progress->Advance();
    std::lock_guard lock(mu);
    if (advance) ++finished;
    --in_flight;
    cv.notify_one();
  };

  const Clock::time_point start = Clock::now();
  size_t issued = 0;  // round-robin over the stubs
  std::unique_lock lock(mu);
  while (finished < n) {
    // What may be sent now: due retries first, then new sentences, up to the in-flight limit.
    std::vector<std::pair<size_t, int>> to_send;
    const Clock::time_point now = Clock::now();
    while (in_flight + static_cast<int>(to_send.size()) < opt.in_flight) {
      if (!retries.empty() && retries.begin()->first <= now) {
        to_send.push_back(retries.begin()->second);
        retries.erase(retries.begin());
      } else if (next < n) {
        to_send.emplace_back(next++, 0);
      } else {
        break;
      }
    }
    in_flight += static_cast<int>(to_send.size());
    if (!to_send.empty()) {
      lock.unlock();  // a callback may run before Correct() returns
      for (const auto& [index, attempt] : to_send) {
        auto* call = new Call;
        call->index = index;
        call->attempt = attempt;
        call->request.set_text(texts[index]);
        call->context.set_deadline(DeadlineIn(opt.deadline_ms));
        auto& stub = state_->stubs[issued++ % state_->stubs.size()];
        stub->async()->Correct(&call->context, &call->request, &call->response,
                               [call, &on_done](grpc::Status status) { on_done(call, status); });
      }
      lock.lock();
      continue;
    }
    const Clock::time_point wake =
        retries.empty() ? now + std::chrono::seconds(1) : retries.begin()->first;
    cv.wait_until(lock, wake);
  }
  cv.wait(lock, [&] { return in_flight == 0; });  // none is left: finished counts them all
  run.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

}  // namespace gecd::eval
