// gecd correct: a client of a running daemon for people and scripts.
#ifdef GECD_HAVE_SERVER
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace gecd::cli {
namespace {

struct CorrectOptions {
  std::string server = "127.0.0.1:50051";
  std::string text;
  bool json = false;
  int timeout_ms = 30000;
};

absl::StatusOr<std::string> ReadAll(std::istream& in, const std::string& name) {
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", name));
  return text;
}

absl::StatusOr<CorrectOptions> ParseOptions(const Args& args) {
  CorrectOptions o;
  o.server = args.Get("server").value_or(o.server);
  o.json = args.Has("json");
  auto timeout = args.GetInt("timeout-ms", o.timeout_ms);
  if (!timeout.ok()) return timeout.status();
  o.timeout_ms = *timeout;
  if (o.timeout_ms < 1) return absl::InvalidArgumentError("--timeout-ms must be positive");
  const std::optional<std::string> file = args.Get("file");
  if (file && !args.positionals().empty()) {
    return absl::InvalidArgumentError("give the text as arguments or --file, not both");
  }
  if (!args.positionals().empty()) {
    o.text = absl::StrJoin(args.positionals(), " ");
  } else if (file && *file != "-") {
    std::ifstream in(*file, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("--file ", *file, ": cannot open"));
    auto text = ReadAll(in, *file);
    if (!text.ok()) return text.status();
    o.text = *std::move(text);
  } else {
    auto text = ReadAll(std::cin, "stdin");
    if (!text.ok()) return text.status();
    o.text = *std::move(text);
  }
  return o;
}

const char* KindName(gecd::v1::EditKind kind) {
  switch (kind) {
    case gecd::v1::EDIT_KIND_SPELLING:
      return "spelling";
    case gecd::v1::EDIT_KIND_PUNCTUATION:
      return "punctuation";
    case gecd::v1::EDIT_KIND_CAPITALIZATION:
      return "capitalization";
    case gecd::v1::EDIT_KIND_WHITESPACE:
      return "whitespace";
    case gecd::v1::EDIT_KIND_WORD_FORM:
      return "word form";
    case gecd::v1::EDIT_KIND_WORD_CHOICE:
      return "word choice";
    case gecd::v1::EDIT_KIND_MISSING_WORD:
      return "missing word";
    case gecd::v1::EDIT_KIND_UNNECESSARY_WORD:
      return "unnecessary word";
    case gecd::v1::EDIT_KIND_WORD_ORDER:
      return "word order";
    default:
      return "other";
  }
}

// The corrected text, then one line per edit. On a terminal the original text is shown with
// each edit struck in red and its replacement in green; piped, plain tab-separated lines.
void PrintHuman(const std::string& text, const gecd::v1::CorrectResponse& response, bool terminal) {
  if (terminal) {
    std::string marked;
    size_t at = 0;
    for (const gecd::v1::Edit& e : response.edits()) {
      marked += text.substr(at, e.start() - at);
      marked += absl::StrCat("\033[9;31m", text.substr(e.start(), e.end() - e.start()),
                             "\033[0m\033[4;32m", e.replacement(), "\033[0m");
      at = e.end();
    }
    marked += text.substr(at);
    std::printf("%s\n", marked.c_str());
  } else {
    std::printf("%s\n", response.corrected_text().c_str());
  }
  for (const gecd::v1::Edit& e : response.edits()) {
    std::printf("%u\t%u\t%s\t%s\t%s\n", e.start(), e.end(),
                text.substr(e.start(), e.end() - e.start()).c_str(), e.replacement().c_str(),
                KindName(e.kind()));
  }
}

}  // namespace

int RunCorrect(const std::vector<std::string>& argv) {
  const CommandLine command = {
      .name = "correct",
      .flags =
          {
              {"server", true, "HOST:PORT of gecd serve (default 127.0.0.1:50051)"},
              {"file", true, "read the text from FILE ('-': stdin, also the default)"},
              {"json", false, "print the whole response as JSON"},
              {"timeout-ms", true, "the call's deadline (default 30000)"},
          },
      .usage =
          "usage: gecd correct [--server HOST:PORT] [--json] [--file FILE | TEXT...]\n"
          "Corrects a text with a running daemon and prints the corrected text and the "
          "edits\n(start, end in UTF-8 bytes, original, replacement, kind): marked in "
          "colour on a\nterminal, tab-separated when piped, JSON with --json. Exits 1 "
          "with the status on an\nerror.\n",
  };
  int exit_code = 0;
  std::optional<CorrectOptions> o = ParseCommandLine(command, argv, ParseOptions, &exit_code);
  if (!o) return exit_code;
  auto stub = gecd::v1::GrammarCorrection::NewStub(
      grpc::CreateChannel(o->server, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o->timeout_ms));
  gecd::v1::CorrectRequest request;
  request.set_text(o->text);
  gecd::v1::CorrectResponse response;
  const grpc::Status status = stub->Correct(&context, request, &response);
  if (!status.ok()) {
    std::fprintf(stderr, "gecd correct: %s: code %d: %s\n", o->server.c_str(),
                 static_cast<int>(status.error_code()), status.error_message().c_str());
    return 1;
  }
  if (o->json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    if (!google::protobuf::util::MessageToJsonString(response, &json, options).ok()) {
      std::fprintf(stderr, "gecd correct: the response does not convert to JSON\n");
      return 1;
    }
    std::printf("%s\n", json.c_str());
    return 0;
  }
  PrintHuman(o->text, response, isatty(STDOUT_FILENO) != 0);
  return 0;
}

}  // namespace gecd::cli
#endif  // GECD_HAVE_SERVER
