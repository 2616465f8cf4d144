#pragma once
// Bodies of the commands and options that write reports: `run --trace/--report`, `scale` and
// `compare`. main.cc parses the command line and maps exceptions to exit codes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "parallel/step_runner.h"

namespace trainsim::cli {

struct RunOutputs {
  std::string trace_file;              // --trace: Chrome trace JSON
  std::string trace_ranks = "stages";  // --trace-ranks
  std::string report_dir;              // --report: HTML page
  bool ops = false;                    // --ops: each part's ops with their modelled times
};

// Simulates one step and writes the trace and HTML report asked for; a progress bar on a terminal.
parallel::StepResult simulate_with_outputs(const config::Scenario& scenario, const parallel::BuildOptions& options,
                                           const RunOutputs& outputs);

// "1,2,4" -> {1, 2, 4}: whole numbers of at least `min`, none twice (increasing, when asked); an
// InputError naming `option` otherwise.
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option, std::int64_t min,
                                         bool increasing);

// The help of run's, scale's and search's --set.
inline constexpr const char* kSetHelp =
    "Override a scenario key: PATH=VALUE, e.g. parallel.tp=8 or training.precision=fp8 (repeatable; VALUE is JSON, "
    "else a string; null takes the key out)";
// The scenario file's JSON with each `--set PATH=VALUE` applied in order (config::apply_overrides);
// config::parse_scenario(util::JsonNode(doc, scenario_file), ...) then checks it as load_scenario does.
nlohmann::json scenario_doc(const std::string& scenario_file, const std::vector<std::string>& sets);

struct ScaleArgs {
  std::string scenario_file;
  std::vector<std::string> sets;  // --set PATH=VALUE
  std::string gpus;               // --gpus 64,128,256
  std::string nodes;              // --nodes 8,16,32 (times the cluster's GPUs per node)
  std::string keep = "global-batch";
  std::string report_dir;
  std::string price;  // --price: US dollars per GPU-hour
  bool json = false;
  bool markdown = false;
};

// `--price`: US dollars per GPU-hour. One number for the one cluster of a run or search; with
// `--clusters`, NAME=USD for each of them, comma-separated (a price of one cluster says nothing of
// another's). Each mistake is an InputError naming the option.
std::vector<double> parse_prices(std::string_view value, const std::vector<std::string>& clusters);

// Re-runs the scenario at each size; prints a table (text, --markdown or --json) and writes the
// HTML report, summary.md and results.json into --report DIR.
int scale_command(const ScaleArgs& args);

// Compares two result files of `run --json` or `scale --json`: 1 when a prediction got worse by
// more than `max_slowdown` ("5%" or "0.05"), else 0.
int compare_command(const std::string& base_file, const std::string& new_file, const std::string& max_slowdown);

struct ReportCommands {
  CLI::App* scale = nullptr;
  CLI::App* compare = nullptr;
  ScaleArgs scale_args;
  std::string base_file, new_file, max_slowdown = "5%";
};
// Adds `scale` and `compare` to the command line.
void add_report_commands(CLI::App& app, ReportCommands& commands);
// Runs whichever of them was parsed and returns its exit code; nullopt when neither was.
std::optional<int> run_report_commands(const ReportCommands& commands);

}  // namespace trainsim::cli
