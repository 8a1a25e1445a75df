#include "core/plan/spec.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/bytes.h"
#include "core/base/printable.h"

namespace ckpt {
namespace {

bool IsIdentifier(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_')) return false;
  }
  return true;
}

// `s` in quotes, escaped (core/base/printable.h): every message quotes what it refuses through
// here.
std::string Quote(absl::string_view s) { return absl::StrCat("'", Printable(s), "'"); }

// The shortest %g writing of `v` that reads back as `v`.
std::string ShortestDecimal(double v) {
  for (int digits = 1; digits < 17; ++digits) {
    const std::string text = absl::StrFormat("%.*g", digits, v);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == v) return text;
  }
  return absl::StrFormat("%.17g", v);
}

std::string AcceptedKeys(const std::vector<ParamDef>& defs) {
  if (defs.empty()) return "it takes no parameters";
  std::vector<std::string> keys;
  for (const ParamDef& d : defs) keys.push_back(d.key);
  return absl::StrCat("accepted: ", absl::StrJoin(keys, ", "));
}

// A checked value: the number, for kInt and kBytes (neither "auto" nor "none") and kFloat,
// and the value as the canonical spec writes it.
struct Parsed {
  std::optional<int64_t> integer;
  std::optional<double> real;
  std::string canonical;
};

// Checks one value against its definition.
absl::StatusOr<Parsed> CheckValue(const std::string& owner, const ParamDef& def,
                                  const std::string& value) {
  auto rejected = [&] {
    return absl::InvalidArgumentError(absl::StrCat(owner, ": ", def.key, "=", Quote(value),
                                                   " is not accepted; ", def.Describe()));
  };
  switch (def.type) {
    case ParamDef::Type::kFloat: {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !(v >= def.min_float && v <= def.max_float)) {
        return rejected();
      }
      if (v == 0) v = 0;  // -0 is 0
      // One writing per number, as integers have: "0.10", "1e-1" and "0x1.999999999999ap-4"
      // are all "0.1", so that one configuration cannot be run twice under two spellings.
      return Parsed{std::nullopt, v, ShortestDecimal(v)};
    }
    case ParamDef::Type::kText:
      if (value.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(owner, ": ", def.key, "= must be given; ", def.Describe()));
      }
      return Parsed{std::nullopt, std::nullopt, value};
    case ParamDef::Type::kChoice:
      for (const std::string& c : def.choices) {
        if (c == value) return Parsed{std::nullopt, std::nullopt, value};
      }
      return absl::InvalidArgumentError(
          absl::StrCat(owner, ": ", def.key, "=", Quote(value), " is not accepted; ", def.key,
                       " is one of: ", absl::StrJoin(def.choices, ", ")));
    case ParamDef::Type::kInt: {
      if (value == "auto" && def.auto_allowed) return Parsed{std::nullopt, std::nullopt, value};
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v) || v < def.min_value || v > def.max_value) {
        return rejected();
      }
      return Parsed{v, std::nullopt, absl::StrCat(v)};  // "+4" and "04" are written "4"
    }
    case ParamDef::Type::kBytes: {
      if ((value == "auto" && def.auto_allowed) || (value == "none" && def.none_allowed)) {
        return Parsed{std::nullopt, std::nullopt, value};
      }
      absl::StatusOr<int64_t> v = ParseByteSize(value);
      if (!v.ok() || *v < def.min_value || *v > def.max_value) return rejected();
      return Parsed{*v, std::nullopt, FormatByteSize(*v)};
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace

absl::StatusOr<Spec> ParseSpec(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (const int at = FindUnprintable(text); at >= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "spec %s holds %s at position %d; accepted: printable UTF-8 text (form: name or "
        "name:key=value:key=value)",
        Quote(text), DescribeUnprintable(text, at), at + 1));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  Spec spec;
  spec.name = std::string(parts[0]);
  if (!IsIdentifier(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat("spec ", Quote(text), ": the name ",
                                                   Quote(spec.name),
                                                   " must be non-empty and made of a-z, 0-9 and _ "
                                                   "(form: name or name:key=value:key=value)"));
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    const bool has_equals = parts[i].find('=') != absl::string_view::npos;
    if (!has_equals || !IsIdentifier(kv.first) || kv.second.empty() ||
        kv.second.find(',') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec ", Quote(text), ": ", Quote(parts[i]),
                       " is not key=value (keys are a-z, 0-9, _; values are non-empty)"));
    }
    for (const auto& [key, unused] : spec.params) {
      if (key == kv.first) {
        return absl::InvalidArgumentError(
            absl::StrCat("spec ", Quote(text), ": key ", Quote(key), " is given twice"));
      }
    }
    spec.params.emplace_back(std::string(kv.first), std::string(kv.second));
  }
  return spec;
}

absl::StatusOr<std::vector<Spec>> ParseSpecList(absl::string_view text) {
  std::vector<Spec> specs;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    absl::StatusOr<Spec> spec = ParseSpec(item);
    if (!spec.ok()) return spec.status();
    specs.push_back(*std::move(spec));
  }
  return specs;
}

std::string ParamDef::Describe() const {
  std::string what;
  switch (type) {
    case Type::kFloat:
      what = absl::StrCat("a number in [", min_float, ", ", max_float, "]");
      break;
    case Type::kChoice:
      what = absl::StrCat("one of ", absl::StrJoin(choices, ", "));
      break;
    case Type::kText:
      what = "text without ':' or ','";
      break;
    case Type::kBytes:
      what = "a size in bytes (e.g. 512MiB, 1.5GiB, 1000)";
      if (auto_allowed) absl::StrAppend(&what, " or auto");
      if (none_allowed) absl::StrAppend(&what, " or none");
      break;
    case Type::kInt:
      what = "an integer";
      if (min_value != std::numeric_limits<int64_t>::min()) {
        absl::StrAppend(&what, " >= ", min_value);
      }
      if (max_value != std::numeric_limits<int64_t>::max()) {
        absl::StrAppend(&what, " <= ", max_value);
      }
      if (auto_allowed) absl::StrAppend(&what, " or auto");
      break;
  }
  return absl::StrCat(key, " is ", what, " (",
                      default_value.empty() ? "required" : absl::StrCat("default ", default_value),
                      "): ", help);
}

ParamDef IntParam(std::string key, std::string default_value, std::string help) {
  ParamDef d;
  d.key = std::move(key);
  d.type = ParamDef::Type::kInt;
  d.default_value = std::move(default_value);
  d.help = std::move(help);
  return d;
}

ParamDef FloatParam(std::string key, std::string default_value, std::string help) {
  ParamDef d = IntParam(std::move(key), std::move(default_value), std::move(help));
  d.type = ParamDef::Type::kFloat;
  return d;
}

ParamDef ChoiceParam(std::string key, std::vector<std::string> choices, std::string default_value,
                     std::string help) {
  ParamDef d;
  d.key = std::move(key);
  d.type = ParamDef::Type::kChoice;
  d.choices = std::move(choices);
  d.default_value = std::move(default_value);
  d.help = std::move(help);
  return d;
}

ParamDef TextParam(std::string key, std::string default_value, std::string help) {
  ParamDef d = IntParam(std::move(key), std::move(default_value), std::move(help));
  d.type = ParamDef::Type::kText;
  return d;
}

ParamDef BytesParam(std::string key, std::string default_value, std::string help) {
  ParamDef d = IntParam(std::move(key), std::move(default_value), std::move(help));
  d.type = ParamDef::Type::kBytes;
  d.min_value = 0;
  return d;
}

absl::StatusOr<ParamValues> BindParams(const Spec& spec, const std::vector<ParamDef>& defs) {
  for (const auto& [key, value] : spec.params) {
    bool known = false;
    for (const ParamDef& d : defs) known |= d.key == key;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.name, ": unknown parameter ", Quote(key), "; ", AcceptedKeys(defs)));
    }
  }
  ParamValues out;
  out.name_ = spec.name;
  for (const ParamDef& d : defs) {
    std::string value = d.default_value;
    for (const auto& [key, given] : spec.params) {
      if (key == d.key) value = given;
    }
    absl::StatusOr<Parsed> parsed = CheckValue(spec.name, d, value);
    if (!parsed.ok()) return parsed.status();
    if (parsed->integer) out.ints_[d.key] = *parsed->integer;
    if (parsed->real) out.floats_[d.key] = *parsed->real;
    out.values_.emplace_back(d.key, parsed->canonical);
  }
  return out;
}

absl::StatusOr<ParamValues> ParamValues::With(const ParamDef& def,
                                              std::optional<int64_t> bytes) const {
  ParamValues out = *this;
  const auto entry = std::find_if(out.values_.begin(), out.values_.end(),
                                  [&](const auto& kv) { return kv.first == def.key; });
  if (entry == out.values_.end()) {
    return absl::InternalError(absl::StrCat(name_, " declares no parameter ", Quote(def.key)));
  }
  out.ints_.erase(def.key);
  if (!bytes.has_value()) {
    absl::StatusOr<Parsed> parsed = CheckValue(name_, def, def.default_value);
    if (!parsed.ok()) return parsed.status();
    entry->second = parsed->canonical;
    if (parsed->integer) out.ints_[def.key] = *parsed->integer;
    return out;
  }
  if (def.type != ParamDef::Type::kBytes || *bytes < def.min_value || *bytes > def.max_value) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", def.key, "=", *bytes,
                                                   " bytes is not accepted; ", def.Describe()));
  }
  entry->second = FormatByteSize(*bytes);
  out.ints_[def.key] = *bytes;
  return out;
}

const std::string& ParamValues::Find(absl::string_view key) const {
  for (const auto& [k, v] : values_) {
    if (k == key) return v;
  }
  std::fprintf(stderr, "ckptlab: %s has no declared parameter '%.*s'\n", name_.c_str(),
               static_cast<int>(key.size()), key.data());
  std::abort();
}

int64_t ParamValues::Int(absl::string_view key) const {
  Find(key);
  auto it = ints_.find(key);
  if (it == ints_.end()) {
    std::fprintf(stderr, "ckptlab: %s parameter '%.*s' is not an integer here\n", name_.c_str(),
                 static_cast<int>(key.size()), key.data());
    std::abort();
  }
  return it->second;
}

double ParamValues::Float(absl::string_view key) const {
  Find(key);
  auto it = floats_.find(key);
  if (it == floats_.end()) {
    std::fprintf(stderr, "ckptlab: %s parameter '%.*s' is not a number here\n", name_.c_str(),
                 static_cast<int>(key.size()), key.data());
    std::abort();
  }
  return it->second;
}

bool ParamValues::IsAuto(absl::string_view key) const { return Find(key) == "auto"; }
bool ParamValues::IsNone(absl::string_view key) const { return Find(key) == "none"; }
int64_t ParamValues::IntOr(absl::string_view key, int64_t if_auto) const {
  return IsAuto(key) ? if_auto : Int(key);
}

int64_t ParamValues::Bytes(absl::string_view key) const { return Int(key); }

const std::string& ParamValues::Text(absl::string_view key) const { return Find(key); }

std::string ParamValues::Canonical(
    const std::vector<std::pair<std::string, int64_t>>& resolved) const {
  std::string out = name_;
  for (const auto& [k, v] : values_) {
    const auto r = std::find_if(resolved.begin(), resolved.end(),
                                [&k = k](const auto& entry) { return entry.first == k; });
    absl::StrAppend(&out, ":", k, "=", r == resolved.end() ? v : absl::StrCat(r->second));
  }
  return out;
}

}  // namespace ckpt
