#ifndef GECD_TESTS_ROUTE_FAKE_DAEMON_H_
#define GECD_TESTS_ROUTE_FAKE_DAEMON_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

// An in-process stand-in for a gecd daemon behind the router: answers Correct with
// "<name>:<text>" (or a configured status), echoes the client's "x-test" metadata back as
// initial ("x-echo") and trailing ("x-trailer") metadata, answers each CorrectStream message
// the same way, and serves grpc.health.v1. It records what the router's calls looked like.
namespace gecd::route::testing {

class FakeDaemon final : public v1::GrammarCorrection::CallbackService {
 public:
  // Plaintext, or with `credentials` (TLS); on a free port, or on `port` (a daemon restarted).
  explicit FakeDaemon(
      std::string name,
      std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials(),
      int port = 0)
      : name_(std::move(name)) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), std::move(credentials), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeDaemon() override { Stop(); }

  void Stop() {
    Release();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int calls() const { return calls_.load(); }
  // CorrectStream calls not yet done.
  int open_streams() const { return open_streams_.load(); }
  int cancelled() const { return cancelled_.load(); }
  // The deadline the last call arrived with, as time left at arrival.
  std::chrono::milliseconds last_deadline_left() const {
    std::lock_guard lock(mu_);
    return last_deadline_left_;
  }

  // Every Correct answers this status from now on (OK: the normal answer).
  void AnswerWith(grpc::Status status) {
    std::lock_guard lock(mu_);
    status_ = std::move(status);
  }
  // Correct calls wait (until Release, or their cancellation) before answering.
  void Hold() {
    std::lock_guard lock(mu_);
    hold_ = true;
  }
  void Release() {
    std::vector<HeldCall*> held;
    grpc::Status status;
    {
      std::lock_guard lock(mu_);
      hold_ = false;
      held.swap(held_);
      status = status_;
    }
    for (HeldCall* call : held) call->Answer(status);
  }
  // Waits until `n` calls have arrived.
  bool WaitForCalls(int n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lock(mu_);
    return arrived_.wait_for(lock, timeout, [&] { return calls_.load() >= n; });
  }
  void SetServing(bool serving) { server_->GetHealthCheckService()->SetServingStatus(serving); }

  grpc::ServerUnaryReactor* Correct(grpc::CallbackServerContext* context,
                                    const v1::CorrectRequest* request,
                                    v1::CorrectResponse* response) override {
    auto* call = new HeldCall(*this);
    for (const auto& [key, value] : context->client_metadata()) {
      if (key == "x-test") {
        context->AddInitialMetadata("x-echo", std::string(value.data(), value.size()));
        context->AddTrailingMetadata("x-trailer", std::string(value.data(), value.size()));
      }
    }
    response->set_request_id(request->request_id());
    response->set_corrected_text(absl::StrCat(name_, ":", request->text()));
    std::lock_guard lock(mu_);
    last_deadline_left_ = std::chrono::duration_cast<std::chrono::milliseconds>(
        context->deadline() - std::chrono::system_clock::now());
    ++calls_;
    arrived_.notify_all();
    if (hold_) {
      held_.push_back(call);
    } else {
      call->Answer(status_);
    }
    return call;
  }

  grpc::ServerBidiReactor<v1::CorrectRequest, v1::CorrectResponse>* CorrectStream(
      grpc::CallbackServerContext* context) override {
    class Echo final : public grpc::ServerBidiReactor<v1::CorrectRequest, v1::CorrectResponse> {
     public:
      Echo(const std::string& name, std::atomic<int>& open) : name_(name), open_(open) {
        ++open_;
        StartRead(&request_);
      }
      void OnReadDone(bool ok) override {
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        response_.set_request_id(request_.request_id());
        response_.set_corrected_text(absl::StrCat(name_, ":", request_.text()));
        StartWrite(&response_);
      }
      void OnWriteDone(bool ok) override {
        if (ok) {
          StartRead(&request_);
        } else {
          Finish(grpc::Status::CANCELLED);
        }
      }
      void OnDone() override {
        --open_;
        delete this;
      }

     private:
      const std::string name_;
      std::atomic<int>& open_;
      v1::CorrectRequest request_;
      v1::CorrectResponse response_;
    };
    ++calls_;
    return new Echo(name_, open_streams_);
  }

 private:
  // A Correct call, answered now or, while the fake holds calls, on Release or cancellation.
  class HeldCall final : public grpc::ServerUnaryReactor {
   public:
    explicit HeldCall(FakeDaemon& daemon) : daemon_(daemon) {}
    void Answer(const grpc::Status& status) {
      if (!answered_.exchange(true)) Finish(status);
    }
    void OnCancel() override {
      ++daemon_.cancelled_;
      {
        std::lock_guard lock(daemon_.mu_);
        std::erase(daemon_.held_, this);
      }
      Answer(grpc::Status::CANCELLED);
    }
    void OnDone() override { delete this; }

   private:
    FakeDaemon& daemon_;
    std::atomic<bool> answered_{false};
  };

  const std::string name_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<int> calls_{0};
  std::atomic<int> cancelled_{0};
  std::atomic<int> open_streams_{0};
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  bool hold_ = false;
  std::vector<HeldCall*> held_;
  grpc::Status status_;
  std::chrono::milliseconds last_deadline_left_{0};
};

}  // namespace gecd::route::testing

#endif  // GECD_TESTS_ROUTE_FAKE_DAEMON_H_
