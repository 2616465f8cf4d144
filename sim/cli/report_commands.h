#pragma once
// Bodies of the commands and options that write reports: `run --trace/--report`, `scale` and
// `compare`. main.cc parses the command line and maps exceptions to exit codes.

#include <cstdint>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "parallel/step_runner.h"

namespace trainsim::cli {

struct RunOutputs {
  std::string trace_file;              // --trace: Chrome trace JSON
  std::string trace_ranks = "stages";  // --trace-ranks
  std::string report_dir;              // --report: HTML page
};

// Simulates one step and writes the trace and HTML report asked for; a progress bar on a terminal.
parallel::StepResult simulate_with_outputs(const config::Scenario& scenario, const parallel::BuildOptions& options,
                                           const RunOutputs& outputs);

}  // namespace trainsim::cli
