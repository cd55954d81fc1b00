// RunWorkerProcess (roles.h): one front-end worker over the shared-memory engine link.

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <ctime>

#include "common/startup_phases.h"
#include "ipc/shared_segment.h"
#include "metrics/metrics.h"
#include "spdlog/spdlog.h"
#include "spelling/spell_corrector.h"
#include "spelling/spelling_config.h"
#include "supervisor/roles.h"
#include "tokenizer/tokenizer.h"
#include "worker/ring_engine_link.h"
#include "worker/worker_server.h"

namespace gecd::worker {

namespace {

// How often the worker looks at the segment's draining flag while no signal arrives.
constexpr timespec kDrainPoll = {0, 100'000'000};

}  // namespace

int RunWorkerProcess(const config::Config& config, const std::string& shm_name, int index) {
  // Blocked before any thread starts, so that every thread inherits the mask and the signals
  // wait for sigtimedwait below instead of killing the process mid-request.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<ipc::SharedSegment> segment = ipc::SharedSegment::Open(shm_name);
  if (!segment.ok()) {
    spdlog::critical("{}", segment.status().ToString());
    return 1;
  }
  metrics::ProcessMetrics* metrics = metrics::MetricsRegion(segment->metrics_region())
                                         .ForProcess(metrics::MetricsRegion::WorkerIndex(index));
  if (metrics == nullptr) {
    spdlog::critical("worker index {} has no metrics block in segment {}", index, shm_name);
    return 1;
  }
  ProcessStartup().Mark("segment");
  // A worker only tokenizes: the weights stay in the engine.
  absl::StatusOr<std::unique_ptr<model::Tokenizer>> tokenizer =
      model::Tokenizer::LoadFromModelDir(config.model.dir);
  if (!tokenizer.ok()) {
    spdlog::critical("{}", tokenizer.status().ToString());
    return 1;
  }
  ProcessStartup().Mark("tokenizer");
  absl::StatusOr<std::unique_ptr<RingEngineLink>> link = RingEngineLink::Create(*segment, index);
  if (!link.ok()) {
    spdlog::critical("{}", link.status().ToString());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<model::SpellCorrector>> spelling =
      model::SpellCorrectorFrom(config.spelling);
  if (!spelling.ok()) {
    spdlog::critical("{}", spelling.status().ToString());
    return 1;
  }
  ProcessStartup().Mark("spelling");
  WorkerServer::Options options;
  options.listen = config.server.listen;
  options.service.spelling = spelling->get();
  absl::StatusOr<std::unique_ptr<WorkerServer>> server =
      WorkerServer::Start(config, **tokenizer, **link, *metrics, options);
  if (!server.ok()) {
    spdlog::critical("{}", server.status().ToString());
    return 1;
  }
  segment->channel(index).MarkListening();  // the daemon's readiness waits for it
  ProcessStartup().Mark("gRPC server");
  spdlog::info("listening on {} (port {}); start-up: {}", config.server.listen, (*server)->port(),
               ProcessStartup().Summary());

  // SIGTERM from the supervisor, or its draining flag, whichever comes first.
  while (segment->header()->draining.load(std::memory_order_relaxed) == 0) {
    const int signal = sigtimedwait(&stop_signals, nullptr, &kDrainPoll);
    if (signal > 0) {
      spdlog::info("signal {}: draining", signal);
      break;
    }
    if (errno != EAGAIN && errno != EINTR) {
      spdlog::error("sigtimedwait: errno {}", errno);
      break;
    }
  }
  (*server)->Drain(std::chrono::milliseconds(config.server.grace_period_ms));
  spdlog::info("drained, exiting");
  return 0;
}

}  // namespace gecd::worker
