#pragma once
// The regression gate: compares two result files of `trainsim run --json` or `scale --json`, size
// by size (GPU count), and flags every prediction that got worse by more than a bound: step time
// up, throughput or MFU down, or a layout that no longer fits. A slowdown is measured the same way
// for each: new/base - 1 for step time, base/new - 1 for throughput, TFLOP/s and MFU.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainsim::report {

struct MetricChange {
  std::int64_t gpus = 0;
  std::string metric;
  double base = 0, fresh = 0;
  double slowdown = 0;  // > 0: worse
  bool regression = false;
};

struct Comparison {
  std::vector<MetricChange> changes;
  std::vector<std::string> notes;  // sizes only one side has, layouts that stopped fitting
  int regressions = 0;
};

// "5%" -> 0.05, "0.05" -> 0.05; an InputError naming `what` otherwise (a bare number above 1 is
// ambiguous and rejected).
double parse_bound(const std::string& text, const std::string& what = "--max-slowdown");

// `base` and `fresh` are parsed result files; `base_file`/`new_file` name them in errors.
Comparison compare_results(const nlohmann::json& base, const nlohmann::json& fresh, double max_slowdown,
                           const std::string& base_file, const std::string& new_file);

std::string to_text(const Comparison& c, double max_slowdown, const std::string& base_file,
                    const std::string& new_file);

}  // namespace trainsim::report
