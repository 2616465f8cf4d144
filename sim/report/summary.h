#pragma once
// The result of `trainsim run` for people (a ten-second summary) and for scripts (one JSON object).
// MFU counts model FLOPs as NeMo / Megatron-Bridge do (forward + backward, no recompute, full
// non-causal attention, embedding and logits) over the GPU's dense BF16 peak.

#include <array>
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "parallel/step_runner.h"

namespace trainsim::report {

// training.train_tokens at a step time: the whole steps that reach the budget, their days and
// GPU-hours (every step as the simulated one). Zeros when the scenario sets no budget.
struct TrainTime {
  std::int64_t steps = 0;
  double days = 0;
  double gpu_hours = 0;
};

struct Metrics {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double model_tflops_per_gpu = 0;
  double mfu = 0;
  double bubble_fraction = 0;
  double peak_gib = 0;
  double capacity_gib = 0;
  bool fits = true;
  // It fits, but its peak is above what the published runs fill (Scenario::memory_fill, where looked up).
  bool tight = false;
  // Activation offloading: the pinned host memory one GPU fills, and its share of the node's host
  // memory (0: the topology states none); host_fits false when the buffers exceed the share.
  double host_offload_gib = 0;
  double host_share_gib = 0;
  bool host_fits = true;
  TrainTime train;  // training.train_tokens set: the steps that reach it and their time
};

TrainTime train_time(const config::Scenario& sc, double step_time_s);
// At the scenario's price per GPU-hour (`--price`, Scenario::gpu_hour_price_usd): a million tokens'
// cost, price · GPUs · step time / 3600 / (global_batch · seq_len) · 10^6, and with
// training.train_tokens the whole steps' (price · TrainTime::gpu_hours; else 0). Zeros without a price.
struct Cost {
  double usd_per_million_tokens = 0;
  double usd_to_train = 0;
};
Cost cost(const config::Scenario& sc, double step_time_s);
// A dollar amount in three significant digits: "$0.523", "$12.3", "$7.83M".
std::string usd(double v);
// "$0.877 per million tokens at $2.49 per GPU-hour" (and "; $13.2M to train" with a budget): the
// `cost` line of run's summary and HTML page and of search's best layout.
std::string cost_line(const config::Scenario& sc, double step_time_s);
// The JSON `cost` object: {usd_per_gpu_hour, usd_per_million_tokens, usd_to_train (with a budget)}.
nlohmann::json cost_json(const config::Scenario& sc, double step_time_s);
// The stage whose rank runs the most kernel time in the step, that time, and each KernelKind's share
// of it (percent); no stage: total_s 0.
struct BusiestKernels {
  std::size_t stage = 0;
  double total_s = 0;
  std::array<double, parallel::kKernelKinds> percent{};
};
BusiestKernels busiest_kernels(const parallel::StepResult& r);
// 15.6T, 405B, 1.34M: three significant figures with an SI suffix (k, M, B, T; none below 1000).
std::string si_count(double v);
// The optimizer's states and CPU offload when they are not Megatron's default fp32 Adam on the GPU
// (training.optimizer), as the summary's `optimizer` line and the HTML report print them; empty
// otherwise.
std::string optimizer_line(const config::Scenario& sc);
// "published dense Hopper runs: step time off by 3.1% on average (mean error -1.2%, 120 runs)": the
// scenario's kind of run and its error on the published runs (scenario.accuracy); empty without it.
std::string accuracy_line(const config::Scenario& sc);
// A kind of run in words: "moe/blackwell/nvfp4" -> "mixture-of-experts Blackwell NVFP4".
std::string accuracy_group_words(const std::string& group);
// "published runs of this model (GPT OSS 120B): step time off by 25.7% on average (mean error
// -25.3%, 28 runs)": the error on the published runs of the scenario's very model
// (scenario.model_accuracy); empty without it.
std::string model_accuracy_line(const config::Scenario& sc);
// "none", "selective" or "full", as the scenario file spells it.
const char* recompute_name(config::Recompute r);
// training.precision as a scenario spells it: bf16, fp16, fp8, nvfp4.
const char* precision_name(config::Precision p);

Metrics compute_metrics(const config::Scenario& scenario, const parallel::StepResult& result);
nlohmann::json to_json(const config::Scenario& scenario, const parallel::StepResult& result);
std::string to_text(const config::Scenario& scenario, const parallel::StepResult& result);

}  // namespace trainsim::report
