#ifndef GECD_COMMON_OPENMP_WAIT_H_
#define GECD_COMMON_OPENMP_WAIT_H_

#include <string>
#include <vector>

// How this process's environment tells libgomp's threads to wait at a barrier: spin, sleep at
// once, or spin a number of iterations first. `gecd serve` chooses for its engine unless the
// operator did (supervisor.cc), and the engine's start-up line says which (engine_options.h):
// both read the choice here, so that they agree on what counts as one.
namespace gecd {

// "NAME=value" for each of OMP_WAIT_POLICY and GOMP_SPINCOUNT set to something in this
// process's environment, in that order; a variable set but empty is libgomp's default, not a
// choice, and is left out. Empty: the operator chose nothing.
std::vector<std::string> OpenMpWaitChoices();

}  // namespace gecd

#endif  // GECD_COMMON_OPENMP_WAIT_H_
