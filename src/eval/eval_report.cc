#include "eval/eval_report.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "eval/edit_kinds.h"
#include "eval/gleu.h"
#include "ptb_text/ptb_text.h"

namespace gecd::eval {
namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> Slice(const std::vector<std::string>& v, size_t begin, size_t count) {
  return std::vector<std::string>(v.begin() + begin, v.begin() + begin + count);
}

Json ThroughputJson(const System& s, size_t sentences) {
  const double wall = s.run.wall_s > 0 ? s.run.wall_s : 1e-9;
  Json j;
  j["where"] = s.where;
  j["sentences"] = sentences;
  j["failed"] = s.run.failed;
  j["wall_s"] = s.run.wall_s;
  j["sentences_per_s"] = sentences / wall;
  j["generated_tokens"] = s.run.generated_tokens;
  j["generated_tokens_per_s"] = s.run.generated_tokens / wall;
  if (s.run.sequence_steps > 0) {
    j["decode_steps_per_sentence"] = static_cast<double>(s.run.sequence_steps) / sentences;
    j["drafts_accepted"] = s.run.accepted_drafts;
    j["drafts_rejected"] = s.run.rejected_drafts;
  }
  if (s.run.engine_wall_s > 0) {
    j["engine_wall_s"] = s.run.engine_wall_s;
    j["engine_sentences_per_s"] = sentences / s.run.engine_wall_s;
  }
  Json errors = Json::array();
  for (size_t i = 0; i < s.run.errors.size() && errors.size() < 20; ++i) {
    if (!s.run.errors[i].empty()) errors.push_back({{"index", i}, {"message", s.run.errors[i]}});
  }
  j["first_errors"] = std::move(errors);
  return j;
}

Json SyntheticJson(const SyntheticScore& s) {
  Json j;
  j["overall"] = {{"sentences", s.overall.sentences},
                  {"exact", s.overall.exact},
                  {"accuracy", s.overall.accuracy()}};
  Json by_type = Json::object();
  for (const ExactMatch& row : s.by_type) {
    by_type[row.error_type] = {
        {"sentences", row.sentences}, {"exact", row.exact}, {"accuracy", row.accuracy()}};
  }
  j["by_type"] = std::move(by_type);
  j["none_sentences"] = s.none_sentences;
  j["false_changes"] = s.false_changes;
  j["false_change_rate"] = s.false_change_rate();
  return j;
}

Json EditCountsJson(const EditCounts& c) {
  // NaN (nothing to divide by) is written as null.
  return {{"proposed", c.proposed},     {"matched", c.matched}, {"reference", c.reference},
          {"precision", c.precision()}, {"recall", c.recall()}, {"f0.5", c.f05()}};
}

Json EditKindJson(const EditKindScore& s) {
  Json j;
  j["sentences"] = s.sentences;
  j["skipped"] = s.skipped;
  j["overall"] = EditCountsJson(s.overall);
  Json by_kind = Json::object();
  for (int k = 0; k < kNumEditKinds; ++k) {
    const EditCounts& c = s.by_kind[k];
    if (c.proposed == 0 && c.reference == 0) continue;
    by_kind[std::string(EditKindName(static_cast<text::EditKind>(k)))] = EditCountsJson(c);
  }
  j["by_kind"] = std::move(by_kind);
  return j;
}

std::string Percent(double v) {
  return std::isnan(v) ? std::string("     -") : absl::StrFormat("%5.1f%%", v * 100);
}

// One system's per-kind table: every kind with an edit on either side, then all kinds.
void AppendEditKinds(std::string* summary, const std::string& name, const EditKindScore& s) {
  absl::StrAppendFormat(
      summary,
      "  edits by kind, %s (%d sentences%s)\n    %-16s %8s %8s %9s %9s %7s "
      "%7s\n",
      name, s.sentences,
      s.skipped > 0 ? absl::StrFormat(", %d failed and left out", s.skipped) : std::string(),
      "kind", "proposed", "matched", "reference", "precision", "recall", "F0.5");
  const auto row = [&](std::string_view label, const EditCounts& c) {
    absl::StrAppendFormat(summary, "    %-16s %8d %8d %9d    %s  %s  %s\n", label, c.proposed,
                          c.matched, c.reference, Percent(c.precision()), Percent(c.recall()),
                          Percent(c.f05()));
  };
  for (int k = 0; k < kNumEditKinds; ++k) {
    const EditCounts& c = s.by_kind[k];
    if (c.proposed == 0 && c.reference == 0) continue;
    row(EditKindName(static_cast<text::EditKind>(k)), c);
  }
  row("all", s.overall);
}

// Which outputs a system failed on (left out of the edit scores), from `begin` on.
std::vector<bool> FailedSlice(const System& s, size_t begin, size_t count) {
  std::vector<bool> failed(count, false);
  for (size_t i = 0; i < count && begin + i < s.run.errors.size(); ++i) {
    failed[i] = !s.run.errors[begin + i].empty();
  }
  return failed;
}

}  // namespace

absl::StatusOr<Report> ScoreSystems(const EvalSets& sets, const std::vector<System>& systems,
                                    const ReportOptions& o, Json* report) {
  Json& doc = *report;
  const JflegSet* jfleg = sets.jfleg;
  const std::vector<SyntheticExample> none;
  const std::vector<SyntheticExample>& synthetic =
      sets.synthetic != nullptr ? *sets.synthetic : none;
  const std::vector<std::string>& texts = sets.texts;
  const size_t num_jfleg = jfleg != nullptr ? jfleg->sources.size() : 0;
  std::string summary;
  std::vector<std::string> failures;
  Json throughput;
  for (const System& s : systems) throughput[s.name] = ThroughputJson(s, texts.size());
  doc["throughput"] = throughput;

  if (jfleg) {
    std::vector<Tokens> sources;
    std::vector<Tokens> roundtrip;
    for (const std::string& s : jfleg->sources) {
      sources.push_back(ptb_text::SplitTokens(s));
      roundtrip.push_back(ptb_text::SplitTokens(ptb_text::PtbTokenize(ptb_text::PtbDetokenize(s))));
    }
    std::vector<std::vector<Tokens>> refs;
    for (const auto& set : jfleg->references) {
      auto& r = refs.emplace_back();
      for (const std::string& line : set) r.push_back(ptb_text::SplitTokens(line));
    }
    ASSIGN_OR_RETURN(const GleuCorpus corpus,
                     GleuCorpus::Create(sources, std::move(refs), o.gleu_iterations));
    ASSIGN_OR_RETURN(const GleuScore copy, corpus.Score(sources));
    ASSIGN_OR_RETURN(const GleuScore copy_roundtrip, corpus.Score(roundtrip));
    Json j;
    j["dir"] = jfleg->dir;
    j["split"] = jfleg->split;
    j["sentences"] = num_jfleg;
    j["references"] = jfleg->references.size();
    j["gleu_iterations"] = o.gleu_iterations;
    j["source_copy_gleu"] = copy.mean * 100;
    j["source_roundtrip_gleu"] = copy_roundtrip.mean * 100;
    absl::StrAppendFormat(&summary,
                          "JFLEG %s: %zu sentences, %zu references; GLEU (0-100), mean of %d "
                          "reference draws\n  %-12s %6.2f  (%.2f once detokenized and tokenized "
                          "again, as outputs are)\n",
                          jfleg->split, num_jfleg, jfleg->references.size(), o.gleu_iterations,
                          "source copy", copy.mean * 100, copy_roundtrip.mean * 100);
    std::vector<std::vector<std::string>> outputs;
    for (const System& s : systems) {
      std::vector<std::string> out = Slice(s.run.outputs, 0, num_jfleg);
      std::vector<Tokens> hyps;
      for (const std::string& h : out)
        hyps.push_back(ptb_text::SplitTokens(ptb_text::PtbTokenize(h)));
      ASSIGN_OR_RETURN(const GleuScore g, corpus.Score(hyps));
      j[s.name] = {{"gleu", g.mean * 100},
                   {"gleu_stddev", g.stddev * 100},
                   {"delta_vs_source", (g.mean - copy.mean) * 100}};
      absl::StrAppendFormat(&summary, "  %-12s %6.2f  %+.2f vs source", s.name, g.mean * 100,
                            (g.mean - copy.mean) * 100);
      if (s.name == "model" && (g.mean - copy.mean) * 100 < o.min_gleu_delta) {
        failures.push_back(
            absl::StrFormat("JFLEG GLEU %+.2f vs the source copy is below "
                            "--min-gleu-delta %g",
                            (g.mean - copy.mean) * 100, o.min_gleu_delta));
      }
      if (s.name == "compare") {
        const double model_gleu = j["model"]["gleu"].get<double>();
        ASSIGN_OR_RETURN(const double agree, AgreementRate(outputs[0], out));
        j["compare_minus_model_gleu"] = g.mean * 100 - model_gleu;
        j["agreement"] = agree;
        absl::StrAppendFormat(&summary, ", %+.2f vs model; outputs agree on %.1f%%",
                              g.mean * 100 - model_gleu, agree * 100);
      }
      summary += "\n";
      outputs.push_back(std::move(out));
    }
    // Edits by kind, in Treebank tokens (as the references are), whitespace normalised.
    std::vector<std::string> tok_sources, tok_roundtrip;
    for (const std::string& src : jfleg->sources) {
      tok_sources.push_back(ptb_text::NormalizeWhitespace(src));
      tok_roundtrip.push_back(ptb_text::PtbTokenize(ptb_text::PtbDetokenize(src)));
    }
    std::vector<std::vector<std::string>> tok_refs;
    for (const auto& set : jfleg->references) {
      auto& r = tok_refs.emplace_back();
      for (const std::string& line : set) r.push_back(ptb_text::NormalizeWhitespace(line));
    }
    absl::StrAppendFormat(&summary,
                          "  edits of the source (the server's word-level diff and kinds) that "
                          "equal an edit of the best reference\n");
    // What detokenizing and tokenizing again alone proposes: a floor under every system's.
    ASSIGN_OR_RETURN(const EditKindScore copy_edits,
                     ScoreEditKinds(tok_sources, tok_roundtrip, tok_refs));
    j["source_roundtrip_edit_kinds"] = EditKindJson(copy_edits);
    absl::StrAppendFormat(&summary,
                          "  (the source copied, detokenized and tokenized again, proposes %d "
                          "edits, %d matched: tokenization alone)\n",
                          copy_edits.overall.proposed, copy_edits.overall.matched);
    for (size_t k = 0; k < systems.size(); ++k) {
      std::vector<std::string> hyps;
      for (const std::string& h : outputs[k]) hyps.push_back(ptb_text::PtbTokenize(h));
      ASSIGN_OR_RETURN(
          const EditKindScore kinds,
          ScoreEditKinds(tok_sources, hyps, tok_refs, FailedSlice(systems[k], 0, num_jfleg)));
      j[systems[k].name]["edit_kinds"] = EditKindJson(kinds);
      AppendEditKinds(&summary, systems[k].name, kinds);
    }
    doc["jfleg"] = std::move(j);
    if (o.include_outputs) {
      Json rows = Json::array();
      for (size_t i = 0; i < num_jfleg; ++i) {
        Json row = {{"source", jfleg->sources[i]}, {"input", texts[i]}};
        for (size_t k = 0; k < systems.size(); ++k) row[systems[k].name] = outputs[k][i];
        rows.push_back(std::move(row));
      }
      doc["outputs"]["jfleg"] = std::move(rows);
    }
  }
  if (!synthetic.empty()) {
    Json j;
    j["file"] = sets.synthetic_path;
    j["sentences"] = synthetic.size();
    std::vector<SyntheticScore> scores;
    std::vector<EditKindScore> synthetic_kinds;
    std::vector<std::vector<std::string>> outputs;
    for (const System& s : systems) {
      std::vector<std::string> out = Slice(s.run.outputs, num_jfleg, synthetic.size());
      ASSIGN_OR_RETURN(SyntheticScore score, ScoreSynthetic(synthetic, out));
      j[s.name] = SyntheticJson(score);
      {
        std::vector<std::string> sources, hyps;
        std::vector<std::vector<std::string>> targets(1);
        for (size_t i = 0; i < synthetic.size(); ++i) {
          sources.push_back(ptb_text::NormalizeWhitespace(synthetic[i].source));
          targets[0].push_back(ptb_text::NormalizeWhitespace(synthetic[i].target));
          hyps.push_back(ptb_text::NormalizeWhitespace(out[i]));
        }
        ASSIGN_OR_RETURN(
            EditKindScore kinds,
            ScoreEditKinds(sources, hyps, targets, FailedSlice(s, num_jfleg, synthetic.size())));
        j[s.name]["edit_kinds"] = EditKindJson(kinds);
        synthetic_kinds.push_back(std::move(kinds));
      }
      if (s.name == "model" && score.none_sentences > 0 &&
          score.false_change_rate() > o.max_false_change_rate) {
        failures.push_back(absl::StrFormat(
            "false-change rate %.4f on 'none' sentences is above --max-false-change-rate %g",
            score.false_change_rate(), o.max_false_change_rate));
      }
      scores.push_back(std::move(score));
      outputs.push_back(std::move(out));
    }
    absl::StrAppendFormat(&summary, "synthetic %s: %zu sentences; exact match\n  %-16s %6s",
                          sets.synthetic_path, synthetic.size(), "error type", "n");
    for (const System& s : systems) absl::StrAppendFormat(&summary, " %8s", s.name);
    summary += "\n";
    const auto row = [&](const std::string& label, int64_t n, auto value_of) {
      absl::StrAppendFormat(&summary, "  %-16s %6d", label, n);
      for (const auto& score : scores)
        absl::StrAppendFormat(&summary, " %7.1f%%", value_of(score) * 100);
      summary += "\n";
    };
    for (size_t t = 0; t < scores[0].by_type.size(); ++t) {
      row(scores[0].by_type[t].error_type, scores[0].by_type[t].sentences,
          [t](const SyntheticScore& s) { return s.by_type[t].accuracy(); });
    }
    row("overall", scores[0].overall.sentences,
        [](const SyntheticScore& s) { return s.overall.accuracy(); });
    if (scores[0].none_sentences > 0) {
      row("false changes", scores[0].none_sentences,
          [](const SyntheticScore& s) { return s.false_change_rate(); });
    }
    if (outputs.size() == 2) {
      ASSIGN_OR_RETURN(const double agree, AgreementRate(outputs[0], outputs[1]));
      j["agreement"] = agree;
      absl::StrAppendFormat(&summary, "  outputs agree on %.1f%%\n", agree * 100);
    }
    absl::StrAppendFormat(&summary,
                          "  edits of the source (the server's word-level diff and kinds) that "
                          "equal an edit of the target\n");
    for (size_t k = 0; k < systems.size(); ++k) {
      AppendEditKinds(&summary, systems[k].name, synthetic_kinds[k]);
    }
    doc["synthetic"] = std::move(j);
    if (o.include_outputs) {
      Json rows = Json::array();
      for (size_t i = 0; i < synthetic.size(); ++i) {
        Json r = {{"error_type", synthetic[i].error_type},
                  {"source", synthetic[i].source},
                  {"target", synthetic[i].target}};
        for (size_t k = 0; k < systems.size(); ++k) r[systems[k].name] = outputs[k][i];
        rows.push_back(std::move(r));
      }
      doc["outputs"]["synthetic"] = std::move(rows);
    }
  }
  summary += "throughput\n";
  for (const System& s : systems) {
    const double wall = s.run.wall_s > 0 ? s.run.wall_s : 1e-9;
    absl::StrAppendFormat(&summary,
                          "  %-12s %zu sentences in %.2f s: %.1f sentences/s, %.0f generated "
                          "tokens/s (%d failed; %s)\n",
                          s.name, texts.size(), s.run.wall_s, texts.size() / wall,
                          s.run.generated_tokens / wall, s.run.failed, s.where);
    if (s.run.sequence_steps > 0) {
      const int64_t drafts = s.run.accepted_drafts + s.run.rejected_drafts;
      absl::StrAppendFormat(&summary,
                            "  %-12s %.2f sequential decode steps per sentence, drafts accepted "
                            "%.1f%% (%d of %d)\n",
                            "", static_cast<double>(s.run.sequence_steps) / texts.size(),
                            drafts == 0 ? 0.0 : 100.0 * s.run.accepted_drafts / drafts,
                            s.run.accepted_drafts, drafts);
    }
  }
  if (systems.size() == 2) {
    // Every sentence of both sets: a speculative run against a plain one must differ on none.
    int64_t differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      differ += systems[0].run.outputs[i] != systems[1].run.outputs[i] ? 1 : 0;
    }
    doc["output_differences"] = differ;
    absl::StrAppendFormat(&summary, "  outputs differ on %d of %zu sentences\n", differ,
                          texts.size());
  }
  if (!std::isnan(o.min_gleu_delta) || !std::isnan(o.max_false_change_rate)) {
    Json g;
    g["passed"] = failures.empty();
    g["failures"] = failures;
    if (!std::isnan(o.min_gleu_delta)) g["min_gleu_delta"] = o.min_gleu_delta;
    if (!std::isnan(o.max_false_change_rate)) g["max_false_change_rate"] = o.max_false_change_rate;
    doc["gate"] = std::move(g);
  }
  return Report{std::move(summary), std::move(failures)};
}

}  // namespace gecd::eval
