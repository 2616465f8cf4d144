#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "config/accuracy.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"

namespace fs = std::filesystem;
using trainsim::config::accuracy_json;
using trainsim::config::accuracy_model_key;
using trainsim::config::kMemoryFillQuantile;
using trainsim::config::memory_fill_of;
using trainsim::config::published_memory_fill;
using trainsim::config::published_model_accuracy;
using trainsim::config::PublishedMemoryFill;
using trainsim::config::PublishedModelAccuracy;

namespace {

// A data directory of its own with validation/accuracy.json holding `doc`.
fs::path data_dir_with(const std::string& name, const nlohmann::json& doc) {
  const fs::path dir = fs::temp_directory_path() / ("trainsim-accuracy-" + std::to_string(::getpid())) / name;
  fs::create_directories(dir / "validation");
  std::ofstream(dir / "validation" / "accuracy.json") << doc.dump(2);
  return dir;
}

}  // namespace

TEST_CASE("the published runs' memory fill is the nearest-rank quantile of their fills") {
  // 100 runs filling 1%, 2%, ..., 100%: 98% of them stay within 98% (the 98th smallest).
  std::vector<double> fills;
  for (int i = 100; i >= 1; --i) fills.push_back(i / 100.0);  // unsorted on purpose
  const PublishedMemoryFill f = memory_fill_of(fills);
  CHECK(f.runs == 100);
  CHECK(f.quantile == kMemoryFillQuantile);
  CHECK(f.fill == Approx(0.98));
  // 10 runs: ceil(0.98 * 10) = 10, so the fullest.
  CHECK(memory_fill_of({0.5, 0.1, 0.9, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.95}).fill == Approx(0.95));
  CHECK(memory_fill_of({0.7}).fill == Approx(0.7));
  CHECK(memory_fill_of({}).runs == 0);
}

TEST_CASE("accuracy.json carries the memory fill, which published_memory_fill reads back") {
  const PublishedMemoryFill f{.runs = 767, .quantile = 0.98, .fill = 0.89537};
  const nlohmann::json doc = accuracy_json({}, f);
  CHECK(doc["memory_fill"]["runs"] == 767);
  CHECK(doc["memory_fill"]["fill"] == 0.8954);  // to 1e-4, as the file's other numbers
  const auto read = published_memory_fill(data_dir_with("good", doc));
  REQUIRE(read);
  CHECK(read->runs == 767);
  CHECK(read->quantile == 0.98);
  CHECK(read->fill == 0.8954);
  // No runs: no key, and nothing to read; no file: nothing either.
  CHECK_FALSE(accuracy_json({}).contains("memory_fill"));
  CHECK_FALSE(published_memory_fill(data_dir_with("none", accuracy_json({}))));
  CHECK_FALSE(published_memory_fill(fs::temp_directory_path() / "trainsim-no-such-dir"));
  // A malformed entry is an input error naming the file and the key.
  nlohmann::json bad = doc;
  bad["memory_fill"]["fill"] = 0;
  CHECK_THROWS_WITH(published_memory_fill(data_dir_with("zero", bad)),
                    Catch::Contains("accuracy.json: memory_fill.fill: must be above 0"));
  bad = doc;
  bad["memory_fill"]["share"] = 0.5;
  CHECK_THROWS_WITH(published_memory_fill(data_dir_with("unknown", bad)), Catch::Contains("memory_fill.share"));
  bad = doc;
  bad["fills"] = 1;
  CHECK_THROWS_WITH(published_memory_fill(data_dir_with("top", bad)), Catch::Contains("fills: unknown key"));
}

namespace {

trainsim::config::Scenario parsed(const nlohmann::json& doc) {
  return trainsim::config::parse_scenario(trainsim::util::JsonNode(doc, "model-key.json"), TRAINSIM_SOURCE_DIR);
}

nlohmann::json llama_scenario() {
  return nlohmann::json::parse(R"({
    "model": "llama3.1-8b", "cluster": "dgx-h100", "gpus": 8,
    "training": {"global_batch": 8, "seq_len": 4096}})");
}

}  // namespace

TEST_CASE("a model's accuracy key is its framework and architecture, not its name or vocabulary") {
  nlohmann::json doc = llama_scenario();
  const std::string key = accuracy_model_key(parsed(doc));
  // Llama 3.1 8B: 32 layers of 4096; 8,030,261,248 parameters less the 128,256 x 4096 embedding and
  // output layer (untied): 8,030,261,248 - 2 x 525,336,576 = 6,979,588,096.
  CHECK(key == "megatron:32x4096:e0:p6979588096");
  // Another name, another (padded) vocabulary: the same model.
  nlohmann::json renamed = doc;
  renamed["model"] = nlohmann::json::parse(R"({"name": "LLAMA3_8B", "layers": 32, "hidden": 4096, "heads": 32,
      "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128768, "mlp": "swiglu"})");
  CHECK(accuracy_model_key(parsed(renamed)) == key);
  // Fewer layers: another model. Another framework: another group.
  renamed["model"]["layers"] = 16;
  CHECK(accuracy_model_key(parsed(renamed)) != key);
  nlohmann::json titan = doc;
  titan["training"]["framework"] = "torchtitan";
  titan["parallel"] = {{"zero", 3}};
  CHECK(accuracy_model_key(parsed(titan)) == "torchtitan:32x4096:e0:p6979588096");
  // A framework without published runs has no key.
  nlohmann::json eager = doc;
  eager["gpus"] = 1;
  eager["training"] = {{"framework", "pytorch-eager"}, {"global_batch", 1}, {"seq_len", 1024}};
  CHECK(accuracy_model_key(parsed(eager)).empty());
}

TEST_CASE("accuracy.json carries the models of 5 runs or more, which published_model_accuracy reads back") {
  const std::string key = accuracy_model_key(parsed(llama_scenario()));
  const std::vector<PublishedModelAccuracy> models{
      {.key = key, .name = "llama3.1-8b", .runs = 45, .mape = 0.03412, .mean_error = -0.02501},
      {.key = "megatron:2x64:e0:p1", .name = "tiny", .runs = 4, .mape = 0.5, .mean_error = 0.5}};
  const nlohmann::json doc = accuracy_json({}, {}, models);
  REQUIRE(doc.contains("step_time_by_model"));
  CHECK(doc["step_time_by_model"].size() == 1);  // 4 runs are too few
  CHECK(doc["step_time_by_model"][key]["mape"] == 0.0341);
  const auto read = published_model_accuracy(parsed(llama_scenario()), data_dir_with("models", doc));
  REQUIRE(read);
  CHECK(read->name == "llama3.1-8b");
  CHECK(read->runs == 45);
  CHECK(read->mean_error == -0.025);
  // Another model, no such key, no file: nothing.
  nlohmann::json other = llama_scenario();
  other["model"] = "llama3.1-70b";
  CHECK_FALSE(published_model_accuracy(parsed(other), data_dir_with("models-other", doc)));
  CHECK_FALSE(published_model_accuracy(parsed(llama_scenario()), data_dir_with("models-none", accuracy_json({}))));
  CHECK_FALSE(accuracy_json({}).contains("step_time_by_model"));
  // A malformed entry is an input error naming the file and the key.
  nlohmann::json bad = doc;
  bad["step_time_by_model"][key]["runs"] = 0;
  CHECK_THROWS_WITH(published_model_accuracy(parsed(llama_scenario()), data_dir_with("models-bad", bad)),
                    Catch::Contains("accuracy.json: step_time_by_model." + key + ".runs"));
}
