#pragma once
// How far the predictions of published, measured runs of a scenario's kind fell from the
// measurements: the step-time error `trainsim validate` finds on validation/records, grouped by
// model kind (dense, mixture of experts, hybrid Mamba), GPU architecture and NVFP4, kept in
// validation/accuracy.json (written by `validate --accuracy`, checked to be current by the tests).
// `run` prints the group of its scenario, so a prediction comes with the error of its kind.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/scenario.h"

namespace trainsim::config {

// The groups a scenario belongs to, most specific first: its kind and architecture ("moe/blackwell";
// NVFP4 runs apart, "moe/blackwell/nvfp4"), then its kind ("moe"); torchtitan's and
// Megatron-DeepSpeed's runs by framework ("torchtitan/hopper", "megatron-deepspeed"). Empty for a
// framework with no published runs (pytorch-eager).
std::vector<std::string> accuracy_groups(const Scenario& scenario);

// Groups with fewer runs than this are too small to quote; the broader group is used.
inline constexpr int kMinAccuracyRuns = 5;

// The most specific group of `scenario` with at least kMinAccuracyRuns runs in
// <data_dir>/validation/accuracy.json; nothing when the file or such a group is missing. Its
// reserved-memory ratios come from the most specific group with at least kMinAccuracyRuns such runs
// (none: reserved_runs 0). A malformed file is an InputError naming it.
std::optional<PublishedAccuracy> published_accuracy(const Scenario& scenario, const std::filesystem::path& data_dir);

// The share of the published runs whose memory fill (the allocated peak trainsim predicts over the
// GPU's memory) PublishedMemoryFill quotes. Not 1: the fullest few are runs whose peak the model puts
// at or above the GPU's memory, its own error (validation/README.md, "How full the published runs
// keep their GPUs"); below this share the fills fall off a cliff (760 of 767 at most 0.90).
inline constexpr double kMemoryFillQuantile = 0.98;

// The fill that kMemoryFillQuantile of `fills` stay within (the nearest-rank quantile); runs 0 when
// `fills` is empty.
PublishedMemoryFill memory_fill_of(std::vector<double> fills);

// The "memory_fill" of <data_dir>/validation/accuracy.json; nothing when the file or the key is
// missing. A malformed file is an InputError naming it.
std::optional<PublishedMemoryFill> published_memory_fill(const std::filesystem::path& data_dir);

// The file's JSON for a set of groups ({"step_time_by_kind": {group: {runs, mape, mean_error}},
// "reserved_over_allocated_by_kind": {group: {runs, min, max}}} for the groups with reserved_runs)
// and the published runs' memory fill ({"memory_fill": {runs, quantile, fill}}, when it has runs).
nlohmann::json accuracy_json(const std::vector<PublishedAccuracy>& groups, const PublishedMemoryFill& fill = {});

}  // namespace trainsim::config
