// Profiles made up for tests that need no tensors (strategies, plans, profile text): chains of
// stages with random parts, sizes and times under every policy of their menus, some stages
// stochastic, some parameters tied across two stages, some profiles with copy rates.
#pragma once

#include "core/plan/profile.h"
#include "rapidcheck.h"

namespace ckpt::testing {

// Up to `max_stages` stages, most of them 30 or fewer.
rc::Gen<ModelProfile> GeneratedProfile(int max_stages);

}  // namespace ckpt::testing
