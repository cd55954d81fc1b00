#include "fleet_sim/sim_options.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gecd::fleet_sim {
namespace {

std::string Error(const std::vector<std::string>& args) {
  absl::StatusOr<SweepOptions> options = ParseSweepOptions(args);
  EXPECT_FALSE(options.ok());
  return options.ok() ? "" : std::string(options.status().message());
}

TEST(SimOptionsTest, DefaultsAreTheDocumentedSweep) {
  absl::StatusOr<SweepOptions> options = ParseSweepOptions({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->policies.size(), 4u);
  EXPECT_EQ(options->utilisations.size(), 10u);
  EXPECT_EQ(options->fleet.pods, 200);
  EXPECT_NEAR(options->fleet.model.Capacity(), 1050, 1e-6);
  EXPECT_NEAR(options->time_scale, CpuCalibratedPodModel().Capacity() / 1050, 1e-12);
  // 190 pods at 1,050 and 10 at half that.
  EXPECT_NEAR(FleetCapacity(options->fleet), 204'750, 1e-3);
}

TEST(SimOptionsTest, FlagsSetTheRun) {
  absl::StatusOr<SweepOptions> options = ParseSweepOptions(
      {"--pods", "1", "--slow-fraction=0", "--pod-capacity", "0", "--rates", "20,42.5",
       "--policies", "p2c,round_robin", "--steps", "20", "--step-ms", "3", "--routers", "4"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->fleet.pods, 1);
  EXPECT_EQ(options->fleet.routers, 4);
  EXPECT_EQ(options->rates, (std::vector<double>{20, 42.5}));
  EXPECT_EQ(options->policies, (std::vector<Policy>{Policy::kP2C, Policy::kRoundRobin}));
  EXPECT_EQ(options->fleet.model.steps_per_request, 20);
  EXPECT_DOUBLE_EQ(options->fleet.model.step_fixed_s, 3e-3);  // not scaled
  EXPECT_EQ(options->time_scale, 1);
}

TEST(SimOptionsTest, BadValuesNameTheFlag) {
  EXPECT_NE(Error({"--pods", "0"}).find("--pods"), std::string::npos);
  EXPECT_NE(Error({"--pods", "3000000000"}).find("--pods"), std::string::npos);
  EXPECT_NE(Error({"--policies", "p2c,fastest"}).find("'fastest'"), std::string::npos);
  EXPECT_NE(Error({"--utilisation", "0.5,abc"}).find("--utilisation: 'abc'"), std::string::npos);
  EXPECT_NE(Error({"--slow-fraction", "1.5"}).find("--slow-fraction"), std::string::npos);
  EXPECT_NE(Error({"--requests"}).find("--requests needs a value"), std::string::npos);
  EXPECT_NE(Error({"--pods-count", "3"}).find("unknown flag --pods-count"), std::string::npos);
  EXPECT_NE(Error({"--max-step-tokens", "100"}).find("max_step_tokens"), std::string::npos);
  EXPECT_NE(Error({"--routers", "5000"}).find("routers"), std::string::npos);
  EXPECT_NE(Error({"--rates", "10", "--utilisation", "0.5"}).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(Error({"stray"}).find("unexpected argument 'stray'"), std::string::npos);
}

}  // namespace
}  // namespace gecd::fleet_sim
