#include "loadgen/speculation_counters.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/loopback.h"

namespace gecd::loadgen {

double SpeculationCounters::acceptance() const {
  const double drafts = accepted + rejected;
  return drafts > 0 ? accepted / drafts : 0;
}

double SpeculationCounters::tokens_per_sequence_step() const {
  return sequence_steps > 0 ? tokens / sequence_steps : 0;
}

SpeculationCounters SpeculationCounters::Since(const SpeculationCounters& before) const {
  return {.accepted = accepted - before.accepted,
          .rejected = rejected - before.rejected,
          .sequence_steps = sequence_steps - before.sequence_steps,
          .tokens = tokens - before.tokens};
}

std::string SpeculationCounters::Summary() const {
  if (accepted + rejected <= 0) return "speculative decoding: no drafts verified";
  return absl::StrFormat(
      "speculative decoding: %.1f%% of %.0f draft tokens accepted, %.2f tokens per "
      "sequence-step",
      100 * acceptance(), accepted + rejected, tokens_per_sequence_step());
}

nlohmann::json SpeculationCounters::ToJson() const {
  return {{"accepted", accepted},
          {"rejected", rejected},
          {"acceptance", acceptance()},
          {"tokens_per_sequence_step", tokens_per_sequence_step()}};
}

SpeculationCounters ParseSpeculationCounters(const std::string& metrics) {
  auto value = [&metrics](const std::string& series) {
    return MetricValue(metrics, series).value_or(0);
  };
  return {.accepted = value("gecd_speculative_tokens_total{result=\"accepted\"}"),
          .rejected = value("gecd_speculative_tokens_total{result=\"rejected\"}"),
          .sequence_steps = value("gecd_tokens_per_sequence_step_count"),
          .tokens = value("gecd_tokens_per_sequence_step_sum")};
}

absl::StatusOr<SpeculationCounters> ReadSpeculationCounters(int port) {
  std::string body;
  const int status = HttpGet(port, "/metrics", &body);
  if (status != 200) {
    return absl::UnavailableError(
        absl::StrCat("--metrics-port ", port, ": http://127.0.0.1:", port, "/metrics answered ",
                     status == 0 ? std::string("nothing") : absl::StrCat("HTTP ", status)));
  }
  return ParseSpeculationCounters(body);
}

}  // namespace gecd::loadgen
