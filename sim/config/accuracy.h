#pragma once
// How far the predictions of published, measured runs of a scenario's kind fell from the
// measurements: the step-time error `trainsim validate` finds on validation/records, grouped by
// model kind (dense, mixture of experts, hybrid Mamba), GPU architecture and NVFP4, kept in
// validation/accuracy.json (written by `validate --accuracy`, checked to be current by the tests).
// `run` prints the group of its scenario, so a prediction comes with the error of its kind, and,
// where enough published runs trained the same model, their error too.

#include <filesystem>
#include <map>
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

// The model a scenario runs, as the published runs of the same model are grouped: the framework's
// group ("megatron", "torchtitan", "megatron-deepspeed": their kernels differ) and the architecture
// by its layers, hidden size, routed experts and parameters outside the embedding, the output layer
// and multi-token prediction (the name is left out: sources spell one model differently; a padded
// vocabulary or another tokenizer leaves the model the same; the MTP module is a training choice),
// e.g. "megatron:36x2880:e128:p115670887488". Empty where accuracy_groups is.
std::string accuracy_model_key(const Scenario& scenario);

// The architecture part of accuracy_model_key: "36x2880:e128:p115670887488".
std::string model_signature(const workload::ModelSpec& model);

// The names of the models of <data_dir>/models/ (the files' stems, sorted) by their model_signature:
// the names users type, which `validate` gives the published runs' models where one matches (Llama 2
// and Llama 3 70B share one architecture, hence several). Empty without the directory.
std::map<std::string, std::vector<std::string>> catalog_model_names(const std::filesystem::path& data_dir);

// The step-time error of the published runs of `scenario`'s model (accuracy_model_key) in
// <data_dir>/validation/accuracy.json ("step_time_by_model", which holds the models with at least
// kMinAccuracyRuns runs); nothing when the file or the model is missing. A malformed file is an
// InputError naming it.
std::optional<PublishedModelAccuracy> published_model_accuracy(const Scenario& scenario,
                                                               const std::filesystem::path& data_dir);

// Sets scenario.accuracy and scenario.model_accuracy from <data_dir>/validation/accuracy.json, as
// `run` and `search` quote them.
void look_up_published_accuracy(Scenario& scenario, const std::filesystem::path& data_dir);

// One kind's or one model's error as `run --json` and `search --json` give it: {group, runs, mape,
// mean_error}; {key, name, runs, mape, mean_error}.
nlohmann::json published_json(const PublishedAccuracy& accuracy);
nlohmann::json published_json(const PublishedModelAccuracy& accuracy);

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
// "reserved_over_allocated_by_kind": {group: {runs, min, max}}} for the groups with reserved_runs),
// the published runs' memory fill ({"memory_fill": {runs, quantile, fill}}, when it has runs) and
// the models with at least kMinAccuracyRuns runs ({"step_time_by_model": {key: {name, runs, mape,
// mean_error}}}, when there is one).
nlohmann::json accuracy_json(const std::vector<PublishedAccuracy>& groups, const PublishedMemoryFill& fill = {},
                             const std::vector<PublishedModelAccuracy>& models = {});

}  // namespace trainsim::config
