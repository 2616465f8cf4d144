// The trainsim command. Only this file prints errors and chooses exit codes:
//   0 success, 1 an accuracy gate failed (validate --gate), a prediction got worse (compare) or an
//   unexpected error, 2 bad input (one line naming file, JSON path and problem), 3 the simulation
//   could not finish (deadlock report).

#include <malloc.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "calibrate/command.h"
#include "cli/export_command.h"
#include "cli/import_command.h"
#include "cli/option_checks.h"
#include "cli/report_commands.h"
#include "config/accuracy.h"
#include "config/scenario.h"
#include "engine/executor.h"
#include "network/sweep.h"
#include "parallel/step_runner.h"
#include "report/compare.h"
#include "report/ops_table.h"
#include "report/progress.h"
#include "report/summary.h"
#include "search/search.h"
#include "util/error.h"
#include "util/json_node.h"
#include "validate/validate.h"

namespace {

int run_command(const std::string& scenario_file, const std::vector<std::string>& sets, bool json, bool all_ranks,
                const std::string& price, const trainsim::cli::RunOutputs& outputs) {
  using namespace trainsim;
  const nlohmann::json doc = cli::scenario_doc(scenario_file, sets);
  auto scenario = config::parse_scenario(util::JsonNode(doc, scenario_file), config::default_data_dir());
  if (!price.empty()) scenario.gpu_hour_price_usd = trainsim::cli::parse_prices(price, {}).front();
  config::look_up_published_accuracy(scenario, config::default_data_dir());
  scenario.memory_fill = config::published_memory_fill(config::default_data_dir());
  for (const auto& w : scenario.warnings) spdlog::warn("warning: {}", w);
  spdlog::info("simulating {} ranks", scenario.gpus);
  parallel::BuildOptions options;
  options.all_ranks = all_ranks;
  const auto result = [&] {
    try {
      return cli::simulate_with_outputs(scenario, options, outputs);
    } catch (const std::range_error& e) {
      // A model so large that one kernel or the step outlasts the simulated clock is the input's doing.
      throw util::InputError(scenario_file, "", fmt::format("the step cannot be simulated: {}", e.what()));
    }
  }();
  spdlog::info("{} tasks in {} programs, {} events", result.tasks, scenario.parallel.pp, result.events);
  const hardware::ComputeModel compute(scenario.cluster.gpu);
  if (json) {
    nlohmann::json out = report::to_json(scenario, result);
    if (outputs.ops) out["ops"] = report::ops_json(parallel::op_lists(scenario, compute), compute);
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("{}", report::to_text(scenario, result));
    if (outputs.ops) fmt::print("{}", report::ops_text(parallel::op_lists(scenario, compute), compute));
  }
  return 0;
}

int validate_command(const std::string& dir_arg, bool json, bool markdown, const std::string& gate,
                     const std::string& network_name, double host_cost_scale, double compute_slowdown, int threads_arg,
                     const std::vector<std::string>& sets, const std::string& accuracy_file) {
  using namespace trainsim;
  const auto data_dir = config::default_data_dir();
  const std::filesystem::path dir =
      dir_arg.empty() ? data_dir / "validation" / "records" : std::filesystem::path(dir_arg);
  const auto records = validate::load_records(dir);
  validate::Overrides overrides;
  std::optional<config::NetworkModel>& network = overrides.network;
  if (network_name == "flow") network = config::NetworkModel::flow;
  if (network_name == "analytical") network = config::NetworkModel::analytical;
  if (host_cost_scale > 0) overrides.host_cost_scale = host_cost_scale;
  if (compute_slowdown >= 0) overrides.compute_slowdown = compute_slowdown;
  // A malformed --set fails here, once; one a record's scenario cannot take skips that record.
  nlohmann::json probe = nlohmann::json::object();
  config::apply_overrides(probe, sets, "");
  overrides.sets = sets;
  if (!network_name.empty() && !network)
    throw util::InputError("--network", "",
                           fmt::format("unknown network \"{}\" (expected one of: analytical, flow)", network_name));
  // Records run on `threads` threads, each outcome in its record's slot, so the output does not
  // depend on the thread count; a record's error is reported as the first one in record order.
  std::vector<validate::Outcome> outcomes(records.size());
  std::vector<std::exception_ptr> errors(records.size());
  report::ProgressBar bar("validating", records.size());
  std::mutex progress;
  std::size_t finished = 0;
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < records.size(); i = next++) {
      spdlog::info("validating {}", records[i].id);
      try {
        outcomes[i] = validate::evaluate(records[i], data_dir, overrides);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(progress);
      bar.set(++finished, records[i].id);
    }
  };
  const int threads =
      threads_arg > 0 ? threads_arg : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(records.size())); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  bar.finish();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  auto summary = validate::summarize(outcomes);
  validate::name_models_from_catalog(summary, data_dir);
  if (!accuracy_file.empty()) {
    std::ofstream out(accuracy_file);
    out << config::accuracy_json(summary.step_time_by_kind, summary.memory_fill, summary.step_time_by_model).dump(2)
        << '\n';
    if (!out) throw util::InputError("--accuracy", "", fmt::format("cannot write {}", accuracy_file));
  }
  if (json)
    fmt::print("{}\n", validate::to_json(outcomes, summary).dump(2));
  else if (markdown)
    fmt::print("{}", validate::to_markdown(outcomes, summary));
  else
    fmt::print("{}", validate::to_text(outcomes, summary));
  if (gate.empty()) return 0;
  const auto violations = validate::check_gate(summary, gate);
  for (const auto& v : violations) std::fprintf(stderr, "trainsim: accuracy gate %s: %s\n", gate.c_str(), v.c_str());
  return violations.empty() ? 0 : 1;
}

int collective_command(const std::string& cluster_name, const trainsim::network::SweepRequest& req,
                       const std::string& network, bool json) {
  using namespace trainsim;
  if (network != "analytical" && network != "flow")
    throw util::InputError("--network", "",
                           fmt::format("unknown network \"{}\" (expected one of: analytical, flow)", network));
  network::SweepRequest request = req;
  request.flow = network == "flow";
  const auto cluster = config::load_cluster(cluster_name, config::default_data_dir(), "--cluster");
  // The topology describes one node and its fabric; any number of nodes can be asked for.
  const auto rows = network::collective_sweep(cluster, std::int64_t{1} << 24, request);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
      out.push_back({{"bytes", r.bytes},
                     {"time_s", r.time_s},
                     {"algbw_GBps", r.algbw_GBps},
                     {"busbw_GBps", r.busbw_GBps},
                     {"algo", r.algo},
                     {"proto", r.proto}});
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("# trainsim collective: {} over {} GPUs of {} ({} network, algorithm {})\n", req.op, req.gpus,
             cluster.name, network, network::to_string(req.algo));
  fmt::print("# {:>14} {:>12} {:>10} {:>10}  {:<9} {}\n", "size (B)", "time (us)", "algbw", "busbw", "algorithm",
             "protocol");
  fmt::print("# {:>14} {:>12} {:>10} {:>10}\n", "", "", "(GB/s)", "(GB/s)");
  for (const auto& r : rows)
    fmt::print("  {:>14} {:>12.2f} {:>10.2f} {:>10.2f}  {:<9} {}\n", r.bytes, r.time_s * 1e6, r.algbw_GBps,
               r.busbw_GBps, r.algo, r.proto);
  return 0;
}

struct SearchArgs {
  std::string scenario_file;
  std::vector<std::string> sets;  // --set PATH=VALUE
  std::size_t top = 10;
  int threads = 0;  // 0: one per hardware thread
  bool json = false, markdown = false;
  std::string tp, pp, cp, ep, vp, schedule, micro_batch, recompute, zero, hsdp, a2a_overlap, dispatcher, precision;
  std::string network;          // overrides the scenario's network model
  std::string headroom;         // empty: what the published runs leave free (validation/accuracy.json), else 0
  std::string gpus, nodes;      // search at these GPU counts instead of the scenario's
  std::string clusters;         // ... or on each of these clusters
  std::string price;            // --price: US dollars per GPU-hour (NAME=USD,... with --clusters)
  std::string megatron_script;  // write the fastest fitting layout's Megatron-LM launch script here
  std::string torchtitan_toml;  // ... or its torchtitan job configuration
  std::string bridge_config;    // ... or its Megatron-Bridge configuration
};

// The items of a comma-separated option value, as indices into `names`; an unknown or repeated item
// is an InputError naming the option ("unknown <noun> "x" (expected a list of a, b)").
std::vector<std::size_t> parse_choice_list(std::string_view value, const char* option, const char* noun,
                                           std::initializer_list<std::string_view> names) {
  using trainsim::util::InputError;
  const std::vector<std::string_view> known(names);
  std::vector<std::size_t> out;
  while (true) {
    const std::size_t comma = value.find(',');
    const std::string item(value.substr(0, comma));
    const auto it = std::find(known.begin(), known.end(), item);
    if (it == known.end())
      throw InputError(option, "",
                       fmt::format("unknown {} \"{}\" (expected a list of {})", noun, item, fmt::join(known, ", ")));
    const auto i = static_cast<std::size_t>(it - known.begin());
    if (std::find(out.begin(), out.end(), i) != out.end())
      throw InputError(option, "", fmt::format("{} is listed twice", item));
    out.push_back(i);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

// A search's base scenario: its layout is replaced by each one searched, so neither how the global
// batch splits over it nor the keys that need some other layout are checked against it (a batch of 32
// on 128 GPUs, or cp_comm_type a2a, searches without a parallel block); every candidate is.
constexpr trainsim::config::ParseOptions kSearchBase{.check_batch_split = false, .check_layout_rules = false};

// `search --clusters a,b,c`: the same search on each cluster (at the scenario's GPU count, or the one
// --gpus / --nodes gives), then the best layout per cluster.
template <typename AxesFor, typename Searched, typename Print>
int search_clusters(const SearchArgs& a, nlohmann::json doc, const AxesFor& axes_for, int threads, double headroom,
                    const Searched& searched, const Print& print) {
  using namespace trainsim;
  for (const auto& [option, value] :
       {std::pair<const char*, const std::string&>{"--megatron-script", a.megatron_script},
        {"--torchtitan-toml", a.torchtitan_toml},
        {"--bridge-config", a.bridge_config}})
    if (!value.empty()) throw util::InputError(option, "", "takes one cluster: search without --clusters");
  std::vector<std::string> names;
  std::string_view rest = a.clusters;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string name(rest.substr(0, comma));
    if (name.empty()) throw util::InputError("--clusters", "", "expected a list of clusters like dgx-h100,dgx-b200");
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw util::InputError("--clusters", "", fmt::format("{} is listed twice", name));
    names.push_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::int64_t count = 0;  // 0: the scenario's
  if (!a.gpus.empty() || !a.nodes.empty()) {
    const std::string option = a.gpus.empty() ? "--nodes" : "--gpus";
    const auto counts = trainsim::cli::parse_int_list(a.gpus.empty() ? a.nodes : a.gpus, option, 1, true);
    if (counts.size() > 1)
      throw util::InputError(option, "", "takes one count with --clusters (compare clusters at one size)");
    count = counts.front();
  }
  const auto data_dir = config::default_data_dir();
  std::vector<nlohmann::json> docs;
  std::vector<config::Scenario> bases;
  // Every cluster is checked before any is searched, so a bad one fails at once.
  for (const auto& name : names) {
    nlohmann::json d = doc;
    d["cluster"] = name;
    config::Scenario b = config::parse_scenario(util::JsonNode(d, a.scenario_file), data_dir, kSearchBase);
    if (count > 0) {
      d["gpus"] = a.nodes.empty() ? count : count * b.cluster.gpus_per_node;
      b = config::parse_scenario(util::JsonNode(d, a.scenario_file), data_dir, kSearchBase);
    }
    config::look_up_published_accuracy(b, data_dir);  // each cluster's kind of run (its GPUs)
    docs.push_back(std::move(d));
    bases.push_back(std::move(b));
  }
  if (!a.price.empty()) {
    const std::vector<double> prices = trainsim::cli::parse_prices(a.price, names);
    for (std::size_t i = 0; i < bases.size(); ++i) bases[i].gpu_hour_price_usd = prices[i];
  }
  std::vector<search::Result> results;
  for (std::size_t i = 0; i < bases.size(); ++i)
    results.push_back(
        searched(search::run_search(bases[i], docs[i], axes_for(bases[i]), threads, data_dir, headroom, a.top)));
  if (results.front().root) print(results, bases);
  return 0;
}

int search_layouts(const SearchArgs& a) {
  using namespace trainsim;
  const auto data_dir = config::default_data_dir();
  nlohmann::json doc = trainsim::cli::scenario_doc(a.scenario_file, a.sets);
  config::Scenario base = config::parse_scenario(util::JsonNode(doc, a.scenario_file), data_dir, kSearchBase);
  config::look_up_published_accuracy(base, data_dir);
  if (!a.price.empty() && a.clusters.empty())
    base.gpu_hour_price_usd = trainsim::cli::parse_prices(a.price, {}).front();
  // The axes of a search on `b`: its defaults (which depend on the cluster), with the options' lists.
  auto axes_for = [&](const config::Scenario& b) {
    search::Axes axes = search::default_axes(b);
    if (!a.tp.empty()) axes.tp = trainsim::cli::parse_int_list(a.tp, "--tp", 1, false);
    if (!a.pp.empty()) axes.pp = trainsim::cli::parse_int_list(a.pp, "--pp", 1, false);
    if (!a.cp.empty()) axes.cp = trainsim::cli::parse_int_list(a.cp, "--cp", 1, false);
    if (!a.ep.empty()) {
      if (!base.model.moe())
        throw util::InputError("--ep", "", fmt::format("{} is not a mixture-of-experts model", base.model.name));
      axes.ep = trainsim::cli::parse_int_list(a.ep, "--ep", 1, false);
    }
    if (!a.vp.empty()) axes.virtual_stages = trainsim::cli::parse_int_list(a.vp, "--vp", 1, false);
    if (!a.micro_batch.empty())
      axes.micro_batch = trainsim::cli::parse_int_list(a.micro_batch, "--micro-batch", 1, false);
    if (!a.zero.empty()) {
      axes.zero = trainsim::cli::parse_int_list(a.zero, "--zero", 0, false);
      for (const auto z : axes.zero)
        if (z > 3) throw util::InputError("--zero", "", fmt::format("must be 0, 1, 2 or 3, got {}", z));
    }
    if (!a.hsdp.empty()) axes.hsdp_nodes = trainsim::cli::parse_int_list(a.hsdp, "--hsdp", 0, false);
    auto moe_only = [&](const char* option) {
      if (!base.model.moe())
        throw util::InputError(option, "", fmt::format("{} is not a mixture-of-experts model", base.model.name));
    };
    if (!a.a2a_overlap.empty()) {
      moe_only("--a2a-overlap");
      axes.moe_a2a_overlap.clear();
      for (const std::size_t i : parse_choice_list(a.a2a_overlap, "--a2a-overlap", "value", {"off", "on"}))
        axes.moe_a2a_overlap.push_back(i == 1);
    }
    if (!a.schedule.empty()) {
      constexpr std::array<config::Schedule, 4> kSchedules = {config::Schedule::one_f_one_b, config::Schedule::gpipe,
                                                              config::Schedule::zb_h1, config::Schedule::dualpipev};
      axes.schedule.clear();
      for (const std::size_t i :
           parse_choice_list(a.schedule, "--schedule", "value", {"1f1b", "gpipe", "zb-h1", "dualpipev"}))
        axes.schedule.push_back(kSchedules[i]);
    }
    if (!a.dispatcher.empty()) {
      moe_only("--dispatcher");
      axes.moe_dispatcher.clear();
      for (const std::size_t i :
           parse_choice_list(a.dispatcher, "--dispatcher", "value", {"alltoall", "allgather", "flex"}))
        axes.moe_dispatcher.push_back(static_cast<config::MoeDispatcher>(i));
    }
    if (!a.precision.empty()) {
      constexpr std::array<config::Precision, 4> kPrecisions = {config::Precision::bf16, config::Precision::fp16,
                                                                config::Precision::fp8, config::Precision::nvfp4};
      axes.precision.clear();
      for (const std::size_t i :
           parse_choice_list(a.precision, "--precision", "precision", {"bf16", "fp16", "fp8", "nvfp4"}))
        axes.precision.push_back(kPrecisions[i]);
    }
    if (!a.recompute.empty()) {
      constexpr std::array<config::Recompute, 3> kModes = {config::Recompute::none, config::Recompute::selective,
                                                           config::Recompute::full};
      axes.recompute.clear();
      for (const std::size_t i :
           parse_choice_list(a.recompute, "--recompute", "recompute", {"none", "selective", "full"}))
        axes.recompute.push_back(kModes[i]);
    }
    return axes;
  };
  const search::Axes axes = axes_for(base);
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!a.network.empty()) {
    if (a.network != "analytical" && a.network != "flow")
      throw util::InputError("--network", "",
                             fmt::format("unknown network \"{}\" (expected one of: analytical, flow)", a.network));
    doc["network"] = a.network;
  }
  // By default a layout must leave free what the published runs leave: they seldom fill their GPUs
  // beyond it by trainsim's memory model (validation/README.md, "How full the published runs keep
  // their GPUs").
  const std::optional<config::PublishedMemoryFill> published =
      a.headroom.empty() ? config::published_memory_fill(data_dir) : std::nullopt;
  const double headroom = published            ? 1 - published->fill
                          : a.headroom.empty() ? 0
                                               : report::parse_bound(a.headroom, "--headroom");
  if (headroom >= 1) throw util::InputError("--headroom", "", "must leave some memory to use (below 100%)");
  const auto searched = [&published](search::Result r) {
    r.published_fill = published;
    return r;
  };
  // One search, or one per GPU count: the same three outputs.
  auto print = [&a](const auto& results, const auto& bases) {
    if (a.json)
      fmt::print("{}\n", search::to_json(results, bases, a.top).dump(2));
    else if (a.markdown)
      fmt::print("{}", search::to_markdown(results, bases, a.top));
    else
      fmt::print("{}", search::to_text(results, bases, a.top));
  };
  if (!a.clusters.empty()) return search_clusters(a, doc, axes_for, threads, headroom, searched, print);
  if (a.gpus.empty() && a.nodes.empty()) {
    const auto result = searched(search::run_search(base, doc, axes, threads, data_dir, headroom, a.top));
    if (!result.root) return 0;
    print(result, base);  // rank 0 prints
    for (const auto& [option, file] :
         {std::pair<std::string_view, const std::string&>{"--megatron-script", a.megatron_script},
          {"--torchtitan-toml", a.torchtitan_toml},
          {"--bridge-config", a.bridge_config}}) {
      if (file.empty()) continue;
      if (result.fitting == 0 || result.ranked.empty())
        throw util::InputError(std::string(option), "", "no layout fits, so there is nothing to write");
      // The fastest layout that fits leads the ranking; its keys complete the scenario.
      nlohmann::json best = doc;
      best["parallel"] = result.ranked.front().parallel;
      best["training"] = result.ranked.front().training;
      if (option == "--megatron-script")
        trainsim::cli::write_megatron_script(best, a.scenario_file, file);
      else if (option == "--torchtitan-toml")
        trainsim::cli::write_torchtitan_toml(best, a.scenario_file, file);
      else
        trainsim::cli::write_bridge_config(best, a.scenario_file, file);
    }
    return 0;
  }
  if (!a.megatron_script.empty())
    throw util::InputError("--megatron-script", "", "takes one GPU count: search without --gpus / --nodes lists");
  if (!a.torchtitan_toml.empty())
    throw util::InputError("--torchtitan-toml", "", "takes one GPU count: search without --gpus / --nodes lists");
  if (!a.bridge_config.empty())
    throw util::InputError("--bridge-config", "", "takes one GPU count: search without --gpus / --nodes lists");
  // Several GPU counts: the same search at each, then the best layout per count.
  std::vector<std::int64_t> counts =
      trainsim::cli::parse_int_list(a.gpus.empty() ? a.nodes : a.gpus, a.gpus.empty() ? "--nodes" : "--gpus", 1, true);
  if (!a.nodes.empty())
    for (auto& n : counts) n *= base.cluster.gpus_per_node;
  std::vector<search::Result> results;
  std::vector<config::Scenario> bases;
  for (const std::int64_t n : counts) {
    config::Scenario b = base;
    b.gpus = n;
    doc["gpus"] = n;
    results.push_back(searched(search::run_search(b, doc, axes, threads, data_dir, headroom, a.top)));
    bases.push_back(std::move(b));
  }
  if (results.front().root) print(results, bases);
  return 0;
}

int search_command(const SearchArgs& a, int* argc, char*** argv) {
  trainsim::search::MpiSession mpi(argc, argv);
  try {
    return search_layouts(a);
  } catch (const trainsim::util::InputError& e) {
    // Every rank meets the same bad input; rank 0 says so once, before MPI_Finalize (the session's
    // end), whose fence holds the other ranks until then: had they ended first, mpirun could have
    // ended the job, rank 0 with it, before its line was out.
    if (!trainsim::search::secondary_rank()) std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // glibc hands freed blocks above 128 KiB straight back to the kernel; `search` and `validate` build
  // and free the same task vectors for thousands of simulations, and faulting their pages in again
  // took a third of an 8B search's time (BENCHMARKS.md). Keep up to 1 GiB of freed memory and serve
  // blocks up to 32 MiB from the heap.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{
      "trainsim predicts how a transformer training step runs on a GPU cluster: step time, throughput, MFU,\n"
      "pipeline bubbles, exposed communication and per-GPU memory, for any DP/TP/PP/SP/CP/EP/ZeRO layout."};
  app.failure_message(trainsim::cli::one_line_failure);
  app.set_version_flag("--version", "trainsim 0.1.0");
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Log progress to stderr");

  std::string scenario_file;
  bool json = false;
  CLI::App* run = app.add_subcommand("run", "Simulate one training step of a scenario and print the prediction");
  run->add_option("scenario", scenario_file, "Scenario JSON file (see configs/README.md for the keys)")->required();
  run->add_flag("--json", json, "Print one JSON object instead of the human summary");
  std::vector<std::string> run_sets;
  run->add_option("--set", run_sets, trainsim::cli::kSetHelp)->allow_extra_args(false);
  bool all_ranks = false;
  run->add_flag("--all-ranks", all_ranks,
                "Simulate every rank instead of one representative per class of identical ranks (same result, slower)");
  std::string run_price;
  run->add_option(
      "--price", run_price,
      "US dollars per GPU-hour of the cluster: adds what a million tokens (and training.train_tokens) cost");
  trainsim::cli::RunOutputs run_outputs;
  run->add_option("--trace", run_outputs.trace_file,
                  "Write the simulated timeline as a Chrome/Perfetto trace (JSON) to this file");
  run->add_option("--trace-ranks", run_outputs.trace_ranks,
                  "Ranks in the trace: stages (default: one per pipeline stage), all, or a list like 0,8,16-23");
  run->add_option("--report", run_outputs.report_dir,
                  "Write a self-contained HTML report (index.html, inline SVG) into this directory");
  run->add_flag("--ops", run_outputs.ops,
                "Also list the ops one micro-batch runs through each part of the model, with each op's modelled "
                "time and what bounds it (with --json: the key ops)");

  std::string validate_dir, gate_file;
  bool validate_json = false, validate_markdown = false;
  CLI::App* validate = app.add_subcommand(
      "validate", "Re-simulate published, measured runs and report the prediction error of each, with the MAPE");
  validate->add_option("dir", validate_dir,
                       "Directory of validation records (default: validation/records of the data dir)");
  auto* vj = validate->add_flag("--json", validate_json, "Print one JSON object");
  validate->add_flag("--markdown", validate_markdown, "Print Markdown tables")->excludes(vj);
  std::string validate_network;
  validate->add_option("--network", validate_network,
                       "Run every record on this network model (analytical or flow) instead of the record's own");
  double validate_host_scale = 0;
  validate
      ->add_option("--host-cost-scale", validate_host_scale,
                   "Run every Megatron record with training.host_cost_scale set to this (a host overhead "
                   "sensitivity study)")
      ->check(trainsim::cli::kPositive);
  double validate_compute_slowdown = -1;
  validate
      ->add_option("--compute-slowdown", validate_compute_slowdown,
                   "Run every record with compute slowed by this share (0 to 0.99) while its rank's communication "
                   "runs, as a calibrated profile's overlap measurement would (a sensitivity study)")
      ->check(CLI::Range(0.0, 0.99));
  std::vector<std::string> validate_sets;
  validate
      ->add_option(
          "--set", validate_sets,
          "Override a key of every record's scenario: PATH=VALUE, e.g. training.attention=flash2 (repeatable; null "
          "takes the key out; a record it makes invalid is skipped)")
      ->allow_extra_args(false);
  int validate_threads = 0;
  validate->add_option("--threads", validate_threads, "Records simulated at once (default: one per hardware thread)")
      ->check(trainsim::cli::kPositive);
  validate->add_option("--gate", gate_file,
                       "Accuracy gate file (e.g. validation/gate.json): exit 1 when a MAPE or worst error exceeds it");
  std::string accuracy_file;
  validate->add_option("--accuracy", accuracy_file,
                       "Also write the step-time error by kind of run to this file (validation/accuracy.json, which "
                       "`run` quotes)");

  std::string coll_cluster, coll_algo = "auto", coll_network = "analytical";
  trainsim::network::SweepRequest coll;
  bool coll_json = false;
  CLI::App* collective = app.add_subcommand(
      "collective", "Predict one collective over the first N GPUs of a cluster, 1 MiB to 16 GiB, like nccl-tests");
  collective->add_option("--cluster", coll_cluster, "Topology name (topologies/NAME.json) or file")->required();
  collective->add_option("--gpus", coll.gpus, "Number of GPUs (the first N of the cluster)")->required();
  collective->add_option("--op", coll.op, "all_reduce, all_gather, reduce_scatter, all_to_all or send_recv")
      ->required();
  collective->add_option("--algo", coll_algo, "auto (what the simulation uses), ring, tree or nvls");
  collective->add_option("--network", coll_network, "analytical (default) or flow (on an idle fabric)");
  collective->add_option("--min-bytes", coll.min_bytes, "Smallest message, bytes (default 1 MiB)");
  collective->add_option("--max-bytes", coll.max_bytes, "Largest message, bytes (default 16 GiB)");
  collective->add_flag("--json", coll_json, "Print a JSON list of {bytes, time_s, algbw_GBps, busbw_GBps, algo}");

  SearchArgs search_args;
  CLI::App* search = app.add_subcommand(
      "search",
      "Try every parallel layout of a scenario's model, cluster and GPU count; rank those that fit by step time");
  search
      ->add_option(
          "scenario", search_args.scenario_file,
          "Scenario JSON file: model, cluster, gpus and training; its parallel block gives what is not searched")
      ->required();
  search->add_option("--set", search_args.sets, trainsim::cli::kSetHelp)->allow_extra_args(false);
  search->add_option("--top", search_args.top, "Layouts to print, fastest first (default 10; 0: all)")
      ->check(trainsim::cli::kNonNegative);
  search->add_option("--threads", search_args.threads, "Simulations run at once (default: one per hardware thread)")
      ->check(trainsim::cli::kPositive);
  search->add_option("--tp", search_args.tp, "Tensor-parallel sizes to try (default 1,2,4,8 within a node)");
  search->add_option("--pp", search_args.pp, "Pipeline sizes (default: every divisor of the layers up to 64)");
  search->add_option("--cp", search_args.cp,
                     "Context-parallel sizes (default 1, and 2,4,8,16 while a rank keeps >= 4096 tokens)");
  search->add_option("--ep", search_args.ep,
                     "Expert-parallel sizes, mixture-of-experts models only (default: every divisor of the experts "
                     "up to 64)");
  search->add_option("--vp", search_args.vp,
                     "Virtual pipeline stages (default 1 and 2..8 where they divide the layers per stage)");
  search->add_option("--schedule", search_args.schedule,
                     "Pipeline schedules of the layouts without virtual stages, of 1f1b, gpipe, zb-h1, dualpipev "
                     "(default: the scenario's, 1f1b if it interleaves)");
  search->add_option("--micro-batch", search_args.micro_batch, "Micro-batch sizes (default 1,2,4,8)");
  search->add_option("--recompute", search_args.recompute, "Recompute modes (default none,selective,full)");
  search->add_option("--precision", search_args.precision,
                     "Precisions, of bf16, fp16, fp8, nvfp4 (default: the scenario's); a GPU without FP8 or FP4 "
                     "rejects those layouts");
  search->add_option("--zero", search_args.zero, "ZeRO stages (default: the scenario's)");
  search->add_option("--hsdp", search_args.hsdp,
                     "With zero 3: hybrid-sharding spans to try, in nodes per replica (0: plain FSDP; default 0,1)");
  search->add_option("--a2a-overlap", search_args.a2a_overlap,
                     "Mixture of experts: the all-to-all overlap off and/or on (default: the scenario's)");
  search->add_option(
      "--dispatcher", search_args.dispatcher,
      "Mixture of experts: the token dispatcher, alltoall, allgather and/or flex (default: the scenario's)");
  auto* search_gpus = search->add_option(
      "--gpus", search_args.gpus,
      "Search at each of these GPU counts (increasing: 256,512,1024) instead of the scenario's, then list the best "
      "layout per count");
  search->add_option("--nodes", search_args.nodes, "As --gpus, in nodes (times the cluster's GPUs per node)")
      ->excludes(search_gpus);
  search->add_option("--clusters", search_args.clusters,
                     "Search on each of these clusters (topology names or files: dgx-h100,dgx-b200,gb200-nvl72) at the "
                     "scenario's GPU count (or one --gpus / --nodes), then list the best layout per cluster");
  search->add_option(
      "--price", search_args.price,
      "US dollars per GPU-hour (with --clusters NAME=USD for each: dgx-h100=2.5,gb200-nvl72=4): adds what "
      "a million tokens (and training.train_tokens) cost on the best layouts");
  search->add_option("--megatron-script", search_args.megatron_script,
                     "Write the fastest layout that fits as a Megatron-LM launch script to this file (as `export "
                     "megatron` writes it; one GPU count only)");
  search->add_option("--torchtitan-toml", search_args.torchtitan_toml,
                     "Write the fastest layout that fits of a torchtitan scenario as torchtitan's job configuration to "
                     "this file (as `export torchtitan` writes it; one GPU count only)");
  search->add_option("--bridge-config", search_args.bridge_config,
                     "Write the fastest layout that fits as a Megatron-Bridge configuration YAML to this file (as "
                     "`export bridge` writes it; one GPU count only)");
  search->add_option("--headroom", search_args.headroom,
                     "Share of GPU memory a layout must leave free to count as fitting: 5% or 0.05 (default: what the "
                     "published runs leave, 1 - the fill 98% of them stay within by trainsim's memory model, "
                     "validation/accuracy.json; 0 without that file)");
  search->add_option("--network", search_args.network,
                     "Network model for every layout, analytical or flow (default: the scenario's; flow shares the "
                     "fabric's links among concurrent messages and is slower, BENCHMARKS.md)");
  auto* sj = search->add_flag("--json", search_args.json, "Print one JSON object");
  search->add_flag("--markdown", search_args.markdown, "Print a Markdown table")->excludes(sj);

  trainsim::calibrate::CommandOptions calibrate_options;
  CLI::App* calibrate = trainsim::calibrate::add_command(app, calibrate_options);

  trainsim::cli::ReportCommands report_commands;
  trainsim::cli::add_report_commands(app, report_commands);

  trainsim::cli::ImportArgs import_args;
  CLI::App* import = trainsim::cli::add_import_command(app, import_args);

  trainsim::cli::ExportArgs export_args;
  CLI::App* export_app = trainsim::cli::add_export_command(app, export_args);

  const int parsed_argc = trainsim::cli::split_passthrough_args(argc, argv, import_args);
  try {
    app.parse(parsed_argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto logger = spdlog::stderr_color_mt("trainsim");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("trainsim: %v");
  spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::warn);

  try {
    if (run->parsed()) return run_command(scenario_file, run_sets, json, all_ranks, run_price, run_outputs);
    if (auto code = trainsim::cli::run_report_commands(report_commands)) return *code;
    if (search->parsed()) return search_command(search_args, &argc, &argv);
    if (calibrate->parsed()) return trainsim::calibrate::run_command(calibrate_options);
    if (import->parsed()) return trainsim::cli::import_command(import_args);
    if (export_app->parsed()) return trainsim::cli::export_command(export_args);
    if (validate->parsed())
      return validate_command(validate_dir, validate_json, validate_markdown, gate_file, validate_network,
                              validate_host_scale, validate_compute_slowdown, validate_threads, validate_sets,
                              accuracy_file);
    if (collective->parsed()) {
      const auto algo = trainsim::network::algorithm_from_string(coll_algo);
      if (!algo)
        throw trainsim::util::InputError("--algo", "",
                                         fmt::format("unknown algorithm \"{}\" (expected one of: auto, ring, tree, "
                                                     "nvls)",
                                                     coll_algo));
      coll.algo = *algo;
      return collective_command(coll_cluster, coll, coll_network, coll_json);
    }
  } catch (const trainsim::util::InputError& e) {
    // Under mpirun every rank meets the same bad input; rank 0 says so once.
    if (!trainsim::search::secondary_rank()) std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const trainsim::engine::RunError& e) {
    std::fprintf(stderr, "trainsim: simulation failed: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainsim: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
