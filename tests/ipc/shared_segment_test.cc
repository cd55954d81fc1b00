#include "ipc/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gecd::ipc {
namespace {

TEST(SharedSegmentTest, CreatesA0600SegmentThatOpenSees) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> created = SharedSegment::Create(
      name, {.num_workers = 3, .ring_slots = 16, .ring_slot_bytes = 256, .metrics_bytes = 1000});
  ASSERT_TRUE(created.ok()) << created.status();
  struct stat st;
  ASSERT_EQ(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);

  created->header()->engine_epoch.store(5);
  created->metrics_region()[999] = 0xab;
  absl::StatusOr<SharedSegment> opened = SharedSegment::Open(name);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->num_workers(), 3);
  EXPECT_EQ(opened->header()->engine_epoch.load(), 5u);
  EXPECT_GE(opened->metrics_region().size(), 1000u);
  EXPECT_EQ(opened->metrics_region()[999], 0xab);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(opened->channel(i).requests().header()->slots, 16u);
    EXPECT_EQ(opened->channel(i).responses().max_message_bytes(), 248u);
  }

  EXPECT_TRUE(created->Unlink().ok());
  EXPECT_FALSE(SharedSegment::Open(name).ok());
  EXPECT_NE(stat(("/dev/shm" + name).c_str(), &st), 0);
  EXPECT_EQ(opened->header()->engine_epoch.load(), 5u) << "mappings outlive the name";
}

TEST(SharedSegmentTest, TheEnginesStepMeasuresReachAnotherMapping) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> engine = SharedSegment::Create(name, {.num_workers = 1});
  ASSERT_TRUE(engine.ok()) << engine.status();
  absl::StatusOr<SharedSegment> worker = SharedSegment::Open(name);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_FALSE(worker->step_time().known());
  EXPECT_EQ(worker->tokens_per_step(), 0);  // not published yet
  engine->PublishStepTime({.fixed_us = 7000, .per_sequence_us = 420});
  engine->PublishTokensPerStep(3.25f);
  EXPECT_EQ(worker->step_time().fixed_us, 7000);
  EXPECT_EQ(worker->step_time().per_sequence_us, 420);
  EXPECT_EQ(worker->tokens_per_step(), 3.25f);
  EXPECT_TRUE(engine->Unlink().ok());
}

TEST(SharedSegmentTest, EngineFailureCrossesProcessesBoundedAndClears) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> created = SharedSegment::Create(name, {.ring_slots = 16});
  ASSERT_TRUE(created.ok()) << created.status();
  absl::StatusOr<SharedSegment> opened = SharedSegment::Open(name);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(created->EngineFailure(), "");
  opened->SetEngineFailure("engine.kv_cache_blocks: too large");
  EXPECT_EQ(created->EngineFailure(), "engine.kv_cache_blocks: too large");
  opened->SetEngineFailure(std::string(5000, 'x'));
  EXPECT_EQ(created->EngineFailure(), std::string(kEngineFailureCapacity, 'x'));
  // A length another process scribbled over never reads past the buffer.
  created->header()->engine_failure_bytes = 1u << 30;
  EXPECT_EQ(created->EngineFailure().size(), kEngineFailureCapacity);
  created->ClearEngineFailure();
  EXPECT_EQ(opened->EngineFailure(), "");
  EXPECT_TRUE(created->Unlink().ok());
}

TEST(SharedSegmentTest, NamesAreUniqueAndNeverReused) {
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) names.insert(SharedSegment::UniqueName());
  EXPECT_EQ(names.size(), 100u);

  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> first = SharedSegment::Create(name, {});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(SharedSegment::Create(name, {}).ok()) << "O_EXCL";
  EXPECT_TRUE(first->Unlink().ok());
}

TEST(SharedSegmentTest, RejectsBadOptionsWithoutLeavingAName) {
  const std::string name = SharedSegment::UniqueName();
  EXPECT_FALSE(SharedSegment::Create(name, {.num_workers = 0}).ok());
  absl::StatusOr<SharedSegment> bad_slots =
      SharedSegment::Create(name, {.num_workers = 1, .ring_slots = 100});
  EXPECT_FALSE(bad_slots.ok());
  EXPECT_FALSE(SharedSegment::Open(name).ok());
}

TEST(SharedSegmentTest, OpenRejectsSomethingElse) {
  const std::string name = SharedSegment::UniqueName();
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  absl::StatusOr<SharedSegment> opened = SharedSegment::Open(name);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kFailedPrecondition);
  shm_unlink(name.c_str());
}

TEST(SharedSegmentTest, OpenRejectsAHeaderThatDisagreesWithTheSize) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> created = SharedSegment::Create(name, {.num_workers = 2});
  ASSERT_TRUE(created.ok());
  created->header()->num_workers = 3;
  EXPECT_FALSE(SharedSegment::Open(name).ok());
  created->header()->num_workers = 2;
  created->header()->channel_bytes += 64;
  EXPECT_FALSE(SharedSegment::Open(name).ok());
  EXPECT_TRUE(created->Unlink().ok());
}

TEST(SharedSegmentTest, WorkerResetIsPendingUntilTheEngineCompletesIt) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> segment = SharedSegment::Create(name, {.num_workers = 2});
  ASSERT_TRUE(segment.ok());
  WorkerChannel channel = segment->channel(1);
  RingProducer producer(channel.requests());
  producer.Reserve();
  producer.Commit(8);
  producer.Publish();
  EXPECT_FALSE(channel.ResetPending());
  segment->ResetWorkerChannel(1);
  EXPECT_TRUE(channel.ResetPending());
  EXPECT_FALSE(segment->channel(0).ResetPending());
  channel.CompleteReset();
  EXPECT_FALSE(channel.ResetPending());
  EXPECT_FALSE(RingConsumer(channel.requests()).HasMessage());
  EXPECT_TRUE(segment->Unlink().ok());
}

TEST(SharedSegmentTest, AWorkerListensUntilItsChannelIsReset) {
  const std::string name = SharedSegment::UniqueName();
  absl::StatusOr<SharedSegment> segment = SharedSegment::Create(name, {.num_workers = 2});
  ASSERT_TRUE(segment.ok());
  // A fresh segment: nobody listens, whatever the generations are.
  EXPECT_FALSE(segment->channel(0).Listening());
  EXPECT_FALSE(segment->channel(1).Listening());
  absl::StatusOr<SharedSegment> worker = SharedSegment::Open(name);  // the worker's own mapping
  ASSERT_TRUE(worker.ok());
  worker->channel(1).MarkListening();
  EXPECT_TRUE(segment->channel(1).Listening());
  EXPECT_FALSE(segment->channel(0).Listening());
  // The worker died: the supervisor's reset makes it not listen until its replacement does.
  segment->ResetWorkerChannel(1);
  EXPECT_FALSE(segment->channel(1).Listening());
  worker->channel(1).MarkListening();
  EXPECT_TRUE(segment->channel(1).Listening());
  EXPECT_TRUE(segment->Unlink().ok());
}

}  // namespace
}  // namespace gecd::ipc
