#pragma once
// The simulated timeline in the Chrome trace-event format (chrome://tracing, ui.perfetto.dev;
// ecosystem.md §5): a process per rank, named by node, GPU and TP/CP/DP/PP coordinates; a thread
// per stream; a complete ("X") event per task with FLOPs, bytes and group in its args; flow events
// ("s"/"f") from each pipeline or ring-attention send to the recv that consumes it, when both ranks
// are written; memory per category as counter ("C") tracks. Times are µs with ns resolution, from
// the engine's integer clock, so the file is byte-identical run to run.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "parallel/step_runner.h"
#include "report/timeline.h"

namespace trainsim::report {

// Which ranks to write: "stages" (one per pipeline stage: tp = cp = dp = 0), "all", or a list of
// ranks and ranges ("0,8,16-23"). Sorted, no duplicates; errors name the option `what`.
std::vector<std::uint32_t> parse_rank_selection(const std::string& spec, const config::Scenario& scenario,
                                                const std::string& what = "--trace-ranks");

// Writes the trace of `ranks` (sorted; each recorded in `timeline` with its spans).
void write_chrome_trace(std::ostream& out, const config::Scenario& scenario, const parallel::StepResult& result,
                        const Timeline& timeline, const std::vector<std::uint32_t>& ranks);

// "rank 12 · node 1 gpu 4 · tp 4 cp 0 dp 0 pp 1"
std::string rank_title(const config::Scenario& scenario, std::uint32_t rank);

}  // namespace trainsim::report
