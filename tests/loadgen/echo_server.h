#ifndef GECD_TESTS_LOAD_ECHO_SERVER_H_
#define GECD_TESTS_LOAD_ECHO_SERVER_H_

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace gecd::loadgen::testing {

// An in-process gecd.v1.GrammarCorrection server on 127.0.0.1 (a free port) that answers every
// sentence with its own text, with faults on demand: every reject_every-th sentence (0: none)
// gets RESOURCE_EXHAUSTED, as an RPC status on Correct and as a per-sentence status on
// CorrectStream; every drop_every-th sentence on CorrectStream is never answered. A unary
// rejection carries the grpc-retry-pushback-ms trailer when pushback_ms is positive.
// With sentence_cache, Correct also answers as gecd does with its sentence cache, in miniature:
// the text's sentences (each ends at '.', '!' or '?' before whitespace or the text's end) in
// `sentences`, a sentence corrected before by a request without `cache: false` marked `cached`,
// and one word-count each of prompt and output tokens for every other sentence.
struct EchoFaults {
  uint64_t reject_every = 0;
  uint64_t drop_every = 0;
  int pushback_ms = 0;
  bool sentence_cache = false;
};

class EchoServer final : public v1::GrammarCorrection::CallbackService {
 public:
  explicit EchoServer(EchoFaults faults = {}) : faults_(faults) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() override { server_->Shutdown(); }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  uint64_t answered() const { return answered_.load(); }
  // The texts each connection (gRPC peer) sent on Correct.
  std::map<std::string, std::set<std::string>> texts_by_peer() const {
    std::lock_guard lock(peers_mu_);
    return texts_by_peer_;
  }

  grpc::ServerUnaryReactor* Correct(grpc::CallbackServerContext* context,
                                    const v1::CorrectRequest* request,
                                    v1::CorrectResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    {
      std::lock_guard lock(peers_mu_);
      texts_by_peer_[context->peer()].insert(request->text());
    }
    if (Reject()) {
      if (faults_.pushback_ms > 0) {
        context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(faults_.pushback_ms));
      }
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"));
    } else {
      Echo(*request, response);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }

  grpc::ServerBidiReactor<v1::CorrectRequest, v1::CorrectResponse>* CorrectStream(
      grpc::CallbackServerContext* context) override {
    return new StreamEcho(this);
  }

 private:
  // Answers each sentence as it is read; one write in flight at a time, as gRPC requires.
  // Reactor operations start outside the lock: a reaction may run inline.
  class StreamEcho final : public grpc::ServerBidiReactor<v1::CorrectRequest, v1::CorrectResponse> {
   public:
    explicit StreamEcho(EchoServer* server) : server_(server) { StartRead(&request_); }

    void OnReadDone(bool ok) override {
      if (!ok) {
        bool finish;
        {
          std::lock_guard lock(mu_);
          reads_done_ = true;
          finish = !writing_;
        }
        if (finish) Finish(grpc::Status::OK);
        return;
      }
      if (Every(server_->faults_.drop_every, server_->stream_sentences_)) {
        StartRead(&request_);
        return;
      }
      v1::CorrectResponse response;
      if (server_->Reject()) {
        response.set_request_id(request_.request_id());
        response.mutable_status()->set_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
      } else {
        server_->Echo(request_, &response);
      }
      const v1::CorrectResponse* to_write = nullptr;  // stays put: only OnWriteDone pops it
      {
        std::lock_guard lock(mu_);
        pending_.push_back(std::move(response));
        if (!writing_) to_write = &pending_.front();
        writing_ = true;
      }
      if (to_write != nullptr) StartWrite(to_write);
      StartRead(&request_);
    }

    void OnWriteDone(bool ok) override {
      const v1::CorrectResponse* to_write = nullptr;
      bool finish;
      {
        std::lock_guard lock(mu_);
        pending_.pop_front();
        writing_ = !pending_.empty();
        if (writing_) to_write = &pending_.front();
        finish = !writing_ && reads_done_;
      }
      if (to_write != nullptr) StartWrite(to_write);
      if (finish) Finish(grpc::Status::OK);
    }

    void OnDone() override { delete this; }

   private:
    EchoServer* server_;
    v1::CorrectRequest request_;
    std::mutex mu_;
    std::deque<v1::CorrectResponse> pending_;  // front() is being written while writing_
    bool writing_ = false;
    bool reads_done_ = false;
  };

  // True for every n-th call of counter (never when n is 0).
  static bool Every(uint64_t n, std::atomic<uint64_t>& counter) {
    return n > 0 && counter.fetch_add(1) % n == n - 1;
  }
  bool Reject() { return Every(faults_.reject_every, calls_); }
  void Echo(const v1::CorrectRequest& request, v1::CorrectResponse* response) {
    response->set_request_id(request.request_id());
    response->set_corrected_text(request.text());
    if (faults_.sentence_cache) AnswerSentences(request, response);
    answered_.fetch_add(1);
  }
  void AnswerSentences(const v1::CorrectRequest& request, v1::CorrectResponse* response) {
    const std::string& text = request.text();
    const bool use_cache = !request.has_cache() || request.cache();
    const auto ends_at = [&text](size_t i) {
      return (text[i] == '.' || text[i] == '!' || text[i] == '?') &&
             (i + 1 == text.size() || text[i + 1] == ' ' || text[i + 1] == '\n');
    };
    for (size_t start = text.find_first_not_of(" \n"); start != std::string::npos;) {
      size_t end = start;
      while (end < text.size() && !ends_at(end)) ++end;
      end = std::min(end + 1, text.size());
      const std::string sentence = text.substr(start, end - start);
      bool cached = false;
      if (use_cache) {
        std::lock_guard lock(cache_mu_);
        cached = !cache_.insert(sentence).second;
      }
      v1::Sentence* answer = response->add_sentences();
      answer->set_start(start);
      answer->set_end(end);
      answer->set_cached(cached);
      if (!cached) {
        const uint32_t words = std::count(sentence.begin(), sentence.end(), ' ') + 1;
        response->set_prompt_tokens(response->prompt_tokens() + words);
        response->set_output_tokens(response->output_tokens() + words);
      }
      start = text.find_first_not_of(" \n", end);
    }
  }

  const EchoFaults faults_;
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> stream_sentences_{0};
  std::atomic<uint64_t> answered_{0};
  std::mutex cache_mu_;
  std::set<std::string> cache_;  // guarded by cache_mu_: the sentences answered with the cache on
  mutable std::mutex peers_mu_;
  std::map<std::string, std::set<std::string>> texts_by_peer_;  // guarded by peers_mu_
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gecd::loadgen::testing

#endif  // GECD_TESTS_LOAD_ECHO_SERVER_H_
