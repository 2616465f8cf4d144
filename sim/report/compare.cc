#include "report/compare.h"

#include <array>
#include <charconv>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "util/error.h"

namespace trainsim::report {

namespace {

struct Metric {
  const char* key;
  bool higher_is_better;
};
constexpr std::array<Metric, 5> kMetrics = {{{"step_time_s", false},
                                             {"tokens_per_s", true},
                                             {"tokens_per_s_per_gpu", true},
                                             {"model_tflops_per_gpu", true},
                                             {"mfu", true}}};

// GPU count -> the run's JSON; a run file is one run, a scale file many.
std::map<std::int64_t, nlohmann::json> runs_of(const nlohmann::json& j, const std::string& file) {
  std::map<std::int64_t, nlohmann::json> out;
  auto add = [&](const nlohmann::json& run, const std::string& path) {
    if (!run.is_object() || !run.contains("scenario") || !run["scenario"].is_object() ||
        !run["scenario"].contains("gpus") || !run["scenario"]["gpus"].is_number_integer())
      throw util::InputError(file, path, "not a trainsim result (no scenario.gpus)");
    for (const auto& m : kMetrics)
      if (!run.contains(m.key) || !run[m.key].is_number() || !(run[m.key].get<double>() > 0))
        throw util::InputError(file, path.empty() ? m.key : path + "." + m.key, "missing or not a positive number");
    const auto gpus = run["scenario"]["gpus"].get<std::int64_t>();
    if (!out.emplace(gpus, run).second)
      throw util::InputError(file, path, fmt::format("two results for {} GPUs", gpus));
  };
  if (j.is_object() && j.contains("runs")) {
    if (!j["runs"].is_array() || j["runs"].empty()) throw util::InputError(file, "runs", "expected a non-empty list");
    for (std::size_t i = 0; i < j["runs"].size(); ++i) add(j["runs"][i], fmt::format("runs[{}]", i));
  } else if (j.is_object() && j.contains("step_time_s")) {
    add(j, "");
  } else {
    throw util::InputError(file, "", "not a result of `trainsim run --json` or `trainsim scale --json`");
  }
  return out;
}

}  // namespace

double parse_bound(const std::string& text, const std::string& what) {
  std::string_view s = text;
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s.remove_suffix(1);
  double v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || !(v >= 0) || !std::isfinite(v))
    throw util::InputError(
        what, "", fmt::format("\"{}\" is not a bound (expected a percentage like 5% or a fraction like 0.05)", text));
  if (!percent && v > 1)
    throw util::InputError(what, "", fmt::format("{} is ambiguous: write {}% or {}", text, text, v / 100));
  return percent ? v / 100 : v;
}

Comparison compare_results(const nlohmann::json& base, const nlohmann::json& fresh, double max_slowdown,
                           const std::string& base_file, const std::string& new_file) {
  const auto a = runs_of(base, base_file);
  const auto b = runs_of(fresh, new_file);
  Comparison c;
  bool common = false;
  for (const auto& [gpus, run] : a) {
    auto it = b.find(gpus);
    if (it == b.end()) {
      c.notes.push_back(fmt::format("{} GPUs: only in {}", gpus, base_file));
      continue;
    }
    common = true;
    const auto& other = it->second;
    for (const auto& m : kMetrics) {
      MetricChange ch;
      ch.gpus = gpus;
      ch.metric = m.key;
      ch.base = run[m.key].get<double>();
      ch.fresh = other[m.key].get<double>();
      ch.slowdown = m.higher_is_better ? ch.base / ch.fresh - 1 : ch.fresh / ch.base - 1;
      ch.regression = ch.slowdown > max_slowdown;
      c.regressions += ch.regression;
      c.changes.push_back(ch);
    }
    const bool fit_before = run.value("/memory/fits"_json_pointer, true);
    const bool fit_now = other.value("/memory/fits"_json_pointer, true);
    if (fit_before && !fit_now) {
      c.notes.push_back(fmt::format("{} GPUs: no longer fits in GPU memory", gpus));
      ++c.regressions;
    }
  }
  for (const auto& [gpus, run] : b)
    if (!a.count(gpus)) c.notes.push_back(fmt::format("{} GPUs: only in {}", gpus, new_file));
  if (!common) throw util::InputError(new_file, "", fmt::format("no GPU count in common with {}", base_file));
  return c;
}

std::string to_text(const Comparison& c, double max_slowdown, const std::string& base_file,
                    const std::string& new_file) {
  std::string out = fmt::format("trainsim compare: {} -> {} (worse by more than {:.1f}% fails)\n", base_file, new_file,
                                100 * max_slowdown);
  out += fmt::format("{:>6}  {:<22} {:>14} {:>14} {:>9}\n", "GPUs", "prediction", "base", "new", "slowdown");
  for (const auto& ch : c.changes)
    out += fmt::format("{:>6}  {:<22} {:>14.6g} {:>14.6g} {:>8.2f}%{}\n", ch.gpus, ch.metric, ch.base, ch.fresh,
                       100 * ch.slowdown, ch.regression ? "  WORSE" : "");
  for (const auto& n : c.notes) out += "note: " + n + "\n";
  if (c.regressions == 0)
    out += fmt::format("ok: no prediction got worse by more than {:.1f}%\n", 100 * max_slowdown);
  else
    out += fmt::format("REGRESSION: {} prediction{} got worse by more than {:.1f}%\n", c.regressions,
                       c.regressions == 1 ? "" : "s", 100 * max_slowdown);
  return out;
}

}  // namespace trainsim::report
