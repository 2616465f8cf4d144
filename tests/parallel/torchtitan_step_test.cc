// A torchtitan step (training.framework torchtitan): FSDP2's sharded fp32 state by hand, the time the
// activation-checkpointing modes add (the kernels they run again), and torch.compile against eager.

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "engine/program.h"
#include "hardware/compute_model.h"
#include "network/collective.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "util/json_node.h"
#include "workload/torchtitan_ops.h"

using namespace trainsim;

namespace {

// b = 2, s = 1024, h = 1024, 8 query and 2 KV heads of 128, FFN 2816, vocabulary 32000, 4 layers.
nlohmann::json titan_scenario(int gpus, const nlohmann::json& training_extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model",
                       {{"name", "tiny-llama3"},
                        {"layers", 4},
                        {"hidden", 1024},
                        {"heads", 8},
                        {"kv_heads", 2},
                        {"ffn_hidden", 2816},
                        {"vocab", 32000},
                        {"mlp", "swiglu"}}},
                      {"cluster", "dgx-h100"},
                      {"gpus", gpus},
                      {"parallel", {{"zero", 3}}},
                      {"training",
                       {{"micro_batch", 2},
                        {"global_batch", 2 * gpus},
                        {"seq_len", 1024},
                        {"attention", "flash2"},
                        {"framework", "torchtitan"},
                        {"host_forward_us", 0.001},
                        {"host_backward_us", 0.001}}}};
  j["training"].update(training_extra);
  return j;
}

config::Scenario parse(const nlohmann::json& j) {
  return config::parse_scenario(util::JsonNode(j, "test.json"), TRAINSIM_SOURCE_DIR);
}

workload::LayerConfig layer_config() {
  workload::LayerConfig lc;
  lc.micro_batch = 2;
  lc.seq_len = 1024;
  lc.attention = workload::AttentionImpl::flash2;
  return lc;
}

}  // namespace

TEST_CASE("torchtitan step: FSDP2 keeps fp32 weights, gradients and AdamW moments sharded, 16 bytes a parameter") {
  const auto sc = parse(titan_scenario(8));
  const auto r = parallel::simulate_step(sc);
  const std::int64_t shard = (sc.model.total_params() + 7) / 8;
  const auto& peak = r.memory[r.peak_rank].peak_breakdown_bytes;
  CHECK(peak[parallel::kGradients] == 4 * shard);
  CHECK(peak[parallel::kOptimizer] == 8 * shard);
  // The fp32 weight shard and, at the peak, the bf16 units FSDP2 has gathered.
  CHECK(peak[parallel::kWeights] > 4 * shard);
  CHECK(peak[parallel::kWeights] < 4 * shard + 2 * sc.model.total_params());
}

TEST_CASE("torchtitan HSDP: sharded within a replica, the reduce-scattered shard all-reduced across replicas") {
  // 16 GPUs as 2 replicas (distributed_optimizer_instances) of 8-way FSDP2: the fp32 state is an
  // eighth of the model per rank, as on 8 GPUs without replicas, not a sixteenth; each unit is
  // gathered among the replica's 8 consecutive ranks, and the shard of its reduce-scattered
  // gradients (fp32, 4 bytes) is all-reduced with rank 8, the other replica's rank at the same place.
  auto j = titan_scenario(16);
  j["parallel"]["distributed_optimizer_instances"] = 2;
  const auto sc = parse(j);
  const auto r = parallel::simulate_step(sc);
  const auto eight = parallel::simulate_step(parse(titan_scenario(8)));
  const auto& peak = r.memory[r.peak_rank].peak_breakdown_bytes;
  const auto& peak8 = eight.memory[eight.peak_rank].peak_breakdown_bytes;
  CHECK(peak[parallel::kGradients] == peak8[parallel::kGradients]);
  CHECK(peak[parallel::kOptimizer] == peak8[parallel::kOptimizer]);
  CHECK(peak[parallel::kWeights] == peak8[parallel::kWeights]);

  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  const auto& groups = plan.groups;
  const auto gather = groups.placement(plan.bindings[0].group[parallel::kDpGatherGroup]);
  const auto inter = groups.placement(plan.bindings[0].group[parallel::kDpInterGroup]);
  CHECK(std::vector<std::uint32_t>(gather.begin(), gather.end()) == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(std::vector<std::uint32_t>(inter.begin(), inter.end()) == std::vector<std::uint32_t>{0, 8});
  std::int64_t rs = 0, ar = 0, reduce_scatters = 0, all_reduces = 0;
  for (const auto& t : plan.programs[0].stream(parallel::kDpComm)) {
    if (t.op == static_cast<std::uint16_t>(network::CollectiveOp::reduce_scatter)) {
      rs += t.bytes;
      ++reduce_scatters;
    }
    if (t.op == static_cast<std::uint16_t>(network::CollectiveOp::all_reduce)) {
      ar += t.bytes;
      ++all_reduces;
    }
  }
  // One reduce-scatter per unit (4 blocks, the embedding, the output layer with the final norm), each
  // followed by the all-reduce of its eighth.
  CHECK(reduce_scatters == 6);
  CHECK(all_reduces == 6);
  CHECK(rs == 4 * sc.model.total_params());
  CHECK(ar <= rs / 8 + 6 * 4 * 7);  // each unit's shard, rounded up to whole parameters
  CHECK(ar >= rs / 8);

  // One rank per replica shards nothing: that is plain data parallelism, refused.
  auto ddp = titan_scenario(16);
  ddp["parallel"]["distributed_optimizer_instances"] = 16;
  CHECK_THROWS_WITH(parse(ddp),
                    "test.json: parallel.distributed_optimizer_instances: 16 instances of one rank each "
                    "shard nothing: that is plain data parallelism (zero 0)");
}

TEST_CASE("torchtitan step: each checkpointing mode adds exactly the kernels it runs again") {
  // One GPU (no collectives) and a CPU that issues a kernel in 1 ns: the step is the GPU's kernels.
  const auto none = parse(titan_scenario(1));
  const hardware::ComputeModel cm(none.cluster.gpu);
  const workload::TorchtitanOptions o{false, false, {1e-9, 1e-9}};
  const auto fwd = workload::torchtitan_layer_forward(none.model, layer_config(), o);
  const auto sac = workload::torchtitan_layer_forward(none.model, layer_config(), {false, true, {1e-9, 1e-9}});
  double full_rerun = 0, sac_rerun = 0;
  for (const auto& op : fwd)
    if (!op.skip_in_recompute) full_rerun += cm.time_s(op);
  for (const auto& op : sac)
    if (op.rerun & workload::kRecomputeTorchtitanOp) sac_rerun += cm.time_s(op);
  CHECK(sac_rerun > 0);
  CHECK(sac_rerun < full_rerun);
  const double t_none = parallel::simulate_step(none).step_time_s;
  const double t_sac = parallel::simulate_step(parse(titan_scenario(1, {{"recompute", "selective"}}))).step_time_s;
  const double t_full = parallel::simulate_step(parse(titan_scenario(1, {{"recompute", "full"}}))).step_time_s;
  CHECK(t_sac - t_none == Approx(4 * sac_rerun).epsilon(1e-6));
  CHECK(t_full - t_none == Approx(4 * full_rerun).epsilon(1e-6));
}

TEST_CASE("torchtitan step: the op policy keeps less than nothing-recomputed and more than full; compile is faster") {
  auto activations = [](const nlohmann::json& j) {
    const auto r = parallel::simulate_step(parse(j));
    return r.memory[r.peak_rank].peak_breakdown_bytes[parallel::kActivations];
  };
  const auto none = activations(titan_scenario(8));
  const auto sac = activations(titan_scenario(8, {{"recompute", "selective"}}));
  const auto full = activations(titan_scenario(8, {{"recompute", "full"}}));
  CHECK(full < sac);
  CHECK(sac < none);
  const double eager = parallel::simulate_step(parse(titan_scenario(8))).step_time_s;
  const double compiled = parallel::simulate_step(parse(titan_scenario(8, {{"torch_compile", true}}))).step_time_s;
  CHECK(compiled < eager);
}

namespace {

// Counts rank 0's tasks whose label starts with each prefix.
class LabelCounter : public parallel::StepObserver {
 public:
  std::map<std::string, int> counts;
  void on_plan(const parallel::StepPlan&) override {}
  void on_task(std::uint32_t rank, const engine::Program& program, const engine::Task& task, engine::Time,
               engine::Time) override {
    if (rank != 0) return;
    const std::string& name = program.label_name(task.label);
    for (const char* prefix : {"fsdp_param_all_gather", "grad_reduce_scatter"})
      if (name.rfind(prefix, 0) == 0) ++counts[prefix];
    if (name.find("fsdp_copy_out") != std::string::npos) ++counts["fsdp_copy_out"];
  }
};

}  // namespace

TEST_CASE("torchtitan with pipeline parallelism: FSDP2 gathers each unit once a step and reduce-scatters once") {
  // 8 GPUs: pp 2 x dp 4, 4 micro-batches of 2 per pipeline; stage 0 holds the embedding and 2 layers.
  nlohmann::json j = titan_scenario(8, {{"global_batch", 32}});
  j["parallel"]["pp"] = 2;
  const auto pp = parse(j);
  LabelCounter counter;
  const auto r = parallel::simulate_step(pp, {}, &counter);
  // 3 units (embedding, 2 layers): one gather and one reduce-scatter each, for 4 micro-batches.
  CHECK(counter.counts["fsdp_param_all_gather"] == 3);
  CHECK(counter.counts["grad_reduce_scatter"] == 3);
  // FSDP2 copies a unit out of its gather buffer after the gather: once a step, for 3 units.
  CHECK(counter.counts["fsdp_copy_out"] == 3);
  // Without pipeline parallelism every micro-batch gathers each unit for its forward and again for
  // its backward, but FSDP2's root unit (embedding, final norm, output layer) and the last block,
  // which torchtitan keeps from their forward to their backward; and it reduce-scatters each: 6
  // units (embedding, 4 layers, output layer), 1 micro-batch: 6 + 3 gathers, each copied out.
  LabelCounter flat;
  (void)parallel::simulate_step(parse(titan_scenario(8)), {}, &flat);
  CHECK(flat.counts["fsdp_param_all_gather"] == 6 + 3);
  CHECK(flat.counts["fsdp_copy_out"] == 6 + 3);
  CHECK(flat.counts["grad_reduce_scatter"] == 6);
  // The unsharded gradients of stage 0's units accumulate over the micro-batches in the reduce dtype
  // (fp32) beside the sharded fp32 ones: at the peak, up to 4 bytes per parameter of the stage on top
  // of 4 per shard.
  const std::int64_t h = 1024, q = 1024, kv = 256, f = 2816, V = 32000;
  const std::int64_t layer = h * (q + 2 * kv) + q * h + 3 * f * h + 2 * h;
  const std::int64_t stage0 = V * h + 2 * layer;
  const auto& peak = r.memory[0].peak_breakdown_bytes;
  CHECK(peak[parallel::kGradients] <= 4 * ((stage0 + 3) / 4) + 4 * stage0);
  CHECK(peak[parallel::kGradients] > 4 * ((stage0 + 3) / 4));
}

TEST_CASE("torchtitan reshard_after_forward False (zero 2 per unit): one gather and one copy-out per unit") {
  // 8 GPUs, one micro-batch: zero 3 gathers the 6 units before their forward and the first 3 blocks
  // again before their backward (the root unit and the last block are kept), copying each out after
  // each gather; zero 2 with per-unit gathers (FSDP2's reshard_after_forward False) keeps every unit
  // from the forward to the backward: one gather and one copy-out each. Nothing else differs, so
  // the step's kernels differ by 3 block copy-outs.
  const auto three = parse(titan_scenario(8));
  auto j = titan_scenario(8);
  j["parallel"] = {{"zero", 2}, {"zero2_param_gather", "per_unit"}};
  const auto two = parse(j);
  LabelCounter c3, c2;
  (void)parallel::simulate_step(three, {}, &c3);
  (void)parallel::simulate_step(two, {}, &c2);
  CHECK(c3.counts["fsdp_param_all_gather"] == 9);
  CHECK(c2.counts["fsdp_param_all_gather"] == 6);
  CHECK(c3.counts["fsdp_copy_out"] == 9);
  CHECK(c2.counts["fsdp_copy_out"] == 6);
  const hardware::ComputeModel cm(three.cluster.gpu);
  const double copy = cm.time_s(
      workload::torchtitan_copy_out(static_cast<double>(workload::torchtitan_block_gather_bytes(three.model, 1, false)),
                                    three.training.host_backward_s));
  const auto k3 = parallel::build_step(three, cm).stages[0].kernel_s;
  const auto k2 = parallel::build_step(two, cm).stages[0].kernel_s;
  CHECK(k3[parallel::kMemoryKernels] - k2[parallel::kMemoryKernels] == Approx(3 * copy).epsilon(1e-9));
  CHECK(k3[parallel::kGemmKernels] == k2[parallel::kGemmKernels]);
  // One GPU gathers nothing, so it copies nothing.
  LabelCounter c1;
  (void)parallel::simulate_step(parse(titan_scenario(1)), {}, &c1);
  CHECK(c1.counts["fsdp_copy_out"] == 0);
  // Other ZeRO stages are not FSDP2's.
  j["parallel"] = {{"zero", 1}};
  CHECK_THROWS_WITH(parse(j),
                    "test.json: parallel.zero: torchtitan shards with FSDP2: needs zero 3, or zero 2 "
                    "with zero2_param_gather per_unit, got 1");
}

TEST_CASE("torchtitan FSDP2 kernels: a copy-out after each gather, a reduce-scatter copy-in after each backward") {
  // One micro-batch of the 4-layer model on 8 GPUs against 1 (which FSDP2 does not shard): the
  // memory-bound kernels differ by FSDP2's. Units: the embedding (V·h), 4 blocks, the output layer
  // with the final norm (V·h + h). Gathers: 6 before the forward, 3 blocks again before the backward
  // (the root unit and the last block are kept), each copied out (bf16: 2 bytes read and written per
  // parameter). After each of the 6 backwards the bf16 gradients are copied into the fp32
  // reduce-scatter buffer (2 bytes read, 4 written per parameter).
  const auto one = parse(titan_scenario(1));
  const auto eight = parse(titan_scenario(8));
  const hardware::ComputeModel cm(eight.cluster.gpu);
  const double h = 1024, q = 1024, kv = 256, f = 2816, V = 32000;
  const double layer = h * (q + 2 * kv) + q * h + 3 * f * h + 2 * h, emb = V * h, head = V * h + h;
  const double host_f = eight.training.host_forward_s, host_b = eight.training.host_backward_s;
  double expected = 0;
  for (double units : {emb, layer, layer, layer, layer, head})
    expected += cm.time_s(workload::torchtitan_copy_out(2 * units, host_f)) +
                cm.time_s(workload::torchtitan_reduce_scatter_copy_in(units, 2, 4, host_b));
  expected += 3 * cm.time_s(workload::torchtitan_copy_out(2 * layer, host_b));
  const auto k1 = parallel::build_step(one, cm).stages[0].kernel_s;
  const auto k8 = parallel::build_step(eight, cm).stages[0].kernel_s;
  CHECK(k8[parallel::kMemoryKernels] - k1[parallel::kMemoryKernels] == Approx(expected).epsilon(1e-9));
  CHECK(k8[parallel::kGemmKernels] == k1[parallel::kGemmKernels]);
  // The copy-in's bytes: 2 read and 4 written per parameter, its 4-byte buffer held meanwhile.
  const auto copy_in = workload::torchtitan_reduce_scatter_copy_in(layer, 2, 4, 0);
  CHECK(copy_in.bytes == Approx(6 * layer));
  CHECK(copy_in.workspace_bytes == static_cast<std::int64_t>(4 * layer));
  // With pipelining, the first micro-batch's gradients are cast to the fp32 accumulator, the others
  // added to it (4 + 2 read, 4 written); with bf16 reduction the first needs no kernel.
  CHECK(workload::torchtitan_grad_accumulate(layer, true, 4, 0).bytes == Approx(6 * layer));
  CHECK(workload::torchtitan_grad_accumulate(layer, false, 4, 0).bytes == Approx(10 * layer));
  CHECK(workload::torchtitan_grad_accumulate(layer, true, 2, 0).kernels == 0);
}

TEST_CASE("torchtitan context parallelism: PyTorch's context_parallel steps, merges and fp32 dK/dV ring") {
  // cp 4 on 4 GPUs, one micro-batch, 4 layers, no recompute. Per layer, PyTorch's context_parallel
  // (allgather rotation, torchtitan's default) all-gathers K and V once in the forward and once in the
  // backward, runs cp attention steps in each, and in the backward sends the fp32 dK and dV on to the
  // next CP rank after every step: 4 sends of grad_kv_bytes a layer, none in the forward.
  nlohmann::json j = titan_scenario(4);
  j["parallel"]["cp"] = 4;
  j["parallel"]["cp_comm_type"] = "allgather";
  j["training"]["global_batch"] = 2;
  const auto sc = parse(j);
  const hardware::ComputeModel cm(sc.cluster.gpu);
  workload::LayerConfig lc = layer_config();
  lc.cp = 4;
  const workload::TorchtitanCpKernels k =
      workload::torchtitan_cp_kernels(sc.model, lc, {sc.training.host_forward_s, sc.training.host_backward_s});
  // The rank's 256 tokens of 8 heads x 128, K and V in fp32.
  CHECK(k.grad_kv_bytes == std::int64_t{2} * 2 * 256 * 1024 * 4);
  const auto plan = parallel::build_step(sc, cm);
  const engine::Program& p = plan.programs[0];
  int grad_sends = 0, other_sends = 0;
  for (const auto& t : p.stream(parallel::kCpSend))
    if (t.kind == engine::TaskKind::send) (t.bytes == k.grad_kv_bytes ? grad_sends : other_sends)++;
  CHECK(grad_sends == 4 * 4);
  CHECK(other_sends == 0);
  int gathers = 0;
  for (int s = 0; s < parallel::kStreamCount; ++s)
    for (const auto& t : p.stream(s))
      if (t.kind == engine::TaskKind::collective &&
          static_cast<network::CollectiveOp>(t.op) == network::CollectiveOp::all_gather &&
          t.bytes == 4 * workload::torchtitan_cp_kv_bytes(sc.model, lc))
        ++gathers;
  CHECK(gathers == 2 * 4);
  // With the ring rotation (cp_comm_type p2p, torchtitan's "alltoall") K and V travel instead: 3
  // blocks a pass, bf16, beside the 4 fp32 gradient sends of the backward.
  j["parallel"]["cp_comm_type"] = "p2p";
  const auto ring = parallel::build_step(parse(j), cm);
  int kv_sends = 0;
  grad_sends = 0;
  for (const auto& t : ring.programs[0].stream(parallel::kCpSend)) {
    if (t.kind != engine::TaskKind::send) continue;
    if (t.bytes == k.grad_kv_bytes) ++grad_sends;
    if (t.bytes == workload::torchtitan_cp_kv_bytes(sc.model, lc)) ++kv_sends;
  }
  CHECK(grad_sends == 4 * 4);
  CHECK(kv_sends == 2 * 3 * 4);
}
