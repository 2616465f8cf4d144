#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "config/accuracy.h"
#include "util/error.h"

namespace fs = std::filesystem;
using trainsim::config::accuracy_json;
using trainsim::config::kMemoryFillQuantile;
using trainsim::config::memory_fill_of;
using trainsim::config::published_memory_fill;
using trainsim::config::PublishedMemoryFill;

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
