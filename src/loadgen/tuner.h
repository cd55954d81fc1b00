#ifndef GECD_LOADGEN_TUNER_H_
#define GECD_LOADGEN_TUNER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loadgen/find_max.h"
#include "loadgen/load_runner.h"

// `gecd tune`'s search: which values of the settings that decide a daemon's throughput let it
// sustain the highest request rate within a latency SLO, measured with the open-loop find-max
// of gecd-load against daemons started for each candidate, within a wall-time budget.
namespace gecd::loadgen {

// Config key → value, as `gecd serve --set` takes them.
using Settings = std::map<std::string, std::string>;

inline constexpr char kMaxBatchSizeKey[] = "engine.max_batch_size";
inline constexpr char kMaxStepTokensKey[] = "engine.max_step_tokens";
inline constexpr char kWorkersKey[] = "server.workers";
inline constexpr char kGraphBatchSizesKey[] = "engine.graph_batch_sizes";

// One knob of the search: a config key and the values worth trying for it given the other
// settings (so that one value may follow another, as graph sizes follow the batch size). The
// current value is measured already and is skipped if listed.
struct TuneDimension {
  std::string key;
  std::function<std::vector<std::string>(const Settings&)> candidates;
};

// The knobs for a daemon on a machine with `cores` cores whose engine.backend is `backend`, in
// the order they are tuned: engine.max_batch_size and engine.max_step_tokens (half and double
// the current value, the batch never above the step's tokens), server.workers (half and double,
// 0 counting as the supervisor's default for `cores` and `backend`, common/cpu_limit.h, at most
// `cores`), and with the cuda backend engine.graph_batch_sizes (none, or powers of two and their
// midpoints up to the batch size, so that a batch pads less to its graph).
std::vector<TuneDimension> ThroughputSearchSpace(int cores, std::string_view backend);

// A daemon serving one candidate's settings; destroying it stops the daemon.
class CandidateServer {
 public:
  virtual ~CandidateServer() = default;
  // One open-loop trial at `qps` (what find-max runs).
  virtual absl::StatusOr<TrialMeasurement> RunTrial(double qps) = 0;
  // Requests per second answered in a short closed-loop run with many in flight: it warms
  // each daemon up before its trials and gives the first find-max its scale.
  virtual absl::StatusOr<double> ProbeCapacity() = 0;
};

// Starts a daemon with `settings` and returns once it is ready to serve.
using StartFn =
    std::function<absl::StatusOr<std::unique_ptr<CandidateServer>>(const Settings& settings)>;

struct TunerOptions {
  double budget_s = 600;  // all of it: daemon starts and stops, probes, trials
  // The SLO, the error limit, growth, precision and the trials per candidate at most (fewer
  // when its share of the budget ends first); start_qps is chosen by the tuner.
  FindMaxOptions find_max;
  // The upper bound of one trial or probe, start to end, including the backlog's drain. A
  // trial starts only when it and the daemon's stop fit in the candidate's share.
  double trial_cost_s = 5;
  // What a daemon's start and stop are assumed to take until one has been seen; then the
  // slowest seen.
  double start_cost_s = 10;
  double stop_cost_s = 2;
  // No trial below this rate (too few requests in a trial to have a p99): a candidate whose
  // find-max bisects down to it has no rate that meets the SLO.
  double min_qps = 0;
  // The first find-max starts at this share of the probed capacity; later ones start at the
  // best rate so far and grow by candidate_growth, as a setting rarely doubles the rate.
  double probe_start_fraction = 0.5;
  double candidate_growth = 1.25;
};

// What one candidate's find-max measured.
struct CandidateResult {
  Settings settings;
  absl::Status status;  // not OK: it could not be measured (its daemon did not start, ...)
  std::vector<Trial> trials;
  double max_qps = 0;  // the highest offered rate that passed; 0 if none did
  // The passing trial at max_qps; when none passed, the trial that came closest to the SLO.
  std::optional<Trial> best_trial;
  // It failed its first trial, at the best rate found so far, and was left there.
  bool abandoned = false;
  double seconds = 0;  // wall time, its daemon's start and stop included
};

struct TuneResult {
  bool slo_met = false;  // some candidate passed a trial
  // The candidate with the highest max_qps; when none passed, the one closest to the SLO.
  CandidateResult best;
  std::vector<CandidateResult> candidates;  // in the order measured
  std::vector<Settings> untried;            // what the budget left out
  double elapsed_s = 0;
};

// What the search reports as it goes (any may be empty).
struct TuneCallbacks {
  std::function<void(const Settings&)> candidate_started;
  std::function<void(const Settings&, const Trial&)> trial_done;
  std::function<void(const CandidateResult&)> candidate_done;
};

// Coordinate descent from `initial`: measures it, then each dimension in turn with the others
// at the best so far, moving to a value that sustained a higher rate (by more than find-max's
// precision, so that noise alone does not move it; with no rate passing anywhere, to one that
// came closer to the SLO); passes repeat while one
// moved something and budget is left. The budget is split as the search goes: each candidate
// gets an equal share of what is left (the time left over the candidates left in this pass, at
// least one start, stop, probe and two trials), so time a candidate leaves unused goes to the
// rest; within its share it runs the probe, then find-max trials while one more fits. The first
// candidate's find-max starts from half its probed capacity, the others' at the best rate so
// far: one that fails there cannot win and is abandoned after that trial. `now_s` is a
// monotonic clock in seconds.
// Errors: the initial settings could not be measured (their start or trial error), or
// DeadlineExceeded when the budget ends before their first trial.
absl::StatusOr<TuneResult> Tune(const std::vector<TuneDimension>& space, const Settings& initial,
                                const StartFn& start, const TunerOptions& options,
                                const std::function<double()>& now_s,
                                const TuneCallbacks& callbacks = {});

// What the best candidate means for one pod, and for an HPA scaling on the pods' mean
// gecd_request_concurrency.
struct PodFigures {
  double rps = 0;  // the highest offered rate that met the SLO
  double achieved_rps = 0;
  double p99_s = 0;
  double mean_latency_s = 0;
  double littles_law_concurrency = 0;  // achieved_rps × mean latency
  double gauge_concurrency = -1;       // the daemon's own mean; < 0 when not sampled
  double concurrency = 0;              // the gauge where sampled (what the HPA reads), else Little
  double hpa_target = 0;               // AverageValue: concurrency × (1 − headroom)
};

// The figures of `best`'s best trial; all 0 (gauge -1) when it has none or it did not pass.
PodFigures PerPodFigures(const CandidateResult& best, double headroom);

// What `gecd tune` searches with: daemons of one config, each candidate's settings on top.
struct DaemonTuneOptions {
  std::string binary = "/proc/self/exe";  // the gecd executable the daemons run
  std::string config_path;                // "" for the built-in defaults
  std::vector<std::string> sets;          // KEY=VALUE for every daemon, after the config
  Settings initial;                       // the config's values of the keys searched
  std::string backend = "cpu";            // the config's engine.backend
  std::string input_path;                 // the trials' sentences; "" for built-in samples
  double slo_p99_s = 1;
  double max_error_rate = 0.01;
  double budget_s = 600;
  double trial_s = 3;   // each find-max trial's measured window
  double warmup_s = 1;  // before each trial's window
};

// gecd tune's search against real daemons: Tune over ThroughputSearchSpace, where starting a
// candidate starts a `gecd serve` (ServeProcess, free 127.0.0.1 ports, quick drain and grace,
// its log in log_dir()) and measures it with gecd-load's find-max (DaemonCandidate: a
// closed-loop probe, then open-loop trials of the input sentences, each request's deadline
// twice the SLO). Owns the daemons' log directory; it is removed only by RemoveLogs, so that
// an error can point at it. Not thread-safe: one search at a time, from one thread.
class DaemonTuner {
 public:
  // The trial sentences are read and the log directory made here: InvalidArgument when
  // input_path cannot be read, Internal when no directory can be made.
  static absl::StatusOr<std::unique_ptr<DaemonTuner>> Create(DaemonTuneOptions options);

  const DaemonTuneOptions& options() const { return options_; }
  int deadline_ms() const { return run_.deadline_ms; }  // each trial request's gRPC deadline
  const std::string& log_dir() const { return log_dir_; }
  // Some daemon did not start: its log is worth keeping.
  bool daemon_failed() const { return daemon_failed_; }

  // The search (Tune's result and errors): FailedPrecondition when the initial settings'
  // daemon does not start, DeadlineExceeded when the budget ends before their first trial.
  // `now_s` is a monotonic clock in seconds.
  absl::StatusOr<TuneResult> Run(const std::function<double()>& now_s,
                                 const TuneCallbacks& callbacks);
  void RemoveLogs();

 private:
  DaemonTuner(DaemonTuneOptions options, std::vector<std::string> sentences, std::string log_dir);
  // One candidate's daemon, started and ready, as a CandidateServer.
  absl::StatusOr<std::unique_ptr<CandidateServer>> StartCandidate(const Settings& settings);

  const DaemonTuneOptions options_;
  const std::string log_dir_;
  RunConfig run_;  // every trial's shape
  TunerOptions tuner_;
  int daemons_ = 0;  // started so far, to name their logs
  bool daemon_failed_ = false;
};

// How far a trial is from passing: the larger of p99 / SLO and error rate / limit (<= 1 passes
// if both hold).
double SloMiss(const TrialMeasurement& measured, const FindMaxOptions& options);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_TUNER_H_
