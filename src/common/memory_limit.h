#ifndef GECD_COMMON_MEMORY_LIMIT_H_
#define GECD_COMMON_MEMORY_LIMIT_H_

#include <cstdint>
#include <string>
#include <string_view>

// How much memory this process may use at most: the machine's physical memory, lowered by the
// cgroup's limit when one is set (a container's memory limit is a cgroup limit, and exceeding
// it means the OOM killer, not a failed malloc). Sizes that are configured (the KV cache) are
// checked against it, so that an impossible size is an error naming its key instead of an
// allocation that aborts or a process the kernel kills.
namespace gecd {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // what set it: "physical memory" or the cgroup file
};

// The limit of this process, read once (physical pages, /proc/self/cgroup and /sys/fs/cgroup).
const MemoryLimit& ProcessMemoryLimit();

// The same from its parts: `physical_bytes`, the cgroup filesystem mounted at `cgroup_root`
// (usually /sys/fs/cgroup) and the text of /proc/self/cgroup. The cgroup v2 memory.max of the
// process's own cgroup and of the root (a container's namespace root), and the cgroup v1
// memory.limit_in_bytes, are consulted; "max" or an absent or unreadable file sets no limit.
MemoryLimit MemoryLimitFrom(uint64_t physical_bytes, const std::string& cgroup_root,
                            std::string_view proc_self_cgroup);

// "4000000 MB" style text for messages: bytes in MiB, rounded down.
std::string Megabytes(uint64_t bytes);

}  // namespace gecd

#endif  // GECD_COMMON_MEMORY_LIMIT_H_
