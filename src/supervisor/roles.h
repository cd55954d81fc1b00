#ifndef GECD_SUPERVISOR_ROLES_H_
#define GECD_SUPERVISOR_ROLES_H_

#include <string>

#include "config/config.h"

// The three kinds of gecd process. `gecd serve` runs the supervisor, which creates the shared
// memory segment and starts the others by re-executing /proc/self/exe with GECD_ROLE set in the
// environment (so `ps` shows only the title, e.g. "gecd: worker 3"). Each entry point returns
// the process exit code; each is in the namespace of the folder that defines it (RunSupervisor
// in src/supervisor, RunEngineProcess in src/engine_host, RunWorkerProcess in src/worker).
namespace gecd::supervisor {

// Environment variables a child reads: GECD_ROLE (engine | worker), GECD_SHM (the segment
// name), GECD_WORKER_INDEX, GECD_CONFIG (the config file, "" for defaults), and
// GECD_CONFIG_OVERRIDES (newline-separated key=value pairs from the command line).
inline constexpr char kRoleEnv[] = "GECD_ROLE";
inline constexpr char kShmEnv[] = "GECD_SHM";
inline constexpr char kWorkerIndexEnv[] = "GECD_WORKER_INDEX";
inline constexpr char kConfigEnv[] = "GECD_CONFIG";
inline constexpr char kOverridesEnv[] = "GECD_CONFIG_OVERRIDES";

int RunSupervisor(const config::Config& config, const std::string& config_path,
                  const std::string& overrides);

}  // namespace gecd::supervisor

namespace gecd::engine_host {
int RunEngineProcess(const config::Config& config, const std::string& shm_name);
}  // namespace gecd::engine_host

namespace gecd::worker {
int RunWorkerProcess(const config::Config& config, const std::string& shm_name, int index);
}  // namespace gecd::worker

#endif  // GECD_SUPERVISOR_ROLES_H_
