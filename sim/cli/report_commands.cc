#include "cli/report_commands.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/option_checks.h"
#include "config/accuracy.h"
#include "report/chrome_trace.h"
#include "report/compare.h"
#include "report/html.h"
#include "report/progress.h"
#include "report/scale.h"
#include "report/timeline.h"
#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::cli {

nlohmann::json scenario_doc(const std::string& scenario_file, const std::vector<std::string>& sets) {
  nlohmann::json doc = util::read_json_file(scenario_file);
  config::apply_overrides(doc, sets, scenario_file);
  return doc;
}

namespace {

namespace fs = std::filesystem;

// Forwards the hooks to several observers.
class Observers : public parallel::StepObserver {
 public:
  void add(parallel::StepObserver* o) { list_.push_back(o); }
  bool empty() const { return list_.empty(); }
  void on_plan(const parallel::StepPlan& plan) override {
    for (auto* o : list_) o->on_plan(plan);
  }
  void on_task(std::uint32_t rank, const engine::Program& program, const engine::Task& task, engine::Time start,
               engine::Time end) override {
    for (auto* o : list_) o->on_task(rank, program, task, start, end);
  }

 private:
  std::vector<parallel::StepObserver*> list_;
};

// Creates DIR (and its parents) for a report option.
void make_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) throw util::InputError(what, "", fmt::format("cannot create directory {}", dir));
}

std::ofstream open_output(const fs::path& file, const std::string& what) {
  std::ofstream out(file, std::ios::binary);
  if (!out) throw util::InputError(what, "", fmt::format("cannot write {}", file.string()));
  return out;
}

}  // namespace

parallel::StepResult simulate_with_outputs(const config::Scenario& scenario, const parallel::BuildOptions& options,
                                           const RunOutputs& outputs) {
  // Check every option before the (possibly long) simulation.
  std::vector<std::uint32_t> trace_ranks;
  if (!outputs.trace_file.empty()) trace_ranks = report::parse_rank_selection(outputs.trace_ranks, scenario);
  std::ofstream trace;
  if (!outputs.trace_file.empty()) trace = open_output(outputs.trace_file, "--trace");

  if (!outputs.report_dir.empty()) make_dir(outputs.report_dir, "--report");

  Observers observers;
  report::ProgressObserver progress("simulating");
  if (progress.enabled()) observers.add(&progress);
  std::optional<report::TimelineRecorder> recorder;
  if (!trace_ranks.empty() || !outputs.report_dir.empty()) {
    std::vector<std::uint32_t> spans = trace_ranks, mem;
    if (!outputs.report_dir.empty()) {
      const auto want = report::report_ranks(scenario);
      spans.insert(spans.end(), want.spans.begin(), want.spans.end());
      mem = want.mem;
    }
    recorder.emplace(scenario, std::move(spans), std::move(mem));
    observers.add(&*recorder);
  }
  auto result = parallel::simulate_step(scenario, options, observers.empty() ? nullptr : &observers);
  progress.finish();
  if (!recorder) return result;
  const report::Timeline timeline = recorder->take();
  if (trace.is_open()) {
    report::write_chrome_trace(trace, scenario, result, timeline, trace_ranks);
    if (!trace) throw util::InputError("--trace", "", fmt::format("cannot write {}", outputs.trace_file));
    spdlog::info("wrote the trace of {} ranks to {}", trace_ranks.size(), outputs.trace_file);
  }
  if (!outputs.report_dir.empty()) {
    const fs::path page = fs::path(outputs.report_dir) / "index.html";
    std::ofstream out = open_output(page, "--report");
    out << report::run_report_html(scenario, result, timeline);
    if (!out) throw util::InputError("--report", "", fmt::format("cannot write {}", page.string()));
    spdlog::info("wrote the report to {}", page.string());
  }
  return result;
}

}  // namespace trainsim::cli

namespace trainsim::cli {

std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option, std::int64_t min,
                                         bool increasing) {
  std::vector<std::int64_t> out;
  std::string_view rest = text;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < min)
      throw util::InputError(option, "",
                             min == 1 ? fmt::format("\"{}\" is not a positive whole number (expected a list like {})",
                                                    std::string(item), increasing ? "64,128,256" : "1,2,4")
                                      : fmt::format("\"{}\" is not a whole number of at least {} (expected a list "
                                                    "like 0,1)",
                                                    std::string(item), min));
    if (increasing && !out.empty() && v <= out.back())
      throw util::InputError(option, "", fmt::format("sizes must increase: {} after {}", v, out.back()));
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw util::InputError(option, "", fmt::format("{} is listed twice", v));
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return out;
}

std::vector<double> parse_prices(std::string_view value, const std::vector<std::string>& clusters) {
  using util::InputError;
  auto amount = [](std::string_view text) {
    double x = 0;
    if (!detail::parse_number(std::string(text), x) || x <= 0 || x > 1e6)
      throw InputError(
          "--price", "",
          fmt::format("expected US dollars per GPU-hour (a number above 0, at most 10^6), got \"{}\"", text));
    return x;
  };
  if (clusters.empty()) return {amount(value)};
  std::vector<double> prices(clusters.size(), 0.0);
  while (true) {
    const std::size_t comma = value.find(',');
    const std::string_view item = value.substr(0, comma);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      throw InputError("--price", "",
                       fmt::format("with --clusters, give each cluster its price as NAME=USD (e.g. {}=2.5), got \"{}\"",
                                   clusters.front(), item));
    const std::string name(item.substr(0, eq));
    const auto it = std::find(clusters.begin(), clusters.end(), name);
    if (it == clusters.end())
      throw InputError("--price", "",
                       fmt::format("{} is not one of the --clusters ({})", name, fmt::join(clusters, ", ")));
    double& price = prices[static_cast<std::size_t>(it - clusters.begin())];
    if (price > 0) throw InputError("--price", "", fmt::format("{} is priced twice", name));
    price = amount(item.substr(eq + 1));
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  for (std::size_t i = 0; i < clusters.size(); ++i)
    if (prices[i] <= 0) throw InputError("--price", "", fmt::format("gives no price for {}", clusters[i]));
  return prices;
}

int scale_command(const ScaleArgs& args) {
  const auto data_dir = config::default_data_dir();
  report::Keep keep;
  if (args.keep == "global-batch")
    keep = report::Keep::global_batch;
  else if (args.keep == "per-gpu-batch")
    keep = report::Keep::per_gpu_batch;
  else
    throw util::InputError("--keep", "",
                           fmt::format("unknown rule \"{}\" (expected global-batch or per-gpu-batch)", args.keep));
  if (args.gpus.empty() == args.nodes.empty())
    throw util::InputError("scale", "", "give exactly one of --gpus and --nodes");

  const nlohmann::json doc = scenario_doc(args.scenario_file, args.sets);
  const config::Scenario base = config::parse_scenario(util::JsonNode(doc, args.scenario_file), data_dir);
  const double price = args.price.empty() ? 0.0 : parse_prices(args.price, {}).front();
  std::vector<std::int64_t> sizes =
      parse_int_list(args.gpus.empty() ? args.nodes : args.gpus, args.gpus.empty() ? "--nodes" : "--gpus", 1, true);
  if (!args.nodes.empty())
    for (auto& n : sizes) n *= base.cluster.gpus_per_node;
  const std::string size_flag = args.gpus.empty() ? "--nodes" : "--gpus";

  // Every size is checked before any is simulated, so a bad one fails at once.
  std::vector<config::Scenario> scenarios;
  for (const std::int64_t n : sizes) {
    nlohmann::json d = doc;
    d["gpus"] = n;
    if (keep == report::Keep::per_gpu_batch) {
      const std::int64_t gb = base.training.global_batch;
      if ((gb * n) % base.gpus != 0)
        throw util::InputError(args.scenario_file, "training.global_batch",
                               fmt::format("at {} GPUs ({}): keeping {} sequences per {} GPUs needs a global batch "
                                           "of {} * {} / {}, not a whole number",
                                           n, size_flag, gb, base.gpus, gb, n, base.gpus));
      d["training"]["global_batch"] = gb * n / base.gpus;
    }
    try {
      scenarios.push_back(config::parse_scenario(util::JsonNode(d, args.scenario_file), data_dir));
      scenarios.back().gpu_hour_price_usd = price;
      scenarios.back().memory_fill = config::published_memory_fill(data_dir);
    } catch (const util::InputError& e) {
      throw util::InputError(e.file(), e.path(), fmt::format("at {} GPUs ({}): {}", n, size_flag, e.problem()));
    }
  }
  std::string report_dir = args.report_dir;
  if (!report_dir.empty()) make_dir(report_dir, "--report");

  std::vector<report::ScalePoint> points;
  report::ProgressBar bar("scaling", scenarios.size());
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    bar.set(i, fmt::format("{} GPUs", scenarios[i].gpus));
    spdlog::info("simulating {} GPUs", scenarios[i].gpus);
    auto result = parallel::simulate_step(scenarios[i]);
    points.push_back({std::move(scenarios[i]), std::move(result)});
  }
  bar.set(scenarios.size());
  bar.finish();

  if (args.json)
    fmt::print("{}\n", report::scale_json(points, keep).dump(2));
  else if (args.markdown)
    fmt::print("{}", report::scale_markdown(points, keep));
  else
    fmt::print("{}", report::scale_text(points, keep));
  if (!report_dir.empty()) {
    const fs::path dir(report_dir);
    auto put = [&](const std::string& name, const std::string& text) {
      std::ofstream out = open_output(dir / name, "--report");
      out << text;
      if (!out) throw util::InputError("--report", "", fmt::format("cannot write {}", (dir / name).string()));
    };
    put("index.html", report::scale_report_html(points, keep));
    put("summary.md", report::scale_markdown(points, keep));
    put("results.json", report::scale_json(points, keep).dump(2) + "\n");
    spdlog::info("wrote index.html, summary.md and results.json to {}", report_dir);
  }
  return 0;
}

}  // namespace trainsim::cli

namespace trainsim::cli {

int compare_command(const std::string& base_file, const std::string& new_file, const std::string& max_slowdown) {
  const double bound = report::parse_bound(max_slowdown);
  const nlohmann::json base = util::read_json_file(base_file);
  const nlohmann::json fresh = util::read_json_file(new_file);
  const auto c = report::compare_results(base, fresh, bound, base_file, new_file);
  fmt::print("{}", report::to_text(c, bound, base_file, new_file));
  return c.regressions > 0 ? 1 : 0;
}

}  // namespace trainsim::cli

namespace trainsim::cli {

void add_report_commands(CLI::App& app, ReportCommands& c) {
  c.scale = app.add_subcommand(
      "scale", "Re-run a scenario at several GPU counts (DP grows; TP, PP, CP fixed) and report how it scales");
  c.scale->add_option("scenario", c.scale_args.scenario_file, "Scenario JSON file")->required();
  c.scale->add_option("--set", c.scale_args.sets, kSetHelp)->allow_extra_args(false);
  auto* gpus = c.scale->add_option("--gpus", c.scale_args.gpus, "GPU counts, increasing: 64,128,256");
  c.scale->add_option("--nodes", c.scale_args.nodes, "Node counts, increasing (times the cluster's GPUs per node)")
      ->excludes(gpus);
  c.scale->add_option("--keep", c.scale_args.keep,
                      "What stays fixed: global-batch (default; fewer micro-batches per pipeline as DP grows) or "
                      "per-gpu-batch (the global batch grows with the GPUs)");
  c.scale->add_option("--price", c.scale_args.price,
                      "US dollars per GPU-hour of the cluster: adds what a million tokens (and training.train_tokens) "
                      "cost at each size");
  c.scale->add_option("--report", c.scale_args.report_dir,
                      "Write index.html (SVG plots), summary.md and results.json into this directory");
  auto* json = c.scale->add_flag("--json", c.scale_args.json, "Print the results as one JSON object");
  c.scale->add_flag("--markdown", c.scale_args.markdown, "Print a Markdown table (for a CI job summary)")
      ->excludes(json);

  c.compare = app.add_subcommand(
      "compare",
      "Compare two results of run --json or scale --json; exit 1 when a prediction got worse beyond a bound");
  c.compare->add_option("base", c.base_file, "Baseline result JSON")->required();
  c.compare->add_option("new", c.new_file, "New result JSON")->required();
  c.compare->add_option("--max-slowdown", c.max_slowdown,
                        "Largest accepted slowdown (step time up, throughput or MFU down): 5% (default) or 0.05");
}

std::optional<int> run_report_commands(const ReportCommands& c) {
  if (c.scale != nullptr && c.scale->parsed()) return scale_command(c.scale_args);
  if (c.compare != nullptr && c.compare->parsed()) return compare_command(c.base_file, c.new_file, c.max_slowdown);
  return std::nullopt;
}

}  // namespace trainsim::cli
