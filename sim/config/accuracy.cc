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

std::string model_signature(const workload::ModelSpec& m) {
  // Parameters outside the embedding and the output layer: vocabularies padded differently (or another
  // tokenizer) leave the model the same.
  const std::int64_t vocab_params = m.embedding_params() * (m.tied_embeddings ? 1 : 2);
  return fmt::format("{}x{}:e{}:p{}", m.layers, m.hidden, m.experts, m.main_params() - vocab_params);
}

std::string accuracy_model_key(const Scenario& sc) {
  const std::vector<std::string> groups = accuracy_groups(sc);
  if (groups.empty()) return {};
  // The broadest group names the framework ("dense", "moe", "hybrid": Megatron).
  const std::string& broad = groups.back();
  const std::string framework = broad == "torchtitan" || broad == "megatron-deepspeed" ? broad : "megatron";
  return framework + ":" + model_signature(sc.model);
}

std::map<std::string, std::vector<std::string>> catalog_model_names(const std::filesystem::path& data_dir) {
  std::map<std::string, std::vector<std::string>> names;
  const std::filesystem::path dir = data_dir / "models";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return names;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    names[model_signature(load_model(f.string(), data_dir, f.string()))].push_back(f.stem().string());
  return names;
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
      {"note", "step_time_by_kind", "reserved_over_allocated_by_kind", "memory_fill", "step_time_by_model"});
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

std::optional<PublishedModelAccuracy> published_model_accuracy(const Scenario& sc,
                                                               const std::filesystem::path& data_dir) {
  const std::string key = accuracy_model_key(sc);
  if (key.empty()) return std::nullopt;
  std::string name;
  const std::optional<nlohmann::json> doc = accuracy_file(data_dir, name);
  if (!doc) return std::nullopt;
  const auto models = util::JsonNode(*doc, name).find("step_time_by_model");
  if (!models) return std::nullopt;
  const auto node = models->find(key);
  if (!node) return std::nullopt;
  node->reject_unknown({"name", "runs", "mape", "mean_error"});
  PublishedModelAccuracy a;
  a.key = key;
  a.name = node->at("name").as_string();
  a.runs = static_cast<int>(node->at("runs").as_positive_int());
  a.mape = node->at("mape").as_nonnegative_number();
  a.mean_error = node->at("mean_error").as_number();
  if (a.runs < kMinAccuracyRuns) return std::nullopt;
  return a;
}

void look_up_published_accuracy(Scenario& sc, const std::filesystem::path& data_dir) {
  sc.accuracy = published_accuracy(sc, data_dir);
  sc.model_accuracy = published_model_accuracy(sc, data_dir);
}

nlohmann::json published_json(const PublishedAccuracy& a) {
  return {{"group", a.group}, {"runs", a.runs}, {"mape", a.mape}, {"mean_error", a.mean_error}};
}

nlohmann::json published_json(const PublishedModelAccuracy& a) {
  return {{"key", a.key}, {"name", a.name}, {"runs", a.runs}, {"mape", a.mape}, {"mean_error", a.mean_error}};
}

nlohmann::json accuracy_json(const std::vector<PublishedAccuracy>& groups, const PublishedMemoryFill& fill,
                             const std::vector<PublishedModelAccuracy>& models) {
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
  nlohmann::json out = {
      {"note",
       "Step-time error of trainsim's predictions of the published runs in validation/records, by "
       "kind of run and by model (5 runs or more), where runs logged PyTorch's reserved memory peak its ratio to the "
       "allocated peak trainsim predicts, and the fill (that peak over the GPU's memory) the "
       "quantile of the runs stay within; written by `trainsim validate --accuracy "
       "validation/accuracy.json`"},
      {"step_time_by_kind", by}};
  if (!reserved.empty()) out["reserved_over_allocated_by_kind"] = reserved;
  if (fill.runs > 0)
    out["memory_fill"] = {{"runs", fill.runs}, {"quantile", fill.quantile}, {"fill", rounded(fill.fill)}};
  nlohmann::json by_model = nlohmann::json::object();
  for (const PublishedModelAccuracy& a : models)
    if (a.runs >= kMinAccuracyRuns)
      by_model[a.key] = {
          {"name", a.name}, {"runs", a.runs}, {"mape", rounded(a.mape)}, {"mean_error", rounded(a.mean_error)}};
  if (!by_model.empty()) out["step_time_by_model"] = by_model;
  return out;
}

}  // namespace trainsim::config
