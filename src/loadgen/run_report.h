#ifndef GECD_LOADGEN_RUN_REPORT_H_
#define GECD_LOADGEN_RUN_REPORT_H_

#include <ostream>

#include "loadgen/find_max.h"
#include "loadgen/load_recorder.h"
#include "nlohmann/json.hpp"

namespace gecd::loadgen {

// The human summary of a run: achieved QPS, latency percentiles in ms (OK answers), errors by
// code, and refusals (RESOURCE_EXHAUSTED) with their share and latency.
void WriteTable(const RunResult& result, std::ostream& out);

// The same figures for machines; latencies in ms.
nlohmann::json ToJson(const RunResult& result);

// A run as one find-max trial: achieved QPS, p99 and mean latency of OK answers, and the
// share of completed requests that failed (1 when none completed).
TrialMeasurement ToTrialMeasurement(const RunResult& result);

// Latency over time: a header, then one row per second of the window
// "t,sent,ok,errors,p50_ms,p99_ms".
void WriteTimelineCsv(const RunResult& result, std::ostream& out);

}  // namespace gecd::loadgen

#endif  // GECD_LOADGEN_RUN_REPORT_H_
