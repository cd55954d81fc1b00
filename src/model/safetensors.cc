#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/json_fields.h"

namespace gecd::model {
namespace {

using nlohmann::json;

// The reference implementation refuses larger headers; so do we, before parsing any JSON.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr int64_t kMaxDimension = int64_t{1} << 53;

constexpr struct {
  DType dtype;
  const char* name;
  size_t size;
} kDTypes[] = {
    {DType::kF32, "F32", 4},
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
};

absl::Status TensorError(std::string_view path, std::string_view tensor, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(path), ": tensor '", std::string(tensor), "': ", std::string(what)));
}

absl::StatusOr<SafetensorsHeader::Entry> ParseEntry(const json& value, std::string_view path,
                                                    const std::string& name, uint64_t data_size) {
  if (!value.is_object()) return TensorError(path, name, "expected a JSON object");
  SafetensorsHeader::Entry entry;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return TensorError(path, name, "dtype missing or not a string");
  }
  const std::string dtype_name = dtype->get<std::string>();
  auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                            [&](const auto& d) { return dtype_name == d.name; });
  if (known == std::end(kDTypes)) {
    return TensorError(
        path, name,
        absl::StrCat("unsupported dtype '", dtype_name, "' (supported: F32, BF16, F16, F8_E4M3)"));
  }
  entry.dtype = known->dtype;

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return TensorError(path, name, "shape missing or not a list");
  }
  uint64_t bytes = DTypeSize(entry.dtype);
  for (size_t i = 0; i < shape->size(); ++i) {
    ASSIGN_OR_RETURN(int64_t dim, JsonToInt((*shape)[i], 0, kMaxDimension, path,
                                            absl::StrCat("tensor '", name, "': shape[", i, "]")));
    entry.shape.push_back(dim);
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
      return TensorError(path, name, "shape is too large (byte size overflows)");
    }
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
    return TensorError(path, name, "data_offsets missing or not a [begin, end] pair");
  }
  const int64_t max_offset = static_cast<int64_t>(std::min<uint64_t>(data_size, INT64_MAX));
  const std::string label = absl::StrCat("tensor '", name, "': data_offsets");
  ASSIGN_OR_RETURN(int64_t begin, JsonToInt((*offsets)[0], 0, max_offset, path, label));
  ASSIGN_OR_RETURN(int64_t end, JsonToInt((*offsets)[1], 0, max_offset, path, label));
  if (begin > end) return TensorError(path, name, "data_offsets begin after end");
  entry.begin = static_cast<uint64_t>(begin);
  entry.end = static_cast<uint64_t>(end);
  if (entry.end - entry.begin != bytes) {
    return TensorError(path, name,
                       absl::StrCat("shape and dtype need ", bytes, " bytes but ",
                                    "data_offsets span ", entry.end - entry.begin));
  }
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const json& value,
                                                                 std::string_view path) {
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(path), ": __metadata__: expected a JSON object"));
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(path), ": __metadata__.", key, ": expected a string"));
    }
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

absl::StatusOr<SafetensorsHeader> ParseHeader(std::span<const uint8_t> file_bytes,
                                              std::string_view path) {
  if (file_bytes.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(path), ": truncated: ", file_bytes.size(), " bytes, no header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_bytes[i];
  if (header_len > file_bytes.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": header length ",
                                                   header_len, " runs past the end of the ",
                                                   file_bytes.size(), "-byte file"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(path), ": header length ", header_len, " is over 100 MiB"));
  }
  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = file_bytes.size() - header.data_offset;
  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data()) + 8, header_len);
  ASSIGN_OR_RETURN(json root, ParseJson(text, absl::StrCat(std::string(path), ": header")));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(path), ": header is not a JSON object"));
  }
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      ASSIGN_OR_RETURN(header.metadata, ParseMetadata(value, path));
      continue;
    }
    ASSIGN_OR_RETURN(SafetensorsHeader::Entry entry, ParseEntry(value, path, name, data_size));
    header.tensors.emplace(name, std::move(entry));
  }

  std::vector<std::pair<const std::string*, const SafetensorsHeader::Entry*>> by_offset;
  for (const auto& [name, entry] : header.tensors) by_offset.emplace_back(&name, &entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i].second->begin < by_offset[i - 1].second->end) {
      return TensorError(path, *by_offset[i].first,
                         absl::StrCat("data overlaps tensor '", *by_offset[i - 1].first, "'"));
    }
  }
  return header;
}

// A FILE* that is closed however Write leaves.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::string_view DTypeName(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const auto& d : kDTypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_bytes,
                                                         std::string_view path) {
  // nlohmann::json throws on type misuse; the checks above should make that impossible, and this
  // is the boundary that guarantees no exception escapes.
  try {
    return ParseHeader(file_bytes, path);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(path), ": header: ", e.what()));
  }
}

SafetensorsFile::SafetensorsFile(std::string path, MappedFile file, SafetensorsHeader header)
    : path_(std::move(path)), file_(std::move(file)), header_(std::move(header)) {}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensorsHeader(file.bytes(), path));
  return std::unique_ptr<SafetensorsFile>(
      new SafetensorsFile(path, std::move(file), std::move(header)));
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(header_.tensors.size());
  for (const auto& [name, entry] : header_.tensors) names.push_back(name);
  return names;
}

absl::StatusOr<TensorView> SafetensorsFile::Get(std::string_view name) const {
  auto it = header_.tensors.find(std::string(name));
  if (it == header_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor '", std::string(name), "'"));
  }
  const SafetensorsHeader::Entry& e = it->second;
  TensorView view;
  view.name = it->first;
  view.dtype = e.dtype;
  view.shape = e.shape;
  view.data = file_.bytes().subspan(header_.data_offset + e.begin, e.end - e.begin);
  view.file = path_;
  return view;
}

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  tensors_[std::move(name)] = Pending{dtype, std::move(shape), std::move(bytes)};
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors_) {
    uint64_t expected = DTypeSize(t.dtype);
    for (int64_t d : t.shape) expected *= static_cast<uint64_t>(d);
    if (expected != t.bytes.size()) {
      return TensorError(path, name,
                         absl::StrCat("shape and dtype need ", expected, " bytes but ",
                                      t.bytes.size(), " were given"));
    }
    header[name] = {{"dtype", std::string(DTypeName(t.dtype))},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  // Pad with spaces, as the reference writer does, so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) {
      return absl::PermissionDeniedError(
          absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
    }
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f.get()) == 8 &&
              std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
    for (const auto& [name, t] : tensors_) {
      ok = ok && std::fwrite(t.bytes.data(), 1, t.bytes.size(), f.get()) == t.bytes.size();
    }
    ok = ok && std::fflush(f.get()) == 0 && fsync(fileno(f.get())) == 0;
    if (!ok) {
      const int err = errno;
      f.reset();
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat(tmp, ": write failed: ", std::strerror(err)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::DataLossError(
        absl::StrCat(path, ": cannot rename into place: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace gecd::model
