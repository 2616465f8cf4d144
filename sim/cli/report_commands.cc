#include "cli/report_commands.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "report/chrome_trace.h"
#include "report/html.h"
#include "report/progress.h"
#include "report/timeline.h"
#include "util/error.h"

namespace trainsim::cli {

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
