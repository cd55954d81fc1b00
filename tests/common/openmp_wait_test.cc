#include "common/openmp_wait.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_env.h"

namespace gecd {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

using testing::ScopedEnv;

TEST(OpenMpWaitChoices, NothingSetIsNoChoice) {
  ScopedEnv policy("OMP_WAIT_POLICY", nullptr);
  ScopedEnv spin("GOMP_SPINCOUNT", nullptr);
  EXPECT_THAT(OpenMpWaitChoices(), IsEmpty());
}

// systemd's Environment=GOMP_SPINCOUNT= or a shell's `export OMP_WAIT_POLICY=` leave the
// variable set and empty, which libgomp reads as unset.
TEST(OpenMpWaitChoices, AnEmptyVariableIsNoChoice) {
  ScopedEnv policy("OMP_WAIT_POLICY", "");
  ScopedEnv spin("GOMP_SPINCOUNT", "");
  EXPECT_THAT(OpenMpWaitChoices(), IsEmpty());
}

TEST(OpenMpWaitChoices, EachVariableSetIsNamedWithItsValue) {
  ScopedEnv policy("OMP_WAIT_POLICY", "passive");
  ScopedEnv spin("GOMP_SPINCOUNT", nullptr);
  EXPECT_THAT(OpenMpWaitChoices(), ElementsAre("OMP_WAIT_POLICY=passive"));
  ScopedEnv spin_too("GOMP_SPINCOUNT", "10000");
  EXPECT_THAT(OpenMpWaitChoices(), ElementsAre("OMP_WAIT_POLICY=passive", "GOMP_SPINCOUNT=10000"));
}

}  // namespace
}  // namespace gecd
