#include "loadgen/typing_session.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string_view>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gecd/v1/grammar.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "ptb_text/ptb_text.h"

namespace gecd::loadgen {
namespace {

constexpr const char* kInsertedWords[] = {"really", "very", "also", "just"};

// A draw in [0, n), n > 0. Not std::uniform_int_distribution: its algorithm is the standard
// library's own, so the same seed would give other sessions under libc++ than under libstdc++;
// mt19937_64's output is fixed by the standard. The modulo's bias is below n / 2^64.
size_t Below(std::mt19937_64& rng, size_t n) { return rng() % n; }

// The word misspelt: its code points reversed when it has more than 3 and that changes it, else
// an "s" added. Code points, not bytes, so that the text stays valid UTF-8 (the server refuses
// anything else).
std::string Misspelt(const std::string& word) {
  std::vector<std::string_view> code_points;
  for (size_t i = 0; i < word.size();) {
    size_t end = i + 1;
    while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) ++end;
    code_points.push_back(std::string_view(word).substr(i, end - i));
    i = end;
  }
  if (code_points.size() > 3) {
    std::string reversed;
    for (auto it = code_points.rbegin(); it != code_points.rend(); ++it) reversed += *it;
    if (reversed != word) return reversed;
  }
  return word + "s";
}

// One edit of one sentence, as MakeTypingSessions's contract says; never returns it unchanged.
std::string Edited(std::string_view sentence, std::mt19937_64& rng) {
  std::vector<std::string> words =
      absl::StrSplit(absl::string_view(sentence.data(), sentence.size()), ' ');
  const size_t n = words.size();
  enum Kind { kInsert, kDelete, kMisspell };
  const size_t kind = Below(rng, 3);
  if (kind == kInsert || n < 3) {
    // After the first word, up to before the last (after the only one when there is one).
    const size_t at = 1 + Below(rng, std::max<size_t>(n - 1, 1));
    words.insert(words.begin() + at, kInsertedWords[Below(rng, std::size(kInsertedWords))]);
  } else {
    const size_t at = 1 + Below(rng, n - 2);  // an inner word
    if (kind == kDelete) {
      words.erase(words.begin() + at);
    } else {
      words[at] = Misspelt(words[at]);
    }
  }
  return absl::StrJoin(words, " ");
}

// A JFLEG line as MakeTypingSessions's contract says a user types it: many sources begin in
// lower case ("i think ..."), which a writer's sentence would not. Opening quotes and brackets
// before the first letter are passed over; a digit or a non-ASCII byte that comes first is left
// as it is (ascii_toupper changes neither).
std::string Typed(std::string_view line) {
  std::string sentence = ptb_text::PtbDetokenize(line);
  const auto first = std::find_if(sentence.begin(), sentence.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           static_cast<unsigned char>(c) >= 0x80;
  });
  if (first != sentence.end()) *first = absl::ascii_toupper(static_cast<unsigned char>(*first));
  return sentence;
}

absl::Status CheckOptions(const TypingSessionOptions& options) {
  const auto below = [](const char* flag, int value, int least) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be at least ", least, ", not ", value));
  };
  if (options.sessions < 1) return below("--typing-sessions", options.sessions, 1);
  if (options.edits < 0) return below("--typing-edits", options.edits, 0);
  if (options.paragraphs < 1) return below("--typing-paragraphs", options.paragraphs, 1);
  if (options.sentences_per_paragraph < 1) {
    return below("--typing-sentences", options.sentences_per_paragraph, 1);
  }
  return absl::OkStatus();
}

// One Correct, its outcome added to `pass`.
void SendText(v1::GrammarCorrection::Stub& stub, const RunConfig& config, const std::string& text,
              bool cache, TypingPass& pass) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(config.deadline_ms));
  if (!config.authorization.empty()) context.AddMetadata("authorization", config.authorization);
  v1::CorrectRequest request;
  request.set_text(text);
  request.set_priority(config.priority);
  request.set_cache(cache);
  v1::CorrectResponse response;
  const Clock::time_point start = Clock::now();
  const grpc::Status status = stub.Correct(&context, request, &response);
  ++pass.requests;
  if (!status.ok()) {
    ++pass.errors[StatusCodeName(status.error_code())];
    return;
  }
  ++pass.ok;
  pass.ok_latency.Record(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  pass.sentences += response.sentences_size();
  for (const v1::Sentence& sentence : response.sentences()) pass.cached += sentence.cached();
  pass.prompt_tokens += response.prompt_tokens();
  pass.output_tokens += response.output_tokens();
}

void Add(const TypingPass& from, TypingPass& to) {
  to.requests += from.requests;
  to.ok += from.ok;
  for (const auto& [code, count] : from.errors) to.errors[code] += count;
  to.sentences += from.sentences;
  to.cached += from.cached;
  to.prompt_tokens += from.prompt_tokens;
  to.output_tokens += from.output_tokens;
  to.ok_latency.Merge(from.ok_latency);
}

// Every session's texts once, `parallel` sessions at a time. Each thread sums into its own
// TypingPass, merged once all have joined, so nothing is shared but the next session's index.
TypingPass RunPass(const RunConfig& config,
                   const std::vector<std::unique_ptr<v1::GrammarCorrection::Stub>>& stubs,
                   const std::vector<std::vector<std::string>>& texts, int parallel, bool cache) {
  std::atomic<size_t> next_session{0};
  std::vector<TypingPass> partial(parallel);
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&, t] {
      for (size_t s; (s = next_session.fetch_add(1)) < texts.size();) {
        for (const std::string& text : texts[s]) {
          SendText(*stubs[s % stubs.size()], config, text, cache, partial[t]);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  TypingPass pass;
  for (const TypingPass& p : partial) Add(p, pass);
  pass.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return pass;
}

std::string PassLine(const char* name, const TypingPass& pass) {
  std::string line = absl::StrFormat(
      "%-16s %u requests (%u OK), %u sentences, %u from the cache (%.1f%%), "
      "%.1f engine tokens/request, latency p50 %.1f ms p99 %.1f ms, %.1f s",
      name, pass.requests, pass.ok, pass.sentences, pass.cached, pass.cached_rate() * 100,
      pass.tokens_per_request(), pass.ok_latency.Percentile(0.5) / 1e3,
      pass.ok_latency.Percentile(0.99) / 1e3, pass.elapsed_s);
  for (const auto& [code, count] : pass.errors) absl::StrAppend(&line, ", ", code, " ", count);
  return line;
}

nlohmann::json PassJson(const TypingPass& pass) {
  return {{"requests", pass.requests},
          {"ok", pass.ok},
          {"errors_by_code", pass.errors},
          {"sentences", pass.sentences},
          {"cached", pass.cached},
          {"cached_rate", pass.cached_rate()},
          {"prompt_tokens", pass.prompt_tokens},
          {"output_tokens", pass.output_tokens},
          {"tokens_per_request", pass.tokens_per_request()},
          {"elapsed_s", pass.elapsed_s},
          {"latency_ms",
           {{"p50", pass.ok_latency.Percentile(0.5) / 1e3},
            {"p99", pass.ok_latency.Percentile(0.99) / 1e3},
            {"max", pass.ok_latency.max() / 1e3}}}};
}

}  // namespace

absl::StatusOr<std::vector<TypingSession>> MakeTypingSessions(const std::vector<std::string>& lines,
                                                              const TypingSessionOptions& options) {
  if (absl::Status valid = CheckOptions(options); !valid.ok()) return valid;
  std::vector<std::string> sentences;
  for (const std::string& line : lines) {
    std::string sentence = Typed(line);
    if (!sentence.empty()) sentences.push_back(std::move(sentence));
  }
  const size_t per_text = static_cast<size_t>(options.paragraphs) *
                          static_cast<size_t>(options.sentences_per_paragraph);
  if (sentences.size() < per_text) {
    return absl::InvalidArgumentError(
        absl::StrCat("--input has ", sentences.size(), " sentences; a typing session's text needs ",
                     per_text, " (--typing-paragraphs ", options.paragraphs,
                     " x --typing-sentences ", options.sentences_per_paragraph, ")"));
  }
  const size_t windows = sentences.size() - per_text + 1;
  std::mt19937_64 rng(options.seed);
  std::vector<TypingSession> sessions(options.sessions);
  for (size_t s = 0; s < sessions.size(); ++s) {
    std::vector<std::vector<std::string>>& versions = sessions[s].versions;
    const size_t first = (s * per_text) % windows;
    versions.emplace_back(sentences.begin() + first, sentences.begin() + first + per_text);
    for (int e = 0; e < options.edits; ++e) {
      std::vector<std::string> next = versions.back();
      std::string& changed = next[Below(rng, per_text)];
      changed = Edited(changed, rng);
      versions.push_back(std::move(next));
    }
  }
  return sessions;
}

std::string TypingText(const std::vector<std::string>& sentences, int sentences_per_paragraph) {
  std::string text;
  for (size_t i = 0; i < sentences.size(); ++i) {
    if (i > 0) text += i % sentences_per_paragraph == 0 ? "\n\n" : " ";
    text += sentences[i];
  }
  return text;
}

double TypingPass::tokens_per_request() const {
  return ok == 0 ? 0 : static_cast<double>(prompt_tokens + output_tokens) / ok;
}

double TypingPass::cached_rate() const {
  return sentences == 0 ? 0 : static_cast<double>(cached) / sentences;
}

double TypingResult::tokens_reduction() const {
  const double on = cache_on.tokens_per_request();
  return on == 0 ? 0 : cache_off.tokens_per_request() / on;
}

absl::StatusOr<TypingResult> RunTypingSessions(const RunConfig& config,
                                               const std::vector<TypingSession>& sessions,
                                               int sentences_per_paragraph) {
  if (config.targets.empty()) return absl::InvalidArgumentError("no target to send to");
  if (config.channels < static_cast<int>(config.targets.size())) {
    return absl::InvalidArgumentError(absl::StrCat(config.channels, " channels for ",
                                                   config.targets.size(),
                                                   " targets: each target needs one"));
  }
  // No more channels than sessions: one would carry nothing.
  const int channels =
      static_cast<int>(std::min<size_t>(config.channels, std::max<size_t>(sessions.size(), 1)));
  std::vector<std::unique_ptr<v1::GrammarCorrection::Stub>> stubs;
  for (int i = 0; i < channels; ++i) {
    std::shared_ptr<grpc::Channel> channel = NewLoadChannel(config, i);
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to ", config.targets[i % config.targets.size()], " within 5 s"));
    }
    stubs.push_back(v1::GrammarCorrection::NewStub(channel));
  }
  std::vector<std::vector<std::string>> texts;
  for (const TypingSession& session : sessions) {
    std::vector<std::string>& out = texts.emplace_back();
    for (const auto& version : session.versions) {
      out.push_back(TypingText(version, sentences_per_paragraph));
    }
  }
  const int parallel = static_cast<int>(
      std::clamp<size_t>(config.concurrency, 1, std::max<size_t>(sessions.size(), 1)));
  TypingResult result;
  result.cache_off = RunPass(config, stubs, texts, parallel, /*cache=*/false);
  result.cache_on = RunPass(config, stubs, texts, parallel, /*cache=*/true);
  return result;
}

void WriteTypingTable(const TypingSessionOptions& options, const TypingResult& result,
                      std::ostream& out) {
  out << absl::StrFormat("%-16s %d x %d texts of %d paragraphs x %d sentences (seed %u)\n",
                         "typing sessions", options.sessions, options.edits + 1, options.paragraphs,
                         options.sentences_per_paragraph, options.seed);
  out << PassLine("cache off", result.cache_off) << "\n";
  out << PassLine("cache on", result.cache_on) << "\n";
  if (result.tokens_reduction() > 0) {
    out << absl::StrFormat("%-16s %.1fx fewer engine tokens per request with the cache\n",
                           "cache saves", result.tokens_reduction());
  }
}

nlohmann::json TypingJson(const TypingSessionOptions& options, const TypingResult& result) {
  nlohmann::json json = {{"sessions", options.sessions},
                         {"edits", options.edits},
                         {"paragraphs", options.paragraphs},
                         {"sentences_per_paragraph", options.sentences_per_paragraph},
                         {"seed", options.seed},
                         {"cache_off", PassJson(result.cache_off)},
                         {"cache_on", PassJson(result.cache_on)},
                         {"tokens_reduction", nullptr}};
  if (result.tokens_reduction() > 0) json["tokens_reduction"] = result.tokens_reduction();
  return json;
}

}  // namespace gecd::loadgen
