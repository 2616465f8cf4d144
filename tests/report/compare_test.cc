// The regression gate: a prediction that got worse by more than the bound fails it, one that got
// worse by less or got better passes; slowdowns are measured alike for step time (new/base - 1)
// and for throughput or MFU (base/new - 1).

#include <catch2/catch.hpp>

#include "report/compare.h"
#include "util/error.h"

using namespace trainsim;

namespace {

// A result as `run --json` writes it, reduced to what compare reads.
nlohmann::json result(std::int64_t gpus, double step_s, double mfu = 0.4, bool fits = true) {
  const double tokens = 1024.0 * 2048;
  return {{"scenario", {{"gpus", gpus}}},      {"step_time_s", step_s},
          {"tokens_per_s", tokens / step_s},   {"tokens_per_s_per_gpu", tokens / step_s / static_cast<double>(gpus)},
          {"model_tflops_per_gpu", 400 * mfu}, {"mfu", mfu},
          {"memory", {{"fits", fits}}}};
}

report::Comparison compare(const nlohmann::json& a, const nlohmann::json& b, double bound = 0.05) {
  return report::compare_results(a, b, bound, "base.json", "new.json");
}

}  // namespace

TEST_CASE("a step 6% slower fails a 5% bound on step time and all three throughputs; 4% slower passes") {
  // Step time x1.06: step slowdown 6%; tokens/s and tokens/s/GPU drop by 1/1.06, a slowdown of 6%.
  auto c = compare(result(64, 10.0), result(64, 10.6));
  CHECK(c.regressions == 3);
  REQUIRE(c.changes.size() == 5);
  CHECK(c.changes[0].metric == "step_time_s");
  CHECK(c.changes[0].slowdown == Approx(0.06));
  CHECK(c.changes[1].slowdown == Approx(0.06));
  CHECK_FALSE(c.changes[4].regression);  // MFU unchanged in this made-up result
  CHECK(compare(result(64, 10.0), result(64, 10.4)).regressions == 0);
}

TEST_CASE("MFU from 40% to 37% is a slowdown of 0.40/0.37 - 1 = 8.1%; a faster step is no regression") {
  auto c = compare(result(64, 10.0, 0.40), result(64, 10.0, 0.37));
  CHECK(c.regressions == 2);  // mfu and model TFLOP/s/GPU
  CHECK(c.changes[4].slowdown == Approx(0.40 / 0.37 - 1));
  CHECK(compare(result(64, 10.0), result(64, 5.0, 0.8)).regressions == 0);
}

TEST_CASE("scale results compare size by size; a size on one side only is a note; losing fit is a regression") {
  nlohmann::json base = {{"runs", {result(64, 10.0), result(128, 5.2)}}};
  nlohmann::json fresh = {{"runs", {result(128, 5.2), result(256, 2.8)}}};
  auto c = compare(base, fresh);
  CHECK(c.regressions == 0);
  CHECK(c.changes.size() == 5);
  CHECK(c.notes == std::vector<std::string>{"64 GPUs: only in base.json", "256 GPUs: only in new.json"});
  auto lost = compare(result(64, 10.0), result(64, 10.0, 0.4, false));
  CHECK(lost.regressions == 1);
  const std::string text = report::to_text(lost, 0.05, "base.json", "new.json");
  CHECK(text.find("64 GPUs: no longer fits in GPU memory") != std::string::npos);
  CHECK(text.find("REGRESSION: 1 prediction got worse by more than 5.0%") != std::string::npos);
}

TEST_CASE("bounds are a percentage or a fraction; bad results name the file") {
  CHECK(report::parse_bound("5%") == Approx(0.05));
  CHECK(report::parse_bound("0.05") == Approx(0.05));
  CHECK(report::parse_bound("0%") == 0);
  CHECK_THROWS_WITH(report::parse_bound("5"), "--max-slowdown: 5 is ambiguous: write 5% or 0.05");
  CHECK_THROWS_AS(report::parse_bound("-1%"), util::InputError);
  CHECK_THROWS_AS(report::parse_bound("fast"), util::InputError);
  CHECK_THROWS_WITH(compare(nlohmann::json{{"x", 1}}, result(64, 1)),
                    "base.json: not a result of `trainsim run --json` or `trainsim scale --json`");
  auto broken = result(64, 1);
  broken.erase("mfu");
  CHECK_THROWS_WITH(compare(result(64, 1), broken), "new.json: mfu: missing or not a positive number");
  CHECK_THROWS_WITH(compare(result(64, 1), result(128, 1)), "new.json: no GPU count in common with base.json");
}
