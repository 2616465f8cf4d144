// A single-GPU eager-PyTorch step (training.framework pytorch-eager): its memory peak by hand, and
// its step time in the two limits of the host stream (GPU-bound: the kernels' times add up;
// CPU-bound: the CPU's issue time is the step).

#include <catch2/catch.hpp>

#include <vector>

#include "config/scenario.h"
#include "hardware/compute_model.h"
#include "parallel/step_runner.h"
#include "util/json_node.h"
#include "workload/eager_ops.h"

using namespace trainsim;

namespace {

// b = 2, s = 1024 (T = 2048), h = 1024, 8 heads of 128, FFN 2816, vocabulary 32000, 4 layers.
nlohmann::json eager_scenario(double host_forward_us, double host_backward_us) {
  return {{"model",
           {{"name", "tiny-llama"},
            {"layers", 4},
            {"hidden", 1024},
            {"heads", 8},
            {"kv_heads", 8},
            {"ffn_hidden", 2816},
            {"vocab", 32000},
            {"mlp", "swiglu"}}},
          {"cluster", "dgx-h200"},
          {"gpus", 1},
          {"training",
           {{"micro_batch", 2},
            {"global_batch", 2},
            {"seq_len", 1024},
            {"attention", "flash2"},
            {"framework", "pytorch-eager"},
            {"host_forward_us", host_forward_us},
            {"host_backward_us", host_backward_us}}}};
}

config::Scenario parse(const nlohmann::json& j) {
  return config::parse_scenario(util::JsonNode(j, "test.json"), TRAINSIM_SOURCE_DIR);
}

// Every op of the step in program order.
std::vector<workload::Op> step_ops(const config::Scenario& sc) {
  workload::LayerConfig lc;
  lc.micro_batch = 2;
  lc.seq_len = 1024;
  lc.attention = workload::AttentionImpl::flash2;
  const workload::EagerHost host{sc.training.host_forward_s, sc.training.host_backward_s};
  const auto& m = sc.model;
  std::vector<workload::Op> ops{workload::eager_zero_grad(m, host)};
  auto add = [&ops](const std::vector<workload::Op>& more) { ops.insert(ops.end(), more.begin(), more.end()); };
  add(workload::eager_embedding_forward(m, lc, host));
  for (int l = 0; l < 4; ++l) add(workload::eager_layer_forward(m, lc, host));
  add(workload::eager_head_forward(m, lc, host));
  add(workload::eager_head_backward(m, lc, host));
  for (int l = 0; l < 4; ++l) add(workload::eager_layer_backward(m, lc, host));
  add(workload::eager_embedding_backward(m, lc, host));
  ops.push_back(workload::eager_adamw_step(m, host));
  return ops;
}

}  // namespace

TEST_CASE(
    "Eager step memory peak: 8 bytes per parameter, every layer's saved tensors, the head's, and 8TV of logit "
    "gradients") {
  // The peak is in LogSoftmaxBackward, the first backward op: all forward activations are still
  // held, plus two fp32 [T, V] gradients.
  const auto sc = parse(eager_scenario(8, 4));
  const auto r = parallel::simulate_step(sc);
  const std::int64_t T = 2048, h = 1024, f = 2816, V = 32000;
  const std::int64_t P = sc.model.total_params();
  const std::int64_t layer = 24 * T * h + 8 * T * f + 4 * T + 4 * 2 * 8 * 1024;  // eager_ops_test.cc
  const std::int64_t head = 6 * T * h + 2 * T + 4 * T * V;
  REQUIRE(r.memory.size() == 1);
  const auto& peak = r.memory[0].peak_breakdown_bytes;
  CHECK(peak[parallel::kWeights] == 2 * P);
  CHECK(peak[parallel::kGradients] == 2 * P);
  CHECK(peak[parallel::kOptimizer] == 4 * P);
  CHECK(peak[parallel::kActivations] == 4 * layer + head + 8 * T * V);
  CHECK(r.memory[0].peak_bytes == 8 * P + 4 * layer + head + 8 * T * V);
}

TEST_CASE("Eager step time: GPU-bound it is the sum of the kernels' times, CPU-bound the CPU's issue time") {
  {
    // A CPU that issues a kernel in 1 ns keeps the GPU waiting only for its first kernel, which
    // zero_grad's Python loop over the parameters delays (its host time, spread over its launches).
    const auto sc = parse(eager_scenario(0.001, 0.001));
    const hardware::ComputeModel cm(sc.cluster.gpu);
    const auto ops = step_ops(sc);
    double device = 0;
    for (const auto& op : ops) device += cm.time_s(op);
    const double first_issue = ops.front().host_s / ops.front().kernels;
    CHECK(first_issue > 1e-6);
    CHECK(parallel::simulate_step(sc).step_time_s == Approx(device + first_issue).epsilon(1e-9));
  }
  {
    // At 1 ms a kernel the GPU always waits: the step is the CPU's time plus a share of the last op.
    const auto sc = parse(eager_scenario(1000, 1000));
    double host = 0;
    for (const auto& op : step_ops(sc)) host += op.host_s;
    const double step = parallel::simulate_step(sc).step_time_s;
    CHECK(step > host);
    CHECK(step == Approx(host).epsilon(1e-3));
  }
}
