#include "loadgen/tuner.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gecd::loadgen {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A deterministic world: a clock that only the fakes move, and daemons whose capacity is a
// function of their settings. A start, a trial or probe, and a stop each cost fixed seconds.
struct FakeWorld {
  double now = 0;
  double start_s = 3;
  double trial_s = 4;
  double stop_s = 1;
  std::function<double(const Settings&)> capacity;
  // p99 of an idle daemon.
  std::function<double(const Settings&)> base_p99 = [](const Settings&) { return 0.2; };
  std::vector<Settings> started;
  int trials = 0;
};

int Get(const Settings& s, const std::string& key) {
  int v = 0;
  EXPECT_TRUE(absl::SimpleAtoi(s.at(key), &v)) << key;
  return v;
}

class FakeServer : public CandidateServer {
 public:
  FakeServer(FakeWorld* world, const Settings& s)
      : world_(world), capacity_(world->capacity(s)), base_p99_s_(world->base_p99(s)) {}
  ~FakeServer() override { world_->now += world_->stop_s; }

  // p99 grows like an M/M/1 queue's as the load nears capacity; above it the excess fails.
  absl::StatusOr<TrialMeasurement> RunTrial(double qps) override {
    world_->now += world_->trial_s;
    ++world_->trials;
    if (qps >= capacity_) return TrialMeasurement{capacity_, 10.0, (qps - capacity_) / qps};
    return TrialMeasurement{qps, base_p99_s_ / (1 - qps / capacity_), 0};
  }
  absl::StatusOr<double> ProbeCapacity() override {
    world_->now += world_->trial_s;
    return capacity_;
  }

 private:
  FakeWorld* world_;
  double capacity_;
  double base_p99_s_;
};

StartFn Starter(FakeWorld* world) {
  return [world](const Settings& s) -> absl::StatusOr<std::unique_ptr<CandidateServer>> {
    world->now += world->start_s;
    world->started.push_back(s);
    return std::make_unique<FakeServer>(world, s);
  };
}

TunerOptions Options(double budget_s) {
  TunerOptions options;
  options.budget_s = budget_s;
  options.trial_cost_s = 4;
  options.stop_cost_s = 1;
  options.start_cost_s = 3;
  return options;
}

// Capacity peaks at batch 256 and one worker; step tokens do not matter.
double Peaked(const Settings& s) {
  const double batch = Get(s, kMaxBatchSizeKey);
  const double workers = Get(s, kWorkersKey);
  return 1000 * batch / (batch + 64) / workers - (batch > 256 ? 300 : 0);
}

const Settings kInitial = {
    {kMaxBatchSizeKey, "128"}, {kMaxStepTokensKey, "2048"}, {kWorkersKey, "2"}};

TEST(TunerTest, KeepsTheBestSettingsThatMeetTheSlo) {
  FakeWorld world;
  world.capacity = Peaked;
  absl::StatusOr<TuneResult> r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, Starter(&world),
                                      Options(100'000), [&] { return world.now; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->slo_met);
  EXPECT_EQ(r->best.settings.at(kMaxBatchSizeKey), "256");
  EXPECT_EQ(r->best.settings.at(kWorkersKey), "1");
  // The SLO (p99 <= 1 s) holds up to 80% of the capacity; find-max lands within 5% below.
  const double boundary = 0.8 * Peaked(r->best.settings);
  EXPECT_LE(r->best.max_qps, boundary);
  EXPECT_GE(r->best.max_qps, boundary * 0.95);
  ASSERT_TRUE(r->best.best_trial.has_value());
  EXPECT_TRUE(r->best.best_trial->passed);
  EXPECT_EQ(r->best.best_trial->offered_qps, r->best.max_qps);
  EXPECT_LE(r->best.best_trial->measured.p99_s, 1.0);
  // The initial settings first, then one key at a time; nothing measured twice.
  EXPECT_EQ(world.started.front(), kInitial);
  EXPECT_EQ(r->candidates.size(), world.started.size());
  std::set<Settings> distinct(world.started.begin(), world.started.end());
  EXPECT_EQ(distinct.size(), world.started.size());
  for (const CandidateResult& c : r->candidates) {
    EXPECT_TRUE(c.status.ok());
    if (c.max_qps > 0) {
      EXPECT_LE(c.best_trial->measured.p99_s, 1.0);
    }
    // No candidate beats the best by more than the precision.
    EXPECT_LE(c.max_qps, r->best.max_qps * 1.05);
  }
  EXPECT_THAT(r->untried, IsEmpty());
}

TEST(TunerTest, ACandidateThatFailsAtTheBestRateIsLeftAfterOneTrial) {
  FakeWorld world;
  // Only the worker count matters: 2 workers have half the capacity.
  world.capacity = [](const Settings& s) { return 1000.0 / Get(s, kWorkersKey); };
  TuneCallbacks callbacks;
  std::vector<std::string> trials_of;
  callbacks.trial_done = [&](const Settings& s, const Trial&) {
    trials_of.push_back(s.at(kWorkersKey));
  };
  const Settings initial = {
      {kMaxBatchSizeKey, "128"}, {kMaxStepTokensKey, "2048"}, {kWorkersKey, "1"}};
  absl::StatusOr<TuneResult> r = Tune(
      ThroughputSearchSpace(2, "cpu"), initial, Starter(&world), Options(100'000),
      [&] { return world.now; }, callbacks);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->best.settings, initial);
  const CandidateResult* two = nullptr;
  for (const CandidateResult& c : r->candidates) {
    if (c.settings.at(kWorkersKey) == "2") two = &c;
  }
  ASSERT_NE(two, nullptr);
  EXPECT_TRUE(two->abandoned);
  ASSERT_EQ(two->trials.size(), 1u);
  EXPECT_EQ(two->trials[0].offered_qps, r->best.max_qps);
  EXPECT_FALSE(two->trials[0].passed);
  EXPECT_EQ(std::count(trials_of.begin(), trials_of.end(), "2"), 1);
}

TEST(TunerTest, StaysWithinTheBudgetAndSaysWhatItLeftOut) {
  for (const double budget : {40.0, 75.0, 200.0}) {
    FakeWorld world;
    world.capacity = Peaked;
    absl::StatusOr<TuneResult> r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, Starter(&world),
                                        Options(budget), [&] { return world.now; });
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(world.now, budget) << "budget " << budget;
    EXPECT_EQ(r->elapsed_s, world.now);
    EXPECT_TRUE(r->slo_met);
    double spent = 0;
    for (const CandidateResult& c : r->candidates) {
      spent += c.seconds;
      // Every daemon that started got a trial in: a start with nothing measured is waste.
      EXPECT_FALSE(c.trials.empty()) << "budget " << budget;
    }
    EXPECT_DOUBLE_EQ(spent, world.now);
    // 1 initial + 2 batch sizes + 2 step sizes + 1 worker count in the first pass.
    EXPECT_EQ(r->candidates.size() + r->untried.size() >= 6, true) << "budget " << budget;
    if (budget < 75) {
      EXPECT_FALSE(r->untried.empty());
    }
  }
}

TEST(TunerTest, AnUnreachableSloIsReportedWithTheClosestMiss) {
  FakeWorld world;
  // Over the 1 s SLO at any rate; one worker comes closest.
  world.base_p99 = [](const Settings& s) { return 1.5 * Get(s, kWorkersKey); };
  world.capacity = Peaked;
  TunerOptions options = Options(100'000);
  options.min_qps = 20;  // so each find-max ends when it bisects below 20 req/s
  absl::StatusOr<TuneResult> r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, Starter(&world),
                                      options, [&] { return world.now; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->slo_met);
  EXPECT_EQ(r->best.max_qps, 0);
  EXPECT_EQ(r->best.settings.at(kWorkersKey), "1");
  ASSERT_TRUE(r->best.best_trial.has_value());
  EXPECT_FALSE(r->best.best_trial->passed);
  for (const CandidateResult& c : r->candidates) {
    EXPECT_FALSE(c.trials.empty());
    for (const Trial& t : c.trials) {
      EXPECT_GE(t.offered_qps, 20);
      EXPECT_GE(SloMiss(t.measured, FindMaxOptions{}),
                SloMiss(r->best.best_trial->measured, FindMaxOptions{}));
    }
  }
}

TEST(TunerTest, ACandidateThatCannotStartIsSkippedButTheInitialOneIsAnError) {
  FakeWorld world;
  world.capacity = Peaked;
  const StartFn fake = Starter(&world);
  const StartFn start = [&](const Settings& s) -> absl::StatusOr<std::unique_ptr<CandidateServer>> {
    if (s.at(kMaxBatchSizeKey) == "256") return absl::ResourceExhaustedError("no memory");
    return fake(s);
  };
  absl::StatusOr<TuneResult> r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, start,
                                      Options(100'000), [&] { return world.now; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->slo_met);
  EXPECT_EQ(r->best.settings.at(kMaxBatchSizeKey), "128");
  int failed = 0;
  for (const CandidateResult& c : r->candidates) {
    if (!c.status.ok()) {
      ++failed;
      EXPECT_EQ(c.settings.at(kMaxBatchSizeKey), "256");
      EXPECT_EQ(c.status.message(), "no memory");
      EXPECT_THAT(c.trials, IsEmpty());
    }
  }
  EXPECT_GE(failed, 1);

  const StartFn broken = [](const Settings&) -> absl::StatusOr<std::unique_ptr<CandidateServer>> {
    return absl::InvalidArgumentError("model.dir /nowhere: not found");
  };
  r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, broken, Options(100),
           [&] { return world.now; });
  EXPECT_EQ(r.status().message(), "model.dir /nowhere: not found");
}

TEST(TunerTest, ABudgetTooShortForOneTrialIsAnError) {
  FakeWorld world;
  world.capacity = Peaked;
  absl::StatusOr<TuneResult> r = Tune(ThroughputSearchSpace(2, "cpu"), kInitial, Starter(&world),
                                      Options(9), [&] { return world.now; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(world.trials, 0);
}

TEST(TunerTest, PerPodFiguresComeFromTheBestPassingTrial) {
  CandidateResult best;
  best.max_qps = 40;
  best.best_trial = Trial{40, {39.5, 0.8, 0.001, 0.4, 16}, true};
  PodFigures f = PerPodFigures(best, 0.3);
  EXPECT_EQ(f.rps, 40);
  EXPECT_EQ(f.achieved_rps, 39.5);
  EXPECT_DOUBLE_EQ(f.littles_law_concurrency, 39.5 * 0.4);
  EXPECT_EQ(f.gauge_concurrency, 16);
  EXPECT_EQ(f.concurrency, 16);  // the gauge: what the HPA reads
  EXPECT_DOUBLE_EQ(f.hpa_target, 16 * 0.7);
  // Without the gauge, Little's law.
  best.best_trial->measured.server_concurrency = -1;
  f = PerPodFigures(best, 0.5);
  EXPECT_DOUBLE_EQ(f.concurrency, 39.5 * 0.4);
  EXPECT_DOUBLE_EQ(f.hpa_target, 39.5 * 0.4 * 0.5);
  // A miss gives no figures.
  best.best_trial->passed = false;
  f = PerPodFigures(best, 0.3);
  EXPECT_EQ(f.rps, 0);
  EXPECT_EQ(f.hpa_target, 0);
}

TEST(TunerTest, TheSearchSpaceKeepsConfigsValid) {
  const std::vector<TuneDimension> cpu = ThroughputSearchSpace(2, "cpu");
  ASSERT_EQ(cpu.size(), 3u);
  EXPECT_EQ(cpu[0].key, kMaxBatchSizeKey);
  EXPECT_THAT(cpu[0].candidates(kInitial), ElementsAre("64", "256"));
  // The batch never above the step's tokens, and the other way round.
  const Settings tight = {
      {kMaxBatchSizeKey, "128"}, {kMaxStepTokensKey, "128"}, {kWorkersKey, "0"}};
  EXPECT_THAT(cpu[0].candidates(tight), ElementsAre("64"));
  EXPECT_THAT(cpu[1].candidates(tight), ElementsAre("256"));
  // Workers: 0 is the default, beside a cpu engine one on 2 cores, so the candidates are 2
  // only; never more than the cores.
  EXPECT_THAT(cpu[2].candidates(tight), ElementsAre("2"));
  EXPECT_THAT(cpu[2].candidates(kInitial), ElementsAre("1"));
  EXPECT_THAT(ThroughputSearchSpace(8, "cpu")[2].candidates(kInitial), ElementsAre("1", "4"));

  const std::vector<TuneDimension> cuda = ThroughputSearchSpace(2, "cuda");
  ASSERT_EQ(cuda.size(), 4u);
  // With a GPU's engine 0 is one per core (2): the candidates are 1 only.
  EXPECT_THAT(cuda[2].candidates(tight), ElementsAre("1"));
  EXPECT_EQ(cuda[3].key, kGraphBatchSizesKey);
  EXPECT_THAT(cuda[3].candidates({{kMaxBatchSizeKey, "48"}}),
              ElementsAre("", "1,2,3,4,6,8,12,16,24,32,48"));
  EXPECT_THAT(cuda[3].candidates({{kMaxBatchSizeKey, "40"}}),
              ElementsAre("", "1,2,3,4,6,8,12,16,24,32,40"));

  // The echo engine computes nothing on the CPUs either: the supervisor's 0 is one worker per
  // core there too, and there are no graphs to size.
  const std::vector<TuneDimension> echo = ThroughputSearchSpace(2, "echo");
  ASSERT_EQ(echo.size(), 3u);
  EXPECT_THAT(echo[2].candidates(tight), ElementsAre("1"));
}

}  // namespace
}  // namespace gecd::loadgen
