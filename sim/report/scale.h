#pragma once
// A scaling study: the same scenario at several GPU counts, with data parallelism growing with the
// GPUs (TP, PP and CP fixed). Results as JSON (for `compare`), a Markdown table (for a CI job
// summary), a text table, and an HTML page with SVG plots of throughput, tokens/s/GPU, MFU and
// scaling efficiency against GPUs, plus the bubble and exposed-communication shares.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "parallel/step_runner.h"
#include "report/summary.h"

namespace trainsim::report {

// What stays fixed as GPUs grow: the global batch (fewer micro-batches per pipeline), or the
// sequences per GPU (the global batch grows with the GPUs).
enum class Keep : std::uint8_t { global_batch, per_gpu_batch };
const char* to_string(Keep keep);

struct ScalePoint {
  config::Scenario scenario;
  parallel::StepResult result;
};

struct ScaleRow {
  std::int64_t gpus = 0, dp = 0, global_batch = 0, micro_batches = 0;
  double step_time_s = 0, tokens_per_s = 0, tokens_per_s_per_gpu = 0, model_tflops_per_gpu = 0, mfu = 0;
  double scaling_efficiency = 0;  // tokens/s/GPU over that of the smallest size
  double bubble_fraction = 0, exposed_comm_fraction = 0;
  double peak_gib = 0;
  bool fits = true;
  bool tight = false;  // fits, above what the published runs fill (Metrics::tight)
  TrainTime train;     // with training.train_tokens
};

// One row per point, in the given order; efficiency relative to the first (smallest) point.
std::vector<ScaleRow> scale_rows(const std::vector<ScalePoint>& points);

nlohmann::json scale_json(const std::vector<ScalePoint>& points, Keep keep);
std::string scale_markdown(const std::vector<ScalePoint>& points, Keep keep);
std::string scale_text(const std::vector<ScalePoint>& points, Keep keep);
std::string scale_report_html(const std::vector<ScalePoint>& points, Keep keep);

}  // namespace trainsim::report
