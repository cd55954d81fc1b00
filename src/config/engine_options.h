#ifndef GECD_CONFIG_ENGINE_OPTIONS_H_
#define GECD_CONFIG_ENGINE_OPTIONS_H_

#include "config/config.h"
#include "engine/cpu_backend.h"

// The engine section's settings as the CPU backend takes them, for every command that runs
// the model on the CPU (serve, generate, eval).
namespace gecd::config {

engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine);

}  // namespace gecd::config

#endif  // GECD_CONFIG_ENGINE_OPTIONS_H_
