#pragma once
// The HTML report of a run: one self-contained page (inline CSS and SVG, no script, nothing from
// the network) with the summary numbers, a pipeline timeline per stage (forward, backward,
// recompute, communication and bubbles), the memory timeline of the peak rank by category, the
// step-time breakdown as a stacked bar, and per-link-tier utilisation when the flow network ran.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/scenario.h"
#include "parallel/step_runner.h"
#include "report/timeline.h"

namespace trainsim::report {

// What a run report needs recorded: every task of one rank per pipeline stage, and the memory of
// every stage and CP representative (where the peak rank's timeline is found).
struct ReportRanks {
  std::vector<std::uint32_t> spans, mem;
};
ReportRanks report_ranks(const config::Scenario& scenario);

std::string run_report_html(const config::Scenario& scenario, const parallel::StepResult& result,
                            const Timeline& timeline);

// A complete page: doctype, the report's stylesheet, `body` (already HTML).
std::string html_page(std::string_view title, std::string_view body);

// The window the pipeline chart zooms into: from the start of the step to the end of stage 0's
// first backward pass (micro-batch 0's trip through every stage and back), in picoseconds.
std::int64_t first_round_trip_ps(const Timeline& timeline, const RankTimeline& stage0, std::int64_t step_ps);

// One micro-batch period in the steady state: between the ends of two consecutive forward sends of
// stage 0 in the middle of the step, in picoseconds; {0, 0} without pipeline sends (pp = 1).
std::pair<std::int64_t, std::int64_t> steady_period_ps(const Timeline& timeline, const RankTimeline& stage0);

}  // namespace trainsim::report
