#ifndef GECD_COMMON_CPU_LIMIT_H_
#define GECD_COMMON_CPU_LIMIT_H_

#include <string>
#include <string_view>

// How many CPUs this process may keep busy: the CPUs it may run on (its affinity mask, e.g.
// taskset or a cpuset), lowered by the cgroup's CPU quota when one is set. A container's CPU
// limit is a quota (Kubernetes' resources.limits.cpu: cpu.max "200000 100000" for 2 CPUs), not
// fewer visible cores: a process that starts a thread per visible core on a 64-core node under
// a 2-CPU limit has its threads throttled for most of each period, in the middle of a matmul.
namespace gecd {

struct CpuLimit {
  double cpus = 1;
  std::string source;  // what set it: "affinity" or the cgroup file
};

// The limit of this process, read once (sched_getaffinity, /proc/self/cgroup, /sys/fs/cgroup).
const CpuLimit& ProcessCpuLimit();

// The same from its parts: `affinity_cpus`, the cgroup filesystem at `cgroup_root` and the text
// of /proc/self/cgroup. cgroup v2's cpu.max ("quota period", "max period": none) and v1's
// cpu.cfs_quota_us / cpu.cfs_period_us (-1: none) of the process's cgroup and its ancestors
// are consulted; the smallest quota wins.
CpuLimit CpuLimitFrom(int affinity_cpus, const std::string& cgroup_root,
                      std::string_view proc_self_cgroup);

// The compute threads to run within `limit`: its whole CPUs, at least one (a fraction of a CPU
// more would be throttled, not used).
int ComputeThreads(const CpuLimit& limit);

// The front-end worker processes `server.workers: 0` stands for on `cpus` CPUs (ComputeThreads).
// Where the engine computes on those CPUs (`engine_on_cpus`: the cpu backend), one per four, at
// least one: the engine keeps every core busy, and each worker process brings its own gRPC
// threads, whose hand-offs then take CPU from it. On 2 cores one worker spent ~145 µs of CPU
// and ~4.7 context switches a call at 3x overload against two workers' ~185 µs and ~6, and
// answered 7-15% more in time (session 28). Why four: the cpu engine answers ~400 sentences a
// second a core and a worker spends ~260 µs of CPU on each, so the calls of four cores' engine
// take one worker ~40% of a core, and its gRPC threads spread over cores as they need. Where
// the engine computes elsewhere (a GPU) or not at all (echo), the CPUs are the front end's: one
// per CPU.
int DefaultWorkers(int cpus, bool engine_on_cpus);

}  // namespace gecd

#endif  // GECD_COMMON_CPU_LIMIT_H_
