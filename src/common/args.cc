#include "common/args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gecd {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::vector<FlagSpec>& specs) {
  Args args;
  bool only_positionals = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (only_positionals || a.size() < 3 || a.rfind("--", 0) != 0) {
      if (a == "--") {
        only_positionals = true;
        continue;
      }
      args.positionals_.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (spec->takes_value && !value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", std::string(name), " needs a value"));
      }
      value = argv[++i];
    }
    if (!spec->takes_value && value) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", std::string(name), " takes no value"));
    }
    args.values_[name].push_back(value.value_or(""));
  }
  return args;
}

bool Args::Has(std::string_view name) const { return values_.find(name) != values_.end(); }

std::optional<std::string> Args::Get(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(std::string_view name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::string> Args::Required(std::string_view name) const {
  auto v = Get(name);
  if (!v)
    return absl::InvalidArgumentError(absl::StrCat("missing required flag --", std::string(name)));
  return *v;
}

absl::Status Args::NoPositionals() const {
  if (positionals_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", positionals_[0], "'"));
}

absl::StatusOr<int> Args::GetInt(std::string_view name, int default_value) const {
  auto v = Get(name);
  if (!v) return default_value;
  int out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", std::string(name), " wants an integer, got '", *v, "'"));
  }
  return out;
}

absl::StatusOr<Args> ParseToolArgs(const std::vector<std::string>& argv,
                                   const std::vector<FlagSpec>& specs, bool* help) {
  absl::StatusOr<Args> args = Args::Parse(argv, specs);
  if (!args.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(args.status().message(), " (see --help)"));
  }
  *help = args->Has("help");
  for (const std::string& positional : args->positionals()) {
    if (positional != "-h") {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", positional, "' (see --help)"));
    }
    *help = true;
  }
  return args;
}

std::string FlagHelp(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    const std::string left = absl::StrCat("--", s.name, s.takes_value ? " VALUE" : "");
    absl::StrAppendFormat(&out, "  %-28s %s\n", left, s.help);
  }
  return out;
}

}  // namespace gecd
