#include "config/accuracy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::config {

std::vector<std::string> accuracy_groups(const Scenario& sc) {
  const char* arch = sc.cluster.gpu.arch == hardware::Arch::ampere   ? "ampere"
                     : sc.cluster.gpu.arch == hardware::Arch::hopper ? "hopper"
                                                                     : "blackwell";
  // torchtitan runs form groups of their own (their kernels and sharding are not Megatron's); the
  // single-GPU eager PyTorch model has no published runs.
  if (sc.training.framework == Framework::torchtitan) return {fmt::format("torchtitan/{}", arch), "torchtitan"};
  // Megatron-DeepSpeed's runs too: DeepSpeed's engine, and kernels of their own years.
  if (sc.training.deepspeed) return {fmt::format("megatron-deepspeed/{}", arch), "megatron-deepspeed"};
  if (sc.training.framework != Framework::megatron) return {};
  const std::string kind = sc.model.hybrid() ? "hybrid" : sc.model.moe() ? "moe" : "dense";
  // NVFP4 runs form their own group within their architecture, apart from the others.
  const bool nvfp4 = sc.training.precision == Precision::nvfp4;
  return {fmt::format("{}/{}{}", kind, arch, nvfp4 ? "/nvfp4" : ""), kind};
}

namespace {

// validation/accuracy.json of `data_dir`, parsed and its top-level keys checked; nothing when the file
// is missing.
std::optional<nlohmann::json> accuracy_file(const std::filesystem::path& data_dir, std::string& name) {
  const std::filesystem::path file = data_dir / "validation" / "accuracy.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  name = file.string();
  nlohmann::json doc = util::read_json_file(name);
  util::JsonNode(doc, name).reject_unknown(
      {"note", "step_time_by_kind", "reserved_over_allocated_by_kind", "memory_fill"});
  return doc;
}

}  // namespace

PublishedMemoryFill memory_fill_of(std::vector<double> fills) {
  PublishedMemoryFill out;
  out.quantile = kMemoryFillQuantile;
  if (fills.empty()) return out;
  std::sort(fills.begin(), fills.end());
  out.runs = static_cast<int>(fills.size());
  // Nearest rank: the smallest fill that at least `quantile` of the runs stay within.
  const auto rank = static_cast<std::size_t>(std::ceil(kMemoryFillQuantile * static_cast<double>(fills.size())));
  out.fill = fills[std::max<std::size_t>(rank, 1) - 1];
  return out;
}

std::optional<PublishedMemoryFill> published_memory_fill(const std::filesystem::path& data_dir) {
  std::string name;
  const std::optional<nlohmann::json> doc = accuracy_file(data_dir, name);
  if (!doc) return std::nullopt;
  const auto node = util::JsonNode(*doc, name).find("memory_fill");
  if (!node) return std::nullopt;
  node->reject_unknown({"runs", "quantile", "fill"});
  PublishedMemoryFill out;
  out.runs = static_cast<int>(node->at("runs").as_positive_int());
  out.quantile = node->at("quantile").as_nonnegative_number();
  out.fill = node->at("fill").as_nonnegative_number();
  if (out.quantile > 1) throw util::InputError(name, "memory_fill.quantile", "must be at most 1");
  if (out.fill <= 0) throw util::InputError(name, "memory_fill.fill", "must be above 0");
  return out;
}

std::optional<PublishedAccuracy> published_accuracy(const Scenario& sc, const std::filesystem::path& data_dir) {
  std::string name;
  const std::optional<nlohmann::json> doc = accuracy_file(data_dir, name);
  if (!doc) return std::nullopt;
  const util::JsonNode root(*doc, name);
  const util::JsonNode groups = root.at("step_time_by_kind");
  std::optional<PublishedAccuracy> out;
  for (const std::string& g : accuracy_groups(sc)) {
    const auto node = groups.find(g);
    if (!node) continue;
    node->reject_unknown({"runs", "mape", "mean_error"});
    PublishedAccuracy a;
    a.group = g;
    a.runs = static_cast<int>(node->at("runs").as_positive_int());
    a.mape = node->at("mape").as_nonnegative_number();
    a.mean_error = node->at("mean_error").as_number();
    if (a.runs >= kMinAccuracyRuns) {
      out = a;
      break;
    }
  }
  if (!out) return out;
  const auto reserved = root.find("reserved_over_allocated_by_kind");
  if (!reserved) return out;
  for (const std::string& g : accuracy_groups(sc)) {
    const auto node = reserved->find(g);
    if (!node) continue;
    node->reject_unknown({"runs", "min", "max"});
    const int runs = static_cast<int>(node->at("runs").as_positive_int());
    if (runs < kMinAccuracyRuns) continue;
    out->reserved_runs = runs;
    out->reserved_min = node->at("min").as_nonnegative_number();
    out->reserved_max = node->at("max").as_nonnegative_number();
    break;
  }
  return out;
}

nlohmann::json accuracy_json(const std::vector<PublishedAccuracy>& groups, const PublishedMemoryFill& fill) {
  // To 0.01% (1e-4): the file holds what a summary line quotes, not the last bits of a build's
  // floating point, so the Release and the sanitized Debug builds write the same file.
  auto rounded = [](double x) { return std::round(x * 1e4) / 1e4; };
  nlohmann::json by = nlohmann::json::object(), reserved = nlohmann::json::object();
  for (const PublishedAccuracy& a : groups) {
    by[a.group] = {{"runs", a.runs}, {"mape", rounded(a.mape)}, {"mean_error", rounded(a.mean_error)}};
    if (a.reserved_runs > 0)
      reserved[a.group] = {
          {"runs", a.reserved_runs}, {"min", rounded(a.reserved_min)}, {"max", rounded(a.reserved_max)}};
  }
  nlohmann::json out = {{"note",
                         "Step-time error of trainsim's predictions of the published runs in validation/records, by "
                         "kind of run, where runs logged PyTorch's reserved memory peak its ratio to the "
                         "allocated peak trainsim predicts, and the fill (that peak over the GPU's memory) the "
                         "quantile of the runs stay within; written by `trainsim validate --accuracy "
                         "validation/accuracy.json`"},
                        {"step_time_by_kind", by}};
  if (!reserved.empty()) out["reserved_over_allocated_by_kind"] = reserved;
  if (fill.runs > 0)
    out["memory_fill"] = {{"runs", fill.runs}, {"quantile", fill.quantile}, {"fill", rounded(fill.fill)}};
  return out;
}

}  // namespace trainsim::config
