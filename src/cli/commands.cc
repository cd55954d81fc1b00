#include "cli/commands.h"

namespace gecd::cli {

const std::vector<Command>& AllCommands() {
  static const std::vector<Command> commands = {
#ifdef GECD_HAVE_SERVER
      {"serve", "run the daemon: supervisor, engine and gRPC workers", RunServe},
      {"route", "run the router: spreads gRPC calls over daemons (p2c), with discovery", RunRoute},
      {"tune", "measure the engine settings and per-pod HPA target that meet a latency SLO",
       RunTune},
      {"correct", "correct a text with a running daemon and print the edits", RunCorrect},
#endif
      {"generate", "run the model on prompts and print the outputs", RunGenerate},
      {"eval", "score a model or server on JFLEG (GLEU) and the synthetic test set", RunEval},
      {"inspect", "print a model's architecture, size, dtypes and FP8 error", RunInspect},
      {"quantize", "write an FP8 (compressed-tensors) copy of a model", RunQuantize},
      {"version", "print the version and the CUDA devices seen", RunVersion},
  };
  return commands;
}

}  // namespace gecd::cli
