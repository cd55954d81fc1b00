#include "ipc/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gecd::ipc {
namespace {

constexpr uint64_t kMagic = 0x31474553'44434547;  // "GECDSEG1"
constexpr uint32_t kVersion = 9;
constexpr int kMaxWorkers = 1024;

size_t RoundUp64(size_t n) { return (n + 63) / 64 * 64; }

absl::Status ErrnoError(const std::string& what, const std::string& name) {
  const int err = errno;
  return absl::InternalError(absl::StrCat(what, " ", name, ": ", std::strerror(err)));
}

// Closes a descriptor on every path out of Create/Open.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string SharedSegment::UniqueName() {
  std::random_device random;
  return absl::StrFormat("/gecd-%d-%08x%08x", getpid(), random(), random());
}

absl::StatusOr<SharedSegment> SharedSegment::Create(const std::string& name,
                                                    const SegmentOptions& options) {
  if (options.num_workers < 1 || options.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be in [1, ", kMaxWorkers, "], got ", options.num_workers));
  }
  const size_t header_bytes = RoundUp64(sizeof(SegmentHeader));
  const size_t metrics_bytes = RoundUp64(options.metrics_bytes);
  const size_t channel_bytes =
      RoundUp64(WorkerChannel::RegionBytes(options.ring_slots, options.ring_slot_bytes));
  const size_t total = header_bytes + metrics_bytes + channel_bytes * options.num_workers;

  ScopedFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
  if (fd.get() < 0) return ErrnoError("shm_open", name);
  // From here the name exists: remove it again if anything below fails.
  auto fail = [&](absl::Status status) {
    shm_unlink(name.c_str());
    return status;
  };
  if (ftruncate(fd.get(), static_cast<off_t>(total)) != 0) {
    return fail(ErrnoError("ftruncate", name));
  }
  absl::StatusOr<SharedSegment> mapped = Map(name, fd.get(), total);
  if (!mapped.ok()) return fail(mapped.status());
  SharedSegment segment = *std::move(mapped);

  auto* header = new (segment.base_) SegmentHeader{};
  header->num_workers = static_cast<uint32_t>(options.num_workers);
  header->total_bytes = total;
  header->ring_slots = options.ring_slots;
  header->ring_slot_bytes = options.ring_slot_bytes;
  header->metrics_offset = header_bytes;
  header->metrics_bytes = metrics_bytes;
  header->channels_offset = header_bytes + metrics_bytes;
  header->channel_bytes = channel_bytes;
  for (int i = 0; i < options.num_workers; ++i) {
    absl::StatusOr<WorkerChannel> channel = WorkerChannel::Format(
        segment.channel_region(i), options.ring_slots, options.ring_slot_bytes);
    if (!channel.ok()) return fail(channel.status());
    segment.channels_.push_back(*channel);
  }
  // Last, so that a process opening the segment early fails the magic check rather than
  // reading a half-written header.
  header->version = kVersion;
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kMagic;
  return segment;
}

absl::StatusOr<SharedSegment> SharedSegment::Open(const std::string& name) {
  ScopedFd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (fd.get() < 0) return ErrnoError("shm_open", name);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError("fstat", name);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < sizeof(SegmentHeader)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is too small (", size, " bytes) for gecd"));
  }
  ASSIGN_OR_RETURN(SharedSegment segment, Map(name, fd.get(), size));
  const SegmentHeader* h = segment.header();
  if (h->magic != kMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is not a gecd segment (bad magic)"));
  }
  if (h->version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory ", name, " has layout version ", h->version, ", expected ", kVersion));
  }
  const uint64_t channels_end =
      h->channels_offset + static_cast<uint64_t>(h->channel_bytes) * h->num_workers;
  if (h->total_bytes != size || h->num_workers < 1 || h->num_workers > kMaxWorkers ||
      h->metrics_offset < sizeof(SegmentHeader) ||
      h->metrics_offset + h->metrics_bytes > h->channels_offset || channels_end != size ||
      h->channel_bytes < WorkerChannel::RegionBytes(h->ring_slots, h->ring_slot_bytes)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory ", name, ": header sizes do not match the segment (", size, " bytes)"));
  }
  for (int i = 0; i < segment.num_workers(); ++i) {
    ASSIGN_OR_RETURN(WorkerChannel channel, WorkerChannel::Attach(segment.channel_region(i)));
    segment.channels_.push_back(channel);
  }
  return segment;
}

absl::StatusOr<SharedSegment> SharedSegment::Map(const std::string& name, int fd, size_t size) {
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ErrnoError("mmap", name);
  SharedSegment segment;
  segment.name_ = name;
  segment.base_ = static_cast<uint8_t*>(base);
  segment.size_ = size;
  return segment;
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      channels_(std::move(other.channels_)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, size_);
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    channels_ = std::move(other.channels_);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  if (base_ != nullptr) munmap(base_, size_);
}

absl::Status SharedSegment::Unlink() {
  if (shm_unlink(name_.c_str()) != 0) return ErrnoError("shm_unlink", name_);
  return absl::OkStatus();
}

SegmentHeader* SharedSegment::header() const { return reinterpret_cast<SegmentHeader*>(base_); }

std::span<uint8_t> SharedSegment::metrics_region() const {
  return {base_ + header()->metrics_offset, header()->metrics_bytes};
}

std::span<uint8_t> SharedSegment::channel_region(int index) const {
  const SegmentHeader* h = header();
  return {base_ + h->channels_offset + index * h->channel_bytes, h->channel_bytes};
}

WorkerChannel SharedSegment::channel(int index) const { return channels_[index]; }

int SharedSegment::num_workers() const { return static_cast<int>(header()->num_workers); }

void SharedSegment::SetEngineFailure(std::string_view message) {
  SegmentHeader* h = header();
  const size_t n = std::min(message.size(), kEngineFailureCapacity);
  std::memcpy(h->engine_failure, message.data(), n);
  h->engine_failure_bytes = static_cast<uint32_t>(n);
}

std::string SharedSegment::EngineFailure() const {
  const SegmentHeader* h = header();
  // Bounded here too: the length was written by another process.
  return std::string(h->engine_failure,
                     std::min<size_t>(h->engine_failure_bytes, kEngineFailureCapacity));
}

void SharedSegment::ClearEngineFailure() { header()->engine_failure_bytes = 0; }

bool SharedSegment::EngineWorkQueued() const {
  if (header()->engine_has_work.load(std::memory_order_acquire) != 0) return true;
  return std::any_of(channels_.begin(), channels_.end(),
                     [](const WorkerChannel& c) { return c.requests().HasUnread(); });
}

void SharedSegment::PublishStepTime(StepTime step_time) const {
  header()->engine_step_time.store(std::bit_cast<uint64_t>(step_time), std::memory_order_relaxed);
}

StepTime SharedSegment::step_time() const {
  return std::bit_cast<StepTime>(header()->engine_step_time.load(std::memory_order_relaxed));
}

void SharedSegment::PublishTokensPerStep(float tokens) const {
  header()->engine_tokens_per_step.store(std::bit_cast<uint32_t>(tokens),
                                         std::memory_order_relaxed);
}

float SharedSegment::tokens_per_step() const {
  return std::bit_cast<float>(header()->engine_tokens_per_step.load(std::memory_order_relaxed));
}

int SharedSegment::AdmittedByOtherWorkers(int index) const {
  int admitted = 0;
  for (int i = 0; i < std::ssize(channels_); ++i) {
    if (i != index) admitted += channels_[i].admitted();
  }
  return admitted;
}

void SharedSegment::ResetWorkerChannel(int index) {
  channels_[index].RequestReset();
  engine_doorbell().Ring();
}

}  // namespace gecd::ipc
