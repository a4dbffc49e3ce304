#pragma once
// The memory plan is a pass: passes/memory_plan.h. This path remains only because
// runtime/replay_arena.cpp (rewritten on another branch) still includes it; delete this
// file once that include names passes/memory_plan.h.
#include "passes/memory_plan.h"
