// Profiles as text, both ways: what a run keeps of a model's profile so that a later question on
// the same model plans from it instead of measuring again (experiments/kept_profiles.h).
//
//   const std::string text = ProfilesToText({{key, profile}});
//   ASSIGN_OR_RETURN(std::vector<KeyedProfile> back, ProfilesFromText(text));  // plans alike
//
// The text is a stream of blank-separated tokens in one fixed order: a field's name, then its
// value (an integer, a real written to round-trip exactly, or text in double quotes with every
// byte outside '!'..'~', '"' and '%' written as %XX); a list's length before its items. One
// walk over ModelProfile writes and reads it, so that the two cannot disagree. The first token
// names the format and its version (kProfileFormat): a text of another version is refused, not
// guessed at. Each entry carries a digest of its key and profile as written: an entry changed
// since (a digit edited by hand) is refused, naming its line.
//
// Reading returns a profile or an error on any input (fuzzed in testing/profile_text_test.cc):
// bytes are whole numbers from 0 to 2^44 (the loss's net bytes may be negative), times finite
// and from 0 to 10^12 ms, at most kMaxProfileStages stages and 64 policies a stage, each policy
// one the stage's parts allow; a list is never longer than the tokens left to fill it. Needs no
// LibTorch.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/plan/profile.h"

namespace ckpt {

// The format's version: changed whenever the walk changes, so that an older text is refused.
inline constexpr int kProfileFormat = 6;
inline constexpr int kMaxProfileStages = 16384;

// Profiles, each under a key (what it was measured for; keys need not be distinct), in one
// text, and back in the same order. InvalidArgument naming the token (by line) that is not what
// the format has there, and why.
using KeyedProfile = std::pair<std::string, ModelProfile>;
std::string ProfilesToText(const std::vector<KeyedProfile>& entries);
absl::StatusOr<std::vector<KeyedProfile>> ProfilesFromText(absl::string_view text);

// The stages alone, as a profile's text writes them: equal texts, equal declarations.
std::string StagesToText(const std::vector<StageInfo>& stages);

}  // namespace ckpt
