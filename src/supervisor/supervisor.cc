#include "supervisor/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
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
#include "common/startup_phases.h"
#include "common/status_macros.h"
#include "config/config.h"
#include "engine_options/engine_options.h"
#include "ipc/shared_segment.h"
#ifdef GECD_HAVE_CUDA
#include "kernels/device_info.h"
#endif
#include "daemon/listen_address.h"
#include "daemon/open_file_limit.h"
#include "daemon/process_title.h"
#include "daemon/sd_notify.h"
#include "daemon/status_http.h"
#include "metrics/metrics.h"
#include "model/checkpoint.h"
#include "spdlog/spdlog.h"
#include "supervisor/roles.h"
#include "supervisor/watchdog.h"
#include "tokenizer/tokenizer.h"

extern char** environ;

namespace gecd::server {

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

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        strsignal(WTERMSIG(wait_status)), ")");
  }
  return "stopped";
}

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
    return is_engine() ? MetricsRegion::kEngineIndex : MetricsRegion::WorkerIndex(worker);
  }
};

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
  absl::Status Start();
  absl::Status Spawn(Child& child);
  std::vector<std::string> ChildEnvironment(const Child& child) const;
  void ReapExited();
  void OnExit(Child& child, int wait_status);
  void StartDueRestarts();
  void UpdateReadiness();
  bool Ready() const;
  bool EngineReady() const;
  // Whether the workers' gRPC servers listen: all of them until they first have, then any.
  bool WorkersListening() const;
  // systemd: WATCHDOG=1 while the engine is healthy, STATUS= when the state line changes.
  void Watch();
  std::string StatusLine() const;
  void UpdateStatus();
  void Notify(const std::string& state);
  void BeginShutdown(int signal);
  void AdvanceShutdown();
  void KillAll();
  bool AnyRunning(bool workers_only) const;

  const config::Config& config_;
  const std::string config_path_;
  const std::string overrides_;
  const sigset_t signals_;

  ipc::SharedSegment segment_;
  bool segment_created_ = false;
  ipc::SegmentHeader* header_ = nullptr;
  std::optional<MetricsRegion> metrics_;
  std::atomic<uint64_t> engine_restarts_{0};
  std::atomic<uint64_t> worker_restarts_{0};
  std::unique_ptr<StatusHttpServer> http_;
  std::vector<Child> children_;  // the engine, then worker 0..N-1

  bool ready_ = false;
  bool notified_ready_ = false;
  bool was_ever_ready_ = false;  // the start-up summary is logged once
  // Every worker has listened since start-up (read and written by Ready(), which /readyz calls
  // on the HTTP thread).
  mutable std::atomic<bool> all_workers_listened_{false};
  std::optional<Watchdog> watchdog_;  // set when systemd asked for pings (WatchdogSec=)
  std::string status_;                // the STATUS= line last sent
  bool engine_was_ready_ = false;     // some engine set engine_ready_epoch to its epoch
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
  const int num_workers = config_.server.workers > 0
                              ? config_.server.workers
                              : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ipc::SegmentOptions options;
  options.num_workers = num_workers;
  options.ring_slots = config_.server.ring_slots;
  options.ring_slot_bytes = config_.server.ring_slot_bytes;
  options.metrics_bytes = MetricsRegion::BytesFor(1 + num_workers);
  ASSIGN_OR_RETURN(segment_, ipc::SharedSegment::Create(ipc::SharedSegment::UniqueName(), options));
  segment_created_ = true;
  header_ = segment_.header();
  metrics_ = MetricsRegion::Initialize(segment_.metrics_region());
  spdlog::info("shared memory segment {} ({} workers)", segment_.name(), num_workers);

  StatusHttpServer::Handlers handlers;
  handlers.metrics = [this] {
    return FormatPrometheus(metrics_->Sum(), {{"engine", engine_restarts_.load()},
                                              {"worker", worker_restarts_.load()}});
  };
  handlers.ready = [this] { return Ready(); };
  ASSIGN_OR_RETURN(http_, StatusHttpServer::Start(config_.server.metrics_listen, handlers));
  spdlog::info("metrics, /healthz and /readyz on {} (port {})", config_.server.metrics_listen,
               http_->port());
  ProcessStartup().Mark("segment and /metrics");

  absl::StatusOr<std::optional<std::chrono::microseconds>> watchdog =
      Watchdog::IntervalFromEnvironment();
  if (!watchdog.ok()) {
    spdlog::warn("no systemd watchdog pings: {}", watchdog.status().ToString());
  } else if (*watchdog) {
    watchdog_.emplace(**watchdog);
    spdlog::info("systemd watchdog: {} ms, pinged while the engine makes progress",
                 std::chrono::duration_cast<milliseconds>(**watchdog).count());
  }

  header_->engine_epoch.store(1);
  children_.resize(1 + num_workers);
  for (int i = 0; i < num_workers; ++i) {
    children_[1 + i].worker = i;
    children_[1 + i].title = absl::StrCat("gecd: worker ", i);
  }
  children_[0].title = "gecd: engine";
  for (Child& child : children_) child.restart_at = Clock::now();
  StartDueRestarts();
  ProcessStartup().Mark("children started");
  return absl::OkStatus();
}

std::vector<std::string> Supervisor::ChildEnvironment(const Child& child) const {
  // Our own variables are replaced, not inherited; systemd's are the supervisor's alone.
  static constexpr std::string_view kOwned[] = {kRoleEnv,        kShmEnv,       kWorkerIndexEnv,
                                                kConfigEnv,      kOverridesEnv, "NOTIFY_SOCKET",
                                                "WATCHDOG_USEC", "WATCHDOG_PID"};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view var(*e);
    const bool owned = std::any_of(std::begin(kOwned), std::end(kOwned), [&](std::string_view k) {
      return var.size() > k.size() && var.substr(0, k.size()) == k && var[k.size()] == '=';
    });
    if (!owned) env.emplace_back(var);
  }
  env.push_back(absl::StrCat(kRoleEnv, "=", child.kind()));
  env.push_back(absl::StrCat(kShmEnv, "=", segment_.name()));
  env.push_back(absl::StrCat(kConfigEnv, "=", config_path_));
  env.push_back(absl::StrCat(kOverridesEnv, "=", overrides_));
  if (!child.is_engine()) env.push_back(absl::StrCat(kWorkerIndexEnv, "=", child.worker));
  return env;
}

absl::Status Supervisor::Spawn(Child& child) {
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are allowed, as the HTTP thread may hold the allocator's lock.
  std::vector<std::string> env = ChildEnvironment(child);
  std::vector<char*> envp;
  for (std::string& var : env) envp.push_back(var.data());
  envp.push_back(nullptr);
  std::string title = child.title;
  char* argv[] = {title.data(), nullptr};
  if (child.is_engine()) segment_.ClearEngineFailure();
  sigset_t none;
  sigemptyset(&none);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Its own process group, so a terminal's Ctrl-C reaches only the supervisor, which drains
    // in order; and no child outlives a supervisor that was killed.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close_range(3, ~0U, 0);
    execve("/proc/self/exe", argv, envp.data());
    _exit(127);
  }
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
    // Read before it is cleared: an engine that became ready and died within one poll interval
    // counts as having been ready.
    const uint64_t ready_epoch = header_->engine_ready_epoch.load();
    if (ready_epoch != 0 && ready_epoch == header_->engine_epoch.load()) engine_was_ready_ = true;
    // Not ready until the next engine warms up; the new epoch tells workers to fail what they
    // had in flight with the dead one.
    header_->engine_ready_epoch.store(0);
    header_->engine_has_work.store(0);  // the next engine starts with none
    header_->engine_epoch.fetch_add(1);
  } else {
    // The engine frees the dead worker's sequences and resets its rings before the
    // replacement attaches.
    segment_.ResetWorkerChannel(child.worker);
  }
  if (shutting_down_) {
    spdlog::info("{} (pid {}) {}", child.title, pid, DescribeExit(wait_status));
    return;
  }
  if (child.is_engine() && !engine_was_ready_) {
    spdlog::error("{} (pid {}) {} before it was ever ready; not restarting it", child.title, pid,
                  DescribeExit(wait_status));
    const std::string reason = segment_.EngineFailure();
    engine_start_failure_ = reason.empty() ? DescribeExit(wait_status) : reason;
    return;
  }
  const milliseconds delay =
      child.backoff.OnExit(std::chrono::duration_cast<milliseconds>(now - child.started));
  spdlog::warn("{} (pid {}) {}; restarting in {} ms", child.title, pid, DescribeExit(wait_status),
               delay.count());
  child.restart_at = now + delay;
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

void Supervisor::Watch() {
  if (!watchdog_) return;
  const bool was_stalled = watchdog_->stalled();
  // Only a ready engine is held to making steps (it serves the drain too): loading a model is
  // bounded by TimeoutStartSec, and a restart by its backoff.
  const bool queued = EngineReady() && segment_.EngineWorkQueued();
  if (watchdog_->Observe(Clock::now(), header_->engine_steps.load(std::memory_order_acquire),
                         queued)) {
    Notify("WATCHDOG=1");
  }
  if (watchdog_->stalled() != was_stalled) {
    if (watchdog_->stalled()) {
      spdlog::error(
          "engine (pid {}) has work queued and finished no step for {} ms; "
          "withholding systemd watchdog pings",
          children_[0].pid,
          std::chrono::duration_cast<milliseconds>(watchdog_->ping_period()).count());
    } else {
      spdlog::warn("engine making progress again; systemd watchdog pings resumed");
    }
  }
}

std::string Supervisor::StatusLine() const {
  if (shutting_down_) return "draining";
  if (watchdog_ && watchdog_->stalled()) return "engine stalled: work queued, no step progress";
  if (ready_) {
    const size_t workers = children_.size() - 1;
    return absl::StrCat("serving: ", workers, workers == 1 ? " worker" : " workers",
                        ", engine ready");
  }
  if (engine_was_ready_) return "engine restarting";
  return "starting: engine loading the model";
}

void Supervisor::UpdateStatus() {
  std::string line = StatusLine();
  if (line == status_) return;
  status_ = std::move(line);
  // READY=1 goes with the first "serving" line, in one datagram.
  std::string state = absl::StrCat("STATUS=", status_);
  if (ready_ && !notified_ready_) {
    notified_ready_ = true;
    state = absl::StrCat("READY=1\n", state);
  }
  Notify(state);
}

void Supervisor::Notify(const std::string& state) {
  if (absl::Status s = NotifySystemd(state); !s.ok()) spdlog::warn("{}", s.ToString());
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

void Supervisor::BeginShutdown(int signal) {
  shutting_down_ = true;
  shutdown_deadline_ = Clock::now() + milliseconds(config_.server.grace_period_ms);
  header_->draining.store(1);
  spdlog::info("{}: draining for up to {} ms", strsignal(signal), config_.server.grace_period_ms);
  status_ = StatusLine();
  Notify(absl::StrCat("STOPPING=1\nSTATUS=", status_));
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

absl::Status Supervisor::Run() {
  RETURN_IF_ERROR(Start());
  // Often enough to ping within the watchdog's half interval.
  const auto poll_interval = watchdog_
                                 ? std::clamp<std::chrono::nanoseconds>(
                                       watchdog_->ping_period() / 2, milliseconds(1), kPollInterval)
                                 : std::chrono::nanoseconds(kPollInterval);
  const timespec poll = {0, poll_interval.count()};
  while (true) {
    ReapExited();
    if (engine_start_failure_) {
      // The destructor stops the workers and removes the segment.
      return absl::FailedPreconditionError(
          absl::StrCat("the engine could not start: ", *engine_start_failure_));
    }
    if (shutting_down_) {
      AdvanceShutdown();
      if (!AnyRunning(false)) break;
    } else {
      StartDueRestarts();
      UpdateReadiness();
    }
    UpdateStatus();
    Watch();
    siginfo_t info;
    const int signal = sigtimedwait(&signals_, &info, &poll);
    if (signal == SIGTERM || signal == SIGINT) {
      if (!shutting_down_) {
        BeginShutdown(signal);
      } else {
        spdlog::warn("{} again: stopping now", strsignal(signal));
        shutdown_deadline_ = Clock::now();
      }
    }
  }
  spdlog::info("stopped");
  return absl::OkStatus();
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
  SetProcessTitle("gecd: supervisor");
  // Each connection is a descriptor: let the metrics endpoint (and the workers, who inherit
  // it) hold thousands rather than stop accepting at the usual soft limit of 1024.
  if (absl::StatusOr<OpenFileLimit> files = RaiseOpenFileLimit(); files.ok()) {
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
    return config::SpellCorrectorFrom(one).status();
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
  for (const auto& [key, listen] :
       {std::pair{"server.listen", &config.server.listen},
        std::pair{"server.metrics_listen", &config.server.metrics_listen}}) {
    if (absl::Status free = CheckListenAddressFree(*listen, key); !free.ok()) {
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

}  // namespace gecd::server
