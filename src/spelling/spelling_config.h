#ifndef GECD_SPELLING_SPELLING_CONFIG_H_
#define GECD_SPELLING_SPELLING_CONFIG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "spelling/spell_corrector.h"

// The spelling stage built from the config's `spelling` section, the same way by every command
// that reads text (the daemon's workers and supervisor, eval, generate). Kept in the spelling
// library, not with the engine's options, so that its users need not link the engine.
// Thread-safety: a free function without shared state; it may be called from any thread.
namespace gecd::model {

// The spelling stage the `spelling` section asks for; null when it is off. Errors name the
// missing or malformed file.
absl::StatusOr<std::unique_ptr<SpellCorrector>> SpellCorrectorFrom(
    const config::SpellingSection& spelling);

}  // namespace gecd::model

#endif  // GECD_SPELLING_SPELLING_CONFIG_H_
