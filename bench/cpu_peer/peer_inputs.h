#ifndef GECD_BENCH_CPU_PEER_PEER_INPUTS_H_
#define GECD_BENCH_CPU_PEER_PEER_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/config.h"
#include "text/prompt_builder.h"

// What the cpu_peer tools (cpu_peer_tool, cpu_step_profile) share: the config as `gecd`'s
// commands read it (--config FILE, --set KEY=VALUE), JFLEG sources as `gecd eval` gives them to
// the model (PTB-detokenized), and their prompts as the request pipeline builds them (no
// spelling stage). Plain functions, no shared state: thread-safe.
namespace gecd::bench::cpu_peer {

// Every line of a JFLEG .src file, detokenized as `gecd eval --jfleg` does. NotFound naming the
// file if it cannot be read; InvalidArgument if it is empty.
absl::StatusOr<std::vector<std::string>> ReadJflegSources(const std::string& path);

// One text's prompt: its tokens and generation parameters, or why the pipeline refused it.
// `unchanged` texts (only whitespace) have no prompt and are answered with themselves.
struct PeerPrompt {
  bool ok = false;
  bool unchanged = false;
  std::string error;
  std::vector<int32_t> tokens;
  int max_new_tokens = 0;
  float copy_bias = 0;
  int copy_begin = 0;
  int copy_end = 0;
};
std::vector<PeerPrompt> BuildPrompts(const text::PromptBuilder& builder,
                                     const std::vector<std::string>& texts);

}  // namespace gecd::bench::cpu_peer

#endif  // GECD_BENCH_CPU_PEER_PEER_INPUTS_H_
