#include "core/plan/profile_text.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/digest.h"
#include "core/base/printable.h"

namespace ckpt {
namespace {

constexpr char kMagic[] = "ckptlab-profiles";
constexpr int64_t kMaxBytes = int64_t{1} << 44;
constexpr double kMaxMs = 1e12;
constexpr double kMaxFlops = 1e30;
constexpr int64_t kMaxFlopCount = int64_t{1} << 62;
constexpr double kMaxRate = 1e18;  // bytes per ms
constexpr int64_t kMaxPolicies = 64;
constexpr int64_t kMaxIndex = int64_t{1} << 30;  // storages, parameters, chunks
// Fewer tokens than a stage, a stage's measurement and a keyed profile take (their fixed fields'
// names and values: 16, 54 and 48), which bound how many of them a text of so many tokens holds.
constexpr int64_t kStageTokens = 16;
constexpr int64_t kMeasuredTokens = 50;
constexpr int64_t kProfileTokens = 40;
constexpr int kStageKinds = static_cast<int>(StageKind::kOther) + 1;
constexpr int kPartKinds = static_cast<int>(PartKind::kNorm) + 1;

// Text as one token: in double quotes, every byte outside '!'..'~', '"' and '%' as %XX.
std::string QuoteToken(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x21 || u > 0x7e || c == '"' || c == '%') {
      absl::StrAppendFormat(&out, "%%%02X", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::optional<std::string> UnquoteToken(absl::string_view token) {
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') return std::nullopt;
  std::string out;
  for (size_t i = 1; i + 1 < token.size(); ++i) {
    const char c = token[i];
    if (c == '"') return std::nullopt;
    if (c != '%') {
      out += c;  // '!'..'~': the tokeniser split at blanks, and the rest is checked below
      continue;
    }
    int value = 0;
    for (int k = 1; k <= 2; ++k) {
      if (i + k + 1 >= token.size() || !absl::ascii_isxdigit(token[i + k])) return std::nullopt;
      const char h = absl::ascii_tolower(token[i + k]);
      value = value * 16 + (h <= '9' ? h - '0' : h - 'a' + 10);
    }
    out += static_cast<char>(value);
    i += 2;
  }
  for (const char c : token) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return std::nullopt;
    }
  }
  return out;
}

// The two directions of the walk: each takes a field's name and a reference to its value; the
// writer prints them, the reader checks the name and fills the value.
class Writer {
 public:
  static constexpr bool kReading = false;
  void Name(absl::string_view name) { Token(name); }
  template <typename I>
  void Int(I& value, int64_t, int64_t) {
    Token(absl::StrCat(value));
  }
  void Real(double& value, double) { Token(absl::StrFormat("%.17g", value)); }
  void Bool(bool& value) { Token(value ? "1" : "0"); }
  void Text(std::string& value) { Token(QuoteToken(value)); }
  template <typename T>
  void Size(std::vector<T>& items, int64_t, int64_t = 1) {
    Token(absl::StrCat(items.size()));
  }
  void Line() { out_ += '\n'; }
  void Fail(absl::string_view) {}
  bool ok() const { return true; }
  std::string Take() { return std::move(out_); }

 private:
  void Token(absl::string_view token) {
    if (!out_.empty() && out_.back() != '\n') out_ += ' ';
    absl::StrAppend(&out_, token);
  }
  std::string out_;
};

class Reader {
 public:
  static constexpr bool kReading = true;
  explicit Reader(absl::string_view text) {
    int line = 1;
    size_t i = 0;
    while (i < text.size()) {
      if (absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
        line += text[i++] == '\n';
        continue;
      }
      const size_t start = i;
      while (i < text.size() && !absl::ascii_isspace(static_cast<unsigned char>(text[i]))) ++i;
      tokens_.push_back({text.substr(start, i - start), line});
    }
  }

  void Name(absl::string_view name) {
    const absl::string_view token = Next();
    if (ok() && token != name) Fail(absl::StrCat("expected ", name));
  }
  template <typename I>
  void Int(I& value, int64_t least, int64_t most) {
    int64_t v = 0;
    const absl::string_view token = Next();
    if (!ok()) return;
    if (!absl::SimpleAtoi(token, &v) || v < least || v > most) {
      return Fail(absl::StrCat("expected a whole number from ", least, " to ", most));
    }
    value = static_cast<I>(v);
  }
  void Real(double& value, double most) {
    const absl::string_view token = Next();
    if (!ok()) return;
    if (!absl::SimpleAtod(token, &value) || !std::isfinite(value) || value < 0 || value > most) {
      return Fail(absl::StrCat("expected a finite number from 0 to ", most));
    }
  }
  void Bool(bool& value) {
    int v = 0;
    Int(v, 0, 1);
    value = v == 1;
  }
  void Text(std::string& value) {
    const absl::string_view token = Next();
    if (!ok()) return;
    std::optional<std::string> text = UnquoteToken(token);
    if (!text.has_value()) {
      return Fail(
          "expected text in double quotes, with %XX for each blank, '\"', '%' or byte "
          "outside '!'..'~'");
    }
    value = *std::move(text);
  }
  // A list's length: at most `most`, and never more than the tokens left can fill, each item
  // taking at least `tokens_per_item`: a short text cannot make the reader allocate much.
  template <typename T>
  void Size(std::vector<T>& items, int64_t most, int64_t tokens_per_item = 1) {
    int64_t n = 0;
    const size_t left = next_ < tokens_.size() ? tokens_.size() - next_ - 1 : 0;  // after n
    Int(n, 0, std::min<int64_t>(most, static_cast<int64_t>(left) / tokens_per_item));
    if (ok()) items.resize(n);
  }
  void Line() {}
  // Records the first failure, at the token last read.
  void Fail(absl::string_view why) {
    if (!status_.ok()) return;
    if (next_ > tokens_.size() || next_ == 0) {
      status_ = absl::InvalidArgumentError(absl::StrCat("profile text ends early: ", why));
      return;
    }
    const auto& [token, line] = tokens_[next_ - 1];
    status_ = absl::InvalidArgumentError(absl::StrCat("profile text line ", line, ": ", why,
                                                      ", not '", Printable(token.substr(0, 80)),
                                                      token.size() > 80 ? "...'" : "'"));
  }
  // Records `why` as the first failure, at the line of the token `position` names (position() when
  // it was next).
  void FailAt(size_t position, absl::string_view why) {
    if (!status_.ok()) return;
    status_ = absl::InvalidArgumentError(
        position < tokens_.size()
            ? absl::StrCat("profile text line ", tokens_[position].second, ": ", why)
            : absl::StrCat("profile text ends early: ", why));
  }
  size_t position() const { return next_; }
  bool ok() const { return status_.ok(); }
  void End() {
    if (!ok() || next_ >= tokens_.size()) return;
    ++next_;
    Fail("expected the end of the text");
  }
  const absl::Status& status() const { return status_; }

 private:
  absl::string_view Next() {
    if (!ok()) return "";
    if (next_ >= tokens_.size()) {
      ++next_;  // past the end: the caller's failure says the text ends early
      return "";
    }
    return tokens_[next_++].first;
  }
  std::vector<std::pair<absl::string_view, int>> tokens_;
  size_t next_ = 0;
  absl::Status status_;
};

template <typename Io>
void Bytes(Io& io, absl::string_view name, int64_t& value, int64_t least = 0) {
  io.Name(name);
  io.Int(value, least, kMaxBytes);
}
template <typename Io>
void Ms(Io& io, absl::string_view name, double& value) {
  io.Name(name);
  io.Real(value, kMaxMs);
}
template <typename Io>
void Flag(Io& io, absl::string_view name, bool& value) {
  io.Name(name);
  io.Bool(value);
}
template <typename Io>
void Words(Io& io, absl::string_view name, std::string& value) {
  io.Name(name);
  io.Text(value);
}
template <typename Io>
void Work(Io& io, absl::string_view name, OpWork& work) {
  io.Name(name);
  io.Int(work.matmul_flops, 0, kMaxFlopCount);
  io.Int(work.bytes, 0, kMaxBytes);
  io.Int(work.ops, 0, kMaxBytes);
}
template <typename Io>
void Indices(Io& io, absl::string_view name, std::vector<int>& indices) {
  io.Name(name);
  io.Size(indices, kMaxIndex);
  for (int& i : indices) io.Int(i, 0, kMaxIndex);
}
template <typename Io>
void Texts(Io& io, absl::string_view name, std::vector<std::string>& texts) {
  io.Name(name);
  io.Size(texts, kMaxIndex);
  for (std::string& t : texts) io.Text(t);
}

// An enumeration by its name (`name_of`, over the values 0..count-1).
template <typename Io, typename E, typename NameOf>
void Enum(Io& io, absl::string_view name, E& value, int count, NameOf name_of) {
  std::string word(name_of(value));
  Words(io, name, word);
  if (!Io::kReading || !io.ok()) return;
  for (int k = 0; k < count; ++k) {
    if (name_of(static_cast<E>(k)) == word) {
      value = static_cast<E>(k);
      return;
    }
  }
  io.Fail(absl::StrCat("expected a ", name, " this version knows"));
}

template <typename Io>
void WalkStage(Io& io, StageInfo& stage) {
  Words(io, "stage", stage.name);
  Enum(io, "kind", stage.kind, kStageKinds, StageKindName);
  Flag(io, "stochastic", stage.stochastic);
  Flag(io, "updates_state", stage.updates_state);
  Bytes(io, "buffer_bytes", stage.buffer_bytes);
  io.Name("forward_flops");
  io.Real(stage.forward_flops, kMaxFlops);
  Words(io, "repeat_key", stage.repeat_key);
  io.Name("parts");
  io.Size(stage.parts, kMaxPolicies, 8);
  for (PartInfo& part : stage.parts) {
    Words(io, "part", part.name);
    Enum(io, "part_kind", part.kind, kPartKinds, PartKindName);
    io.Name("extent");
    io.Int(part.extent, 0, kMaxBytes);
    Words(io, "unfusable", part.unfusable);
  }
  io.Line();
}

// A policy of `stage`: a policy for each of its parts, or none (every part stored).
template <typename Io>
void WalkPolicy(Io& io, const StageInfo& stage, StagePolicy& policy) {
  io.Name("policy");
  io.Size(policy.parts, static_cast<int64_t>(stage.parts.size()));
  if (Io::kReading && io.ok() && !policy.parts.empty() &&
      policy.parts.size() != stage.parts.size()) {
    return io.Fail(absl::StrCat("expected 0 or the stage's ", stage.parts.size(), " parts"));
  }
  for (size_t k = 0; k < policy.parts.size() && io.ok(); ++k) {
    PartPolicy& part = policy.parts[k];
    std::string id = part.action.id();
    io.Text(id);
    io.Int(part.chunks, 1, kMaxIndex);
    if (!Io::kReading || !io.ok()) continue;
    const std::optional<PartAction> action = PartAction::Find(id, stage.parts[k].kind);
    if (!action.has_value()) {
      return io.Fail(
          absl::StrCat("expected an action for a ", PartKindName(stage.parts[k].kind), " part"));
    }
    if (action->def().mechanism == PartMechanism::kFused && !stage.parts[k].unfusable.empty()) {
      return io.Fail("expected no fused kernel for a part the model cannot fuse");
    }
    part.action = *action;
    if ((part.chunks >= 2) != action->Counted()) {
      return io.Fail("expected a count of 2 or more for chunking, else 1");
    }
  }
}

template <typename Io>
void WalkMeasured(Io& io, const StageInfo& stage, StageProfile& p) {
  WalkPolicy(io, stage, p.policy);
  Bytes(io, "input_bytes", p.input_bytes);
  Bytes(io, "output_bytes", p.output_bytes);
  io.Name("outputs");
  io.Size(p.outputs, kMaxIndex, 2);
  for (BoundaryStorage& s : p.outputs) {
    io.Int(s.bytes, 0, kMaxBytes);
    io.Int(s.input, -1, kMaxIndex);
  }
  Bytes(io, "retained_bytes", p.retained_bytes);
  Indices(io, "kept_inputs", p.kept_inputs);
  Indices(io, "kept_outputs", p.kept_outputs);
  Bytes(io, "forward_transient_bytes", p.forward_transient_bytes);
  Bytes(io, "nograd_transient_bytes", p.nograd_transient_bytes);
  io.Name("param_grads");
  io.Size(p.param_grads, kMaxIndex, 2);
  for (auto& [param, bytes] : p.param_grads) {
    io.Int(param, 0, kMaxIndex);
    io.Int(bytes, 0, kMaxBytes);
  }
  io.Name("sums_in_place");
  std::vector<bool>& sums = p.param_grad_sums_in_place;
  io.Size(sums, kMaxIndex);
  for (size_t k = 0; k < sums.size(); ++k) {
    bool sum = sums[k];
    io.Bool(sum);
    sums[k] = sum;
  }
  Bytes(io, "input_grad_bytes", p.input_grad_bytes);
  Bytes(io, "backward_transient_bytes", p.backward_transient_bytes);
  Bytes(io, "backward_input_held_transient_bytes", p.backward_input_held_transient_bytes);
  Bytes(io, "backward_input_output_held_transient_bytes",
        p.backward_input_output_held_transient_bytes);
  Bytes(io, "backward_held_transient_bytes", p.backward_held_transient_bytes);
  Bytes(io, "rng_state_bytes", p.rng_state_bytes);
  Texts(io, "float32_ops", p.float32_ops);
  Work(io, "forward_work", p.forward_work);
  Work(io, "nograd_work", p.nograd_work);
  Work(io, "backward_work", p.backward_work);
  StageCosts& c = p.costs;
  Ms(io, "forward_ms", c.forward_ms);
  Ms(io, "nograd_forward_ms", c.nograd_forward_ms);
  Ms(io, "backward_ms", c.backward_ms);
  Bytes(io, "costs.input_bytes", c.input_bytes);
  Bytes(io, "costs.output_bytes", c.output_bytes);
  Bytes(io, "costs.kept_bytes", c.kept_bytes);
  Bytes(io, "costs.forward_transient_bytes", c.forward_transient_bytes);
  Bytes(io, "costs.nograd_transient_bytes", c.nograd_transient_bytes);
  Bytes(io, "costs.backward_transient_bytes", c.backward_transient_bytes);
  Bytes(io, "costs.param_grad_bytes", c.param_grad_bytes);
  io.Line();
}

template <typename Io>
void WalkStages(Io& io, std::vector<StageInfo>& stages) {
  io.Name("stages");
  io.Size(stages, kMaxProfileStages, kStageTokens);
  for (StageInfo& stage : stages) WalkStage(io, stage);
}

template <typename Io>
void WalkProfile(Io& io, ModelProfile& p) {
  Words(io, "model", p.model);
  Flag(io, "timed", p.timed);
  Words(io, "autocast", p.autocast);
  Words(io, "extrapolated", p.extrapolated);
  io.Name("menu_chunks");
  io.Int(p.menu_chunks, 1, kMaxIndex);
  io.Line();
  Bytes(io, "input_bytes", p.input_bytes);
  io.Name("input_storages");
  io.Size(p.input_storage_bytes, kMaxIndex);
  for (int64_t& bytes : p.input_storage_bytes) io.Int(bytes, 0, kMaxBytes);
  Bytes(io, "target_bytes", p.target_bytes);
  Bytes(io, "param_bytes", p.param_bytes);
  io.Name("param_element_bytes");
  io.Int(p.param_element_bytes, 1, 64);
  io.Line();
  io.Name("to_host_bytes_per_ms");
  io.Real(p.to_host_bytes_per_ms, kMaxRate);
  io.Name("from_host_bytes_per_ms");
  io.Real(p.from_host_bytes_per_ms, kMaxRate);
  Flag(io, "link_assumed", p.link_assumed);
  Flag(io, "copies_overlap", p.copies_overlap);
  // A map, walked as its pairs in order: read back, each parameter once.
  std::vector<std::pair<int, int64_t>> kept(p.kept_gradient_bytes.begin(),
                                            p.kept_gradient_bytes.end());
  io.Name("kept_gradient_bytes");
  io.Size(kept, kMaxIndex, 2);
  for (auto& [param, bytes] : kept) {
    io.Int(param, 0, kMaxIndex);
    io.Int(bytes, 0, kMaxBytes);
    if (Io::kReading && io.ok() && !p.kept_gradient_bytes.emplace(param, bytes).second) {
      io.Fail("expected each parameter once");
    }
  }
  io.Line();
  LossProfile& loss = p.loss;
  Bytes(io, "loss.retained_bytes", loss.retained_bytes);
  Indices(io, "loss.kept_inputs", loss.kept_inputs);
  Bytes(io, "loss.output_bytes", loss.output_bytes);
  Bytes(io, "loss.forward_transient_bytes", loss.forward_transient_bytes);
  Bytes(io, "loss.backward_transient_bytes", loss.backward_transient_bytes);
  Bytes(io, "loss.backward_net_bytes", loss.backward_net_bytes, -kMaxBytes);
  Bytes(io, "loss.input_grad_bytes", loss.input_grad_bytes);
  Ms(io, "loss.forward_ms", loss.forward_ms);
  Ms(io, "loss.backward_ms", loss.backward_ms);
  Work(io, "loss.forward_work", loss.forward_work);
  Work(io, "loss.backward_work", loss.backward_work);
  io.Line();
  WalkStages(io, p.stages);
  if (Io::kReading) p.measured.resize(p.stages.size());
  for (size_t i = 0; i < p.stages.size() && io.ok(); ++i) {
    io.Name("measured");
    io.Size(p.measured[i], kMaxPolicies, kMeasuredTokens);
    if (Io::kReading && io.ok() && p.measured[i].empty()) {
      return io.Fail("expected at least the stage's measurement with every part stored");
    }
    for (StageProfile& measured : p.measured[i]) WalkMeasured(io, p.stages[i], measured);
    if (Io::kReading && io.ok() && !p.measured[i].front().policy.IsDefault()) {
      return io.Fail("expected the first measurement of a stage to store every part");
    }
  }
}

// The digest of an entry: of its key and profile as this version writes them.
std::string EntryDigest(const std::string& key, const ModelProfile& profile) {
  Writer w;
  // The walk takes references to fill when reading; the writer only reads them.
  Words(w, "key", const_cast<std::string&>(key));
  WalkProfile(w, const_cast<ModelProfile&>(profile));
  return absl::StrFormat("%016x", Fnv1a64(w.Take()));
}

}  // namespace

std::string ProfilesToText(const std::vector<KeyedProfile>& entries) {
  Writer w;
  w.Name(kMagic);
  int format = kProfileFormat;
  w.Int(format, 0, 0);
  w.Name("entries");
  w.Size(const_cast<std::vector<KeyedProfile>&>(entries), 0);
  w.Line();
  for (const auto& [key, profile] : entries) {
    Words(w, "key", const_cast<std::string&>(key));
    std::string digest = EntryDigest(key, profile);
    Words(w, "digest", digest);
    w.Line();
    WalkProfile(w, const_cast<ModelProfile&>(profile));
  }
  return w.Take();
}

absl::StatusOr<std::vector<KeyedProfile>> ProfilesFromText(absl::string_view text) {
  Reader r(text);
  r.Name(kMagic);
  int format = 0;
  r.Int(format, 0, kMaxIndex);
  if (r.ok() && format != kProfileFormat) {
    r.Fail(absl::StrCat("expected format ", kProfileFormat, " (this version's)"));
  }
  std::vector<KeyedProfile> entries;
  r.Name("entries");
  r.Size(entries, kMaxIndex, kProfileTokens);
  for (auto& [key, profile] : entries) {
    if (!r.ok()) break;
    const size_t at = r.position();
    Words(r, "key", key);
    std::string digest;
    Words(r, "digest", digest);
    WalkProfile(r, profile);
    if (r.ok() && digest != EntryDigest(key, profile)) {
      r.FailAt(at,
               "the entry was changed since it was written (its text does not give its digest)");
    }
  }
  r.End();
  if (!r.ok()) return r.status();
  return entries;
}

std::string StagesToText(const std::vector<StageInfo>& stages) {
  Writer w;
  WalkStages(w, const_cast<std::vector<StageInfo>&>(stages));
  return w.Take();
}

}  // namespace ckpt
