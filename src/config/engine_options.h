#ifndef GECD_CONFIG_ENGINE_OPTIONS_H_
#define GECD_CONFIG_ENGINE_OPTIONS_H_

#include "config/config.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "model/checkpoint.h"

// The settings every command that runs the model (serve, generate, eval) derives the same way.
namespace gecd::config {

// The engine section's settings as the CPU backend takes them.
engine::CpuBackendOptions CpuBackendOptionsFrom(const EngineSection& engine);

// The engine options the checkpoint sets: its EOS ids (generation_config.json's, which
// Checkpoint::Open already filled in from config.json where it had none).
engine::EngineOptions EngineOptionsFrom(const model::Checkpoint& checkpoint);

}  // namespace gecd::config

#endif  // GECD_CONFIG_ENGINE_OPTIONS_H_
