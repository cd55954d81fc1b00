#include "supervisor/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "auth/token_table.h"
#include "common/child_process.h"
#include "common/cpu_limit.h"
#include "common/monotonic_clock.h"
#include "common/openmp_wait.h"
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "ipc/shared_segment.h"
#include "spelling/spelling_config.h"
#ifdef GECD_HAVE_CUDA
#include "kernels/device_info.h"
#endif
#include "daemon/listen_address.h"
#include "daemon/open_file_limit.h"
#include "daemon/process_title.h"
#include "daemon/sd_notify.h"
#include "metrics/metrics.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"
#include "supervisor/roles.h"
#include "supervisor/watchdog.h"
#include "tls/key_material.h"
#include "tls/metrics_server.h"
#include "tokenizer/tokenizer.h"

namespace gecd::supervisor {

std::chrono::milliseconds RestartBackoff::OnExit(std::chrono::milliseconds uptime) {
  if (uptime >= kStableUptime) quick_exits_ = 0;
  const int n = quick_exits_++;
  if (n == 0) return std::chrono::milliseconds(0);
  return std::min<std::chrono::milliseconds>(kFirstDelay * (int64_t{1} << std::min(n - 1, 16)),
                                             kMaxDelay);
}

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the loop looks at state no signal announces: the engine's ready flag, restart
// times, the drain deadline.
constexpr auto kPollInterval = milliseconds(50);

// How long the engine's OpenMP threads spin at a barrier before they sleep, in libgomp's
// iterations (GOMP_SPINCOUNT), unless the operator's environment chooses (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT: common/openmp_wait.h). A step's parallel regions follow each other within
// microseconds, and a thread that sleeps between them is woken by a futex each time: sleeping
// at once (passive) made a step at batch 1 take 2.0 ms against 0.54. libgomp's own default
// (300,000, some milliseconds) also spins between steps, taking the cores the workers answer
// refusals on: at 3x overload on a 2-core box a refusal's p99 was 11-12 ms against 9.2-9.6 at
// 10,000, for ~4% more answers (2026-12-06, bench/RESULTS.md).
constexpr char kEngineSpinCount[] = "10000";

// One supervised process slot: the engine or one worker, through all its restarts.
struct Child {
  int worker = -1;  // -1 for the engine
  std::string title;
  pid_t pid = 0;  // 0 while not running
  Clock::time_point started;
  std::optional<Clock::time_point> restart_at;  // set while a restart is pending
  bool has_run = false;
  RestartBackoff backoff;

  bool is_engine() const { return worker < 0; }
  const char* kind() const { return is_engine() ? "engine" : "worker"; }
  int metrics_index() const {
    return is_engine() ? metrics::MetricsRegion::kEngineIndex
                       : metrics::MetricsRegion::WorkerIndex(worker);
  }
};

// The supervisor's side of systemd: the watchdog pings, sent while the engine makes progress
// (when systemd asked for them, WatchdogSec=), and the READY=1, STATUS= and STOPPING=1
// notifications. Used by the supervisor's loop thread alone.
class SystemdLink {
 public:
  // Reads the watchdog interval systemd set, if any.
  void Start() {
    absl::StatusOr<std::optional<std::chrono::microseconds>> watchdog =
        Watchdog::IntervalFromEnvironment();
    if (!watchdog.ok()) {
      spdlog::warn("no systemd watchdog pings: {}", watchdog.status().ToString());
    } else if (*watchdog) {
      watchdog_.emplace(**watchdog);
      spdlog::info("systemd watchdog: {} ms, pinged while the engine makes progress",
                   std::chrono::duration_cast<milliseconds>(**watchdog).count());
    }
  }

  // How long the loop may wait: kPollInterval, or less to ping within the watchdog's half
  // interval.
  std::chrono::nanoseconds PollInterval() const {
    return watchdog_ ? std::clamp<std::chrono::nanoseconds>(watchdog_->ping_period() / 2,
                                                            milliseconds(1), kPollInterval)
                     : std::chrono::nanoseconds(kPollInterval);
  }

  bool watching() const { return watchdog_.has_value(); }
  bool stalled() const { return watchdog_ && watchdog_->stalled(); }

  // WATCHDOG=1 while the engine finishes steps, or has no work queued (`queued`: a ready
  // engine has work queued; only a ready engine is held to making steps).
  void Watch(bool queued, uint64_t engine_steps, pid_t engine_pid) {
    if (!watchdog_) return;
    const bool was_stalled = watchdog_->stalled();
    if (watchdog_->Observe(Clock::now(), engine_steps, queued)) Notify("WATCHDOG=1");
    if (watchdog_->stalled() == was_stalled) return;
    if (watchdog_->stalled()) {
      spdlog::error(
          "engine (pid {}) has work queued and finished no step for {} ms; "
          "withholding systemd watchdog pings",
          engine_pid, std::chrono::duration_cast<milliseconds>(watchdog_->ping_period()).count());
    } else {
      spdlog::warn("engine making progress again; systemd watchdog pings resumed");
    }
  }

  // STATUS=`line` when it changed; READY=1 goes with the first line sent while `ready`, in one
  // datagram.
  void SetStatus(std::string line, bool ready) {
    if (line == status_) return;
    status_ = std::move(line);
    std::string state = absl::StrCat("STATUS=", status_);
    if (ready && !notified_ready_) {
      notified_ready_ = true;
      state = absl::StrCat("READY=1\n", state);
    }
    Notify(state);
  }

  void Stopping(std::string line) {
    status_ = std::move(line);
    Notify(absl::StrCat("STOPPING=1\nSTATUS=", status_));
  }

 private:
  static void Notify(const std::string& state) {
    if (absl::Status s = daemon::NotifySystemd(state); !s.ok()) spdlog::warn("{}", s.ToString());
  }

  std::optional<Watchdog> watchdog_;  // set when systemd asked for pings (WatchdogSec=)
  std::string status_;                // the STATUS= line last sent
  bool notified_ready_ = false;
};

// `gecd serve`'s supervisor: creates the segment and the status endpoint, starts the engine
// and the workers (restarting them with RestartBackoff), tracks readiness, tells systemd, and
// on SIGTERM drains: workers first, then the engine, SIGKILL past the grace period. Runs on
// one thread (Run's loop); the HTTP thread calls Ready() and the /metrics handler, which read
// only the segment and atomics.
class Supervisor {
 public:
  Supervisor(const config::Config& config, std::string config_path, std::string overrides,
             const sigset_t& signals)
      : config_(config),
        config_path_(std::move(config_path)),
        overrides_(std::move(overrides)),
        signals_(signals) {}
  ~Supervisor();

  // Serves until SIGTERM or SIGINT and a completed drain. Fails, with the engine's reason,
  // when the engine exits before it was ever ready (see engine_start_failed()).
  absl::Status Run();

  // Whether Run() failed because the first engine could not start. That is a start-up crash
  // loop (a model, config or memory problem every restart would hit again), so the supervisor
  // stops instead of restarting it while /healthz says the daemon is alive.
  bool engine_start_failed() const { return engine_start_failure_.has_value(); }

 private:
  // Start-up, in order.
  absl::Status Start();
  absl::Status CreateSegment(int num_workers);
  absl::Status StartStatusServer();  // /metrics, /healthz, /readyz
  void StartChildren(int num_workers);

  // The children.
  absl::Status Spawn(Child& child);
  std::vector<std::string> ChildEnvironment(const Child& child) const;
  void ReapExited();
  void OnExit(Child& child, int wait_status);
  // A dead engine's epoch ends: workers fail what they had in flight with it.
  void EndEngineEpoch();
  void StartDueRestarts();
  void KillAll();
  bool AnyRunning(bool workers_only) const;

  // Readiness and what systemd is told.
  void UpdateReadiness();
  bool Ready() const;
  bool EngineReady() const;
  // Whether the workers' gRPC servers listen: all of them until they first have, then any.
  bool WorkersListening() const;
  std::string StatusLine() const;

  // The loop and the drain.
  // What one turn of the loop does besides waiting; false once the drain is over.
  bool Advance();
  // Waits up to `poll` for SIGTERM, SIGINT or SIGCHLD, and acts on the first two.
  void WaitForSignal(const timespec& poll);
  void BeginShutdown(int signal);
  void AdvanceShutdown();

  const config::Config& config_;
  const std::string config_path_;
  const std::string overrides_;
  const sigset_t signals_;

  ipc::SharedSegment segment_;
  bool segment_created_ = false;
  ipc::SegmentHeader* header_ = nullptr;
  std::optional<metrics::MetricsRegion> metrics_;
  std::atomic<uint64_t> engine_restarts_{0};
  std::atomic<uint64_t> worker_restarts_{0};
  std::unique_ptr<tls::MetricsServer> http_;
  std::vector<Child> children_;  // the engine, then worker 0..N-1
  SystemdLink systemd_;

  bool ready_ = false;
  bool was_ever_ready_ = false;  // the start-up summary is logged once
  // Every worker has listened since start-up (read and written by Ready(), which /readyz calls
  // on the HTTP thread).
  mutable std::atomic<bool> all_workers_listened_{false};
  bool engine_was_ready_ = false;  // some engine set engine_ready_epoch to its epoch
  std::optional<std::string> engine_start_failure_;  // why the first engine could not start
  bool shutting_down_ = false;
  bool engine_stopped_ = false;
  bool killed_stragglers_ = false;
  Clock::time_point shutdown_deadline_;
};

Supervisor::~Supervisor() {
  // Error paths and a finished drain alike: no child outlives us, no segment name leaks.
  KillAll();
  http_.reset();
  if (segment_created_) {
    if (absl::Status s = segment_.Unlink(); !s.ok()) {
      spdlog::error("cannot unlink shared memory {}: {}", segment_.name(), s.ToString());
    }
  }
}

absl::Status Supervisor::Start() {
  // 0: by the CPUs this process may keep busy (a container's CPU quota counts) and whether the
  // engine computes on them.
  const int num_workers =
      config_.server.workers > 0
          ? config_.server.workers
          : DefaultWorkers(ComputeThreads(ProcessCpuLimit()), config_.engine.backend == "cpu");
  RETURN_IF_ERROR(CreateSegment(num_workers));
  RETURN_IF_ERROR(StartStatusServer());
  ProcessStartup().Mark("segment and /metrics");
  systemd_.Start();
  StartChildren(num_workers);
  ProcessStartup().Mark("children started");
  return absl::OkStatus();
}

absl::Status Supervisor::CreateSegment(int num_workers) {
  ipc::SegmentOptions options;
  options.num_workers = num_workers;
  options.ring_slots = config_.server.ring_slots;
  options.ring_slot_bytes = config_.server.ring_slot_bytes;
  options.metrics_bytes = metrics::MetricsRegion::BytesFor(1 + num_workers);
  ASSIGN_OR_RETURN(segment_, ipc::SharedSegment::Create(ipc::SharedSegment::UniqueName(), options));
  segment_created_ = true;
  header_ = segment_.header();
  metrics_ = metrics::MetricsRegion::Initialize(segment_.metrics_region());
  spdlog::info("shared memory segment {} ({} worker{})", segment_.name(), num_workers,
               num_workers == 1 ? "" : "s");
  return absl::OkStatus();
}

absl::Status Supervisor::StartStatusServer() {
  daemon::StatusHttpServer::Handlers handlers;
  handlers.metrics = [this] {
    metrics::MetricsSnapshot snapshot = metrics_->Sum();
    const ipc::SharedMargin& margin = *segment_.admission_margin();
    snapshot.admission_margin = margin.Value();
    snapshot.admission_late_mark = margin.MarkAt(MonotonicMicros());
    snapshot.admission_late_mark_in_flight = margin.MarkInFlight();
    const ipc::StepTime between = segment_.step_time();
    snapshot.admission_step_fixed_seconds = between.fixed_us * 1e-6;
    snapshot.admission_step_per_sequence_seconds = between.per_sequence_us * 1e-6;
    return metrics::FormatPrometheus(
        snapshot, {{"engine", engine_restarts_.load()}, {"worker", worker_restarts_.load()}});
  };
  handlers.ready = [this] { return Ready(); };
  ASSIGN_OR_RETURN(http_,
                   tls::MetricsServer::Start("server.metrics_listen", config_.server.metrics_listen,
                                             handlers, config_.metrics_tls));
  spdlog::info("metrics, /healthz and /readyz on {} (port {}, {})", config_.server.metrics_listen,
               http_->port(), http_->https() ? "HTTPS" : "plain HTTP");
  return absl::OkStatus();
}

void Supervisor::StartChildren(int num_workers) {
  header_->engine_epoch.store(1);
  children_.resize(1 + num_workers);
  for (int i = 0; i < num_workers; ++i) {
    children_[1 + i].worker = i;
    children_[1 + i].title = absl::StrCat("gecd: worker ", i);
  }
  children_[0].title = "gecd: engine";
  for (Child& child : children_) child.restart_at = Clock::now();
  StartDueRestarts();
}

std::vector<std::string> Supervisor::ChildEnvironment(const Child& child) const {
  // Our own variables are replaced, not inherited; systemd's are the supervisor's alone.
  std::vector<std::string> ours = {
      absl::StrCat(kRoleEnv, "=", child.kind()), absl::StrCat(kShmEnv, "=", segment_.name()),
      absl::StrCat(kConfigEnv, "=", config_path_), absl::StrCat(kOverridesEnv, "=", overrides_)};
  if (!child.is_engine()) ours.push_back(absl::StrCat(kWorkerIndexEnv, "=", child.worker));
  std::vector<std::string_view> drop = {kRoleEnv,        kShmEnv,       kWorkerIndexEnv,
                                        kConfigEnv,      kOverridesEnv, "NOTIFY_SOCKET",
                                        "WATCHDOG_USEC", "WATCHDOG_PID"};
  if (child.is_engine() && OpenMpWaitChoices().empty()) {
    drop.insert(drop.end(), {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"});  // set, but empty
    ours.push_back(absl::StrCat("GOMP_SPINCOUNT=", kEngineSpinCount));
  }
  return ProcessEnvironment(drop, ours);
}

absl::Status Supervisor::Spawn(Child& child) {
  if (child.is_engine()) segment_.ClearEngineFailure();
  ChildProcessOptions options;
  options.executable = "/proc/self/exe";
  options.argv = {child.title};
  options.env = ChildEnvironment(child);
  // The loop takes its signals synchronously (blocked); the child handles its own.
  options.clear_signal_mask = true;
  // Its own process group, so a terminal's Ctrl-C reaches only the supervisor, which drains
  // in order; and no child outlives a supervisor that was killed.
  options.own_process_group = true;
  options.parent_death_signal = SIGKILL;
  options.close_inherited_fds = true;
  // The engine keeps the supervisor's priority; the workers yield to it (server.worker_nice).
  options.nice_increment = child.is_engine() ? 0 : config_.server.worker_nice;
  ASSIGN_OR_RETURN(const pid_t pid, SpawnProcess(options));
  child.pid = pid;
  child.started = Clock::now();
  spdlog::info("started {} (pid {})", child.title, pid);
  return absl::OkStatus();
}

void Supervisor::StartDueRestarts() {
  const Clock::time_point now = Clock::now();
  for (Child& child : children_) {
    if (!child.restart_at || *child.restart_at > now) continue;
    child.restart_at.reset();
    if (absl::Status s = Spawn(child); !s.ok()) {
      spdlog::error("cannot start {}: {}", child.title, s.ToString());
      child.restart_at = now + child.backoff.OnExit(milliseconds(0));
      continue;
    }
    if (child.has_run) (child.is_engine() ? engine_restarts_ : worker_restarts_).fetch_add(1);
    child.has_run = true;
  }
}

void Supervisor::ReapExited() {
  int wait_status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &wait_status, WNOHANG)) > 0) {
    for (Child& child : children_) {
      if (child.pid == pid) OnExit(child, wait_status);
    }
  }
}

void Supervisor::OnExit(Child& child, int wait_status) {
  const Clock::time_point now = Clock::now();
  const pid_t pid = child.pid;
  child.pid = 0;
  metrics_->ForProcess(child.metrics_index())->ResetGauges();
  if (child.is_engine()) {
    EndEngineEpoch();
  } else {
    // The engine frees the dead worker's sequences and resets its rings before the
    // replacement attaches.
    segment_.ResetWorkerChannel(child.worker);
  }
  if (shutting_down_) {
    spdlog::info("{} (pid {}) {}", child.title, pid, DescribeWaitStatus(wait_status));
    return;
  }
  if (child.is_engine() && !engine_was_ready_) {
    spdlog::error("{} (pid {}) {} before it was ever ready; not restarting it", child.title, pid,
                  DescribeWaitStatus(wait_status));
    const std::string reason = segment_.EngineFailure();
    engine_start_failure_ = reason.empty() ? DescribeWaitStatus(wait_status) : reason;
    return;
  }
  const milliseconds delay =
      child.backoff.OnExit(std::chrono::duration_cast<milliseconds>(now - child.started));
  spdlog::warn("{} (pid {}) {}; restarting in {} ms", child.title, pid,
               DescribeWaitStatus(wait_status), delay.count());
  child.restart_at = now + delay;
}

void Supervisor::EndEngineEpoch() {
  // Read before it is cleared: an engine that became ready and died within one poll interval
  // counts as having been ready.
  const uint64_t ready_epoch = header_->engine_ready_epoch.load();
  if (ready_epoch != 0 && ready_epoch == header_->engine_epoch.load()) engine_was_ready_ = true;
  // Not ready until the next engine warms up; the new epoch tells workers to fail what they
  // had in flight with the dead one.
  header_->engine_ready_epoch.store(0);
  header_->engine_has_work.store(0);  // the next engine starts with none
  header_->engine_epoch.fetch_add(1);
}

void Supervisor::KillAll() {
  for (Child& child : children_) {
    if (child.pid == 0) continue;
    kill(child.pid, SIGKILL);
    waitpid(child.pid, nullptr, 0);
    child.pid = 0;
  }
}

bool Supervisor::AnyRunning(bool workers_only) const {
  return std::any_of(children_.begin(), children_.end(), [&](const Child& c) {
    return c.pid != 0 && !(workers_only && c.is_engine());
  });
}

bool Supervisor::Ready() const {
  return EngineReady() && WorkersListening() && header_->draining.load() == 0;
}

bool Supervisor::WorkersListening() const {
  int listening = 0;
  for (int i = 0; i < segment_.num_workers(); ++i) listening += segment_.channel(i).Listening();
  // All of them the first time: SO_REUSEPORT spreads connections over the sockets that listen,
  // and a gRPC connection stays where it landed, so clients that came while one worker listened
  // would all stay on it. Later, a worker that restarts leaves the others serving.
  if (listening == segment_.num_workers()) all_workers_listened_.store(true);
  return all_workers_listened_.load() ? listening > 0 : false;
}

bool Supervisor::EngineReady() const {
  const uint64_t epoch = header_->engine_epoch.load();
  return epoch != 0 && header_->engine_ready_epoch.load() == epoch;
}

std::string Supervisor::StatusLine() const {
  if (shutting_down_) return "draining";
  if (systemd_.stalled()) return "engine stalled: work queued, no step progress";
  if (ready_) {
    const size_t workers = children_.size() - 1;
    return absl::StrCat("serving: ", workers, workers == 1 ? " worker" : " workers",
                        ", engine ready");
  }
  if (engine_was_ready_) return "engine restarting";
  return "starting: engine loading the model";
}

void Supervisor::UpdateReadiness() {
  const bool ready = Ready();
  if (ready == ready_) return;
  ready_ = ready;
  if (ready && !was_ever_ready_) {
    was_ever_ready_ = true;
    // The engine and the workers log their own phases as they come up.
    ProcessStartup().Mark("engine and workers up");
    spdlog::info("ready; start-up: {}", ProcessStartup().Summary());
    return;
  }
  spdlog::info(ready ? "ready" : "not ready: engine not warmed up, or no worker listening");
}

absl::Status Supervisor::Run() {
  RETURN_IF_ERROR(Start());
  const timespec poll = {0, systemd_.PollInterval().count()};
  while (true) {
    ReapExited();
    if (engine_start_failure_) {
      // The destructor stops the workers and removes the segment.
      return absl::FailedPreconditionError(
          absl::StrCat("the engine could not start: ", *engine_start_failure_));
    }
    if (!Advance()) break;
    WaitForSignal(poll);
  }
  spdlog::info("stopped");
  return absl::OkStatus();
}

bool Supervisor::Advance() {
  if (shutting_down_) {
    AdvanceShutdown();
    if (!AnyRunning(false)) return false;
  } else {
    StartDueRestarts();
    UpdateReadiness();
  }
  systemd_.SetStatus(StatusLine(), ready_);
  if (systemd_.watching()) {
    // Only a ready engine is held to making steps (it serves the drain too): loading a model
    // is bounded by TimeoutStartSec, and a restart by its backoff.
    const bool queued = EngineReady() && segment_.EngineWorkQueued();
    systemd_.Watch(queued, header_->engine_steps.load(std::memory_order_acquire), children_[0].pid);
  }
  return true;
}

void Supervisor::WaitForSignal(const timespec& poll) {
  siginfo_t info;
  const int signal = sigtimedwait(&signals_, &info, &poll);
  if (signal != SIGTERM && signal != SIGINT) return;
  if (!shutting_down_) {
    BeginShutdown(signal);
  } else {
    spdlog::warn("{} again: stopping now", strsignal(signal));
    shutdown_deadline_ = Clock::now();
  }
}

void Supervisor::BeginShutdown(int signal) {
  shutting_down_ = true;
  shutdown_deadline_ = Clock::now() + milliseconds(config_.server.grace_period_ms);
  header_->draining.store(1);
  spdlog::info("{}: draining for up to {} ms", strsignal(signal), config_.server.grace_period_ms);
  systemd_.Stopping(StatusLine());
  // Workers first: the engine keeps serving what they still have in flight.
  for (Child& child : children_) {
    child.restart_at.reset();
    if (!child.is_engine() && child.pid != 0) kill(child.pid, SIGTERM);
  }
}

void Supervisor::AdvanceShutdown() {
  Child& engine = children_[0];
  if (!engine_stopped_ && engine.pid != 0 && !AnyRunning(/*workers_only=*/true)) {
    engine_stopped_ = true;
    kill(engine.pid, SIGTERM);
  }
  if (!killed_stragglers_ && Clock::now() >= shutdown_deadline_ && AnyRunning(false)) {
    killed_stragglers_ = true;
    for (const Child& child : children_) {
      if (child.pid == 0) continue;
      spdlog::warn("{} (pid {}) still running after the grace period; killing it", child.title,
                   child.pid);
      kill(child.pid, SIGKILL);
    }
  }
}

}  // namespace

namespace {

// What every child would find wrong with the model directory, found once before any child
// starts: a misconfigured daemon exits with the reason instead of restarting its children
// forever while /healthz says it is alive. Workers need the tokenizer; the engine, unless it
// echoes, the checkpoint (opening it validates config.json and every tensor's header, without
// reading the weights).
absl::Status CheckModelDirectory(const config::Config& config) {
  RETURN_IF_ERROR(model::Tokenizer::LoadFromModelDir(config.model.dir).status());
  if (config.engine.backend != "echo") {
    RETURN_IF_ERROR(model::Checkpoint::Open(config.model.dir).status());
  }
  return absl::OkStatus();
}

// The cuda backend's device, checked before any child starts for the same reason.
absl::Status CheckDevice(const config::Config& config) {
  if (config.engine.backend != "cuda") return absl::OkStatus();
#ifdef GECD_HAVE_CUDA
  const kernels::DeviceList list = kernels::ListDevices();
  if (config.engine.device >= static_cast<int>(list.devices.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "engine.device ", config.engine.device, ": ", list.devices.size(),
        " CUDA device(s) visible", list.error.empty() ? "" : absl::StrCat(" (", list.error, ")")));
  }
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(
      "engine.backend: cuda, but this gecd was built without CUDA (no nvcc at build time)");
#endif
}

}  // namespace

int RunSupervisor(const config::Config& config, const std::string& config_path,
                  const std::string& overrides) {
  daemon::SetProcessTitle("gecd: supervisor");
  // Each connection is a descriptor: let the metrics endpoint (and the workers, who inherit
  // it) hold thousands rather than stop accepting at the usual soft limit of 1024.
  if (absl::StatusOr<daemon::OpenFileLimit> files = daemon::RaiseOpenFileLimit(); files.ok()) {
    spdlog::info("open files limit {} (was {})", files->after, files->before);
  } else {
    spdlog::warn("open files limit unchanged: {}", files.status().ToString());
  }
  ProcessStartup().Mark("logging and file limit");
  // The workers' spelling stage, checked for the same reason (its errors name the file and the
  // key): one Hunspell instance is enough to know the files load, and it loads on a thread
  // alongside the model check, each being a tenth of a second of start-up.
  std::future<absl::Status> spelling = std::async(std::launch::async, [&config] {
    config::SpellingSection one = config.spelling;
    one.instances = 1;
    return model::SpellCorrectorFrom(one).status();
  });
  const absl::Status model = CheckModelDirectory(config);
  const absl::Status spelling_status = spelling.get();
  ProcessStartup().Mark("model and spelling checks");
  if (!model.ok()) {
    spdlog::critical("model.dir {}: {}", config.model.dir, model.ToString());
    return 2;
  }
  if (!spelling_status.ok()) {
    spdlog::critical("{}", spelling_status.ToString());
    return 2;
  }
  // The workers' certificate and tokens, checked here so that a bad file stops the start with
  // exit 2 naming it, instead of workers that fail and are restarted; and the metrics
  // listener's certificate, so that it too stops the start with exit 2 rather than 1.
  for (const auto& [name, section] :
       {std::pair{"tls", &config.tls}, std::pair{"metrics_tls", &config.metrics_tls}}) {
    if (section->cert_file.empty()) continue;
    if (absl::Status checked = tls::LoadKeyMaterial(*section, name).status(); !checked.ok()) {
      spdlog::critical("{}", checked.ToString());
      return 2;
    }
  }
  if (!config.auth.tokens_file.empty()) {
    if (absl::Status tokens = auth::TokenTable::Load(config.auth).status(); !tokens.ok()) {
      spdlog::critical("{}", tokens.ToString());
      return 2;
    }
  }
  for (const auto& [key, listen] :
       {std::pair{"server.listen", &config.server.listen},
        std::pair{"server.metrics_listen", &config.server.metrics_listen}}) {
    if (absl::Status free = daemon::CheckListenAddressFree(*listen, key); !free.ok()) {
      spdlog::critical("{}", free.ToString());
      return 2;
    }
  }
  if (absl::Status device = CheckDevice(config); !device.ok()) {
    spdlog::critical("{}", device.ToString());
    return 2;
  }
  ProcessStartup().Mark("listen and device checks");
  // Blocked before any thread starts, so every thread inherits the mask and the loop alone
  // takes these signals, synchronously.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Supervisor supervisor(config, config_path, overrides, signals);
  if (absl::Status status = supervisor.Run(); !status.ok()) {
    spdlog::critical("{}", status.ToString());
    // 2, as for the checks above: what stopped the engine is in the config, the model or the
    // machine, and a restart would meet it again.
    return supervisor.engine_start_failed() ? 2 : 1;
  }
  return 0;
}

}  // namespace gecd::supervisor
