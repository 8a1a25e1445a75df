// The one parameter grammar of ckptlab: `name` or `name:key=value:key=value`.
//
// Strategies and models declare their parameters as a list of ParamDef; BindParams checks a
// parsed Spec against that list, fills in defaults and returns typed values:
//
//   ASSIGN_OR_RETURN(Spec spec, ParseSpec("uniform:segments=4"));
//   ASSIGN_OR_RETURN(ParamValues values, BindParams(spec, {IntParam("segments", ...)}));
//   int64_t k = values.Int("segments");
//
// Needs no LibTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// A spec as written: the name and the key=value pairs in their order.
struct Spec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;
};

// Parses `name[:key=value]...`. Names and keys are [a-z0-9_]+; values are non-empty and
// contain no ':' or ','. A repeated key is an error.
absl::StatusOr<Spec> ParseSpec(absl::string_view text);

// Splits a comma-separated list of specs ("a:x=1,b") and parses each one.
absl::StatusOr<std::vector<Spec>> ParseSpecList(absl::string_view text);

// One declared parameter. Build them with IntParam / FloatParam / ChoiceParam.
struct ParamDef {
  enum class Type { kInt, kFloat, kChoice, kBytes, kText };
  std::string key;
  Type type = Type::kInt;
  std::string default_value;  // as written in a spec
  std::string help;
  // kInt: inclusive bounds. `auto_allowed` lets the value be the word "auto", which the
  // owner resolves later (e.g. uniform's segments = ceil(sqrt(L))); kInt and kBytes.
  // `none_allowed` lets a kBytes value be the word "none" (no such limit).
  int64_t min_value = std::numeric_limits<int64_t>::min();
  int64_t max_value = std::numeric_limits<int64_t>::max();
  bool auto_allowed = false;
  bool none_allowed = false;
  // kFloat: inclusive bounds.
  double min_float = -1e300;
  double max_float = 1e300;
  // kChoice: the accepted words.
  std::vector<std::string> choices;
  // kInt: a size the model's bytes grow with as a polynomial of degree `scale_degree` (0: not
  // declared) at values that are multiples of `scale_unit`, the other parameters fixed (a batch
  // degree 1, a sequence 2 for its attention scores): what lets a profile taken at small sizes
  // be extrapolated (core/plan/extrapolate.h).
  int scale_degree = 0;
  int64_t scale_unit = 1;

  ParamDef& Min(int64_t v) {
    min_value = v;
    return *this;
  }
  ParamDef& Max(int64_t v) {
    max_value = v;
    return *this;
  }
  ParamDef& AllowAuto() {
    auto_allowed = true;
    return *this;
  }
  ParamDef& AllowNone() {
    none_allowed = true;
    return *this;
  }
  ParamDef& Range(double lo, double hi) {
    min_float = lo;
    max_float = hi;
    return *this;
  }
  ParamDef& Scales(int degree, int64_t unit = 1) {
    scale_degree = degree;
    scale_unit = unit;
    return *this;
  }

  // "segments: int >= 1 or auto (default auto): <help>"
  std::string Describe() const;
};

ParamDef IntParam(std::string key, std::string default_value, std::string help);
ParamDef FloatParam(std::string key, std::string default_value, std::string help);
ParamDef ChoiceParam(std::string key, std::vector<std::string> choices, std::string default_value,
                     std::string help);
// Any text the grammar allows in a value (no ':' or ','), kept as written: a file's path. An
// empty default means the parameter must be given.
ParamDef TextParam(std::string key, std::string default_value, std::string help);
// A size in bytes, written as ParseByteSize (core/base/bytes.h) accepts it.
ParamDef BytesParam(std::string key, std::string default_value, std::string help);

// Values of every declared parameter, defaults filled in, already validated.
class ParamValues {
 public:
  // The integer value of `key`. `key` must be a declared kInt parameter that is not "auto"
  // (a programming error otherwise: it aborts naming the key).
  int64_t Int(absl::string_view key) const;
  // The bytes of a kBytes parameter that is neither "auto" nor "none" (else it aborts).
  int64_t Bytes(absl::string_view key) const;
  bool IsNone(absl::string_view key) const;
  double Float(absl::string_view key) const;
  bool IsAuto(absl::string_view key) const;
  // Int(key), or `if_auto` where the value is "auto" (a model size's default shape).
  int64_t IntOr(absl::string_view key, int64_t if_auto) const;
  const std::string& Text(absl::string_view key) const;

  // These values with the kBytes parameter `def` at `bytes`, or, with none, at its default:
  // InvalidArgument naming the value and what `def` accepts.
  absl::StatusOr<ParamValues> With(const ParamDef& def, std::optional<int64_t> bytes) const;

  // `name:key=value:...` with every declared parameter in declaration order, each key of
  // `resolved` at its value there: a model's spec naming the shape its "auto" sizes resolved to.
  std::string Canonical(const std::vector<std::pair<std::string, int64_t>>& resolved = {}) const;
  const std::string& name() const { return name_; }
  // Every parameter as (key, canonical value), in declaration order.
  const std::vector<std::pair<std::string, std::string>>& Entries() const { return values_; }

 private:
  friend absl::StatusOr<ParamValues> BindParams(const Spec&, const std::vector<ParamDef>&);
  const std::string& Find(absl::string_view key) const;
  std::string name_;
  std::vector<std::pair<std::string, std::string>> values_;  // declaration order
  std::map<std::string, int64_t, std::less<>> ints_;
  std::map<std::string, double, std::less<>> floats_;
};

// Picks an integer in [lo, hi] for the quantity `what`: how a plugin describes the small
// instances tests generate (the tests pass RapidCheck's generators, so that a failing case
// shrinks), without depending on a test library.
using SpecChooser = std::function<int64_t(absl::string_view what, int64_t lo, int64_t hi)>;

// Checks `spec` against `defs`: an unknown key or a bad value is an InvalidArgument error that
// names the key or value and what is accepted.
absl::StatusOr<ParamValues> BindParams(const Spec& spec, const std::vector<ParamDef>& defs);

}  // namespace ckpt
