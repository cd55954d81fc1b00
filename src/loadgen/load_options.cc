#include "loadgen/load_options.h"

#include <fstream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/args.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"

namespace gecd::loadgen {

const char kLoadUsage[] = R"(usage: gecd-load --input FILE [options]

Drives a gecd.v1.GrammarCorrection server with one sentence per request and reports achieved
QPS, latency percentiles (of successful requests) and errors by status code; or, with
--typing-sessions, replays typing sessions and reports what the server's sentence cache saves.

  --target HOST:PORT[,HOST:PORT...]
                         server address (127.0.0.1:50051); with several, the channels are
                         spread round-robin over them (channel i on target i mod count), and
                         so is the load when --channels is a multiple of their count
  --input FILE           sentences, one per line, cycled (required)
  --text-separator LINE  the input holds whole texts (paragraphs, line breaks) instead,
                         each ended by a line that is exactly LINE (e.g. %%)
  --qps N                open loop: Poisson arrivals at N requests/s (default 100)
  --profile SPEC         open loop with a varying rate: ramp:FROM:TO (linear over --duration)
                         or diurnal:MIN:MAX:PERIOD_S (a sine from MIN up to MAX and back)
  --concurrency N        closed loop: N requests in flight, each answered one replaced;
                         with --typing-sessions, N sessions at a time (1)
  --duration D           measured time (10s); D is 30, 30s, 500ms or 2m
  --warmup D             time sent but not measured, before the window (1s)
  --deadline-ms N        per-request gRPC deadline (5000); with --stream, how long after
                         the run a stream may take to answer what it still owes
  --stream               send on CorrectStream (one stream per channel) instead of Correct
  --channels N           connections, each with its own channel args (8)
  --threads N            completion-queue threads (2)
  --honor-pushback       closed loop: after a refusal, wait the server's grpc-retry-pushback-ms
                         before the slot's next send (default: at once)
  --priority P           the requests' priority class: interactive (the server's default) or
                         batch (waits in the server for room, up to --deadline-ms)
  --tls-ca FILE          speak TLS, trusting the CAs in FILE (PEM) for the server's certificate
  --tls-server-name N    the name the server's certificate carries, if not the target's host
  --token-file FILE      send 'authorization: Bearer <the file's first line>' (a file, so the
                         token is not in the process list)
  --seed N               arrival schedule seed; with --typing-sessions, the edits' (1)
  --json FILE            write the report (or the find-max trials) as JSON
  --csv FILE             write per-second rows: t,sent,ok,errors,p50_ms,p99_ms
  --metrics-port N       the daemon's metrics port on this machine (server.metrics_listen, in
                         plain HTTP: not with metrics_tls): the report adds what speculative
                         decoding kept over the run (warm-up included): the share of draft
                         tokens accepted, tokens per sequence-step
  --find-max             search the highest open-loop QPS meeting the SLO: start at --qps,
                         double until a trial fails, then bisect; a failed trial is run
                         once more and fails only if that run fails too; each trial is
                         --warmup plus --duration
  --slo-p99 D            the latency objective: find-max's SLO, and what an OK answer must
                         meet to count as goodput (1s)
  --max-error-rate F     the find-max error-rate limit (0.01); RESOURCE_EXHAUSTED refusals
                         (the server shedding load) are errors too, so the max is the rate
                         served within the SLO while refusing at most F of the requests
  --precision F          find-max stops when the bracket is within F of its top (0.05)
  --max-trials N         find-max trial limit (16)
  --typing-sessions N    instead of a timed run, N typing sessions as a writing assistant
                         sends them: a text of --typing-paragraphs paragraphs of
                         --typing-sentences sentences (consecutive --input lines, tokenized as
                         JFLEG's sources are: joined back roughly), sent as first typed, then
                         again after each of --typing-edits edits (a word inserted, deleted or
                         misspelt in one sentence), each text once its predecessor is answered.
                         The same texts go once with `cache: false`, then with the cache; the
                         report gives for each pass the sentences, the share answered from the
                         server's sentence cache, engine tokens (prompt + output) per request
                         and latency. A session keeps to one connection, hence to one server
                         worker and its cache. Run it against a server that has not seen these
                         texts yet: a second run finds them cached
  --typing-edits N       edits per typing session (10; 0: one text each)
  --typing-paragraphs N  paragraphs of a typing session's text (3)
  --typing-sentences N   sentences of each of its paragraphs (5)
  --help                 this text

Open-loop latency counts from each request's intended send time, so a server (or client)
that falls behind shows as latency, not as fewer requests. Latency percentiles are of OK
answers only; RESOURCE_EXHAUSTED refusals are reported apart (count, share, latency).
)";

namespace {

absl::Status BadValue(std::string_view flag, std::string_view value, std::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), ": '", std::string(value), "' is not ", std::string(want)));
}

absl::StatusOr<double> ParsePositive(std::string_view flag, std::string_view value) {
  double v;
  if (!absl::SimpleAtod(std::string(value), &v) || !(v > 0)) {
    return BadValue(flag, value, "a number > 0");
  }
  return v;
}

// "host:port" or "[v6]:port", port in [1, 65535]; IPv6 without brackets is ambiguous.
bool IsHostPort(absl::string_view v) {
  const size_t colon = v.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return false;
  absl::string_view host = v.substr(0, colon);
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (!bracketed && host.find_first_of("[]:") != absl::string_view::npos) return false;
  int port;
  return absl::SimpleAtoi(v.substr(colon + 1), &port) && port >= 1 && port <= 65535;
}

absl::StatusOr<std::vector<std::string>> ParseTargets(std::string_view flag,
                                                      std::string_view value) {
  std::vector<std::string> targets;
  for (absl::string_view item :
       absl::StrSplit(absl::string_view(value.data(), value.size()), ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!IsHostPort(item)) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(flag), ": '", std::string(item),
                                                     "' in '", std::string(value),
                                                     "' is not HOST:PORT or [V6]:PORT"));
    }
    targets.emplace_back(item);
  }
  return targets;
}

absl::StatusOr<int> ParseCount(std::string_view flag, std::string_view value) {
  int v;
  if (!absl::SimpleAtoi(std::string(value), &v) || v < 1) {
    return BadValue(flag, value, "an integer >= 1");
  }
  return v;
}

}  // namespace

absl::StatusOr<double> ParseDuration(std::string_view text) {
  absl::string_view number(text.data(), text.size());
  double scale = 1;
  if (absl::ConsumeSuffix(&number, "ms")) {
    scale = 1e-3;
  } else if (absl::ConsumeSuffix(&number, "s")) {
  } else if (absl::ConsumeSuffix(&number, "m")) {
    scale = 60;
  }
  double v;
  if (!absl::SimpleAtod(std::string(number), &v) || !(v >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text), "' is not a duration (30, 30s, 500ms, 2m)"));
  }
  return v * scale;
}

absl::StatusOr<LoadOptions> ParseLoadOptions(const std::vector<std::string>& argv) {
  static const std::vector<FlagSpec> kFlags = {{"help", false, ""},
                                               {"stream", false, ""},
                                               {"find-max", false, ""},
                                               {"honor-pushback", false, ""},
                                               {"target", true, ""},
                                               {"input", true, ""},
                                               {"qps", true, ""},
                                               {"profile", true, ""},
                                               {"concurrency", true, ""},
                                               {"duration", true, ""},
                                               {"warmup", true, ""},
                                               {"slo-p99", true, ""},
                                               {"deadline-ms", true, ""},
                                               {"channels", true, ""},
                                               {"threads", true, ""},
                                               {"priority", true, ""},
                                               {"seed", true, ""},
                                               {"json", true, ""},
                                               {"csv", true, ""},
                                               {"max-error-rate", true, ""},
                                               {"precision", true, ""},
                                               {"max-trials", true, ""},
                                               {"tls-ca", true, ""},
                                               {"tls-server-name", true, ""},
                                               {"token-file", true, ""},
                                               {"text-separator", true, ""},
                                               {"metrics-port", true, ""},
                                               {"typing-sessions", true, ""},
                                               {"typing-edits", true, ""},
                                               {"typing-paragraphs", true, ""},
                                               {"typing-sentences", true, ""}};
  bool help = false;
  ASSIGN_OR_RETURN(const Args args, ParseToolArgs(argv, kFlags, &help));
  LoadOptions options;
  RunConfig& run = options.run;
  options.help = help;
  run.stream = args.Has("stream");
  options.find_max = args.Has("find-max");
  run.honor_pushback = args.Has("honor-pushback");
  std::optional<double> qps;
  const std::string profile = args.Get("profile").value_or("");
  if (auto v = args.Get("target")) {
    ASSIGN_OR_RETURN(run.targets, ParseTargets("--target", *v));
  }
  if (auto v = args.Get("input")) options.input_path = *v;
  if (auto v = args.Get("text-separator")) {
    if (v->empty()) return absl::InvalidArgumentError("--text-separator: an empty line");
    options.text_separator = *v;
  }
  if (auto v = args.Get("qps")) {
    ASSIGN_OR_RETURN(qps, ParsePositive("--qps", *v));
  }
  if (auto v = args.Get("concurrency")) {
    ASSIGN_OR_RETURN(run.concurrency, ParseCount("--concurrency", *v));
  }
  if (auto v = args.Get("duration")) {
    ASSIGN_OR_RETURN(run.duration_s, ParseDuration(*v));
  }
  if (auto v = args.Get("warmup")) {
    ASSIGN_OR_RETURN(run.warmup_s, ParseDuration(*v));
  }
  if (auto v = args.Get("slo-p99")) {
    ASSIGN_OR_RETURN(options.find_max_options.slo_p99_s, ParseDuration(*v));
    run.objective =
        std::chrono::microseconds(static_cast<int64_t>(options.find_max_options.slo_p99_s * 1e6));
  }
  if (auto v = args.Get("deadline-ms")) {
    ASSIGN_OR_RETURN(run.deadline_ms, ParseCount("--deadline-ms", *v));
  }
  if (auto v = args.Get("channels")) {
    ASSIGN_OR_RETURN(run.channels, ParseCount("--channels", *v));
  }
  if (auto v = args.Get("threads")) {
    ASSIGN_OR_RETURN(run.threads, ParseCount("--threads", *v));
  }
  if (auto v = args.Get("priority")) {
    if (*v != "interactive" && *v != "batch") {
      return BadValue("--priority", *v, "interactive or batch");
    }
    run.priority = *v;
  }
  if (auto v = args.Get("tls-ca")) {
    absl::StatusOr<std::string> pem = ReadFileToString(*v);
    if (!pem.ok())
      return absl::InvalidArgumentError(absl::StrCat("--tls-ca: ", pem.status().message()));
    run.tls_ca_pem = *std::move(pem);
  }
  if (auto v = args.Get("tls-server-name")) run.tls_server_name = *v;
  if (auto v = args.Get("token-file")) {
    absl::StatusOr<std::string> token = ReadFileToString(*v);
    if (!token.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token-file: ", token.status().message()));
    }
    const absl::string_view first = absl::StripAsciiWhitespace(
        absl::string_view(*token).substr(0, absl::string_view(*token).find('\n')));
    if (first.empty())
      return absl::InvalidArgumentError(absl::StrCat("--token-file ", *v, ": empty"));
    run.authorization = absl::StrCat("Bearer ", first);
  }
  if (auto v = args.Get("seed"); v && !absl::SimpleAtoi(*v, &run.seed)) {
    return BadValue("--seed", *v, "an integer");
  }
  if (auto v = args.Get("json")) options.json_path = *v;
  if (auto v = args.Get("csv")) options.csv_path = *v;
  if (auto v = args.Get("metrics-port")) {
    if (!absl::SimpleAtoi(*v, &options.metrics_port) || options.metrics_port < 1 ||
        options.metrics_port > 65535) {
      return BadValue("--metrics-port", *v, "a port in [1, 65535]");
    }
  }
  if (auto v = args.Get("max-error-rate")) {
    double& rate = options.find_max_options.max_error_rate;
    if (!absl::SimpleAtod(*v, &rate) || rate < 0 || rate > 1) {
      return BadValue("--max-error-rate", *v, "a fraction in [0, 1]");
    }
  }
  if (auto v = args.Get("precision")) {
    ASSIGN_OR_RETURN(options.find_max_options.precision, ParsePositive("--precision", *v));
  }
  if (auto v = args.Get("max-trials")) {
    ASSIGN_OR_RETURN(options.find_max_options.max_trials, ParseCount("--max-trials", *v));
  }
  TypingSessionOptions& typing = options.typing;
  if (auto v = args.Get("typing-sessions")) {
    ASSIGN_OR_RETURN(typing.sessions, ParseCount("--typing-sessions", *v));
  }
  if (auto v = args.Get("typing-edits");
      v && (!absl::SimpleAtoi(*v, &typing.edits) || typing.edits < 0)) {
    return BadValue("--typing-edits", *v, "an integer >= 0");
  }
  if (auto v = args.Get("typing-paragraphs")) {
    ASSIGN_OR_RETURN(typing.paragraphs, ParseCount("--typing-paragraphs", *v));
  }
  if (auto v = args.Get("typing-sentences")) {
    ASSIGN_OR_RETURN(typing.sentences_per_paragraph, ParseCount("--typing-sentences", *v));
  }
  typing.seed = run.seed;
  if (options.help) return options;
  if (options.input_path.empty()) return absl::InvalidArgumentError("--input FILE is required");
  if (typing.sessions > 0) {
    // The workload sends each session's texts in turn until all are answered: there is no
    // rate, window or timeline for these to set, and a text is built from sentences, one a line.
    for (const char* timed :
         {"qps", "profile", "find-max", "stream", "duration", "warmup", "csv", "honor-pushback",
          "slo-p99", "max-error-rate", "precision", "max-trials", "threads", "text-separator"}) {
      if (args.Has(timed)) {
        return absl::InvalidArgumentError(absl::StrCat("--typing-sessions excludes --", timed));
      }
    }
  } else {
    for (const char* flag : {"typing-edits", "typing-paragraphs", "typing-sentences"}) {
      if (args.Has(flag)) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, " needs --typing-sessions"));
      }
    }
  }
  if (!(run.duration_s > 0)) return absl::InvalidArgumentError("--duration must be > 0");
  if (run.channels < static_cast<int>(run.targets.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--channels ", run.channels,
                                                   " is fewer than the ", run.targets.size(),
                                                   " --target addresses: each needs one"));
  }
  if (run.concurrency > 0 && (qps.has_value() || !profile.empty() || options.find_max)) {
    return absl::InvalidArgumentError(
        "--concurrency (closed loop) excludes --qps, --profile and --find-max (open loop)");
  }
  if (!profile.empty() && (qps.has_value() || options.find_max)) {
    return absl::InvalidArgumentError("--profile excludes --qps and --find-max");
  }
  if (!profile.empty()) {
    ASSIGN_OR_RETURN(run.profile, RateProfile::Parse(profile, run.duration_s));
  } else {
    run.profile = RateProfile::Constant(qps.value_or(100));
  }
  options.find_max_options.start_qps = qps.value_or(100);
  return options;
}

absl::StatusOr<std::vector<std::string>> ReadSentences(const std::string& path,
                                                       const std::string& text_separator) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--input ", path, ": cannot be read"));
  std::vector<std::string> requests;
  std::string text;  // the whole text being read, with a separator
  auto end_text = [&] {
    if (text.find_first_not_of(" \t\n") != std::string::npos) requests.push_back(text);
    text.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (text_separator.empty()) {
      if (!line.empty()) requests.push_back(std::move(line));
    } else if (line == text_separator) {
      end_text();
    } else {
      if (!text.empty()) text += '\n';
      text += line;
    }
  }
  if (!text_separator.empty()) end_text();  // the last text needs no separator after it
  if (in.bad()) return absl::DataLossError(absl::StrCat("--input ", path, ": read error"));
  if (requests.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input ", path, text_separator.empty() ? ": no sentences" : ": no texts"));
  }
  return requests;
}

}  // namespace gecd::loadgen
