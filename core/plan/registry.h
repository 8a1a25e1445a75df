// A registry of named plugins (strategies, models), filled by static registration objects.
//
// Each plugin lives in its own package with `alwayslink = 1` and registers itself from its
// .cc file (see core/plan/strategy.h for the strategy form). Registration only stores a
// factory: no LibTorch and no I/O run in static initialisers. A duplicate id aborts at
// start-up naming it; an unknown id is a NotFound error listing the known ids. Needs no
// LibTorch.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/plan/spec.h"

namespace ckpt {

// `Product` is what a factory makes (e.g. std::unique_ptr<Strategy>); `Traits` is what else a
// plugin of this kind declares about itself (e.g. a model's small sizes for the tests); `Args`
// are extra arguments every factory of this kind takes (e.g. the device for a model).
template <typename Product, typename Traits, typename... Args>
class Registry {
 public:
  using Factory = std::function<absl::StatusOr<Product>(const ParamValues&, Args...)>;

  struct Entry {
    std::string id;
    std::string summary;  // one line: what it is
    std::vector<ParamDef> params;
    Factory factory;
    Traits traits;
  };

  // `kind` names what is registered ("strategy", "model") in messages.
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void Register(Entry entry) {
    auto [it, inserted] = entries_.emplace(entry.id, entry);
    if (!inserted) {
      std::fprintf(stderr,
                   "ckptlab: fatal: duplicate %s id '%s', registered by \"%s\" and by "
                   "\"%s\"; ids must be unique\n",
                   kind_.c_str(), entry.id.c_str(), it->second.summary.c_str(),
                   entry.summary.c_str());
      std::abort();
    }
  }

  // Ids in sorted order.
  std::vector<std::string> Ids() const {
    std::vector<std::string> ids;
    for (const auto& [id, unused] : entries_) ids.push_back(id);
    return ids;
  }

  // Every entry, in id order.
  std::vector<const Entry*> Entries() const {
    std::vector<const Entry*> entries;
    for (const auto& [id, entry] : entries_) entries.push_back(&entry);
    return entries;
  }

  absl::StatusOr<const Entry*> Find(const std::string& id) const {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(
          absl::StrCat("unknown ", kind_, " '", id, "'; known: ", absl::StrJoin(Ids(), ", ")));
    }
    return &it->second;
  }

  // Checks a spec (known id, valid parameters) without creating anything.
  absl::StatusOr<ParamValues> Bind(const Spec& spec) const {
    absl::StatusOr<const Entry*> entry = Find(spec.name);
    if (!entry.ok()) return entry.status();
    return BindParams(spec, (*entry)->params);
  }

  // A multi-line listing of ids, summaries and parameters, for --help texts.
  std::string Describe() const {
    std::string out;
    for (const auto& [id, e] : entries_) {
      absl::StrAppend(&out, "  ", id, ": ", e.summary, "\n");
      for (const ParamDef& p : e.params) absl::StrAppend(&out, "      ", p.Describe(), "\n");
    }
    return out;
  }

 private:
  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace ckpt
