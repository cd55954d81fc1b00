#include "loadgen/tuner.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <limits>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/cpu_limit.h"
#include "common/status_macros.h"
#include "loadgen/daemon_candidate.h"
#include "loadgen/load_options.h"
#include "loadgen/serve_process.h"

namespace gecd::loadgen {
namespace {

// The trials' sentences without an input file: short learner sentences like the service's
// traffic.
constexpr const char* kSampleSentences[] = {
    "She go to school every day with her brother.",
    "I has seen that film three times last year.",
    "They was very happy when the results came out.",
    "He don't like to eat vegetables at dinner time.",
    "We is going to the beach if the weather is good.",
    "My sister have two cats and a small dog at home.",
    "The childrens played in the park until it got dark.",
    "Yesterday I buyed a new phone from the shop.",
    "There is many reasons why people move to cities.",
    "She can sings very well but she is shy on stage.",
    "If I would have known, I would have come earlier.",
    "The informations in this report is not correct.",
};

// Requests in flight in the closed-loop capacity probe: few, because a closed loop re-sends a
// refusal at once, and a probe must measure the engine, not admission (with the fixed queue
// limit admission had before server.slo_p99_ms, 16 in flight against the default config and
// model got no OK answer in 3 s; 4: 36 req/s).
constexpr int kProbeConcurrency = 4;

// Fewer requests than this in a trial's window say nothing of its p99: find-max goes no lower.
constexpr double kMinRequestsPerTrial = 10;

// The grace period the candidates' daemons get to stop (they drain no traffic).
constexpr double kDaemonGraceS = 1;

int IntOr(const Settings& settings, const std::string& key, int fallback) {
  int value;
  auto it = settings.find(key);
  return it != settings.end() && absl::SimpleAtoi(it->second, &value) ? value : fallback;
}

// Half and double `value` within [lo, hi].
std::vector<std::string> HalfAndDouble(int value, int lo, int hi) {
  std::vector<std::string> out;
  for (const int v : {value / 2, value * 2}) {
    if (v >= lo && v <= hi && v != value) out.push_back(absl::StrCat(v));
  }
  return out;
}

// 1, 2, 3, 4, 6, 8, 12, 16, ... up to and including `max`.
std::string DenseGraphSizes(int max) {
  std::vector<int> sizes;
  for (int p = 1; p <= max; p *= 2) {
    sizes.push_back(p);
    if (p >= 2 && p + p / 2 <= max) sizes.push_back(p + p / 2);
  }
  if (sizes.empty() || sizes.back() != max) sizes.push_back(max);
  return absl::StrJoin(sizes, ",");
}

// A start's or stop's cost: the guess until one has been seen, then the slowest seen.
double Slowest(bool& seen, double so_far, double observed) {
  const double cost = seen ? std::max(so_far, observed) : observed;
  seen = true;
  return cost;
}

// The state of one search: the budget, what has been measured, the best so far.
class Search {
 public:
  Search(const std::vector<TuneDimension>& space, const StartFn& start, const TunerOptions& options,
         const std::function<double()>& now_s, const TuneCallbacks& callbacks)
      : space_(space),
        start_(start),
        options_(options),
        now_s_(now_s),
        callbacks_(callbacks),
        began_(now_s()),
        deadline_(began_ + options.budget_s),
        start_cost_(options.start_cost_s),
        stop_cost_(options.stop_cost_s) {}

  absl::StatusOr<TuneResult> Run(const Settings& initial);

 private:
  // The values of dimension `d` still to measure, the others at `base`.
  std::vector<Settings> PendingIn(size_t d, const Settings& base) const;
  // Measures `settings` with `share_s` of the budget at most.
  CandidateResult Measure(const Settings& settings, bool initial, double share_s);
  // The probe and find-max trials into `c` while they fit before `until`; a probe's or trial's
  // error.
  absl::Status FindMax(CandidateServer& server, bool initial, double until, CandidateResult& c);
  bool Better(const CandidateResult& a, const CandidateResult& b) const;
  double Left() const { return deadline_ - now_s_(); }
  // A start, a stop, the probe and two trials: one at the best rate so far and one above it,
  // without which a candidate cannot win.
  double MinimumShare() const { return start_cost_ + stop_cost_ + options_.trial_cost_s * 3; }

  const std::vector<TuneDimension>& space_;
  const StartFn& start_;
  const TunerOptions& options_;
  const std::function<double()>& now_s_;
  const TuneCallbacks& callbacks_;
  const double began_;
  const double deadline_;
  double start_cost_;
  double stop_cost_;
  bool started_once_ = false;
  bool stopped_once_ = false;
  double first_qps_ = 0;  // where find-max starts while no candidate has passed
  std::set<Settings> measured_;
  TuneResult result_;
};

std::vector<Settings> Search::PendingIn(size_t d, const Settings& base) const {
  std::vector<Settings> pending;
  for (const std::string& value : space_[d].candidates(base)) {
    Settings s = base;
    s[space_[d].key] = value;
    if (measured_.count(s) == 0 && std::find(pending.begin(), pending.end(), s) == pending.end()) {
      pending.push_back(std::move(s));
    }
  }
  return pending;
}

bool Search::Better(const CandidateResult& a, const CandidateResult& b) const {
  if (!a.best_trial.has_value()) return false;
  if (!b.best_trial.has_value()) return true;
  // By more than find-max's precision, so that noise alone does not move the search.
  if (a.max_qps > 0 || b.max_qps > 0) {
    return a.max_qps > b.max_qps * (1 + options_.find_max.precision);
  }
  return SloMiss(a.best_trial->measured, options_.find_max) <
         SloMiss(b.best_trial->measured, options_.find_max);
}

CandidateResult Search::Measure(const Settings& settings, bool initial, double share_s) {
  CandidateResult c;
  c.settings = settings;
  measured_.insert(settings);
  if (callbacks_.candidate_started) callbacks_.candidate_started(settings);
  const double t0 = now_s_();
  absl::StatusOr<std::unique_ptr<CandidateServer>> server = start_(settings);
  start_cost_ = Slowest(started_once_, start_cost_, now_s_() - t0);
  if (!server.ok()) {
    c.status = server.status();
  } else {
    c.status = FindMax(**server, initial, t0 + share_s, c);
    const double stopping = now_s_();
    server->reset();
    stop_cost_ = Slowest(stopped_once_, stop_cost_, now_s_() - stopping);
  }
  for (const Trial& t : c.trials) {
    if (t.passed && t.offered_qps > c.max_qps) {
      c.max_qps = t.offered_qps;
      c.best_trial = t;
    }
  }
  if (c.max_qps == 0) {
    for (const Trial& t : c.trials) {
      if (!c.best_trial || SloMiss(t.measured, options_.find_max) <
                               SloMiss(c.best_trial->measured, options_.find_max)) {
        c.best_trial = t;
      }
    }
  }
  c.seconds = now_s_() - t0;
  if (callbacks_.candidate_done) callbacks_.candidate_done(c);
  return c;
}

absl::Status Search::FindMax(CandidateServer& server, bool initial, double until,
                             CandidateResult& c) {
  const auto fits = [&] { return now_s_() + options_.trial_cost_s + stop_cost_ <= until; };
  // The probe warms every daemon up (a cold one would lose its first trial to a warm one);
  // the initial settings' probe also sets the scale.
  if (!fits()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const double capacity, server.ProbeCapacity());
  if (initial) first_qps_ = std::max(capacity * options_.probe_start_fraction, options_.min_qps);
  const double best_qps = result_.best.max_qps;
  FindMaxOptions find_max = options_.find_max;
  find_max.start_qps = best_qps > 0 ? best_qps : first_qps_;
  if (best_qps > 0) find_max.growth = options_.candidate_growth;
  if (!(find_max.start_qps > 0)) return absl::OkStatus();  // no probe fitted
  // FindMaxQps ends at the first trial run that fails; the tuner's own stops are such runs.
  bool stopped = false;
  const TrialFn trial = [&](double qps) -> absl::StatusOr<TrialMeasurement> {
    const bool lost_first = !c.trials.empty() && !c.trials[0].passed && best_qps > 0;
    if (lost_first || !fits() || qps < options_.min_qps) {
      c.abandoned = lost_first;
      stopped = true;
      return absl::CancelledError("stopped by the tuner");
    }
    return server.RunTrial(qps);
  };
  const auto on_trial = [&](const Trial& t) {
    c.trials.push_back(t);
    if (callbacks_.trial_done) callbacks_.trial_done(c.settings, t);
  };
  absl::StatusOr<FindMaxResult> found = FindMaxQps(find_max, trial, on_trial);
  return found.ok() || stopped ? absl::OkStatus() : found.status();
}

absl::StatusOr<TuneResult> Search::Run(const Settings& initial) {
  // The initial settings get the share they would get as one more candidate of the first pass.
  size_t first_pass = 1;
  for (size_t d = 0; d < space_.size(); ++d) first_pass += PendingIn(d, initial).size();
  CandidateResult first = Measure(
      initial, /*initial=*/true,
      std::min(std::max(options_.budget_s / first_pass, MinimumShare()), options_.budget_s));
  result_.candidates.push_back(first);
  if (!first.status.ok()) return first.status;
  if (first.trials.empty()) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "the budget (%.0f s) ended before the initial settings had one trial: their daemon took "
        "%.1f s to start and a trial may take %.1f s",
        options_.budget_s, first.seconds, options_.trial_cost_s));
  }
  result_.best = first;
  bool out_of_budget = false;
  for (bool moved = true; moved && !out_of_budget;) {
    moved = false;
    for (size_t d = 0; d < space_.size(); ++d) {
      const Settings base = result_.best.settings;
      std::vector<Settings> pending = PendingIn(d, base);
      for (size_t later = d + 1; later < space_.size(); ++later) {
        const std::vector<Settings> more = PendingIn(later, base);
        pending.insert(pending.end(), more.begin(), more.end());
      }
      // Only this dimension's values are measured now; the later ones count for the share.
      const size_t here = PendingIn(d, base).size();
      for (size_t i = 0; i < here; ++i) {
        const double left = Left();
        if (out_of_budget || left < MinimumShare()) {
          out_of_budget = true;
          result_.untried.push_back(pending[i]);
          continue;
        }
        const double share = std::max(left / (pending.size() - i), MinimumShare());
        CandidateResult c = Measure(pending[i], /*initial=*/false, std::min(share, left));
        if (Better(c, result_.best)) {
          result_.best = c;
          moved = true;
        }
        result_.candidates.push_back(std::move(c));
      }
      if (out_of_budget) {
        for (size_t i = here; i < pending.size(); ++i) result_.untried.push_back(pending[i]);
        break;
      }
    }
  }
  result_.slo_met = result_.best.max_qps > 0;
  result_.elapsed_s = now_s_() - began_;
  return result_;
}

}  // namespace

std::vector<TuneDimension> ThroughputSearchSpace(int cores, std::string_view backend) {
  cores = std::max(cores, 1);
  const bool engine_on_cpus = backend == "cpu";
  std::vector<TuneDimension> space = {
      {kMaxBatchSizeKey,
       [](const Settings& s) {
         const int step_tokens = IntOr(s, kMaxStepTokensKey, 1 << 20);
         return HalfAndDouble(IntOr(s, kMaxBatchSizeKey, 0), 1, std::min(4096, step_tokens));
       }},
      {kMaxStepTokensKey,
       [](const Settings& s) {
         return HalfAndDouble(IntOr(s, kMaxStepTokensKey, 0), IntOr(s, kMaxBatchSizeKey, 1),
                              1 << 20);
       }},
      {kWorkersKey,
       [cores, engine_on_cpus](const Settings& s) {
         const int workers = IntOr(s, kWorkersKey, -1);
         if (workers < 0) return std::vector<std::string>{};
         // 0 means the default for the cores: the same daemon as that value, so that value is
         // no candidate.
         return HalfAndDouble(workers == 0 ? DefaultWorkers(cores, engine_on_cpus) : workers, 1,
                              cores);
       }},
  };
  if (backend == "cuda") {
    space.push_back({kGraphBatchSizesKey, [](const Settings& s) {
                       const int batch = IntOr(s, kMaxBatchSizeKey, 0);
                       std::vector<std::string> out = {""};
                       if (batch > 0) out.push_back(DenseGraphSizes(batch));
                       return out;
                     }});
  }
  return space;
}

absl::StatusOr<TuneResult> Tune(const std::vector<TuneDimension>& space, const Settings& initial,
                                const StartFn& start, const TunerOptions& options,
                                const std::function<double()>& now_s,
                                const TuneCallbacks& callbacks) {
  if (!(options.budget_s > 0)) return absl::InvalidArgumentError("the budget must be > 0");
  Search search(space, start, options, now_s, callbacks);
  return search.Run(initial);
}

PodFigures PerPodFigures(const CandidateResult& best, double headroom) {
  PodFigures f;
  if (!best.best_trial.has_value() || !best.best_trial->passed) return f;
  const TrialMeasurement& m = best.best_trial->measured;
  f.rps = best.best_trial->offered_qps;
  f.achieved_rps = m.achieved_qps;
  f.p99_s = m.p99_s;
  f.mean_latency_s = m.mean_latency_s;
  f.littles_law_concurrency = m.achieved_qps * m.mean_latency_s;
  f.gauge_concurrency = m.server_concurrency;
  f.concurrency = f.gauge_concurrency >= 0 ? f.gauge_concurrency : f.littles_law_concurrency;
  f.hpa_target = f.concurrency * (1 - headroom);
  return f;
}

absl::StatusOr<std::unique_ptr<DaemonTuner>> DaemonTuner::Create(DaemonTuneOptions options) {
  std::vector<std::string> sentences(std::begin(kSampleSentences), std::end(kSampleSentences));
  if (!options.input_path.empty()) {
    absl::StatusOr<std::vector<std::string>> read = ReadSentences(options.input_path);
    if (!read.ok()) return absl::InvalidArgumentError(read.status().message());  // a bad flag
    sentences = *std::move(read);
  }
  namespace fs = std::filesystem;
  std::string log_dir = (fs::temp_directory_path() / "gecd-tune.XXXXXX").string();
  if (mkdtemp(log_dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a directory for the daemons' logs in ",
                                            fs::temp_directory_path().string()));
  }
  return std::unique_ptr<DaemonTuner>(
      new DaemonTuner(std::move(options), std::move(sentences), std::move(log_dir)));
}

DaemonTuner::DaemonTuner(DaemonTuneOptions options, std::vector<std::string> sentences,
                         std::string log_dir)
    : options_(std::move(options)), log_dir_(std::move(log_dir)) {
  const DaemonTuneOptions& o = options_;
  run_.sentences = std::move(sentences);
  run_.duration_s = o.trial_s;
  run_.warmup_s = o.warmup_s;
  // Twice the SLO: an answer later than that fails the trial anyway, and a trial above
  // capacity drains its backlog within it.
  run_.deadline_ms = std::max(1, static_cast<int>(std::ceil(2e3 * o.slo_p99_s)));

  tuner_.budget_s = o.budget_s;
  tuner_.find_max.slo_p99_s = o.slo_p99_s;
  tuner_.find_max.max_error_rate = o.max_error_rate;
  tuner_.find_max.max_trials = 12;
  // Connecting the channels and the sampler's last poll come on top of warm-up, window and
  // drain; a stop is at most the grace period the daemons get (they drain no traffic).
  tuner_.trial_cost_s = o.warmup_s + o.trial_s + run_.deadline_ms / 1e3 + 0.5;
  tuner_.stop_cost_s = kDaemonGraceS + 1;
  tuner_.start_cost_s = 2;
  tuner_.min_qps = kMinRequestsPerTrial / o.trial_s;
}

absl::StatusOr<std::unique_ptr<CandidateServer>> DaemonTuner::StartCandidate(
    const Settings& settings) {
  ServeOptions serve;
  serve.binary = options_.binary;
  serve.config_path = options_.config_path;
  serve.sets = options_.sets;
  for (const auto& [key, value] : settings) serve.sets.push_back(absl::StrCat(key, "=", value));
  // Quick stops between candidates, and logs this process can read.
  serve.sets.push_back("server.drain_quiet_ms=0");
  serve.sets.push_back(absl::StrCat("server.grace_period_ms=", kDaemonGraceS * 1000));
  serve.sets.push_back("logging.format=text");
  serve.log_path = absl::StrCat(log_dir_, "/daemon-", ++daemons_, ".log");
  serve.ready_timeout_s = std::clamp(options_.budget_s, 30.0, 300.0);
  serve.stop_timeout_s = tuner_.stop_cost_s;
  absl::StatusOr<std::unique_ptr<ServeProcess>> server = ServeProcess::Start(serve);
  if (!server.ok()) {
    daemon_failed_ = true;
    return absl::FailedPreconditionError(server.status().message());
  }
  return std::make_unique<DaemonCandidate>(*std::move(server), run_, kProbeConcurrency);
}

absl::StatusOr<TuneResult> DaemonTuner::Run(const std::function<double()>& now_s,
                                            const TuneCallbacks& callbacks) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const StartFn start = [this](const Settings& settings) { return StartCandidate(settings); };
  return Tune(ThroughputSearchSpace(cores, options_.backend), options_.initial, start, tuner_,
              now_s, callbacks);
}

void DaemonTuner::RemoveLogs() { std::filesystem::remove_all(log_dir_); }

double SloMiss(const TrialMeasurement& measured, const FindMaxOptions& options) {
  const double latency = measured.p99_s / options.slo_p99_s;
  const double errors =
      options.max_error_rate > 0
          ? measured.error_rate / options.max_error_rate
          : (measured.error_rate > 0 ? std::numeric_limits<double>::infinity() : 0);
  return std::max(latency, errors);
}

}  // namespace gecd::loadgen
