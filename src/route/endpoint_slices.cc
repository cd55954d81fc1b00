#include "route/endpoint_slices.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gecd::route {
namespace {

using nlohmann::json;

// A member that may be absent or null; present, it must have the type `is` checks.
template <typename Is>
absl::StatusOr<const json*> Member(const json& object, const char* key, Is is, const char* type,
                                   const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  if (!is(*it)) return absl::InvalidArgumentError(absl::StrCat(where, key, ": not ", type));
  return &*it;
}

bool IsString(const json& j) { return j.is_string(); }
bool IsObject(const json& j) { return j.is_object(); }
bool IsArray(const json& j) { return j.is_array(); }
bool IsBool(const json& j) { return j.is_boolean(); }
bool IsInteger(const json& j) { return j.is_number_integer(); }

absl::StatusOr<std::optional<bool>> Condition(const json* conditions, const char* key,
                                              const std::string& where) {
  if (conditions == nullptr) return std::nullopt;
  absl::StatusOr<const json*> value = Member(*conditions, key, IsBool, "a boolean", where);
  if (!value.ok()) return value.status();
  if (*value == nullptr) return std::nullopt;
  return (*value)->get<bool>();
}

// The slice's port number for `wanted` (a name, or a number matching the port), if it has one.
absl::StatusOr<std::optional<int>> FindPort(const json* ports, absl::string_view wanted,
                                            const std::string& where) {
  if (ports == nullptr) return std::nullopt;
  int wanted_number = 0;
  const bool by_number =
      !wanted.empty() && absl::ascii_isdigit(wanted[0]) && absl::SimpleAtoi(wanted, &wanted_number);
  for (size_t i = 0; i < ports->size(); ++i) {
    const json& p = (*ports)[i];
    const std::string at = absl::StrCat(where, "ports[", i, "].");
    if (!p.is_object())
      return absl::InvalidArgumentError(absl::StrCat(where, "ports[", i, "]: not an object"));
    absl::StatusOr<const json*> name = Member(p, "name", IsString, "a string", at);
    absl::StatusOr<const json*> number = Member(p, "port", IsInteger, "an integer", at);
    absl::StatusOr<const json*> protocol = Member(p, "protocol", IsString, "a string", at);
    for (const auto* s : {&name, &number, &protocol}) {
      if (!s->ok()) return s->status();
    }
    if (*protocol != nullptr && (*protocol)->get<std::string>() != "TCP") continue;
    if (*number == nullptr) continue;  // an unrestricted port: no number to dial
    const int64_t port = (*number)->get<int64_t>();
    if (port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(at, "port: ", port, " is out of range"));
    }
    const bool match = by_number ? port == wanted_number
                                 : *name != nullptr && (*name)->get<std::string>() == wanted;
    if (match) return port;
  }
  return std::nullopt;
}

}  // namespace

EndpointUse ClassifyConditions(std::optional<bool> ready, std::optional<bool> serving,
                               std::optional<bool> terminating) {
  const bool is_ready = ready.value_or(true);
  const bool is_serving = serving.value_or(is_ready);
  if (terminating.value_or(false)) {
    return is_serving ? EndpointUse::kDraining : EndpointUse::kRemoved;
  }
  return is_ready ? EndpointUse::kEligible : EndpointUse::kRemoved;
}

absl::StatusOr<ParsedSlice> ParseEndpointSlice(const json& slice, absl::string_view port) {
  if (!slice.is_object()) return absl::InvalidArgumentError("EndpointSlice: not an object");
  absl::StatusOr<const json*> metadata =
      Member(slice, "metadata", IsObject, "an object", "EndpointSlice: ");
  if (!metadata.ok()) return metadata.status();
  if (*metadata == nullptr) return absl::InvalidArgumentError("EndpointSlice: metadata: missing");
  absl::StatusOr<const json*> name =
      Member(**metadata, "name", IsString, "a string", "EndpointSlice: metadata.");
  if (!name.ok()) return name.status();
  if (*name == nullptr || (*name)->get<std::string>().empty()) {
    return absl::InvalidArgumentError("EndpointSlice: metadata.name: missing");
  }
  ParsedSlice parsed;
  parsed.name = (*name)->get<std::string>();
  const std::string where = absl::StrCat("EndpointSlice ", parsed.name, ": ");
  absl::StatusOr<const json*> rv =
      Member(**metadata, "resourceVersion", IsString, "a string", absl::StrCat(where, "metadata."));
  if (!rv.ok()) return rv.status();
  if (*rv != nullptr) parsed.resource_version = (*rv)->get<std::string>();

  absl::StatusOr<const json*> address_type =
      Member(slice, "addressType", IsString, "a string", where);
  absl::StatusOr<const json*> ports = Member(slice, "ports", IsArray, "an array", where);
  absl::StatusOr<const json*> endpoints = Member(slice, "endpoints", IsArray, "an array", where);
  for (const auto* s : {&address_type, &ports, &endpoints}) {
    if (!s->ok()) return s->status();
  }
  if (*address_type == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, "addressType: missing"));
  }
  const std::string type = (*address_type)->get<std::string>();
  if (type != "IPv4" && type != "IPv6" && type != "FQDN") {
    parsed.ignored = absl::StrCat("addressType ", type, " is not IPv4, IPv6 or FQDN");
    return parsed;
  }
  absl::StatusOr<std::optional<int>> number = FindPort(*ports, port, where);
  if (!number.ok()) return number.status();
  if (!number->has_value()) {
    parsed.ignored = absl::StrCat("no TCP port ", port);
    return parsed;
  }
  const std::string port_suffix = absl::StrCat(":", **number);
  if (*endpoints == nullptr) return parsed;
  for (size_t i = 0; i < (*endpoints)->size(); ++i) {
    const json& e = (**endpoints)[i];
    const std::string at = absl::StrCat(where, "endpoints[", i, "].");
    if (!e.is_object())
      return absl::InvalidArgumentError(absl::StrCat(where, "endpoints[", i, "]: not an object"));
    absl::StatusOr<const json*> addresses = Member(e, "addresses", IsArray, "an array", at);
    absl::StatusOr<const json*> conditions = Member(e, "conditions", IsObject, "an object", at);
    for (const auto* s : {&addresses, &conditions}) {
      if (!s->ok()) return s->status();
    }
    const std::string cond_at = absl::StrCat(at, "conditions.");
    absl::StatusOr<std::optional<bool>> ready = Condition(*conditions, "ready", cond_at);
    absl::StatusOr<std::optional<bool>> serving = Condition(*conditions, "serving", cond_at);
    absl::StatusOr<std::optional<bool>> terminating =
        Condition(*conditions, "terminating", cond_at);
    for (const auto* s : {&ready, &serving, &terminating}) {
      if (!s->ok()) return s->status();
    }
    if (*addresses == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(at, "addresses: missing"));
    }
    const EndpointUse use = ClassifyConditions(*ready, *serving, *terminating);
    for (size_t j = 0; j < (*addresses)->size(); ++j) {
      const json& a = (**addresses)[j];
      if (!a.is_string() || a.get<std::string>().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "addresses[", j, "]: not a non-empty string"));
      }
      if (use == EndpointUse::kRemoved) continue;
      const std::string& host = a.get<std::string>();
      parsed.endpoints.push_back({.address = type == "IPv6"
                                                 ? absl::StrCat("[", host, "]", port_suffix)
                                                 : absl::StrCat(host, port_suffix),
                                  .draining = use == EndpointUse::kDraining});
    }
  }
  return parsed;
}

void SliceSet::Upsert(ParsedSlice slice) {
  std::string name = slice.name;
  slices_.insert_or_assign(std::move(name), std::move(slice));
}

void SliceSet::Erase(const std::string& name) { slices_.erase(name); }

std::vector<DiscoveredEndpoint> SliceSet::Merged() const {
  std::map<std::string, bool> draining;  // address → draining
  for (const auto& [name, slice] : slices_) {
    for (const DiscoveredEndpoint& e : slice.endpoints) {
      auto [it, inserted] = draining.emplace(e.address, e.draining);
      if (!inserted) it->second = it->second && e.draining;
    }
  }
  std::vector<DiscoveredEndpoint> merged;
  merged.reserve(draining.size());
  for (const auto& [address, d] : draining) merged.push_back({.address = address, .draining = d});
  return merged;
}

}  // namespace gecd::route
