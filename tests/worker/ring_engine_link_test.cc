#include "worker/ring_engine_link.h"

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ipc/messages.h"
#include "ipc/shared_segment.h"

namespace gecd::worker {
namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

// The test plays the engine: it reads worker 0's request ring and writes its response ring.
class RingEngineLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ipc::SharedSegment> segment =
        ipc::SharedSegment::Create(ipc::SharedSegment::UniqueName(),
                                   {.num_workers = 1, .ring_slots = 4, .ring_slot_bytes = 448});
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    segment_.header()->engine_epoch.store(1);
    segment_.header()->engine_ready_epoch.store(1);
    requests_ = ipc::RingConsumer(segment_.channel(0).requests());
    responses_ = ipc::RingProducer(segment_.channel(0).responses());
    RingEngineLinkOptions options;
    // Long enough that the packing test's Submit calls land in one message even on a loaded
    // machine; the open message is published after it (or when the engine catches up).
    options.flush_delay = std::chrono::milliseconds(500);
    link_ = *RingEngineLink::Create(segment_, 0, options);
  }

  void TearDown() override {
    link_.reset();
    EXPECT_TRUE(segment_.Unlink().ok());
  }

  std::future<EngineReply> Submit(uint64_t id, std::vector<int32_t> prompt) {
    auto promise = std::make_shared<std::promise<EngineReply>>();
    std::future<EngineReply> future = promise->get_future();
    EngineRequest request;
    request.id = id;
    request.prompt = std::move(prompt);
    request.max_new_tokens = 4;
    EXPECT_TRUE(link_
                    ->Submit(std::move(request),
                             [promise](EngineReply r) { promise->set_value(std::move(r)); })
                    .ok());
    return future;
  }

  // The records of the next request message, waiting for it on the engine doorbell.
  std::vector<ipc::Record> NextRequestMessage() {
    const ipc::WaitOptions wait{.timeout = kTimeout};
    EXPECT_TRUE(segment_.engine_doorbell().Wait([&] { return requests_.HasMessage(); }, wait));
    ipc::MessageReader reader(requests_.Peek());
    std::vector<ipc::Record> records;
    ipc::Record record;
    while (*reader.Next(&record)) records.push_back(record);
    requests_.Release();
    return records;
  }

  void Respond(std::span<const uint8_t> bytes) {
    std::span<uint8_t> slot = responses_.Reserve();
    ASSERT_GE(slot.size(), bytes.size());
    std::copy(bytes.begin(), bytes.end(), slot.begin());
    responses_.Commit(bytes.size());
    responses_.Publish();
    segment_.channel(0).responses().consumer_doorbell().Ring();
  }

  // One message with every record in `done`.
  void RespondDone(const std::vector<ipc::DoneRecord>& done) {
    std::vector<uint8_t> buffer(256);
    ipc::MessageWriter writer(buffer);
    for (const ipc::DoneRecord& d : done) ASSERT_TRUE(writer.Add(d));
    Respond({buffer.data(), writer.size()});
  }

  static ipc::DoneRecord Done(uint64_t id, std::vector<int32_t> tokens, uint64_t epoch = 1) {
    ipc::DoneRecord done;
    done.id = id;
    done.epoch = epoch;
    done.queue_us = 5;
    done.engine_us = 7;
    done.tokens = std::move(tokens);
    return done;
  }

  ipc::SharedSegment segment_;
  ipc::RingConsumer requests_;
  ipc::RingProducer responses_;
  std::unique_ptr<RingEngineLink> link_;
};

TEST_F(RingEngineLinkTest, PublishesAtOnceToAnIdleEngineAndPacksWhileItIsBusy) {
  ASSERT_TRUE(link_->Ready());
  std::vector<std::future<EngineReply>> futures;
  futures.push_back(Submit(0, {10}));
  // The engine has not taken the first message: it is busy, so the next ones share a message.
  for (uint64_t id = 1; id < 6; ++id) futures.push_back(Submit(id, {10, static_cast<int>(id)}));

  std::vector<ipc::Record> first = NextRequestMessage();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(std::get<ipc::SubmitRecord>(first[0]).epoch, 1u);
  std::vector<ipc::Record> packed = NextRequestMessage();
  ASSERT_EQ(packed.size(), 5u);
  for (uint64_t i = 0; i < 5; ++i) {
    const auto& submit = std::get<ipc::SubmitRecord>(packed[i]);
    EXPECT_EQ(submit.id, i + 1);
    EXPECT_EQ(submit.max_new_tokens, 4);
    EXPECT_EQ(submit.tokens, (std::vector<int32_t>{10, static_cast<int>(i + 1)}));
  }

  for (uint64_t first : {0, 3}) {  // three replies to a message
    std::vector<ipc::DoneRecord> done;
    for (uint64_t id = first; id < first + 3; ++id) {
      done.push_back(Done(id, {static_cast<int>(id), 99}));
    }
    RespondDone(done);
  }
  for (uint64_t id = 0; id < 6; ++id) {
    ASSERT_EQ(futures[id].wait_for(kTimeout), std::future_status::ready);
    EngineReply reply = futures[id].get();
    EXPECT_TRUE(reply.status.ok()) << reply.status;
    EXPECT_EQ(reply.tokens, (std::vector<int32_t>{static_cast<int>(id), 99}));
    EXPECT_EQ(reply.queue_us, 5);
    EXPECT_EQ(reply.engine_us, 7);
  }
}

// Issue 12: the DONE record's first-token time feeds gecd_time_to_first_token_seconds, and an
// engine-side rejection's own message reaches the client.
TEST_F(RingEngineLinkTest, RepliesCarryTheFirstTokenTimeAndTheEnginesMessage) {
  std::future<EngineReply> ok = Submit(1, {10});
  std::future<EngineReply> rejected = Submit(2, {10});
  std::future<EngineReply> unexplained = Submit(3, {10});
  // The first goes out at once, the others are packed into a second message.
  size_t submitted = 0;
  for (int message = 0; message < 3 && submitted < 3; ++message) {
    submitted += NextRequestMessage().size();
  }
  ASSERT_EQ(submitted, 3u);
  ipc::DoneRecord done = Done(1, {4, 5});
  done.first_token_us = 1234;
  ipc::DoneRecord rejection = Done(2, {});
  rejection.status_code = static_cast<int32_t>(absl::StatusCode::kInvalidArgument);
  rejection.message = "prompt of 600 tokens exceeds the model's 512 positions";
  ipc::DoneRecord bare = Done(3, {});
  bare.status_code = static_cast<int32_t>(absl::StatusCode::kInternal);
  RespondDone({done, rejection, bare});

  ASSERT_EQ(ok.wait_for(kTimeout), std::future_status::ready);
  const EngineReply ok_reply = ok.get();
  EXPECT_TRUE(ok_reply.status.ok()) << ok_reply.status;
  EXPECT_EQ(ok_reply.first_token_us, 1234);
  ASSERT_EQ(rejected.wait_for(kTimeout), std::future_status::ready);
  const EngineReply rejected_reply = rejected.get();
  EXPECT_EQ(rejected_reply.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rejected_reply.status.message(), rejection.message);
  EXPECT_EQ(rejected_reply.first_token_us, 0);
  ASSERT_EQ(unexplained.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(unexplained.get().status.message(), "the engine rejected the request");
}

TEST_F(RingEngineLinkTest, IgnoresStaleAndCorruptRepliesAndDuplicateIds) {
  std::future<EngineReply> future = Submit(1, {10});
  EngineRequest duplicate;
  duplicate.id = 1;
  duplicate.prompt = {3};
  EXPECT_EQ(link_->Submit(duplicate, [](EngineReply) {}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(NextRequestMessage().size(), 1u);

  RespondDone({Done(1, {4}, /*epoch=*/7), Done(2, {4})});  // another engine's, nobody's
  const uint8_t garbage[] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  Respond(garbage);
  RespondDone({Done(1, {42})});
  ASSERT_EQ(future.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(future.get().tokens, std::vector<int32_t>{42});
}

TEST_F(RingEngineLinkTest, CancelReachesTheEngineAndItsAnswerIsCancelled) {
  std::future<EngineReply> future = Submit(3, {10});
  ASSERT_EQ(NextRequestMessage().size(), 1u);
  link_->Cancel(3);
  link_->Cancel(12345);  // unknown: nothing to do
  std::vector<ipc::Record> records = NextRequestMessage();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(std::get<ipc::CancelRecord>(records[0]).id, 3u);
  ipc::DoneRecord done = Done(3, {});
  done.status_code = static_cast<int32_t>(absl::StatusCode::kCancelled);
  RespondDone({done});
  ASSERT_EQ(future.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(future.get().status.code(), absl::StatusCode::kCancelled);
}

TEST_F(RingEngineLinkTest, FullRingIsResourceExhaustedAndCancelStillAnswers) {
  // 4 slots of 320 bytes; prompts of 50 tokens take a slot each.
  std::vector<std::future<EngineReply>> futures;
  for (uint64_t id = 0; id < 4; ++id) futures.push_back(Submit(id, std::vector<int32_t>(50, 3)));
  EngineRequest request;
  request.id = 4;
  request.prompt = std::vector<int32_t>(50, 3);
  const absl::Status status = link_->Submit(request, [](EngineReply) {});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  link_->Cancel(0);  // no room to tell the engine: the link answers itself
  ASSERT_EQ(futures[0].wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(futures[0].get().status.code(), absl::StatusCode::kCancelled);
}

TEST_F(RingEngineLinkTest, PromptsLargerThanASlotAreRejected) {
  EngineRequest request;
  request.prompt = std::vector<int32_t>(1000, 3);
  EXPECT_EQ(link_->Submit(request, [](EngineReply) {}).code(), absl::StatusCode::kInvalidArgument);
}

// Issue 24: a kill -9 of the engine under load failed the calls in flight with UNAVAILABLE. A
// correction is idempotent, so they now go to the next engine and are answered.
TEST_F(RingEngineLinkTest, InFlightRequestsAreResubmittedToTheNextEngine) {
  std::future<EngineReply> answered = Submit(1, {10, 11});
  std::future<EngineReply> cancelled = Submit(2, {20});
  // The idle engine may get them in one message or two.
  if (NextRequestMessage().size() == 1) {
    ASSERT_EQ(NextRequestMessage().size(), 1u);
  }
  segment_.header()->engine_ready_epoch.store(0);  // the supervisor saw the engine die
  EXPECT_FALSE(link_->Ready());
  // Those in flight wait for the next engine, and so do new ones.
  std::future<EngineReply> held = Submit(3, {30});
  EXPECT_EQ(answered.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  // One the caller gives up on meanwhile (its deadline) is answered at once: no engine to ask.
  link_->Cancel(2);
  ASSERT_EQ(cancelled.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(cancelled.get().status.code(), absl::StatusCode::kCancelled);

  segment_.header()->engine_epoch.store(2);
  segment_.header()->engine_ready_epoch.store(2);
  std::vector<ipc::Record> sent = NextRequestMessage();
  // The engine may take the first before the link adds the second to the message.
  if (sent.size() == 1) sent.push_back(NextRequestMessage().at(0));
  ASSERT_EQ(sent.size(), 2u);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (const ipc::Record& record : sent) {
    const auto& submit = std::get<ipc::SubmitRecord>(record);
    EXPECT_EQ(submit.epoch, 2u);
    prompts[submit.id] = submit.tokens;
  }
  EXPECT_EQ(prompts, (std::map<uint64_t, std::vector<int32_t>>{{1, {10, 11}}, {3, {30}}}));
  RespondDone({Done(1, {42}, /*epoch=*/2), Done(3, {43}, /*epoch=*/2)});
  ASSERT_EQ(answered.wait_for(kTimeout), std::future_status::ready);
  const EngineReply reply = answered.get();
  EXPECT_TRUE(reply.status.ok()) << reply.status;
  EXPECT_EQ(reply.tokens, std::vector<int32_t>{42});
  ASSERT_EQ(held.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(held.get().tokens, std::vector<int32_t>{43});
}

// Held requests do not wait for an engine forever.
TEST_F(RingEngineLinkTest, WithoutAnEngineHeldRequestsFailAfterTheEngineWait) {
  link_.reset();
  RingEngineLinkOptions options;
  options.engine_wait = std::chrono::milliseconds(200);
  options.wait.timeout = std::chrono::milliseconds(10);
  link_ = *RingEngineLink::Create(segment_, 0, options);
  std::future<EngineReply> future = Submit(1, {10});
  ASSERT_EQ(NextRequestMessage().size(), 1u);
  const auto start = std::chrono::steady_clock::now();
  segment_.header()->engine_ready_epoch.store(0);  // the engine died; none comes back
  ASSERT_EQ(future.wait_for(kTimeout), std::future_status::ready);
  const EngineReply reply = future.get();
  EXPECT_EQ(reply.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(reply.status.message()), ::testing::HasSubstr("no engine became ready"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
}

// A request whose re-sent copy dies with the next engine too may be what crashes them: it is
// not sent a third time.
TEST_F(RingEngineLinkTest, ARequestInFlightThroughTwoRestartsFails) {
  std::future<EngineReply> future = Submit(1, {10});
  ASSERT_EQ(NextRequestMessage().size(), 1u);
  segment_.header()->engine_epoch.store(2);
  segment_.header()->engine_ready_epoch.store(2);
  ASSERT_EQ(NextRequestMessage().size(), 1u);  // re-sent to engine 2
  segment_.header()->engine_epoch.store(3);
  segment_.header()->engine_ready_epoch.store(3);
  ASSERT_EQ(future.wait_for(kTimeout), std::future_status::ready);
  const EngineReply reply = future.get();
  EXPECT_EQ(reply.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(reply.status.message()), ::testing::HasSubstr("restarted twice"));
}

// Before a first engine the daemon is starting: nothing to hold a request for.
TEST_F(RingEngineLinkTest, BeforeAFirstEngineSubmitIsUnavailable) {
  link_.reset();
  segment_.header()->engine_ready_epoch.store(0);
  link_ = *RingEngineLink::Create(segment_, 0, {});
  EngineRequest request;
  request.id = 1;
  request.prompt = {1};
  EXPECT_EQ(link_->Submit(request, [](EngineReply) {}).code(), absl::StatusCode::kUnavailable);
}

TEST_F(RingEngineLinkTest, ClosingTheLinkAnswersWhatIsInFlight) {
  std::future<EngineReply> future = Submit(1, {10});
  link_.reset();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(future.get().status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(RingEngineLinkTest, AReplacementWorkerWaitsForTheEngineToResetItsChannel) {
  link_.reset();
  segment_.ResetWorkerChannel(0);
  absl::StatusOr<std::unique_ptr<RingEngineLink>> replacement = RingEngineLink::Create(segment_, 0);
  ASSERT_TRUE(replacement.ok());
  EXPECT_FALSE((*replacement)->Ready());
  segment_.channel(0).CompleteReset();  // what the engine does
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!(*replacement)->Ready() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE((*replacement)->Ready());
}

}  // namespace
}  // namespace gecd::worker
