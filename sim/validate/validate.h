#pragma once
// `trainsim validate`: re-simulates published, measured runs (validation/records/*.json, generated
// from the reference data by tools/gen-validation) and reports how far each prediction is from the
// measurement, with the mean absolute percentage error (MAPE) per quantity.
//
// Record kinds: "step" (a training step's time), "layer" (one transformer layer's forward and
// backward time), "memory" (the first pipeline stage's weights+gradients+optimizer states and
// activations). A record whose scenario uses a feature trainsim does not simulate yet is listed as
// skipped with the reason, never dropped. A record measured on software whose maintainers filed the
// slowdown as a performance regression (Record::regression) is compared and listed, but kept out of
// the summary's figures.

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/accuracy.h"
#include "config/scenario.h"

namespace trainsim::validate {

struct Record {
  std::string file;
  std::string id;
  std::string kind;  // step | layer | memory
  std::string source;
  std::string conversion;
  std::vector<std::string> assumptions;
  nlohmann::json scenario;
  nlohmann::json measured;
  std::optional<std::string> skip;
  // The run was measured on software whose maintainers filed this slowdown as a performance
  // regression (the issue and the evidence): it is compared and listed, but left out of every figure
  // of the summary (MAPE, by source, by kind, memory fill) and of the gate.
  std::optional<std::string> regression;
};

// One compared quantity of a record.
struct Comparison {
  std::string quantity;  // "step_time_s", "layer_ms", "memory_gib"
  double measured = 0;
  double predicted = 0;
  double error() const { return (predicted - measured) / measured; }
};

struct Outcome {
  const Record* record = nullptr;
  std::vector<Comparison> comparisons;     // empty when skipped
  std::string skipped;                     // the reason, when skipped
  std::string detail;                      // e.g. the memory split
  std::string regression{};                // Record::regression, when compared
  bool moe = false;                        // the model is a mixture of experts (its own source group)
  bool nvfp4 = false;                      // the run's GEMMs are NVFP4 (its own source group too)
  bool hybrid = false;                     // a hybrid (Mamba) model: its own group, not the MoE one
  bool token_drop = false;                 // MoE with a capacity factor (token dropping): its own group too
  std::vector<std::string> kind_groups{};  // config::accuracy_groups of its scenario
  std::string model_key{};                 // config::accuracy_model_key of its scenario
  std::string model_name{};                // the name its scenario gives the model
  // A compared step record: the allocated peak trainsim predicts over the GPU's memory.
  std::optional<double> memory_fill{};
};

struct QuantitySummary {
  std::string quantity;
  int covered = 0;
  double mape = 0;   // mean of |error|
  double worst = 0;  // largest |error|
  std::string worst_id;
};

// The compared runs of known regressions (Record::regression), apart from every other figure.
struct RegressionSummary {
  int runs = 0;
  double mean_error = 0;  // signed
};

struct Summary {
  int records = 0;
  int skipped = 0;
  RegressionSummary regressions;
  std::vector<QuantitySummary> quantities;
  // Step time by source (the record id up to its first '_': narayanan2021, mcore, mpt, ...).
  std::vector<QuantitySummary> step_time_by_source;
  // Step time by kind of run (config::accuracy_groups: "dense", "moe/blackwell", ...), sorted by name:
  // what validation/accuracy.json holds and `run` quotes.
  std::vector<config::PublishedAccuracy> step_time_by_kind;
  // Step time by model (config::accuracy_model_key), the models with at least
  // config::kMinAccuracyRuns runs, sorted by key; each named by the name most of its runs give it
  // (the first in sorted order of the most frequent).
  std::vector<config::PublishedModelAccuracy> step_time_by_model;
  // The names the runs of each model in step_time_by_model give it, with their runs (by key).
  std::map<std::string, std::map<std::string, int>> model_run_names;
  // The fill config::kMemoryFillQuantile of the compared step runs stay within: validation/accuracy.json
  // holds it too, and `run` calls a peak above it tight, `search` leaves the rest free by default.
  config::PublishedMemoryFill memory_fill;
  const QuantitySummary* find(const std::string& quantity) const;
};

// Gives each model of summary.step_time_by_model the name of a model file of <data_dir>/models/
// with its architecture (config::catalog_model_names), where there is one: the name a user's
// scenario gives it, where the published runs spell it their own ways. Of several such files, the
// one most of the runs name (the first in sorted order of the most named); if the runs name none
// of them, their own most frequent name stays.
void name_models_from_catalog(Summary& summary, const std::filesystem::path& data_dir);

// Reads every *.json in `dir` (sorted by file name); bad records are InputErrors.
std::vector<Record> load_records(const std::filesystem::path& dir);
// What `validate` changes in every record before running it: the network model (e.g. to re-run every
// record on the flow network), and the host cost scale of the Megatron records
// (training.host_cost_scale, a sensitivity study of the host overhead).
struct Overrides {
  std::optional<config::NetworkModel> network;
  std::optional<double> host_cost_scale;
  // The share of compute speed overlapped communication takes, on every record (a sensitivity study
  // of parallel::BuildOptions::compute_slowdown; none by default, as no record names a profile).
  std::optional<double> compute_slowdown;
  // `--set PATH=VALUE` on every record's scenario (config::apply_overrides); a record the change
  // makes invalid is skipped with the reason.
  std::vector<std::string> sets;
};
Outcome evaluate(const Record& record, const std::filesystem::path& data_dir, const Overrides& overrides = {});
Summary summarize(const std::vector<Outcome>& outcomes);

std::string to_text(const std::vector<Outcome>& outcomes, const Summary& summary);
std::string to_markdown(const std::vector<Outcome>& outcomes, const Summary& summary);
nlohmann::json to_json(const std::vector<Outcome>& outcomes, const Summary& summary);

// A gate file holds the accuracy the model has reached: {"step_time_s": {"max_mape_pct": 8.5,
// "max_worst_pct": 20, "min_covered": 30}, "step_time_s:mpt": {...}, ...}; a key is a quantity or
// "step_time_s:<source>". Returns one line per violated bound (empty when all hold).
std::vector<std::string> check_gate(const Summary& summary, const std::filesystem::path& gate_file);

}  // namespace trainsim::validate
