// SelectCpuIsa: oneDNN fixes its ISA once per process, so each case runs in a child process
// (a death test that exits 0 when every expectation inside held).
#include "cpu_matmul/cpu_isa.h"
#include "testing/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace gecd::cpu_matmul {
namespace {

// Ends the child: 0 when `ok`, else 1 after printing why (the death test shows stderr).
[[noreturn]] void Finish(bool ok, const std::string& why) {
  if (!ok) std::fprintf(stderr, "%s\n", why.c_str());
  std::exit(ok ? 0 : 1);
}

TEST(CpuIsaTest, AutoRunsTheCpusBest) {
  EXPECT_EXIT(
      {
        absl::StatusOr<CpuIsa> isa = SelectCpuIsa("auto");
        if (!isa.ok()) Finish(false, std::string(isa.status().message()));
        std::printf("oneDNN ISA here: %s, VNNI %d\n", isa->name.c_str(), isa->int8_dot);
        Finish(isa->int8_dot == testing::CpuHasVnni(),
               "int8_dot disagrees with the CPU's flags: " + isa->name);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuIsaTest, ALowerCeilingIsObeyed) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here";
  EXPECT_EXIT(
      {
        absl::StatusOr<CpuIsa> isa = SelectCpuIsa("avx2");
        if (!isa.ok()) Finish(false, std::string(isa.status().message()));
        Finish(isa->name == "avx2" && !isa->int8_dot, "under avx2 got " + isa->name);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuIsaTest, AnIsaTheCpuLacksIsRefusedNamingTheKey) {
  // AMX when the CPU has none, else AVX-512 when it has none; a CPU with both skips.
  const char* lacking = !__builtin_cpu_supports("avx512f") ? "avx512_core" : "avx512_core_amx";
  EXPECT_EXIT(
      {
        absl::StatusOr<CpuIsa> probe = SelectCpuIsa(lacking);
        if (probe.ok()) std::exit(3);  // the CPU has it: nothing to refuse
        const std::string message(probe.status().message());
        Finish(probe.status().code() == absl::StatusCode::kFailedPrecondition &&
                   message.find(std::string("engine.cpu_isa: ") + lacking) == 0 &&
                   message.find("this CPU lacks it") != std::string::npos,
               message);
      },
      [](int status) {
        return ::testing::ExitedWithCode(0)(status) || ::testing::ExitedWithCode(3)(status);
      },
      "");
}

TEST(CpuIsaTest, TheIsaIsChosenOncePerProcess) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2 here";
  EXPECT_EXIT(
      {
        if (!SelectCpuIsa("avx2").ok()) Finish(false, "avx2 refused");
        if (!SelectCpuIsa("avx2").ok()) Finish(false, "the same ceiling again refused");
        absl::StatusOr<CpuIsa> any = SelectCpuIsa("auto");  // asks no ceiling: gets avx2
        if (!any.ok() || any->name != "avx2") Finish(false, "auto after avx2 did not get avx2");
        absl::StatusOr<CpuIsa> other = SelectCpuIsa("avx2_vnni");
        Finish(
            !other.ok() && other.status().code() == absl::StatusCode::kFailedPrecondition &&
                std::string(other.status().message()).find("once per process") != std::string::npos,
            "a second, different ceiling was accepted");
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuIsaTest, AnUnknownNameIsInvalid) {
  EXPECT_EXIT(
      {
        absl::StatusOr<CpuIsa> isa = SelectCpuIsa("sse9");
        Finish(!isa.ok() && isa.status().code() == absl::StatusCode::kInvalidArgument,
               "sse9 accepted");
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gecd::cpu_matmul
