#include "config/config_edit.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_paths.h"

namespace gecd::config {
namespace {

using ::testing::HasSubstr;

constexpr char kCommented[] = R"(# the operator's notes
model:
  dir: /models/m   # where the model lives
engine:
  backend: cpu            # cpu | cuda | echo
  max_batch_size: 128     # sequences per engine step
  graph_batch_sizes: "1,2,4"  # decode graphs
server:
  listen: 0.0.0.0:50051
)";

TEST(ConfigEdit, ReplacesValuesInPlaceAndKeepsComments) {
  absl::StatusOr<std::string> edited = SetConfigValues(
      kCommented, {{"engine.max_batch_size", "256"}, {"engine.graph_batch_sizes", ""}});
  ASSERT_TRUE(edited.ok()) << edited.status();
  EXPECT_EQ(*edited, R"(# the operator's notes
model:
  dir: /models/m   # where the model lives
engine:
  backend: cpu            # cpu | cuda | echo
  max_batch_size: 256     # sequences per engine step
  graph_batch_sizes: ""  # decode graphs
server:
  listen: 0.0.0.0:50051
)");
  absl::StatusOr<Config> config = ParseConfig(*edited, "tuned.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->engine.max_batch_size, 256);
  EXPECT_EQ(config->engine.graph_batch_sizes, "");
}

TEST(ConfigEdit, AddsMissingKeysToTheirSectionOrANewOne) {
  absl::StatusOr<std::string> edited =
      SetConfigValues(kCommented, {{"engine.max_step_tokens", "4096"},
                                   {"server.workers", "3"},
                                   {"logging.level", "warn"},
                                   {"route.kubernetes.service", "gecd"}});
  ASSERT_TRUE(edited.ok()) << edited.status();
  EXPECT_THAT(*edited, HasSubstr("engine:\n  max_step_tokens: 4096\n  backend: cpu"));
  EXPECT_THAT(*edited, HasSubstr("server:\n  workers: 3\n  listen: 0.0.0.0:50051\n"));
  EXPECT_THAT(*edited, HasSubstr("\nlogging:\n  level: \"warn\"\n"));
  EXPECT_THAT(*edited, HasSubstr("\nroute:\n  kubernetes:\n    service: \"gecd\"\n"));
  EXPECT_THAT(*edited, HasSubstr("# where the model lives"));
  absl::StatusOr<Config> config = ParseConfig(*edited, "tuned.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->engine.max_step_tokens, 4096);
  EXPECT_EQ(config->engine.max_batch_size, 128);
  EXPECT_EQ(config->server.workers, 3);
  EXPECT_EQ(config->logging.level, "warn");
  EXPECT_EQ(config->route.kubernetes.service, "gecd");
}

TEST(ConfigEdit, EditsTheDefaultConfigInPlace) {
  std::ifstream in(gecd::testing::SourceDir() + "/configs/gecd.yaml");
  const std::string original((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  ASSERT_FALSE(original.empty());
  absl::StatusOr<std::string> edited =
      SetConfigValues(original, {{"engine.max_batch_size", "64"},
                                 {"server.workers", "1"},
                                 {"model.dir", "../../models/gecd-gec-small"}});
  ASSERT_TRUE(edited.ok()) << edited.status();
  // Only those three lines differ.
  const std::vector<std::string> before = absl::StrSplit(original, '\n');
  const std::vector<std::string> after = absl::StrSplit(*edited, '\n');
  ASSERT_EQ(before.size(), after.size());
  int changed = 0;
  for (size_t i = 0; i < before.size(); ++i) changed += before[i] != after[i];
  EXPECT_EQ(changed, 3);
  EXPECT_THAT(*edited, HasSubstr("  max_batch_size: 64     # sequences per engine step"));
  EXPECT_THAT(*edited, HasSubstr("  workers: 1              # front-end worker processes"));
  EXPECT_THAT(*edited, HasSubstr("  dir: \"../../models/gecd-gec-small\"\n"));
}

TEST(ConfigEdit, QuotedAndFlowLayoutsStillReadBack) {
  // A single-quoted value is replaced in place; a flow mapping is written anew.
  absl::StatusOr<std::string> quoted =
      SetConfigValues("engine:\n  backend: 'cpu'  # x\n", {{"engine.backend", "echo"}});
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(*quoted, "engine:\n  backend: \"echo\"  # x\n");
  absl::StatusOr<std::string> flow =
      SetConfigValues("engine: {backend: cpu, max_batch_size: 8}\n# gone\n",
                      {{"engine.max_batch_size", "16"}, {"server.workers", "2"}});
  ASSERT_TRUE(flow.ok()) << flow.status();
  absl::StatusOr<Config> config = ParseConfig(*flow, "tuned.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->engine.max_batch_size, 16);
  EXPECT_EQ(config->engine.backend, "cpu");
  EXPECT_EQ(config->server.workers, 2);
  // An empty file and a section left empty.
  for (const char* text : {"", "engine:\n"}) {
    absl::StatusOr<std::string> edited = SetConfigValues(text, {{"engine.max_batch_size", "4"}});
    ASSERT_TRUE(edited.ok()) << edited.status();
    config = ParseConfig(*edited, "tuned.yaml");
    ASSERT_TRUE(config.ok()) << config.status() << *edited;
    EXPECT_EQ(config->engine.max_batch_size, 4);
  }
}

TEST(ConfigEdit, RefusesUnknownKeysBadValuesAndBadYaml) {
  absl::StatusOr<std::string> r = SetConfigValues(kCommented, {{"engine.max_batch", "4"}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("engine.max_batch"));
  r = SetConfigValues(kCommented, {{"engine.max_batch_size", "0"}});
  EXPECT_THAT(r.status().message(), HasSubstr("engine.max_batch_size"));
  r = SetConfigValues("engine: [1, 2\n", {{"engine.max_batch_size", "4"}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  r = SetConfigValues("engine: cpu\n", {{"engine.max_batch_size", "4"}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);  // a scalar, not a section
}

TEST(ConfigEdit, MovingAConfigRebasesItsRelativePaths) {
  const std::string text =
      "model:\n  dir: ../models/m  # the model\nspelling:\n  dictionary: "
      "/usr/share/hunspell/en_US\n"
      "  lexicon: lexicon.tsv\n";
  absl::StatusOr<std::string> moved = MoveConfigText(text, "/srv/gecd/configs", "/srv/out");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(
      *moved,
      "model:\n  dir: \"../gecd/models/m\"  # the model\nspelling:\n"
      "  dictionary: /usr/share/hunspell/en_US\n  lexicon: \"../gecd/configs/lexicon.tsv\"\n");
  // Into another tree: absolute paths.
  moved = MoveConfigText(text, "/srv/gecd/configs", "/tmp/out");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_THAT(*moved, HasSubstr("dir: \"/srv/gecd/models/m\"  # the model\n"));
  EXPECT_THAT(*moved, HasSubstr("lexicon: \"/srv/gecd/configs/lexicon.tsv\"\n"));
  moved = MoveConfigText(text, "/srv/gecd/configs", "/srv/gecd/configs");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_THAT(*moved, HasSubstr("dir: \"../models/m\""));
  EXPECT_EQ(RelocatePath("/srv/gecd/models/m", "/srv/gecd/models/m"), ".");
  EXPECT_EQ(RelocatePath("/srv/gecd/models/m", "/srv"), "gecd/models/m");
  moved = MoveConfigText("engine:\n  backend: echo\n", "/a", "/b");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, "engine:\n  backend: echo\n");
}

}  // namespace
}  // namespace gecd::config
