// Step construction and simulation: Megatron's 1F1B order, pipeline bubbles and the memory
// timeline, checked against hand-worked expectations.

#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <string>

#include "config/scenario.h"
#include "network/analytical_network.h"
#include "network/collective.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "util/error.h"
#include "util/json_node.h"
#include "workload/ops.h"

using namespace trainsim;
using parallel::kActivations;

namespace {

// The hand-worked expectations below are of the GPU's work: Megatron's host overhead is off unless
// a test turns it on ("host_overhead": true; the host stream's tests).
config::Scenario scenario(nlohmann::json j) {
  if (j.contains("training") && !j["training"].contains("host_overhead") &&
      j["training"].value("framework", "megatron") == "megatron")
    j["training"]["host_overhead"] = false;
  return config::parse_scenario(util::JsonNode(j, "test.json"), TRAINSIM_SOURCE_DIR);
}

// A GPT-like model whose layers dominate (tiny vocabulary), so stages cost nearly the same.
nlohmann::json small_model() {
  return {{"name", "uniform"}, {"layers", 16},        {"hidden", 4096}, {"heads", 32},
          {"kv_heads", 32},    {"ffn_hidden", 16384}, {"vocab", 1024},  {"mlp", "gelu"}};
}

nlohmann::json base(std::int64_t gpus, std::int64_t tp, std::int64_t pp, std::int64_t gbs) {
  return {{"model", small_model()},
          {"cluster", "dgx-h100"},
          {"gpus", gpus},
          {"parallel", {{"tp", tp}, {"pp", pp}}},
          {"training", {{"micro_batch", 1}, {"global_batch", gbs}, {"seq_len", 2048}}}};
}

std::vector<std::string> labels(const engine::Program& p, int stream) {
  std::vector<std::string> out;
  for (const auto& t : p.stream(stream)) out.push_back(p.label_name(t.label));
  return out;
}

// The one-line error a scenario is refused with, or "accepted".
std::string refusal(const nlohmann::json& j) {
  try {
    scenario(j);
  } catch (const util::InputError& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

std::int64_t saved(const std::vector<workload::Op>& ops) {
  std::int64_t s = 0;
  for (const auto& op : ops) s += op.saved_bytes;
  return s;
}

}  // namespace

TEST_CASE("1F1B: stage s runs pp-s-1 warm-up forwards, then one forward one backward, then drains") {
  // pp 4, 6 micro-batches: stage 1 receives 2 activations, then alternates activation / gradient
  // 4 times, then receives the last 2 gradients.
  auto sc = scenario(base(4, 1, 4, 6));
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plan = parallel::build_step(sc, cm);
  const std::string f = "recv_forward", b = "recv_backward";
  CHECK(labels(plan.programs[1], parallel::kPpRecv) == std::vector<std::string>{f, f, f, b, f, b, f, b, f, b, b, b});
  // The last stage has no warm-up: it alternates from the start and never receives gradients.
  CHECK(labels(plan.programs[3], parallel::kPpRecv) == std::vector<std::string>(6, f));
  // The first stage sends activations forward and receives gradients.
  CHECK(labels(plan.programs[0], parallel::kPpSend) == std::vector<std::string>(6, "send_forward"));
}

TEST_CASE("pipeline bubble: with equal stages the idle share is (p-1)/(m+p-1) of the step") {
  // 1F1B over p stages and m micro-batches of equal cost t_f + t_b takes (m + p - 1)(t_f + t_b);
  // every stage idles (p - 1)(t_f + t_b) of it. Embedding, head and messages make the stages
  // slightly unequal, hence the tolerance.
  for (std::int64_t m : {4, 8, 16}) {
    auto sc = scenario(base(4, 1, 4, m));
    auto r = parallel::simulate_step(sc);
    const double expected = 3.0 / static_cast<double>(m + 3);
    CHECK(r.mean.bubble_s / r.step_time_s == Approx(expected).epsilon(0.08));
  }
}

TEST_CASE("memory timeline: stage s of 1F1B holds pp-s micro-batches of activations at its peak") {
  // No recompute: each in-flight micro-batch keeps every layer's saved activations until its
  // backward. Stage 0 (with the embedding) peaks with 4 in flight, the last stage (with the
  // head's logits) with 1.
  auto sc = scenario(base(4, 1, 4, 8));
  auto r = parallel::simulate_step(sc);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const std::int64_t layer = saved(workload::layer_forward(sc.model, lc));
  const std::int64_t emb = saved(workload::embedding_forward(sc.model, lc));
  const std::int64_t head = saved(workload::head_forward(sc.model, lc));
  CHECK(r.memory[0].peak_breakdown_bytes[kActivations] == 4 * (emb + 4 * layer));
  CHECK(r.memory[1].peak_breakdown_bytes[kActivations] == 3 * (4 * layer));
  CHECK(r.memory[2].peak_breakdown_bytes[kActivations] == 2 * (4 * layer));
  CHECK(r.memory[3].peak_breakdown_bytes[kActivations] == 4 * layer + head);
  CHECK(r.peak_rank == 0);
}

TEST_CASE("memory: weights, fp32 gradients and Adam states per parameter; ZeRO-1 shards the states over DP") {
  // 2 B bf16 weight + 4 B fp32 gradient + 12 B optimizer states (fp32 master, two moments):
  // 18 B/param, or 6 + 12/dp with the distributed optimizer (Megatron's theoretical memory).
  auto j = base(16, 1, 1, 16);
  auto plain = parallel::simulate_step(scenario(j));
  j["parallel"]["zero"] = 1;
  auto zero1 = parallel::simulate_step(scenario(j));
  auto sc = scenario(j);
  const std::int64_t params = 16 * workload::layer_params_per_rank(sc.model, 1) +
                              workload::embedding_params_per_rank(sc.model, 1) +
                              workload::head_params_per_rank(sc.model, 1);
  CHECK(plain.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params);
  CHECK(plain.memory[0].peak_breakdown_bytes[parallel::kGradients] == 4 * params);
  CHECK(plain.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 12 * params);
  CHECK(zero1.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 12 * ((params + 15) / 16));
}

TEST_CASE("grad_reduce_in_fp32 false: bf16 gradient buffer and half the reduce-scatter bytes") {
  // Megatron-Bridge's ddp.grad_reduce_in_fp32 = False: 2 B/param of gradients instead of 4, and the
  // distributed optimizer's reduce-scatter moves bf16 (the all-gather of bf16 weights is unchanged).
  auto j = base(16, 1, 1, 16);
  j["parallel"]["zero"] = 1;
  auto fp32 = parallel::simulate_step(scenario(j));
  j["training"]["grad_reduce_in_fp32"] = false;
  const auto sc = scenario(j);
  auto bf16 = parallel::simulate_step(sc);
  const std::int64_t params = 16 * workload::layer_params_per_rank(sc.model, 1) +
                              workload::embedding_params_per_rank(sc.model, 1) +
                              workload::head_params_per_rank(sc.model, 1);
  CHECK(fp32.memory[0].peak_breakdown_bytes[parallel::kGradients] == 4 * params);
  CHECK(bf16.memory[0].peak_breakdown_bytes[parallel::kGradients] == 2 * params);
  auto rs_bytes = [&](const nlohmann::json& doc) {
    const auto s = scenario(doc);
    hardware::ComputeModel cm(s.cluster.gpu);
    const auto plan = parallel::build_step(s, cm);
    std::int64_t bytes = 0;
    for (const auto& t : plan.programs[0].stream(parallel::kDpComm))
      if (t.op == static_cast<std::uint16_t>(network::CollectiveOp::reduce_scatter)) bytes += t.bytes;
    return bytes;
  };
  const std::int64_t bf16_bytes = rs_bytes(j);
  j["training"].erase("grad_reduce_in_fp32");
  CHECK(bf16_bytes == 2 * params);
  CHECK(rs_bytes(j) == 4 * params);
  CHECK(bf16.mean.dp_exposed_s < fp32.mean.dp_exposed_s);
}

TEST_CASE("recompute trades time for memory: full keeps only layer inputs and reruns the forward") {
  auto j = base(8, 8, 1, 4);
  auto none = parallel::simulate_step(scenario(j));
  j["training"]["recompute"] = "full";
  auto full = parallel::simulate_step(scenario(j));
  j["training"]["recompute"] = "selective";
  auto selective = parallel::simulate_step(scenario(j));
  CHECK(full.step_time_s > selective.step_time_s);
  CHECK(selective.step_time_s >= none.step_time_s);
  CHECK(full.memory[0].peak_breakdown_bytes[kActivations] < selective.memory[0].peak_breakdown_bytes[kActivations]);
  CHECK(selective.memory[0].peak_breakdown_bytes[kActivations] <= none.memory[0].peak_breakdown_bytes[kActivations]);
}

TEST_CASE("TP communication: all-reduce without sequence parallelism, all-gather/reduce-scatter with it") {
  auto count = [](const engine::Program& p, network::CollectiveOp op) {
    int n = 0;
    for (const auto& t : p.stream(parallel::kTpComm)) n += t.op == static_cast<std::uint16_t>(op);
    return n;
  };
  auto j = base(8, 8, 1, 1);
  auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plain = parallel::build_step(sc, cm);
  // 16 layers x (2 forward + 2 backward) all-reduces, plus embedding and loss reductions.
  CHECK(count(plain.programs[0], network::CollectiveOp::all_reduce) >= 64);
  CHECK(count(plain.programs[0], network::CollectiveOp::reduce_scatter) == 0);
  j["parallel"]["sequence_parallel"] = true;
  auto sp = parallel::build_step(scenario(j), cm);
  CHECK(count(sp.programs[0], network::CollectiveOp::all_gather) >= 32);
  CHECK(count(sp.programs[0], network::CollectiveOp::reduce_scatter) >= 32);
}

TEST_CASE("scatter_gather_tensors_in_pipeline: 1/tp of each message, all-gathered over TP on arrival") {
  // tp 8 · pp 2 on two DGX H100: each stage is a node, so the pipeline messages cross InfiniBand.
  // Megatron-LM before Megatron-Core (Narayanan et al. 2021, section 4.1) sends each TP rank's 1/8 of
  // the hidden states and the receiver all-gathers the pieces over NVLink before its pass.
  auto j = base(16, 8, 2, 4);
  const auto whole = scenario(j);
  j["parallel"]["scatter_gather_tensors_in_pipeline"] = true;
  const auto scattered = scenario(j);
  hardware::ComputeModel cm(whole.cluster.gpu);
  const auto plan = parallel::build_step(scattered, cm);
  // One micro-batch of hidden states: seq 2048 x hidden 4096 in bf16.
  const std::int64_t message = 2048 * 4096 * 2;
  auto pp_bytes = [](const engine::Program& p, int stream) {
    std::set<std::int64_t> out;
    for (const auto& t : p.stream(stream)) out.insert(t.bytes);
    return out;
  };
  CHECK(pp_bytes(plan.programs[0], parallel::kPpSend) == std::set<std::int64_t>{message / 8});
  CHECK(pp_bytes(plan.programs[1], parallel::kPpRecv) == std::set<std::int64_t>{message / 8});
  // The last stage gathers each of the 4 activations it receives, the first each of the 4 gradients.
  auto gathers = [message](const engine::Program& p, const std::string& name) {
    int n = 0;
    for (const auto& t : p.stream(parallel::kTpComm)) {
      if (p.label_name(t.label) != name) continue;
      CHECK(t.op == static_cast<std::uint16_t>(network::CollectiveOp::all_gather));
      CHECK(t.bytes == message);
      ++n;
    }
    return n;
  };
  CHECK(gathers(plan.programs[1], "forward pipeline_gather_forward") == 4);
  CHECK(gathers(plan.programs[1], "backward pipeline_gather_backward") == 0);
  CHECK(gathers(plan.programs[0], "backward pipeline_gather_backward") == 4);
  CHECK(gathers(plan.programs[0], "forward pipeline_gather_forward") == 0);
  // An eighth of the bytes over one NIC per GPU, then an NVLink all-gather: the step gets shorter,
  // and the symmetric run stays exact.
  const auto fast = parallel::simulate_step(scattered);
  CHECK(fast.step_time_s < parallel::simulate_step(whole).step_time_s);
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(fast.step_time_s == parallel::simulate_step(scattered, all).step_time_s);
}

TEST_CASE("scatter_gather_tensors_in_pipeline is refused where Megatron-LM did not scatter") {
  auto j = base(16, 8, 2, 4);
  j["parallel"]["scatter_gather_tensors_in_pipeline"] = true;
  CHECK(refusal(j) == "accepted");
  const std::string path = "test.json: parallel.scatter_gather_tensors_in_pipeline: ";
  auto k = j;
  k["parallel"]["sequence_parallel"] = true;
  CHECK(refusal(k) == path + "needs sequence_parallel false (Megatron-LM sends the sequence-parallel shard as it is)");
  k = j;
  k["parallel"]["tp"] = 1;
  k["gpus"] = 2;
  CHECK(refusal(k) == path + "needs tp > 1 and pp > 1 (a message between tensor-parallel stages)");
  k = j;
  k["parallel"]["pp"] = 1;
  k["gpus"] = 8;
  CHECK(refusal(k) == path + "needs tp > 1 and pp > 1 (a message between tensor-parallel stages)");
  k = j;
  k["parallel"]["schedule"] = "gpipe";
  CHECK(refusal(k) == path + "needs schedule 1f1b or interleaved (the schedules of the Megatron-LM that scattered)");
  // DeepSpeed's pipeline engine partitions its messages so by default (PartitionedTensor): with
  // megatron-deepspeed an absent key is true where it applies, and false keeps the tensors whole.
  k = j;
  k["training"]["framework"] = "megatron-deepspeed";
  k["parallel"]["zero"] = 1;
  k["parallel"]["overlap_grad_reduce"] = false;
  CHECK(refusal(k) == "accepted");
  k["parallel"].erase("scatter_gather_tensors_in_pipeline");
  CHECK(scenario(k).parallel.scatter_gather_tensors_in_pipeline);
  k["parallel"]["scatter_gather_tensors_in_pipeline"] = false;
  CHECK_FALSE(scenario(k).parallel.scatter_gather_tensors_in_pipeline);
  k["parallel"]["sequence_parallel"] = true;
  k["parallel"].erase("scatter_gather_tensors_in_pipeline");
  CHECK_FALSE(scenario(k).parallel.scatter_gather_tensors_in_pipeline);
}

TEST_CASE("data parallelism: gradients are all-reduced, or reduce-scattered and re-gathered with ZeRO-1") {
  auto j = base(16, 8, 1, 2);
  auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  CHECK(labels(parallel::build_step(sc, cm).programs[0], parallel::kDpComm) ==
        std::vector<std::string>{"grad_all_reduce"});
  j["parallel"]["zero"] = 1;
  const auto rs = parallel::build_step(scenario(j), cm);
  CHECK(labels(rs.programs[0], parallel::kDpComm) ==
        std::vector<std::string>{"grad_reduce_scatter", "param_all_gather"});
  // DeepSpeed's BF16_Optimizer: the whole gradients all-reduced, then the updated shards gathered;
  // the same bytes go in, and the optimizer states stay sharded (the same memory).
  j["parallel"]["zero1_grad_reduce"] = "all_reduce";
  const auto ar = parallel::build_step(scenario(j), cm);
  CHECK(labels(ar.programs[0], parallel::kDpComm) == std::vector<std::string>{"grad_all_reduce", "param_all_gather"});
  CHECK(ar.programs[0].stream(parallel::kDpComm)[0].bytes == rs.programs[0].stream(parallel::kDpComm)[0].bytes);
  CHECK(ar.programs[0].initial_mem_bytes == rs.programs[0].initial_mem_bytes);
  j["parallel"]["zero"] = 0;
  CHECK_THROWS_WITH(scenario(j), Catch::Contains("parallel.zero1_grad_reduce: applies to zero 1 only"));
}

TEST_CASE("weight gradients are accumulated as the framework does it") {
  using workload::GradAccumulation;
  auto j = base(16, 2, 2, 16);
  CHECK(parallel::grad_accumulation(scenario(j)) == GradAccumulation::fused);  // Megatron's default
  j["training"]["gradient_accumulation_fusion"] = false;
  CHECK(parallel::grad_accumulation(scenario(j)) == GradAccumulation::main_grad_add);
  // Megatron-DeepSpeed: BF16_Optimizer under bf16 with the whole gradients all-reduced, autograd's
  // .grad otherwise (fp16, or ZeRO-1 reduce-scattering).
  auto d = base(16, 2, 2, 16);
  d["training"]["framework"] = "megatron-deepspeed";
  d["parallel"]["zero"] = 1;
  d["parallel"]["overlap_grad_reduce"] = false;
  CHECK(parallel::grad_accumulation(scenario(d)) == GradAccumulation::autograd);
  d["parallel"]["zero1_grad_reduce"] = "all_reduce";
  CHECK(parallel::grad_accumulation(scenario(d)) == GradAccumulation::fp32_buffer);
  d["training"]["precision"] = "fp16";
  CHECK(parallel::grad_accumulation(scenario(d)) == GradAccumulation::autograd);
  // The accumulation is work of the backward: the step takes longer than with fused accumulation.
  auto fused = base(16, 2, 2, 16);
  auto unfused = fused;
  unfused["training"]["gradient_accumulation_fusion"] = false;
  CHECK(parallel::simulate_step(scenario(unfused)).step_time_s > parallel::simulate_step(scenario(fused)).step_time_s);
}

TEST_CASE("a symmetric run (one rank per class) gives exactly the full run's step time and memory") {
  // Ranks that differ only in their TP, CP or DP coordinate run the same program at the same times,
  // so simulating one of each class must reproduce the full run to the picosecond.
  auto gpt = small_model();
  gpt["tied_embeddings"] = true;
  gpt["dropout"] = 0.1;
  for (auto [gpus, tp, pp, zero, sp] : {std::tuple{16, 2, 2, 0, false}, std::tuple{64, 4, 4, 1, true},
                                        std::tuple{32, 8, 2, 1, true}, std::tuple{16, 1, 1, 0, false}}) {
    auto j = base(gpus, tp, pp, 8 * (gpus / (tp * pp)));
    j["model"] = gpt;
    j["parallel"]["zero"] = zero;
    j["parallel"]["sequence_parallel"] = sp;
    const auto sc = scenario(j);
    parallel::BuildOptions all;
    all.all_ranks = true;
    const auto full = parallel::simulate_step(sc, all);
    const auto sym = parallel::simulate_step(sc);
    INFO("gpus " << gpus << " tp " << tp << " pp " << pp);
    CHECK(sym.ranks.size() == static_cast<std::size_t>(pp));
    CHECK(full.ranks.size() == static_cast<std::size_t>(gpus));
    CHECK(sym.step_time_s == full.step_time_s);
    CHECK(sym.mean.bubble_s == Approx(full.mean.bubble_s).epsilon(1e-12));
    CHECK(sym.memory[sym.peak_rank].peak_bytes == full.memory[full.peak_rank].peak_bytes);
    for (std::size_t i = 0; i < sym.ranks.size(); ++i) {
      const std::uint32_t c = sym.cluster_rank[i];
      CHECK(sym.memory[i].peak_bytes == full.memory[c].peak_bytes);
      CHECK(sym.ranks[i].compute_s == full.ranks[c].compute_s);
    }
  }
}

TEST_CASE("overlapping the DP gradient reduction with the last backward hides part of it") {
  // 8-way DP across nodes, distributed optimizer: reducing buckets while the last micro-batch's
  // backward runs cannot take longer than reducing everything afterwards, and exposes less.
  auto j = base(64, 8, 1, 16);
  j["parallel"]["zero"] = 1;
  const auto plain = parallel::simulate_step(scenario(j));
  j["parallel"]["overlap_grad_reduce"] = true;
  j["parallel"]["dp_bucket_mb"] = 100;
  const auto sc = scenario(j);
  const auto overlapped = parallel::simulate_step(sc);
  CHECK(overlapped.step_time_s < plain.step_time_s);
  CHECK(overlapped.mean.dp_exposed_s < plain.mean.dp_exposed_s);
  // Buckets of 100 MB of fp32 gradients = 25M parameters; a layer of this model holds ~201M / 8.
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  const std::int64_t params = plan.stages[0].params_per_rank;
  int buckets = 0;
  for (const auto& t : plan.programs[0].stream(parallel::kDpComm))
    buckets += plan.programs[0].label_name(t.label).rfind("grad_reduce_scatter bucket", 0) == 0;
  CHECK(buckets >= static_cast<int>(params / 25'000'000) - 1);
  CHECK(buckets <= static_cast<int>(params / 25'000'000) + 2);
  j["parallel"]["overlap_param_gather"] = true;
  const auto gathered = parallel::simulate_step(scenario(j));
  CHECK(gathered.step_time_s < overlapped.step_time_s);
}

TEST_CASE("TP communication overlap runs all-gathers and reduce-scatters beside their GEMMs") {
  // GPT-3-sized layers: each TP8 GEMM takes longer than its all-gather or reduce-scatter, so most of
  // the TP communication hides; what remains is the loss all-reduces and the output layer's gather.
  auto j = base(8, 8, 1, 4);
  j["model"] = {{"name", "wide"}, {"layers", 4},         {"hidden", 12288}, {"heads", 96},
                {"kv_heads", 96}, {"ffn_hidden", 49152}, {"vocab", 1024},   {"mlp", "gelu"}};
  j["parallel"]["sequence_parallel"] = true;
  const auto exposed = parallel::simulate_step(scenario(j));
  j["parallel"]["tp_comm_overlap"] = true;
  const auto overlapped = parallel::simulate_step(scenario(j));
  CHECK(overlapped.mean.tp_exposed_s < 0.5 * exposed.mean.tp_exposed_s);
  CHECK(overlapped.step_time_s < exposed.step_time_s);
  // Overlap cannot beat the compute alone.
  CHECK(overlapped.step_time_s >= overlapped.mean.compute_s);
}

TEST_CASE("symmetric runs stay exact with every overlap switched on") {
  auto j = base(64, 4, 4, 32);
  j["parallel"] = {{"tp", 4},
                   {"pp", 4},
                   {"zero", 1},
                   {"sequence_parallel", true},
                   {"tp_comm_overlap", true},
                   {"overlap_grad_reduce", true},
                   {"overlap_param_gather", true},
                   {"dp_bucket_mb", 50}};
  const auto sc = scenario(j);
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(parallel::simulate_step(sc).step_time_s == parallel::simulate_step(sc, all).step_time_s);
}

TEST_CASE("fp16 keeps fp16 gradients (16 bytes/param), bf16 fp32 ones (18 bytes/param), as Megatron does") {
  auto j = base(16, 1, 1, 16);
  const auto bf16 = parallel::simulate_step(scenario(j));
  j["training"]["precision"] = "fp16";
  const auto fp16 = parallel::simulate_step(scenario(j));
  const auto grads = [](const parallel::StepResult& r) {
    return r.memory[0].peak_breakdown_bytes[parallel::kGradients];
  };
  CHECK(grads(bf16) == 2 * grads(fp16));
  CHECK(fp16.mean.dp_exposed_s < bf16.mean.dp_exposed_s);  // half the bytes to all-reduce
}

TEST_CASE("interleaved 1F1B: with v chunks per rank the bubble shrinks to (p-1)/(v·m+p-1)") {
  // Each rank's m·v chunk passes cost (t_f + t_b)/v; the pipeline fills and drains over p - 1 of
  // them: bubble = (p-1)(t_f+t_b)/v out of (m + (p-1)/v)(t_f+t_b), i.e. (p-1)/(v·m + p - 1).
  // Stages are nearly equal (tiny vocabulary); embedding, head and messages explain the tolerance.
  for (auto [v, m] : {std::pair{2, 8}, std::pair{4, 8}, std::pair{2, 16}}) {
    auto j = base(4, 1, 4, m);
    j["parallel"]["schedule"] = "interleaved";
    j["parallel"]["virtual_stages"] = v;
    auto r = parallel::simulate_step(scenario(j));
    const double expected = 3.0 / static_cast<double>(v * m + 3);
    INFO("v " << v << " m " << m);
    CHECK(r.mean.bubble_s / r.step_time_s == Approx(expected).epsilon(0.12));
  }
}

TEST_CASE("GPipe holds every micro-batch in flight, 1F1B at most pp: their peaks differ by exactly that") {
  // Stage 0, no recompute: GPipe keeps m micro-batches of activations before the first backward,
  // 1F1B keeps pp of them.
  auto j = base(4, 1, 4, 8);
  const auto one_f_one_b = parallel::simulate_step(scenario(j));
  j["parallel"]["schedule"] = "gpipe";
  const auto sc = scenario(j);
  const auto gpipe = parallel::simulate_step(sc);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const std::int64_t per_mb =
      saved(workload::embedding_forward(sc.model, lc)) + 4 * saved(workload::layer_forward(sc.model, lc));
  CHECK(gpipe.memory[0].peak_breakdown_bytes[kActivations] == 8 * per_mb);
  CHECK(one_f_one_b.memory[0].peak_breakdown_bytes[kActivations] == 4 * per_mb);
  // Same work, same bubble share for equal stages: (p-1)/(m+p-1) in both.
  CHECK(gpipe.step_time_s == Approx(one_f_one_b.step_time_s).epsilon(0.02));
}

TEST_CASE("interleaving over two ranks, each the other's previous and next stage, runs and stays symmetric") {
  auto j = base(16, 2, 2, 16);
  j["parallel"]["schedule"] = "interleaved";
  j["parallel"]["virtual_stages"] = 4;
  const auto sc = scenario(j);
  parallel::BuildOptions all;
  all.all_ranks = true;
  const auto sym = parallel::simulate_step(sc);
  CHECK(sym.step_time_s == parallel::simulate_step(sc, all).step_time_s);
  CHECK(sym.step_time_s > 0);
}

TEST_CASE("ZeRO-2 shards gradients, ZeRO-3 weights too; ZeRO-3 gathers each layer and holds at most two") {
  // 16-way DP: gradients (4 B/param) shrink 16x with ZeRO-2, weights (2 B/param) too with ZeRO-3;
  // ZeRO-3's peak adds the gathered bf16 parameters of the running and the prefetched unit.
  auto j = base(16, 1, 1, 16);
  j["parallel"]["zero"] = 1;
  const auto sc = scenario(j);
  const auto z1 = parallel::simulate_step(sc);
  j["parallel"]["zero"] = 2;
  const auto z2 = parallel::simulate_step(scenario(j));
  j["parallel"]["zero"] = 3;
  const auto z3 = parallel::simulate_step(scenario(j));
  const std::int64_t layer = workload::layer_params_per_rank(sc.model, 1);
  const std::int64_t params =
      16 * layer + workload::embedding_params_per_rank(sc.model, 1) + workload::head_params_per_rank(sc.model, 1);
  auto at_peak = [](const parallel::StepResult& r, int c) {
    return r.memory[0].peak_breakdown_bytes[static_cast<std::size_t>(c)];
  };
  CHECK(at_peak(z1, parallel::kGradients) == 4 * params);
  CHECK(at_peak(z2, parallel::kGradients) == 4 * ((params + 15) / 16));
  CHECK(at_peak(z2, parallel::kWeights) == 2 * params);
  const std::int64_t gathered = at_peak(z3, parallel::kWeights) - 2 * ((params + 15) / 16);
  CHECK(gathered > 0);
  CHECK(gathered <= 2 * 2 * std::max(layer, workload::embedding_params_per_rank(sc.model, 1)));
  // The same compute; ZeRO-3's gathers and scatters run beside it layer by layer, where ZeRO-1's
  // reduce-scatter and all-gather of everything come after the backward and the optimizer.
  CHECK(z3.mean.compute_s == Approx(z1.mean.compute_s).epsilon(0.01));
  CHECK(z3.mean.dp_exposed_s < z1.mean.dp_exposed_s);
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(parallel::simulate_step(scenario(j), all).step_time_s == z3.step_time_s);
}

TEST_CASE("fsdp_prefetch false: every unit's all-gather is exposed and one gathered unit is held") {
  // ZeRO-3 over 16 GPUs (two DGX H100 nodes), one micro-batch. With prefetch only the first gather of
  // each pass is exposed (nothing runs before it); without, every unit's compute waits for its own
  // gather, in the forward and again in the backward. The units: 16 layers, the embedding and the
  // output layer's own parameters (the final norm; the tied embedding weight is the embedding's).
  auto j = base(16, 1, 1, 16);
  j["parallel"]["zero"] = 3;
  const auto sc = scenario(j);
  const auto pf = parallel::simulate_step(sc);
  j["parallel"]["fsdp_prefetch"] = false;
  const auto nopf = parallel::simulate_step(scenario(j));
  network::AnalyticalNetwork net(sc.cluster);
  std::vector<std::uint32_t> ranks(16);
  for (std::uint32_t r = 0; r < 16; ++r) ranks[r] = r;
  auto gather_s = [&](std::int64_t params) {
    return net.collective_time_s(network::CollectiveOp::all_gather, 2 * params, ranks);
  };
  const double layer = gather_s(workload::layer_params_per_rank(sc.model, 1));
  const double emb = gather_s(workload::embedding_params_per_rank(sc.model, 1));
  const double head = gather_s(workload::head_params_per_rank(sc.model, 1));
  // Without prefetch the forward waits for the embedding's, 16 layers' and the head's gathers, the
  // backward for the head's, 16 layers' and the embedding's. With prefetch the first unit of each
  // pass waits too (embedding forward, head backward), and so, nearly, does the unit after it, whose
  // gather had only that first unit's short compute (a 1024-word vocabulary) to hide behind: the
  // difference is 2 x 15 layers' gathers plus the embedding's and the head's, plus those two
  // computes' worth.
  const double lower = 2 * 15 * layer + head + emb;
  INFO("layer gather " << layer << " s, embedding " << emb << " s, head " << head << " s");
  CHECK(nopf.mean.compute_s == Approx(pf.mean.compute_s).epsilon(1e-9));
  CHECK(nopf.step_time_s - pf.step_time_s >= lower);
  CHECK(nopf.step_time_s - pf.step_time_s < lower + 2 * layer);
  // One gathered unit at a time instead of two.
  const std::int64_t shard =
      2 * ((workload::layer_params_per_rank(sc.model, 1) * 16 + workload::embedding_params_per_rank(sc.model, 1) +
            workload::head_params_per_rank(sc.model, 1) + 15) /
           16);
  const std::int64_t largest =
      2 * std::max(workload::layer_params_per_rank(sc.model, 1), workload::embedding_params_per_rank(sc.model, 1));
  CHECK(nopf.memory[0].peak_breakdown_bytes[parallel::kWeights] - shard <= largest);
  CHECK(pf.memory[0].peak_breakdown_bytes[parallel::kWeights] - shard > largest);
}

TEST_CASE("zero 2 per_unit (FSDP SHARD_GRAD_OP): each unit gathered once per forward, kept for its backward") {
  // 16-way DP, 2 micro-batches per step: SHARD_GRAD_OP gathers the 18 units (embedding, 16 layers,
  // output layer) before each micro-batch's forward (18 x 2 all-gathers on the FSDP stream), none in
  // the backward and none after the optimizer (ZeRO-2's one all-gather of everything is gone); the
  // reduce-scatters go unit by unit. Between steps the weights are sharded; by the end of the
  // forward every unit is whole beside its shard (FSDP keeps both), so the peak holds all the weights
  // plus the shard.
  auto j = base(16, 1, 1, 32);
  j["parallel"]["zero"] = 2;
  const auto after = parallel::simulate_step(scenario(j));
  j["parallel"]["zero2_param_gather"] = "per_unit";
  const auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  auto count = [&](std::uint8_t stream, network::CollectiveOp op) {
    int n = 0;
    for (const auto& t : plan.programs[0].stream(stream)) n += t.op == static_cast<std::uint16_t>(op);
    return n;
  };
  REQUIRE(sc.training.num_micro_batches == 2);
  CHECK(count(parallel::kDpGather, network::CollectiveOp::all_gather) == 18 * 2);
  CHECK(count(parallel::kDpComm, network::CollectiveOp::all_gather) == 0);
  CHECK(count(parallel::kDpComm, network::CollectiveOp::reduce_scatter) == 18 * 2);
  const std::int64_t params = plan.stages[0].params_per_rank;
  CHECK(plan.programs[0].initial_mem_bytes[parallel::kWeights] == 2 * ((params + 15) / 16));
  const auto per_unit = parallel::simulate_step(sc);
  CHECK(after.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params);
  CHECK(per_unit.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params + 2 * ((params + 15) / 16));
  CHECK(per_unit.mean.compute_s == Approx(after.mean.compute_s).epsilon(1e-9));
  // Without prefetch every forward waits for each unit's gather: the step is longer by at least
  // 2 x 16 layer gathers than with it, where only each pass's first unit waits.
  j["parallel"]["fsdp_prefetch"] = false;
  const auto waits = parallel::simulate_step(scenario(j));
  network::AnalyticalNetwork net(sc.cluster);
  std::vector<std::uint32_t> ranks(16);
  for (std::uint32_t r = 0; r < 16; ++r) ranks[r] = r;
  const double layer_gather =
      net.collective_time_s(network::CollectiveOp::all_gather, 2 * workload::layer_params_per_rank(sc.model, 1), ranks);
  CHECK(waits.step_time_s - per_unit.step_time_s >= 2 * 15 * layer_gather);
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(parallel::simulate_step(scenario(j), all).step_time_s == waits.step_time_s);
}

TEST_CASE("uneven pipeline stages: first and last stages take the layers given, the rest split evenly") {
  // 16 layers on 4 stages with 2 on the first and 2 on the last: the middle two get 6 each, and the
  // first stage (4 micro-batches in flight under 1F1B) keeps 4 x (embedding + 2 layers).
  auto j = base(4, 1, 4, 8);
  j["parallel"]["first_stage_layers"] = 2;
  j["parallel"]["last_stage_layers"] = 2;
  const auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  std::vector<std::int64_t> layers;
  for (const auto& st : plan.stages) layers.push_back(st.layers);
  CHECK(layers == std::vector<std::int64_t>{2, 6, 6, 2});
  const auto r = parallel::simulate_step(sc);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  CHECK(r.memory[0].peak_breakdown_bytes[kActivations] ==
        4 * (saved(workload::embedding_forward(sc.model, lc)) + 2 * saved(workload::layer_forward(sc.model, lc))));
}

TEST_CASE("recompute_layers: full recompute of only the first N layers lands between none and full") {
  auto j = base(8, 8, 1, 4);
  const auto none = parallel::simulate_step(scenario(j));
  j["training"]["recompute"] = "full";
  const auto full = parallel::simulate_step(scenario(j));
  j["training"]["recompute_layers"] = 8;  // half of the 16 layers
  const auto half = parallel::simulate_step(scenario(j));
  CHECK(none.step_time_s < half.step_time_s);
  CHECK(half.step_time_s < full.step_time_s);
  // Half the layers rerun their forward: the extra time is half of full recompute's.
  CHECK(half.step_time_s - none.step_time_s == Approx(0.5 * (full.step_time_s - none.step_time_s)).epsilon(0.05));
  CHECK(full.memory[0].peak_breakdown_bytes[kActivations] < half.memory[0].peak_breakdown_bytes[kActivations]);
  CHECK(half.memory[0].peak_breakdown_bytes[kActivations] < none.memory[0].peak_breakdown_bytes[kActivations]);
}

TEST_CASE("zb-h1: the schedule order of the reference ZB-H1 (deferred weight passes fill the tail)") {
  // pp 4, 6 micro-batches. Stage 1: 2 warm-up forwards, then 1 forward / input-gradient pair whose
  // weight pass waits, then 3 × (F, B, W), then 2 × (B, W), then the deferred W. The input pass
  // sends its gradient before the weight pass runs, so stage 0 receives all 6 gradients; stage 1
  // receives 6 activations and 6 gradients in 1F1B's order.
  auto j = base(4, 1, 4, 6);
  j["parallel"]["schedule"] = "zb-h1";
  auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plan = parallel::build_step(sc, cm);
  const std::string f = "recv_forward", b = "recv_backward";
  CHECK(labels(plan.programs[1], parallel::kPpRecv) == std::vector<std::string>{f, f, f, b, f, b, f, b, f, b, b, b});
  auto weight_passes = [&](const engine::Program& p) {
    int n = 0;
    for (const auto& t : p.stream(parallel::kCompute))
      if (p.label_name(t.label).rfind("weight_grad", 0) == 0) ++n;
    return n;
  };
  // One weight task per layer per micro-batch (4 layers a stage), plus the embedding's on stage 0
  // and the output layer's on stage 3.
  CHECK(weight_passes(plan.programs[1]) == 6 * 4);
  CHECK(weight_passes(plan.programs[0]) == 6 * 5);
  CHECK(weight_passes(plan.programs[3]) == 6 * 5);
}

TEST_CASE("zb-h1: a smaller bubble than 1f1b, (p-1)(t_F + t_B - t_W) instead of (p-1)(t_F + t_B + t_W)") {
  // With the backward split into its input pass (t_B) and weight pass (t_W), 1F1B idles every stage
  // (p-1)(t_F + t_B + t_W); ZB-H1 moves p-1 weight passes into that idle time and the critical path
  // of the cool-down runs input passes only: (p-1)(t_F + t_B - t_W) (Qi et al. 2023, §3.1). The
  // per-layer times come from the compute model; embedding, head and messages make the stages
  // slightly unequal, hence the tolerance.
  auto j = base(4, 1, 4, 8);
  const auto one_f_one_b = parallel::simulate_step(scenario(j));
  j["parallel"]["schedule"] = "zb-h1";
  const auto sc = scenario(j);
  const auto zb = parallel::simulate_step(sc);
  hardware::ComputeModel cm(sc.cluster.gpu);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  double t_f = 0, t_b = 0, t_w = 0;
  for (const auto& op : workload::layer_forward(sc.model, lc)) t_f += cm.time_s(op);
  for (const auto& op : workload::layer_backward(sc.model, lc)) (op.weight_grad ? t_w : t_b) += cm.time_s(op);
  const double layers = 4;  // per stage
  CHECK(one_f_one_b.mean.bubble_s == Approx(3 * layers * (t_f + t_b + t_w)).epsilon(0.1));
  CHECK(zb.mean.bubble_s == Approx(3 * layers * (t_f + t_b - t_w)).epsilon(0.1));
  CHECK(zb.step_time_s < one_f_one_b.step_time_s);
  // Same work: the step shrinks by exactly the bubble it saves.
  CHECK(one_f_one_b.step_time_s - zb.step_time_s == Approx(one_f_one_b.mean.bubble_s - zb.mean.bubble_s).epsilon(0.05));
}

TEST_CASE("zb-h1: the same peak memory as 1f1b, up to one layer's output gradients") {
  // Stage 0 runs its weight passes right after the input passes: its peak is 1F1B's (pp in-flight
  // micro-batches) plus the output gradients the first layer's input pass writes for its weight
  // pass. Later stages defer r weight passes, each holding the weight GEMMs' inputs and output
  // gradients (32·sbh per layer here, about what a forward saves), with p - r micro-batches
  // in flight: no stage exceeds stage 0 by more than a few percent.
  auto j = base(4, 1, 4, 8);
  const auto one_f_one_b = parallel::simulate_step(scenario(j));
  j["parallel"]["schedule"] = "zb-h1";
  const auto sc = scenario(j);
  const auto zb = parallel::simulate_step(sc);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  std::int64_t grad_outputs = 0;
  for (const auto& op : workload::layer_backward(sc.model, lc)) grad_outputs += op.grad_output_bytes;
  CHECK(grad_outputs == 18 * 2048 * 4096);  // dY of QKV 6sbh, projection 2sbh, fc1 8sbh, fc2 2sbh
  CHECK(zb.memory[0].peak_breakdown_bytes[kActivations] ==
        one_f_one_b.memory[0].peak_breakdown_bytes[kActivations] + grad_outputs);
  std::int64_t zb_max = 0, f1b_max = 0;
  for (const auto& m : zb.memory) zb_max = std::max(zb_max, m.peak_breakdown_bytes[kActivations]);
  for (const auto& m : one_f_one_b.memory) f1b_max = std::max(f1b_max, m.peak_breakdown_bytes[kActivations]);
  CHECK(static_cast<double>(zb_max) < 1.06 * static_cast<double>(f1b_max));
}

namespace {

// Llama-like layers (GQA, SwiGLU, flash attention), small vocabulary: layers dominate.
nlohmann::json cp_scenario(std::int64_t cp, std::int64_t seq) {
  return {{"model",
           {{"name", "gqa"},
            {"layers", 8},
            {"hidden", 4096},
            {"heads", 32},
            {"kv_heads", 8},
            {"ffn_hidden", 14336},
            {"vocab", 1024},
            {"mlp", "swiglu"}}},
          {"cluster", "dgx-h100"},
          {"gpus", 2 * cp},
          {"parallel", {{"tp", 2}, {"cp", cp}, {"sequence_parallel", true}}},
          {"training", {{"micro_batch", 1}, {"global_batch", 2}, {"seq_len", seq}}}};
}

int count(const engine::Program& p, int stream, const std::string& label) {
  int n = 0;
  for (const auto& t : p.stream(stream)) n += p.label_name(t.label) == label ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("context parallelism: ring attention passes K/V blocks cp-1 hops per layer and pass") {
  // cp 4, 8 layers, two micro-batches: per layer the forward sends its K/V block 3 times, the
  // backward K/V plus their gradients 3 times and the gradients home once; each block holds the
  // rank's s/cp tokens of K and V for its kv_heads/tp heads: 2 · (s/cp) · (8/2 · 128) · 2 bytes.
  const std::int64_t seq = 16384, cp = 4;
  auto sc = scenario(cp_scenario(cp, seq));
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plan = parallel::build_step(sc, cm);
  const auto& p = plan.programs[0];
  CHECK(count(p, parallel::kCpSend, "send_kv") == 2 * 8 * 3);
  CHECK(count(p, parallel::kCpSend, "send_kv_and_grad") == 2 * 8 * 3);
  CHECK(count(p, parallel::kCpSend, "send_kv_grad_home") == 2 * 8);
  CHECK(count(p, parallel::kCpRecv, "recv_kv") == 2 * 8 * 3);
  const std::int64_t block = 2 * (seq / cp) * (8 / 2 * 128) * 2;
  for (const auto& t : p.stream(parallel::kCpSend)) {
    const std::string name = p.label_name(t.label);
    CHECK(t.bytes == (name == "send_kv_and_grad" ? 2 * block : block));
  }
  // One simulated rank per CP rank (they exchange blocks), the same program for all of them.
  CHECK(plan.bindings.size() == static_cast<std::size_t>(cp));
  // The gradient reduction group spans DP × CP (here dp = 1: the 4 CP ranks).
  const auto all = parallel::simulate_step(sc, parallel::BuildOptions{true, std::nullopt});
  const auto sym = parallel::simulate_step(sc);
  CHECK(sym.step_time_s == all.step_time_s);
  CHECK(sym.memory[0].peak_bytes == all.memory[0].peak_bytes);
}

TEST_CASE("context parallelism: each rank holds 1/cp of the activations and does 1/cp of the attention") {
  // The same two sequences per DP rank, with and without cp = 4: layer activations are per token,
  // so a CP rank saves 1/4 of them; causal attention is balanced over the ranks (2·cp chunks), so
  // the attention FLOPs per rank are 1/4 too.
  const std::int64_t seq = 16384;
  workload::LayerConfig one, four;
  one.seq_len = four.seq_len = seq;
  one.tp = four.tp = 2;
  one.sequence_parallel = four.sequence_parallel = true;
  four.cp = 4;
  const auto sc = scenario(cp_scenario(4, seq));
  auto attention_flops = [&](const workload::LayerConfig& c) {
    double f = 0;
    for (const auto& op : workload::layer_forward(sc.model, c))
      if (op.kind == workload::OpKind::attention) f += op.flops;
    return f;
  };
  CHECK(attention_flops(four) == Approx(attention_flops(one) / 4));
  CHECK(saved(workload::layer_forward(sc.model, four)) * 4 == saved(workload::layer_forward(sc.model, one)));
  const auto with_cp = parallel::simulate_step(sc);
  const auto without = parallel::simulate_step(scenario(cp_scenario(1, seq)));
  CHECK(with_cp.memory[0].peak_breakdown_bytes[kActivations] * 4 ==
        Approx(without.memory[0].peak_breakdown_bytes[kActivations]).epsilon(0.01));
}

TEST_CASE("context parallelism: the ring hides behind attention at long sequences, not at short ones") {
  // A block step computes (s/cp)² attention on one rank while one K/V block (linear in s/cp) moves:
  // at 64k tokens the transfer is a small fraction of the step and stays hidden; at 2k tokens over
  // cp 8 the blocks are tiny, the per-message latency dominates and shows as exposed CP time.
  auto long_seq = parallel::simulate_step(scenario(cp_scenario(4, 65536)));
  auto short_seq = parallel::simulate_step(scenario(cp_scenario(8, 2048)));
  CHECK(long_seq.mean.cp_exposed_s / long_seq.step_time_s < 0.01);
  CHECK(short_seq.mean.cp_exposed_s / short_seq.step_time_s > long_seq.mean.cp_exposed_s / long_seq.step_time_s);
}

TEST_CASE("activation memory per layer on the timeline matches Korthikanti et al. for 22B-1T in all recompute modes") {
  // Korthikanti et al. 2022 (Eqs. 4-6), t = 8 with sequence parallelism, s = 2048, softmax attention
  // with dropout: per layer sbh/t·(34 + 5as/h) without recompute, 34·sbh/t with selective recompute,
  // 2·sbh/t (the layer input) with full recompute. Measured on the simulated timeline as the growth
  // of the activation peak when the model gains one layer (embedding, head and the recomputed
  // layer's working set cancel out). Table 3's configurations; micro-batch 4 for 22B, else 1.
  struct Config {
    const char* name;
    std::int64_t heads, hidden, micro_batch;
  };
  for (const Config& m : {Config{"22B", 64, 6144, 4}, Config{"175B", 96, 12288, 1}, Config{"530B", 128, 20480, 1},
                          Config{"1T", 160, 25600, 1}}) {
    const double s = 2048, b = static_cast<double>(m.micro_batch), h = static_cast<double>(m.hidden);
    const double a = static_cast<double>(m.heads), t = 8, sbh = s * b * h;
    for (const char* mode : {"none", "selective", "full"}) {
      INFO(m.name << " recompute " << mode);
      auto peak = [&](std::int64_t layers) {
        nlohmann::json j = {{"model",
                             {{"name", m.name},
                              {"layers", layers},
                              {"hidden", m.hidden},
                              {"heads", m.heads},
                              {"kv_heads", m.heads},
                              {"ffn_hidden", 4 * m.hidden},
                              {"vocab", 51200},
                              {"mlp", "gelu"},
                              {"dropout", 0.1}}},
                            {"cluster", "dgx-a100"},
                            {"gpus", 8},
                            {"parallel", {{"tp", 8}, {"sequence_parallel", true}}},
                            {"training",
                             {{"micro_batch", m.micro_batch},
                              {"global_batch", m.micro_batch},
                              {"seq_len", 2048},
                              {"attention", "softmax"},
                              {"recompute", mode}}}};
        return static_cast<double>(parallel::simulate_step(scenario(j)).memory[0].peak_breakdown_bytes[kActivations]);
      };
      const double per_layer = peak(3) - peak(2);
      const std::string r = mode;
      const double expected = r == "none"        ? sbh / t * (34 + 5 * a * s / h)
                              : r == "selective" ? 34 * sbh / t
                                                 : 2 * sbh / t;
      CHECK(per_layer == Approx(expected).epsilon(0.05));
    }
  }
}

TEST_CASE("uneven stages with the interleaved schedule: each stage's layers split over its chunks") {
  // 16 layers over pp 4 as 2 / 6 / 6 / 2 (first and last stages lighter, as for the embedding and
  // the output layer), 2 chunks per rank. The light stages wait on the heavy ones: they idle more.
  auto j = base(8, 2, 4, 8);
  j["parallel"]["schedule"] = "interleaved";
  j["parallel"]["virtual_stages"] = 2;
  j["parallel"]["first_stage_layers"] = 2;
  j["parallel"]["last_stage_layers"] = 2;
  const auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  CHECK(plan.stages[0].layers == 2);
  CHECK(plan.stages[1].layers == 6);
  CHECK(plan.stages[0].chunks == 2);
  const auto sym = parallel::simulate_step(sc);
  CHECK(sym.step_time_s == parallel::simulate_step(sc, parallel::BuildOptions{true, std::nullopt}).step_time_s);
  CHECK(sym.ranks[0].bubble_s > sym.ranks[1].bubble_s);
  // 3 layers on a stage cannot be split over 2 chunks.
  j["parallel"]["first_stage_layers"] = 3;
  j["parallel"]["last_stage_layers"] = 3;
  CHECK_THROWS_AS(scenario(j), util::InputError);
}

TEST_CASE("embedding and loss accounted in the pipeline split: first and last chunks one layer short") {
  // Megatron-Core's --account-for-embedding/loss-in-pipeline-split: 16 layers + embedding + loss = 18
  // slots over pp 3 x 2 chunks, 3 each; chunk 0 of stage 0 holds the embedding and 2 layers, the last
  // chunk of stage 2 the loss and 2 layers: stages of 5, 6 and 5 layers.
  auto j = base(24, 1, 3, 24);
  j["parallel"]["schedule"] = "interleaved";
  j["parallel"]["virtual_stages"] = 2;
  j["parallel"]["account_for_embedding_in_pipeline_split"] = true;
  j["parallel"]["account_for_loss_in_pipeline_split"] = true;
  const auto sc = scenario(j);
  CHECK(config::chunk_layers(sc, 0, 0) == 2);
  CHECK(config::chunk_layers(sc, 0, 1) == 3);
  CHECK(config::chunk_layers(sc, 1, 0) == 3);
  CHECK(config::chunk_layers(sc, 2, 1) == 2);
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  std::vector<std::int64_t> layers;
  for (const auto& st : plan.stages) layers.push_back(st.layers);
  CHECK(layers == std::vector<std::int64_t>{5, 6, 5});
  const std::int64_t layer = workload::layer_params_per_rank(sc.model, 1);
  CHECK(plan.stages[1].params_per_rank == 6 * layer);
  CHECK(plan.stages[0].params_per_rank == 5 * layer + workload::embedding_params_per_rank(sc.model, 1));
  const auto sym = parallel::simulate_step(sc);
  CHECK(sym.step_time_s == parallel::simulate_step(sc, parallel::BuildOptions{true, std::nullopt}).step_time_s);
  // 16 + 1 = 17 slots do not split over 6 chunks; and the keys need a pipeline.
  j["parallel"]["account_for_loss_in_pipeline_split"] = false;
  CHECK_THROWS_AS(scenario(j), util::InputError);
  auto flat = base(8, 1, 1, 8);
  flat["parallel"]["account_for_loss_in_pipeline_split"] = true;
  CHECK_THROWS_AS(scenario(flat), util::InputError);
}

TEST_CASE(
    "flow network: a step on an idle-enough fabric matches the analytical one; an oversubscribed spine slows DP") {
  // 32 GPUs (4 nodes, one leaf group per node) of pure data parallelism: the gradient all-reduce
  // crosses the spines. With full bisection the flow model gives the analytical step; with 1:4
  // leaf uplinks the all-reduce's bandwidth term is 4x longer and the step grows accordingly.
  nlohmann::json topo = nlohmann::json::parse(R"({
    "name": "h100-test", "gpu": "h100-sxm", "gpus_per_node": 8,
    "nvlink": {"allreduce_busbw_GBps": 480, "busbw_GBps": 370, "p2p_GBps": 380, "latency_us": 3.4, "nvls": true},
    "nic": {"per_node": 8, "busbw_GBps": 47, "latency_us": 14},
    "collective_base_latency_us": 8.4,
    "fabric": {"nodes_per_leaf": 1, "spines": 1, "oversubscription": 1}})");
  auto j = base(32, 1, 1, 32);
  j["cluster"] = topo;
  const auto analytical = parallel::simulate_step(scenario(j));
  j["network"] = "flow";
  const auto full = parallel::simulate_step(scenario(j));
  CHECK(full.step_time_s == Approx(analytical.step_time_s).epsilon(0.01));
  REQUIRE(full.network.has_value());
  CHECK(full.network->flows > 0);
  j["cluster"]["fabric"]["oversubscription"] = 4;
  const auto over = parallel::simulate_step(scenario(j));
  // The exposed all-reduce is almost all bandwidth term (GBs of fp32 gradients): 1:4 leaf uplinks
  // (47/4 GB/s per rail instead of 47) make it about 4 times longer.
  CHECK(over.step_time_s > full.step_time_s);
  CHECK(over.mean.dp_exposed_s / full.mean.dp_exposed_s == Approx(4).epsilon(0.1));
}

TEST_CASE("flow network in a symmetric run: one rank per class with its images' flows gives the all-ranks step") {
  // 64 GPUs, TP 4 x PP 2 x DP 8 on a 1:4 oversubscribed fabric of one node per leaf: TP rings stay
  // in the nodes, PP sends and DP rings cross the spines and contend there. The default run
  // simulates the 2 tp = 0, dp = 0 ranks and moves every message for all tp x dp = 32 images of
  // them, so the links carry what all 64 ranks send: the same flows, and the same step within 1%
  // of the run that simulates every rank.
  nlohmann::json topo = nlohmann::json::parse(R"({
    "name": "h100-test", "gpu": "h100-sxm", "gpus_per_node": 8,
    "nvlink": {"allreduce_busbw_GBps": 480, "busbw_GBps": 370, "p2p_GBps": 380, "latency_us": 3.4, "nvls": true},
    "nic": {"per_node": 8, "busbw_GBps": 47, "latency_us": 14},
    "collective_base_latency_us": 8.4,
    "fabric": {"nodes_per_leaf": 1, "spines": 2, "oversubscription": 4}})");
  auto j = base(64, 4, 2, 32);
  j["cluster"] = topo;
  j["network"] = "flow";
  const auto sc = scenario(j);
  const auto sym = parallel::simulate_step(sc);
  const auto all = parallel::simulate_step(sc, parallel::BuildOptions{true, std::nullopt});
  CHECK_FALSE(sym.all_ranks);
  CHECK(sym.ranks.size() == 2);
  CHECK(all.ranks.size() == 64);
  REQUIRE(sym.network.has_value());
  REQUIRE(all.network.has_value());
  CHECK(sym.network->flows == all.network->flows);
  CHECK(sym.step_time_s == Approx(all.step_time_s).epsilon(0.01));
  CHECK(sym.mean.dp_exposed_s == Approx(all.mean.dp_exposed_s).epsilon(0.05));
  // The spines are what slows it: the analytical network (no sharing) is faster.
  j["network"] = "analytical";
  CHECK(parallel::simulate_step(scenario(j)).step_time_s < 0.99 * sym.step_time_s);
}

TEST_CASE("collectives: a forced algorithm changes the collective's time, on both networks") {
  // 8 H100 of one node, TP 8 without overlap, micro-batch 4: the 64 MiB TP all-reduces run on NVLS
  // by default (below ~32 MiB NCCL's ring with LL128 would be faster); forcing the ring (370
  // instead of 480 GB/s) makes the exposed TP time longer: by 480/370 on the bandwidth term, less
  // overall since the fixed latency is the same. An algorithm that cannot run (tree is all-reduce
  // only, asked for all-gather) falls back to the default.
  auto j = base(8, 8, 1, 8);
  j["training"]["micro_batch"] = 4;
  const auto nvls = parallel::simulate_step(scenario(j));
  j["collectives"] = {{"all_reduce", "ring"}, {"all_gather", "tree"}};
  const auto ring = parallel::simulate_step(scenario(j));
  CHECK(ring.mean.tp_exposed_s > 1.08 * nvls.mean.tp_exposed_s);
  CHECK(ring.mean.tp_exposed_s < 480.0 / 370.0 * nvls.mean.tp_exposed_s);
  j["network"] = "flow";
  const auto ring_flow = parallel::simulate_step(scenario(j));
  CHECK(ring_flow.step_time_s == Approx(ring.step_time_s).epsilon(0.01));
  j["collectives"] = {{"all_reduce", "fastest"}};
  CHECK_THROWS_AS(scenario(j), util::InputError);
}

namespace {

nlohmann::json moe_scenario(std::int64_t gpus, std::int64_t tp, std::int64_t pp, std::int64_t ep, std::int64_t etp) {
  nlohmann::json model = {
      {"name", "moe"},        {"layers", 8},   {"hidden", 1024},  {"heads", 16},   {"kv_heads", 4},
      {"head_dim", 64},       {"vocab", 1024}, {"mlp", "swiglu"}, {"experts", 32}, {"experts_per_token", 4},
      {"moe_ffn_hidden", 512}};
  return {{"model", model},
          {"cluster", "dgx-h100"},
          {"gpus", gpus},
          {"parallel", {{"tp", tp}, {"pp", pp}, {"ep", ep}, {"etp", etp}, {"sequence_parallel", tp > 1}, {"zero", 1}}},
          {"training", {{"micro_batch", 1}, {"global_batch", 4 * gpus / (tp * pp)}, {"seq_len", 2048}}}};
}

}  // namespace

TEST_CASE("MoE: a symmetric run gives the full run's step time and memory, across nodes and with etp") {
  for (auto [gpus, tp, pp, ep, etp] : {std::tuple{16, 1, 1, 16, 1}, std::tuple{32, 2, 2, 4, 2},
                                       std::tuple{32, 2, 2, 8, 1}, std::tuple{16, 1, 2, 4, 1}}) {
    auto j = moe_scenario(gpus, tp, pp, ep, etp);
    j["parallel"]["overlap_grad_reduce"] = true;
    const auto sc = scenario(j);
    parallel::BuildOptions all;
    all.all_ranks = true;
    const auto full = parallel::simulate_step(sc, all);
    const auto sym = parallel::simulate_step(sc);
    INFO("gpus " << gpus << " tp " << tp << " pp " << pp << " ep " << ep << " etp " << etp);
    CHECK(sym.step_time_s == full.step_time_s);
    CHECK(sym.memory[sym.peak_rank].peak_bytes == full.memory[full.peak_rank].peak_bytes);
    CHECK(sym.mean.ep_exposed_s > 0);
    CHECK(sym.mean.ep_exposed_s == Approx(full.mean.ep_exposed_s).epsilon(1e-12));
  }
}

TEST_CASE("MoE memory: experts held E/ep per rank, their optimizer states sharded over expert dp") {
  // 16 GPUs, tp 1: dense parameters shard over dp 16, experts over 16/(etp·ep) = 4 with ep 4.
  const auto sc = scenario(moe_scenario(16, 1, 1, 4, 1));
  const auto r = parallel::simulate_step(sc);
  const std::int64_t dense = 8 * workload::layer_params_per_rank(sc.model, 1) +
                             workload::embedding_params_per_rank(sc.model, 1) +
                             workload::head_params_per_rank(sc.model, 1);
  const std::int64_t experts = 8 * 8 * 3 * 1024 * 512;  // 8 layers x 32/4 experts x 3·h·F
  CHECK(workload::layer_expert_params_per_rank(sc.model, 4, 1) * 8 == experts);
  CHECK(r.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * (dense + experts));
  CHECK(r.memory[0].peak_breakdown_bytes[parallel::kGradients] == 4 * (dense + experts));
  CHECK(r.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 12 * ((dense + 15) / 16 + (experts + 3) / 4));
}

TEST_CASE("MoE with Megatron FSDP (zero 3) and optim_grads (zero 2): experts sharded over expert dp") {
  // 16 GPUs, tp 1, ep 4: dense parameters shard over dp 16, experts over expert dp 4. 4 micro-batches.
  auto j = moe_scenario(16, 1, 1, 4, 1);
  const auto dense_of = [](const config::Scenario& sc) {
    return 8 * workload::layer_params_per_rank(sc.model, 1) + workload::embedding_params_per_rank(sc.model, 1) +
           workload::head_params_per_rank(sc.model, 1);
  };
  const std::int64_t experts = 8 * 8 * 3 * 1024 * 512, layer_experts = experts / 8;
  auto bytes_of = [](const engine::Program& p, int stream, const std::string& label) {
    std::vector<std::int64_t> out;
    for (const auto& t : p.stream(stream))
      if (p.label_name(t.label).rfind(label, 0) == 0) out.push_back(t.bytes);
    return out;
  };
  const auto r1 = parallel::simulate_step(scenario(j));
  j["parallel"]["zero"] = 2;
  const auto sc2 = scenario(j);
  const auto r2 = parallel::simulate_step(sc2);
  j["parallel"]["zero"] = 3;
  const auto sc3 = scenario(j);
  const auto r3 = parallel::simulate_step(sc3);
  const std::int64_t dense = dense_of(sc3);
  // zero 2: fp32 gradients sharded; zero 3: the 16-bit weights too (the peak adds a unit's gathers).
  CHECK(r2.memory[0].peak_breakdown_bytes[parallel::kGradients] == 4 * ((dense + 15) / 16 + (experts + 3) / 4));
  CHECK(r1.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * (dense + experts));
  CHECK(r3.memory[0].peak_breakdown_bytes[parallel::kWeights] > 2 * ((dense + 15) / 16 + (experts + 3) / 4));
  CHECK(r3.memory[0].peak_breakdown_bytes[parallel::kWeights] < r1.memory[0].peak_breakdown_bytes[parallel::kWeights]);
  CHECK(r3.memory[0].peak_bytes < r2.memory[0].peak_bytes);
  CHECK(r2.memory[0].peak_bytes < r1.memory[0].peak_bytes);
  hardware::ComputeModel cm(sc3.cluster.gpu);
  const auto plan3 = parallel::build_step(sc3, cm);
  const auto& p3 = plan3.programs[0];
  // zero 3: each layer's experts gathered (bf16, over expert dp) before its forward and its backward,
  // every micro-batch; each layer's expert gradients reduce-scattered every micro-batch; nothing
  // gathered after the optimizer.
  const auto gathers = bytes_of(p3, parallel::kDpGather, "fsdp_expert_param_all_gather");
  CHECK(gathers.size() == 8 * 4 * 2);
  for (const auto b : gathers) CHECK(b == 2 * layer_experts);
  const auto reduced = bytes_of(p3, parallel::kDpComm, "expert_grad_reduce_scatter");
  CHECK(reduced.size() == 8 * 4);
  for (const auto b : reduced) CHECK(b == 4 * layer_experts);
  CHECK(bytes_of(p3, parallel::kDpComm, "expert_param_all_gather").empty());
  // zero 2: the expert gradients reduce-scattered every micro-batch too, the updated experts
  // all-gathered after the optimizer.
  const auto plan2 = parallel::build_step(sc2, cm);
  std::int64_t reduced2 = 0;
  for (const auto b : bytes_of(plan2.programs[0], parallel::kDpComm, "expert_grad_reduce_scatter")) reduced2 += b;
  CHECK(reduced2 == 4 * 4 * experts);
  CHECK(bytes_of(plan2.programs[0], parallel::kDpComm, "expert_param_all_gather") ==
        std::vector<std::int64_t>{2 * experts});
  // A symmetric run stays exact.
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(parallel::simulate_step(sc3, all).step_time_s == r3.step_time_s);
}

TEST_CASE("MoE with distributed optimizer instances: experts sharded within an instance, all-reduced across") {
  // 16 GPUs, ep 4: expert dp 4 in 2 instances of 2, dense dp 16 in 2 of 8. Every expert
  // reduce-scatter (within the instance) is followed by an all-reduce of its shard across the
  // instances; the Adam states are sharded over the instance's ranks.
  auto j = moe_scenario(16, 1, 1, 4, 1);
  j["parallel"]["distributed_optimizer_instances"] = 2;
  const auto sc = scenario(j);
  const std::int64_t dense = 8 * workload::layer_params_per_rank(sc.model, 1) +
                             workload::embedding_params_per_rank(sc.model, 1) +
                             workload::head_params_per_rank(sc.model, 1);
  const std::int64_t experts = 8 * 8 * 3 * 1024 * 512;
  const auto r = parallel::simulate_step(sc);
  CHECK(r.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 12 * ((dense + 7) / 8 + (experts + 1) / 2));
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  const auto& p = plan.programs[0];
  std::int64_t scattered = 0, reduced = 0;
  for (const auto& t : p.stream(parallel::kDpComm)) {
    const std::string name = p.label_name(t.label);
    if (name.rfind("expert_grad_reduce_scatter", 0) == 0) scattered += t.bytes;
    if (name.rfind("expert_grad_all_reduce_across_instances", 0) == 0) reduced += t.bytes;
  }
  CHECK(scattered == 4 * experts);  // fp32 gradients, once a step (no overlap: one bucket)
  CHECK(reduced == 4 * ((experts + 1) / 2));
  parallel::BuildOptions all;
  all.all_ranks = true;
  CHECK(parallel::simulate_step(sc, all).step_time_s == r.step_time_s);
  j["parallel"]["distributed_optimizer_instances"] = 8;  // divides dp 16, not expert dp 4
  CHECK(refusal(j) ==
        "test.json: parallel.distributed_optimizer_instances: 8 does not divide the 4 expert data-parallel ranks "
        "(tp*cp*dp/(ep*etp) = 1*1*16/(4*1)) the experts' optimizer is sharded over");
}

TEST_CASE("MoE: token dispatch is slower across nodes than inside one (ep 16 vs ep 8 on the same work)") {
  // Per rank the same tokens and expert FLOPs; ep 16 spans two 8-GPU nodes, so half of every
  // all-to-all crosses the NICs. Its rank holds 2 of the 32 experts where ep 8's holds 4: each of the
  // 6 grouped GEMMs of a layer (fc1, fc2; their data and weight gradients) launches 2 GEMMs fewer, each
  // with a launch and the fixed per-GEMM cost, over 8 layers and 4 micro-batches.
  const auto sc_inside = scenario(moe_scenario(16, 1, 1, 8, 1));
  const auto inside = parallel::simulate_step(sc_inside);
  const auto across = parallel::simulate_step(scenario(moe_scenario(16, 1, 1, 16, 1)));
  CHECK(across.mean.ep_exposed_s > 2 * inside.mean.ep_exposed_s);
  const hardware::GpuSpec& g = sc_inside.cluster.gpu;
  const double fewer_gemms_s = 8 * 4 * 6 * 2 * (g.launch_s + g.gemm_overhead_s);
  CHECK(across.mean.compute_s == Approx(inside.mean.compute_s - fewer_gemms_s).epsilon(0.02));
}

TEST_CASE("MoE on the flow network: the symmetric run moves every all-to-all pair and matches all ranks") {
  // 16 GPUs over two nodes, ep 16: every token all-to-all crosses the NICs. The symmetric run
  // simulates one rank and moves its images' all-to-alls too (each source's pairs as one flow per
  // destination node), so it carries the flows of all 16 ranks and gives the all-ranks step; on an
  // idle fabric it agrees with the analytical network.
  auto j = moe_scenario(16, 1, 1, 16, 1);
  j["training"]["global_batch"] = 32;
  j["network"] = "flow";
  const auto sc = scenario(j);
  const auto sym = parallel::simulate_step(sc);
  const auto all = parallel::simulate_step(sc, parallel::BuildOptions{true, std::nullopt});
  REQUIRE(sym.network.has_value());
  REQUIRE(all.network.has_value());
  CHECK(sym.ranks.size() == 1);
  CHECK(sym.network->flows == all.network->flows);
  CHECK(sym.step_time_s == Approx(all.step_time_s).epsilon(0.01));
  CHECK(sym.mean.ep_exposed_s > 0);
  j["network"] = "analytical";
  CHECK(parallel::simulate_step(scenario(j)).step_time_s == Approx(sym.step_time_s).epsilon(0.05));
}

TEST_CASE("MoE with context parallelism: expert groups span CP ranks, the symmetric run stays exact") {
  // tp 2 x cp 2 x dp 8 = 32 ranks; etp 2 x ep 8 folds over them, so each EP group holds ranks of
  // both CP positions (two simulated ranks meet in its all-to-alls).
  auto j = moe_scenario(32, 2, 1, 8, 2);
  j["parallel"]["cp"] = 2;
  j["training"]["global_batch"] = 32;
  const auto sc = scenario(j);
  parallel::BuildOptions all;
  all.all_ranks = true;
  const auto full = parallel::simulate_step(sc, all);
  const auto sym = parallel::simulate_step(sc);
  CHECK(sym.ranks.size() == 2);
  CHECK(sym.step_time_s == full.step_time_s);
  CHECK(sym.memory[sym.peak_rank].peak_bytes == full.memory[full.peak_rank].peak_bytes);
  CHECK(sym.mean.cp_exposed_s == Approx(full.mean.cp_exposed_s).epsilon(1e-12));
}

namespace {

// A DeepSeek-like model: MLA, the first 2 of 7 layers dense, one multi-token prediction module,
// placed by a pipeline layout over pp 2 x 2 virtual stages (Et|tt|tt|tmL: 1, 2, 2 and 2 layers).
nlohmann::json mla_scenario(std::int64_t gpus, std::int64_t tp, std::int64_t ep) {
  nlohmann::json model = {{"name", "mla"},           {"layers", 7},
                          {"hidden", 1024},          {"heads", 16},
                          {"head_dim", 64},          {"q_lora_rank", 256},
                          {"kv_lora_rank", 128},     {"qk_rope_head_dim", 32},
                          {"first_dense_layers", 2}, {"ffn_hidden", 2048},
                          {"experts", 16},           {"experts_per_token", 4},
                          {"moe_ffn_hidden", 256},   {"shared_expert_ffn_hidden", 256},
                          {"mtp_layers", 1},         {"vocab", 1024},
                          {"mlp", "swiglu"}};
  return {{"model", model},
          {"cluster", "dgx-h100"},
          {"gpus", gpus},
          {"parallel",
           {{"tp", tp},
            {"pp", 2},
            {"ep", ep},
            {"etp", 1},
            {"sequence_parallel", tp > 1},
            {"zero", 1},
            {"schedule", "interleaved"},
            {"virtual_stages", 2},
            {"pipeline_layout", "Et|tt|tt|ttmL"},
            {"overlap_grad_reduce", true},
            {"overlap_param_gather", true}}},
          {"training", {{"micro_batch", 1}, {"global_batch", 4 * gpus / (tp * 2)}, {"seq_len", 2048}}}};
}

}  // namespace

TEST_CASE("MLA, dense first layers and MTP under a pipeline layout: symmetric runs equal all ranks") {
  for (auto [gpus, tp, ep] : {std::tuple{16, 1, 8}, std::tuple{32, 2, 8}}) {
    const auto sc = scenario(mla_scenario(gpus, tp, ep));
    parallel::BuildOptions all;
    all.all_ranks = true;
    const auto full = parallel::simulate_step(sc, all);
    const auto sym = parallel::simulate_step(sc);
    INFO("gpus " << gpus << " tp " << tp << " ep " << ep);
    CHECK(sym.step_time_s == full.step_time_s);
    CHECK(sym.memory[sym.peak_rank].peak_bytes == full.memory[full.peak_rank].peak_bytes);
    CHECK(sym.mean.ep_exposed_s == Approx(full.mean.ep_exposed_s).epsilon(1e-12));
  }
}

TEST_CASE("MLA model: each stage holds its layers' parameters by kind, the MTP module and a shared embedding") {
  // pp 2 x 2 chunks, layout Et|tt|tt|ttmL: stage 0 holds virtual stages 0 and 2 (layers 0; 3, 4),
  // stage 1 virtual stages 1 and 3 (layers 1, 2; 5, 6 and the MTP module). Layers 0 and 1 are dense.
  const auto sc = scenario(mla_scenario(16, 1, 8));
  const auto& m = sc.model;
  const std::int64_t moe_layer = workload::layer_params_per_rank(m, 1);
  const std::int64_t dense_layer = workload::layer_params_per_rank(m.dense_variant(), 1);
  const std::int64_t experts = workload::layer_expert_params_per_rank(m, 8, 1);
  const std::int64_t emb = workload::embedding_params_per_rank(m, 1);
  const std::int64_t head = workload::head_params_per_rank(m, 1);
  const std::int64_t mtp = workload::mtp_params_per_rank(m, 1) + moe_layer;
  CHECK(dense_layer > moe_layer);  // the 2048-wide dense MLP against the shared expert and router
  // MTP: three RMSNorms of h and the 2h x h projection.
  CHECK(workload::mtp_params_per_rank(m, 1) == 3 * 1024 + 2 * 1024 * 1024);
  const auto plan = parallel::build_step(sc, hardware::ComputeModel(sc.cluster.gpu));
  CHECK(plan.stages[0].params_per_rank == dense_layer + 2 * moe_layer + emb);
  CHECK(plan.stages[0].expert_params_per_rank == 2 * experts);
  // The last stage keeps its own embedding for the MTP module's tokens (Megatron's shared embedding).
  CHECK(plan.stages[1].params_per_rank == dense_layer + 3 * moe_layer + head + mtp + emb);
  CHECK(plan.stages[1].expert_params_per_rank == 4 * experts);
  // Every stage's parameters, less the duplicated embedding, plus all routed experts of the 5 MoE
  // layers and the MTP layer: the model's total.
  CHECK(plan.stages[0].params_per_rank + plan.stages[1].params_per_rank - emb + 6 * m.expert_params_per_layer() ==
        m.total_params());
}

TEST_CASE("selective recompute modules: mla_up_proj reruns the up projections and drops Q, K, V") {
  // One GPU, the MLA model above without pipelining: 2 micro-batches through 7 layers (2 dense).
  auto j = mla_scenario(1, 1, 1);
  j["parallel"] = {{"tp", 1}, {"pp", 1}, {"ep", 1}};
  j["training"]["global_batch"] = 2;
  j["training"]["recompute"] = "selective";
  const auto base_sc = scenario(j);
  j["training"]["recompute_modules"] = {"core_attn", "mla_up_proj"};
  const auto mla_sc = scenario(j);
  CHECK(mla_sc.training.recompute_modules == (workload::kRecomputeCoreAttn | workload::kRecomputeMlaUpProj));

  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const auto fwd = workload::layer_forward(mla_sc.model, lc);
  std::vector<std::string> rerun;
  std::int64_t dropped = 0;
  double rerun_s = 0;
  const hardware::ComputeModel compute(mla_sc.cluster.gpu);
  for (const auto& op : fwd) {
    if (op.rerun & workload::kRecomputeMlaUpProj) {
      rerun.push_back(op.name);
      rerun_s += compute.time_s(op);
    }
    if (op.discards & workload::kRecomputeMlaUpProj) dropped += op.saved_bytes;
  }
  CHECK(rerun == std::vector<std::string>{"q_latent_rmsnorm", "kv_latent_rmsnorm", "q_up_proj", "kv_up_proj",
                                          "mla_rotary_assemble"});
  // Q and K of 16 heads x (64 + 32) and V of 16 x 64, bf16, for 2048 tokens.
  CHECK(dropped == 2048 * 16 * (2 * 96 + 64) * 2);
  // The same ops in dense and MoE layers; one GPU runs them on the critical path once more per layer
  // and micro-batch.
  const auto base = parallel::simulate_step(base_sc);
  const auto mla = parallel::simulate_step(mla_sc);
  CHECK(mla.step_time_s - base.step_time_s == Approx(2 * 7 * rerun_s).epsilon(1e-6));
  // The activation peak falls in the output layers' backward (the MTP module's logits and their
  // gradient), after every layer's forward and before any layer's recompute: all 7 layers' Q, K, V
  // are dropped there. (The MTP module's own layer keeps its saved tensors.)
  const auto act = [](const parallel::StepResult& r) {
    return r.memory[r.peak_rank].peak_breakdown_bytes[parallel::kActivations];
  };
  CHECK(act(base) - act(mla) == 7 * dropped);
}

TEST_CASE("selective recompute modules: moe_act drops the experts' fc2 input, a checkpointed MoE keeps its input") {
  auto j = mla_scenario(1, 1, 1);
  j["parallel"] = {{"tp", 1}, {"pp", 1}, {"ep", 1}};
  j["training"]["global_batch"] = 2;
  j["training"]["recompute"] = "selective";
  j["training"]["recompute_modules"] = {"moe_act"};
  const auto sc = scenario(j);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  lc.recompute_modules = sc.training.recompute_modules;
  const auto fwd = workload::layer_forward(sc.model, lc);
  std::int64_t dropped = 0;
  for (const auto& op : fwd) {
    if (op.discards & workload::kRecomputeMoeAct) {
      CHECK(op.name == "experts_fc2");
      dropped += op.saved_bytes;
    }
    if (op.rerun & workload::kRecomputeMoeAct) CHECK(op.name == "experts_swiglu");
  }
  // 2048 tokens x 4 experts each, 256 wide, bf16.
  CHECK(dropped == 2048 * 4 * 256 * 2);
  // moe: everything from the pre-MLP norm's output on runs again; the checkpoint keeps that input.
  lc.recompute_modules = workload::kRecomputeMoe;
  const auto moe_fwd = workload::layer_forward(sc.model, lc);
  std::int64_t kept = 0, moe_saved = 0;
  for (const auto& op : moe_fwd) {
    if (op.name == "moe_checkpoint_input") kept = op.saved_bytes;
    if (op.discards & workload::kRecomputeMoe) moe_saved += op.saved_bytes;
  }
  CHECK(kept == 2048 * 1024 * 2);
  // What the MoE MLP's ops keep, by hand (bf16; 2048 tokens, 4 copies each = 8192 expert rows): the
  // router's input and fp32 probabilities over 16 experts, the experts' fc1 input (h 1024), the
  // SwiGLU's input (2 x 256) with each row's fp32 weight, fc2's input (256), and the shared expert's
  // SwiGLU input (2 x 256) and fc2 input (256) (its fc1 shares the router's input).
  CHECK(moe_saved == 2048 * 1024 * 2 + 2048 * 16 * 4 + 8192 * 1024 * 2 + (8192 * 512 * 2 + 8192 * 4) + 8192 * 256 * 2 +
                         2048 * 512 * 2 + 2048 * 256 * 2);
  // Scenario errors: one line each.
  auto error = [&](nlohmann::json training) {
    auto k = j;
    k["training"] = training;
    try {
      scenario(k);
    } catch (const util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json t = j["training"];
  t["recompute"] = "full";
  CHECK(error(t) == "test.json: training.recompute_modules: applies to \"recompute\": \"selective\" only");
  t["recompute"] = "selective";
  t["recompute_modules"] = {"moe_act", "attn"};
  CHECK(error(t) ==
        "test.json: training.recompute_modules[1]: unknown module \"attn\" (expected one of: "
        "core_attn, layernorm, mla_up_proj, mlp, moe, moe_act, shared_experts)");
  t["recompute_modules"] = {"mlp", "mlp"};
  CHECK(error(t) == "test.json: training.recompute_modules[1]: \"mlp\" is listed twice");
  t["recompute_modules"] = nlohmann::json::array();
  CHECK(error(t) == "test.json: training.recompute_modules: must name at least one module");
}

TEST_CASE("selective recompute modules a model lacks are refused on their path") {
  auto j = base(8, 8, 1, 8);
  j["training"]["recompute"] = "selective";
  j["training"]["recompute_modules"] = {"core_attn", "mla_up_proj"};
  try {
    scenario(j);
    FAIL("accepted mla_up_proj on a model without MLA");
  } catch (const util::InputError& e) {
    CHECK(std::string(e.what()) ==
          "test.json: training.recompute_modules: \"mla_up_proj\" needs multi-head "
          "latent attention (kv_lora_rank) or DeepSeek V4's attention (compress_ratios)");
  }
  j["training"]["recompute_modules"] = {"core_attn", "mlp"};
  CHECK(parallel::simulate_step(scenario(j)).step_time_s > 0);
}

namespace {

// One GPU of a DGX H100 whose host link is `host_GBps` (the topology inline), 8 layers of the small
// model, one micro-batch, the first `offload` layers' activations offloaded.
nlohmann::json offload_scenario(double host_GBps, std::int64_t offload) {
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/topologies/dgx-h100.json");
  nlohmann::json cluster = nlohmann::json::parse(in);
  cluster["host_link_GBps"] = host_GBps;
  auto j = base(1, 1, 1, 1);
  j["cluster"] = cluster;
  j["model"]["layers"] = 8;
  j["training"]["cpu_offload_layers"] = offload;
  return j;
}

}  // namespace

TEST_CASE("activation offloading: a slow host link stalls the forward and the backward as the handler's windows say") {
  // 8 layers, 4 offloaded: the windows end at layers 1, 3, 5, 7. Each copy takes c = S / bandwidth
  // (S: one layer's saved bytes), longer than two layers' forward (f) or backward (b), so:
  // forward: copy 0 runs from the end of layer 0; the forward waits at the end of layer 1 (c - f
  // idle), then copy k runs beside layers 2k, 2k+1 and the forward waits c - 2f more, three times:
  // 4c - 7f. Backward: before layer 7 reload 3 starts; before layers 5, 3, 1 the backward waits
  // for the previous reload (c - 2b each) and starts the next; layer 0 waits for reload 0, which
  // ran beside layer 1 alone (c - b): 4c - 7b.
  const auto plain = scenario(offload_scenario(5, 0));
  const auto slow = scenario(offload_scenario(5, 4));
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const auto fwd = workload::layer_forward(slow.model, lc);
  const auto bwd = workload::layer_backward(slow.model, lc);
  const hardware::ComputeModel compute(slow.cluster.gpu);
  double f = 0, b = 0;
  for (const auto& op : fwd) f += compute.time_s(op);
  for (const auto& op : bwd) b += compute.time_s(op);
  const double c = static_cast<double>(saved(fwd)) / 5e9;
  REQUIRE(c > 2 * b);
  REQUIRE(c > 2 * f);
  const auto base_r = parallel::simulate_step(plain);
  const auto r = parallel::simulate_step(slow);
  CHECK(r.step_time_s - base_r.step_time_s == Approx(8 * c - 7 * f - 7 * b).epsilon(1e-6));
  CHECK(r.mean.offload_exposed_s == Approx(8 * c - 7 * f - 7 * b).epsilon(1e-6));
  CHECK(base_r.mean.offload_exposed_s == 0);
}

TEST_CASE("activation offloading: the peak holds the layers not offloaded and the first reload") {
  // A fast link: the copies never stall. With n of 8 layers offloaded the forward has freed layers
  // 0..n-1 when it ends, and the backward of layer 7 starts by reloading layer n-1: 9 - n layers
  // are held there, the peak once enough layers are offloaded (without offloading, the output
  // layer's backward holds all 8 and peaks a little higher than layer 7's). So offloading 4 rather
  // than 2 layers lowers the peak by exactly two layers, and no offloading peaks at least three
  // layers above 4.
  const auto plain = scenario(offload_scenario(1000, 0));
  const auto two = scenario(offload_scenario(1000, 2));
  const auto fast = scenario(offload_scenario(1000, 4));
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const std::int64_t layer = saved(workload::layer_forward(fast.model, lc));
  const auto base_r = parallel::simulate_step(plain);
  const auto two_r = parallel::simulate_step(two);
  const auto r = parallel::simulate_step(fast);
  const auto act = [](const parallel::StepResult& x) {
    return x.memory[x.peak_rank].peak_breakdown_bytes[kActivations];
  };
  CHECK(act(two_r) - act(r) == 2 * layer);
  // Host memory: one micro-batch's 4 offloaded layers.
  CHECK(r.host_offload_bytes == 4 * layer);
  CHECK(base_r.host_offload_bytes == 0);
  CHECK(act(base_r) - act(r) > 3 * layer);
  // The copies hide behind the layers' compute (each at 1000 GB/s is far shorter than a layer).
  CHECK(r.step_time_s == Approx(base_r.step_time_s).epsilon(1e-9));
  // The program: 4 copies out, 4 back, on the host-copy stream.
  hardware::ComputeModel cm(fast.cluster.gpu);
  const auto plan = parallel::build_step(fast, cm);
  CHECK(labels(plan.programs[0], parallel::kHostCopy) ==
        std::vector<std::string>{"offload_to_host layer 0", "offload_to_host layer 1", "offload_to_host layer 2",
                                 "offload_to_host layer 3", "reload_from_host layer 3", "reload_from_host layer 2",
                                 "reload_from_host layer 1", "reload_from_host layer 0"});
}

TEST_CASE("activation offloading is refused where Megatron-Core refuses it") {
  auto j = offload_scenario(50, 8);
  CHECK(refusal(j) == "test.json: training.cpu_offload_layers: 8 must be less than the model's 8 layers");
  j = base(2, 1, 2, 2);
  j["training"]["cpu_offload_layers"] = 2;
  CHECK(refusal(j) ==
        "test.json: training.cpu_offload_layers: needs pp 1, got 2 (Megatron-Core has no pipeline parallelism with "
        "CPU offloading)");
  j = offload_scenario(50, 2);
  j["training"]["recompute"] = "full";
  CHECK(refusal(j) ==
        "test.json: training.cpu_offload_layers: needs \"recompute\": \"none\" (Megatron-Core: CPU offloading does "
        "not work with activation recomputation)");
  j = offload_scenario(50, 2);
  j["cluster"].erase("host_link_GBps");
  CHECK(refusal(j) ==
        "test.json: training.cpu_offload_layers: the topology \"dgx-h100\" states no host_link_GBps (GPU-host copy "
        "bandwidth)");
  j = offload_scenario(50, 2);
  j["parallel"]["schedule"] = "gpipe";
  CHECK(refusal(j) ==
        "test.json: training.cpu_offload_layers: needs schedule 1f1b (each micro-batch's forward followed by its "
        "backward)");
  j = offload_scenario(50, -1);
  CHECK(refusal(j).rfind("test.json: training.cpu_offload_layers: ", 0) == 0);
}

TEST_CASE("moe_a2a_overlap: merged forward/backward pairs hide every paired all-to-all behind the other's compute") {
  // pp 1, 8 GPUs of one node, ep 8, 4 micro-batches of 8 MoE layers. Without the overlap every
  // token all-to-all is exposed: m passes each way, each layer with the same four all-to-alls
  // (A in all per micro-batch), so EP exposure is m·A. Combined 1F1B runs the first forward alone,
  // then m - 1 merged steps (forward of micro-batch k + 1 with backward of k), then the last
  // backward alone. With experts 4096 wide every all-to-all is shorter than the compute it is
  // paired with, so only the lone first forward's and last backward's all-to-alls stay exposed, one
  // micro-batch's worth: A. The step shortens by the (m - 1)·A hidden.
  auto j = moe_scenario(8, 1, 1, 8, 1);
  j["model"]["moe_ffn_hidden"] = 4096;
  const auto plain_sc = scenario(j);
  j["parallel"]["moe_a2a_overlap"] = true;
  const auto sc = scenario(j);
  REQUIRE(sc.training.num_micro_batches == 4);
  const auto plain = parallel::simulate_step(plain_sc);
  const auto ov = parallel::simulate_step(sc);
  const double a = plain.mean.ep_exposed_s / 4;
  REQUIRE(a > 0);
  CHECK(ov.mean.ep_exposed_s == Approx(a).epsilon(1e-6));
  CHECK(plain.step_time_s - ov.step_time_s == Approx(3 * a).epsilon(1e-6));
  CHECK(ov.mean.compute_s == Approx(plain.mean.compute_s).epsilon(1e-9));
  // The extra warm-up forward holds a second micro-batch in flight, but a merged step frees the
  // backward's layers as its forward fills its own, one layer behind: the peak rises by less than
  // two layers' activations.
  const auto act = [](const parallel::StepResult& x) {
    return x.memory[x.peak_rank].peak_breakdown_bytes[kActivations];
  };
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  lc.ep = 8;
  lc.etp = 1;
  const std::int64_t layer = saved(workload::layer_forward(sc.model, lc));
  CHECK(act(ov) > act(plain));
  CHECK(act(ov) - act(plain) < 2 * layer);
  // The program: F, then three merged steps, then B, with the same all-to-alls. On the
  // communication stream a merged step runs, per layer pair, the backward combine, the forward
  // dispatch, the backward dispatch and the forward combine (schedule_layer_1f1b's order).
  hardware::ComputeModel cm(sc.cluster.gpu);
  const auto plan = parallel::build_step(sc, cm);
  const auto plain_plan = parallel::build_step(plain_sc, cm);
  CHECK(plan.programs[0].stream(parallel::kEpComm).size() == plain_plan.programs[0].stream(parallel::kEpComm).size());
  const std::string fd = "forward moe_dispatch_all_to_all", fc = "forward moe_combine_all_to_all",
                    bc = "backward moe_combine_grad_all_to_all", bd = "backward moe_dispatch_grad_all_to_all";
  std::vector<std::string> expected;
  for (int l = 0; l < 8; ++l) expected.insert(expected.end(), {fd, fc});  // the first forward alone
  for (int step = 0; step < 3; ++step)
    for (int l = 0; l < 8; ++l) expected.insert(expected.end(), {bc, fd, bd, fc});
  for (int l = 0; l < 8; ++l) expected.insert(expected.end(), {bc, bd});  // the last backward alone
  CHECK(labels(plan.programs[0], parallel::kEpComm) == expected);
}

TEST_CASE("moe_a2a_overlap with the interleaved schedule: runs, symmetric equals all ranks, and is faster") {
  auto j = moe_scenario(16, 1, 2, 8, 1);
  j["model"]["moe_ffn_hidden"] = 4096;
  j["parallel"]["schedule"] = "interleaved";
  j["parallel"]["virtual_stages"] = 2;
  j["training"]["global_batch"] = 32;
  const auto plain = parallel::simulate_step(scenario(j));
  j["parallel"]["moe_a2a_overlap"] = true;
  const auto sc = scenario(j);
  parallel::BuildOptions all;
  all.all_ranks = true;
  const auto sym = parallel::simulate_step(sc);
  const auto full = parallel::simulate_step(sc, all);
  CHECK(sym.step_time_s == full.step_time_s);
  CHECK(sym.step_time_s < plain.step_time_s);
  // pp 2 · vp 2 with 4 micro-batches: 8 passes each way per rank. With the extra warm-up forward
  // stage 0 runs (2·1 + 1·2 + 1) = 5 forwards alone, stage 1 (0 + 2 + 1) = 3; the rest pair up, and
  // as many backwards run alone at the end. The paired all-to-alls hide, so each stage's EP
  // exposure is its unpaired share of the plain one: (5/8 + 3/8) / 2 = 1/2 on average.
  CHECK(sym.mean.ep_exposed_s == Approx(plain.mean.ep_exposed_s / 2).epsilon(1e-6));
}

TEST_CASE("moe_a2a_overlap is refused where Megatron-Core refuses it") {
  auto j = base(8, 1, 1, 8);
  j["parallel"]["moe_a2a_overlap"] = true;
  CHECK(refusal(j) == "test.json: parallel.moe_a2a_overlap: needs a mixture-of-experts model with ep > 1");
  j = moe_scenario(16, 1, 2, 8, 1);
  j["parallel"]["moe_a2a_overlap"] = true;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_a2a_overlap: needs the interleaved schedule when pp > 1 (Megatron-Core: virtual "
        "pipeline stages)");
  j = moe_scenario(8, 1, 1, 8, 1);
  j["parallel"]["moe_a2a_overlap"] = true;
  j["training"]["recompute"] = "full";
  CHECK(refusal(j) == "test.json: parallel.moe_a2a_overlap: does not work with full recompute (Megatron-Core)");
  j["training"]["recompute"] = "selective";
  j["training"]["recompute_modules"] = {"moe"};
  CHECK(refusal(j) ==
        "test.json: parallel.moe_a2a_overlap: does not work with the \"moe\" recompute module (Megatron-Core)");
  j["training"]["recompute_modules"] = {"moe_act"};
  CHECK(refusal(j) == "accepted");
}

TEST_CASE("flex dispatcher: fewer token copies cross the NICs, and it is refused where it cannot run") {
  // ep 16 over two 8-GPU nodes, top 4 of 32 experts, 2,048 tokens per rank: the alltoall dispatcher
  // sends each token's 4 copies, half of them over the NICs; flex sends 2·(1 - 1820/35960) copies
  // per token (tests/workload/ops_test.cc), half of them over the NICs. Each all-to-all is bound by
  // its NIC share (one NIC per GPU); the latency is the same, so every one of the 4 all-to-alls of
  // each of 8 layers and 4 micro-batches is shorter by the NIC time of the copies saved. The alltoall
  // dispatcher also sorts the 2,048·4 rows a rank receives by its 2 local experts and back, forward
  // and backward (2 x 8192 x 1024 x 2 bytes each, with the rows' fp32 weights, 2 x 4 bytes a row, in
  // the two sorts): its compute is longer by those 4 kernels a layer and micro-batch; flex's is not.
  auto j = moe_scenario(16, 1, 1, 16, 1);
  const auto plain_sc = scenario(j);
  const auto plain = parallel::simulate_step(plain_sc);
  j["parallel"]["moe_token_dispatcher"] = "flex";
  const auto flex = parallel::simulate_step(scenario(j));
  REQUIRE(plain_sc.training.num_micro_batches == 4);
  const double token_bytes = 2048.0 * 1024 * 2;
  const double saved_s = token_bytes * (4 - 2 * (1 - 1820.0 / 35960)) / 2 / plain_sc.cluster.nic.busbw_Bps;
  CHECK(plain.mean.ep_exposed_s - flex.mean.ep_exposed_s == Approx(4 * 8 * 4 * saved_s).epsilon(1e-4));
  const hardware::ComputeModel cm(plain_sc.cluster.gpu);
  auto sort_s = [&](double bytes) {
    workload::Op op;
    op.kind = workload::OpKind::memory;
    op.bytes = bytes;
    return cm.time_s(op);
  };
  const double rows_bytes = 2.0 * 8192 * 1024 * 2;
  const double sorts_s = 2 * sort_s(rows_bytes + 2.0 * 8192 * 4) + 2 * sort_s(rows_bytes);
  CHECK(plain.mean.compute_s - flex.mean.compute_s == Approx(8 * 4 * sorts_s).epsilon(1e-6));
  auto d = base(8, 1, 1, 8);
  d["parallel"]["moe_token_dispatcher"] = "flex";
  CHECK(refusal(d) ==
        "test.json: parallel.moe_token_dispatcher: \"flex\" needs a mixture-of-experts model with ep > 1");
  j = moe_scenario(32, 2, 2, 4, 2);
  j["parallel"]["moe_token_dispatcher"] = "flex";
  CHECK(refusal(j) == "test.json: parallel.moe_token_dispatcher: \"flex\" with etp > 1 is not supported yet");
}

// Megatron-Core's allgather token dispatcher, over 8 ranks of one node (ep 8, etp 1; 2,048 tokens
// of hidden 1024 per rank, 32 experts, top 4): every rank all-gathers the group's 8·2048 tokens with
// their routing map (a byte per expert) and fp32 probabilities, 8·2048·(1024·2 + 32·5) bytes, and
// reduce-scatters the outputs in fp32, 8·2048·1024·4; the backward all-gathers the output gradient
// in fp32 and reduce-scatters the input gradient (bf16) with the probabilities' (fp32),
// 8·2048·(1024·2 + 32·4). Nothing overlaps them: the EP time of each of the 8 layers and 4
// micro-batches is the four collectives' over the group. The experts run the same rows as with
// alltoall (4·2048 per rank), so their GEMMs take the same time.
TEST_CASE("allgather dispatcher: the group's tokens gathered and scattered, and refused where Megatron refuses it") {
  auto j = moe_scenario(8, 1, 1, 8, 1);
  const auto a2a = parallel::simulate_step(scenario(j));
  j["parallel"]["moe_token_dispatcher"] = "allgather";
  const auto sc = scenario(j);
  REQUIRE(sc.training.num_micro_batches == 4);
  const auto ag = parallel::simulate_step(sc);
  network::AnalyticalNetwork net(sc.cluster);
  std::vector<std::uint32_t> group(8);
  for (std::uint32_t r = 0; r < 8; ++r) group[r] = r;
  const double tokens = 8.0 * 2048, h = 1024, e = 32;
  auto time = [&](network::CollectiveOp op, double bytes) {
    return net.collective_time_s(op, static_cast<std::int64_t>(bytes), group);
  };
  const double per_layer = time(network::CollectiveOp::all_gather, tokens * (h * 2 + e * 5)) +
                           time(network::CollectiveOp::reduce_scatter, tokens * h * 4) +
                           time(network::CollectiveOp::all_gather, tokens * h * 4) +
                           time(network::CollectiveOp::reduce_scatter, tokens * (h * 2 + e * 4));
  CHECK(ag.mean.ep_exposed_s == Approx(8 * 4 * per_layer).epsilon(1e-6));
  CHECK(ag.mean.ep_exposed_s > a2a.mean.ep_exposed_s);
  const auto gemm = [](const parallel::StepResult& r) { return r.stage_kernel_s[0][parallel::kGemmKernels]; };
  CHECK(gemm(ag) == Approx(gemm(a2a)).epsilon(1e-9));
  // A symmetric run gives the full run's step time (the ep x etp groups bound on every rank).
  parallel::BuildOptions all;
  all.all_ranks = true;
  auto k = moe_scenario(32, 2, 2, 4, 2);
  k["parallel"]["moe_token_dispatcher"] = "allgather";
  const auto etp = scenario(k);
  CHECK(parallel::simulate_step(etp).step_time_s == parallel::simulate_step(etp, all).step_time_s);
  // Megatron-Core allows neither the combined 1F1B, the shared expert's overlap nor a capacity
  // factor with it.
  j["parallel"]["moe_a2a_overlap"] = true;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_a2a_overlap: needs the alltoall or flex token dispatcher (Megatron-Core)");
  j["parallel"].erase("moe_a2a_overlap");
  j["parallel"]["moe_expert_capacity_factor"] = 1.0;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_expert_capacity_factor: works with the alltoall token dispatcher "
        "only (Megatron-Core)");
}

namespace {

// A dense model small enough that the CPU, not the GPU, sets the pace: every kernel is a few
// microseconds, every issue at least as long.
nlohmann::json host_bound_scenario() {
  nlohmann::json model = {{"name", "tiny"}, {"layers", 2},       {"hidden", 64}, {"heads", 1},
                          {"kv_heads", 1},  {"ffn_hidden", 256}, {"vocab", 256}, {"mlp", "swiglu"}};
  return {{"model", model},
          {"cluster", "dgx-h100"},
          {"gpus", 1},
          {"parallel", {{"tp", 1}, {"pp", 1}}},
          {"training", {{"micro_batch", 1}, {"global_batch", 2}, {"seq_len", 64}, {"host_overhead", true}}}};
}

// One CPU thread issuing kernels back to back and one GPU running them in order, each once issued
// (an op of k kernels: h/k and g/k each): when the last one ends.
struct SerialQueue {
  double host = 0, gpu = 0;
  void run(double h, double g, int kernels = 1) {
    const int k = std::max(1, kernels);
    for (int j = 0; j < k; ++j) {
      host += h / k;
      gpu = std::max(gpu, host) + g / k;
    }
  }
};

}  // namespace

TEST_CASE("host overhead: the host stream reproduces one CPU thread issuing every kernel of the step") {
  // pp 1, one GPU, no communication: the step is the serial queue of its ops (zero the gradient
  // buffer; per micro-batch the embedding, layers and head forward, then their backward; the
  // optimizer step), each kernel issued by the CPU (its op's host_s spread over its kernels; a bare
  // compute task: a PyTorch call) and run by the GPU once issued. The builder merges each pass into
  // one task that waits for the first max_i(H_<=i - G_<i) of its issue; that must give the queue's
  // end exactly.
  const auto sc = scenario(host_bound_scenario());
  hardware::ComputeModel cm(sc.cluster.gpu);
  workload::LayerConfig lc;
  lc.seq_len = 64;
  const parallel::HostCosts costs = parallel::host_costs(sc.cluster);
  auto with_host = [&](std::vector<workload::Op> ops, bool backward) {
    parallel::set_host_costs(ops, costs, backward, 0);
    return ops;
  };
  const auto emb_f = with_host(workload::embedding_forward(sc.model, lc), false);
  const auto layer_f = with_host(workload::layer_forward(sc.model, lc), false);
  const auto head_f = with_host(workload::head_forward(sc.model, lc), false);
  const auto head_b = with_host(workload::head_backward(sc.model, lc), true);
  const auto layer_b = with_host(workload::layer_backward(sc.model, lc), true);
  const auto emb_b = with_host(workload::embedding_backward(sc.model, lc), true);
  SerialQueue q;
  auto run = [&](const std::vector<workload::Op>& ops) {
    for (const auto& op : ops) q.run(op.host_s, cm.time_s(op), op.kernels);
  };
  const std::int64_t params = workload::embedding_params_per_rank(sc.model, 1) +
                              2 * workload::layer_params_per_rank(sc.model, 1) +
                              workload::head_params_per_rank(sc.model, 1);
  q.run(costs.forward_call_s, cm.time_s(workload::zero_grad_buffer(params)));
  for (int mb = 0; mb < 2; ++mb) {
    for (const auto* ops : {&emb_f, &layer_f, &layer_f, &head_f, &head_b, &layer_b, &layer_b, &emb_b}) run(*ops);
  }
  q.run(costs.forward_call_s, cm.time_s(workload::optimizer_step(params)));
  const auto r = parallel::simulate_step(sc);
  CHECK(r.step_time_s == Approx(q.gpu).epsilon(1e-9));
  // Host-bound: the GPU waits for the CPU most of the step, and the time is reported as such.
  CHECK(q.gpu > 1.5 * parallel::simulate_step(scenario([] {
                        auto j = host_bound_scenario();
                        j["training"]["host_overhead"] = false;
                        return j;
                      }()))
                          .step_time_s);
  CHECK(r.mean.host_bound_s > 0.3 * r.step_time_s);
  // The CPU is busy nearly all the step: all but the GPU's share after the last issue.
  CHECK(r.host_busy_fraction > 0.9);
  CHECK(r.host_busy_fraction <= 1.0);
  CHECK(r.mean.compute_s + r.mean.host_bound_s + r.mean.bubble_s + r.mean.exposed_s() ==
        Approx(r.step_time_s).epsilon(1e-9));
}

TEST_CASE("host overhead: Grace costs 37.08 / 13.48 times the x86 host's CPU time") {
  // Transformer Engine issue #2053: torch.nn.Linear's host time, GB200 against DGX H100.
  const auto x86 = parallel::host_costs(scenario(host_bound_scenario()).cluster);
  auto j = host_bound_scenario();
  j["cluster"] = "gb200-nvl72";
  const auto grace = parallel::host_costs(scenario(j).cluster);
  const double ratio = 37.08 / 13.48;
  CHECK(grace.module_s == Approx(99.66e-6).epsilon(1e-12));  // te.Linear on GB200, as measured
  CHECK(x86.module_s == Approx(99.66e-6 / ratio).epsilon(1e-12));
  CHECK(grace.forward_call_s == Approx(x86.forward_call_s * ratio).epsilon(1e-12));
  CHECK(grace.launch_s == Approx(x86.launch_s * ratio).epsilon(1e-12));
}

TEST_CASE("host overhead: a captured CUDA graph scope costs the CPU one graph launch per captured run") {
  // The attention block of a layer's forward (input norm to residual add) is one captured run: its
  // ops' host time becomes one module call. The dense MLP likewise under "mlp".
  const auto sc = scenario(host_bound_scenario());
  workload::LayerConfig lc;
  lc.seq_len = 64;
  const parallel::HostCosts costs = parallel::host_costs(sc.cluster);
  auto host_of = [&](std::uint8_t graphed, std::uint8_t scope) {
    auto ops = workload::layer_forward(sc.model, lc);
    parallel::set_host_costs(ops, costs, false, graphed);
    double in = 0, out = 0;
    for (const auto& op : ops) ((op.graph & scope) ? in : out) += op.host_s;
    return std::pair{in, out};
  };
  const auto [attn_plain, rest_plain] = host_of(0, workload::kGraphAttn);
  const auto [attn_graphed, rest_graphed] = host_of(workload::kGraphAttn, workload::kGraphAttn);
  CHECK(attn_plain > 3 * costs.module_s);  // QKV, the attention core, the projection, the norm, rotary, the add
  CHECK(attn_graphed == Approx(costs.module_s).epsilon(1e-12));
  CHECK(rest_graphed == Approx(rest_plain).epsilon(1e-12));
  const auto [mlp_graphed, other] = host_of(workload::kGraphAttn | workload::kGraphMlp, workload::kGraphMlp);
  CHECK(mlp_graphed == Approx(costs.module_s).epsilon(1e-12));
  CHECK(other == Approx(costs.module_s).epsilon(1e-12));  // the attention run's launch: the rest is captured
  // End to end: the graphs shorten the host-bound step.
  auto j = host_bound_scenario();
  j["training"]["cuda_graph_scope"] = {"attn", "mlp"};
  CHECK(parallel::simulate_step(scenario(j)).step_time_s < parallel::simulate_step(sc).step_time_s);
  // A whole-iteration graph leaves no host stream.
  j["training"]["cuda_graph_scope"] = {"full_iteration"};
  const auto full = scenario(j);
  CHECK_FALSE(parallel::host_stream(full));
  j["training"]["host_overhead"] = false;
  j["training"].erase("cuda_graph_scope");
  CHECK(parallel::simulate_step(full).step_time_s == parallel::simulate_step(scenario(j)).step_time_s);
}

TEST_CASE(
    "host overhead: the CPU waits once per MoE layer forward for the token counts, and per pipeline step "
    "without interleaving") {
  // Both dispatchers sync before the dispatch all-to-all (after the permutation: alltoall copies the
  // counts to the CPU, flex's notify step exchanges them); the backward reuses the counts. 8 MoE
  // layers, 4 micro-batches on pp 1: 32 host tasks wait for the GPU.
  // The tasks of stream `on` some host task waits for.
  auto waits = [](const engine::Program& p, int on) {
    std::set<std::uint32_t> waited;
    for (const auto& t : p.stream(parallel::kHost))
      for (const auto& d : p.deps(t))
        if (d.stream == on) waited.insert(d.position);
    return static_cast<int>(waited.size());
  };
  auto j = moe_scenario(8, 1, 1, 8, 1);
  j["training"]["host_overhead"] = true;
  auto sc = scenario(j);
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plan = parallel::build_step(sc, cm);
  CHECK(waits(plan.programs[0], parallel::kCompute) == 8 * 4);
  CHECK(waits(plan.programs[0], parallel::kEpComm) == 0);
  j["parallel"]["moe_token_dispatcher"] = "flex";
  plan = parallel::build_step(scenario(j), cm);
  CHECK(waits(plan.programs[0], parallel::kCompute) == 8 * 4);
  CHECK(waits(plan.programs[0], parallel::kEpComm) == 0);
  // Combined 1F1B runs the dispatches beside the compute; the CPU still waits once per layer forward.
  j["parallel"]["moe_a2a_overlap"] = true;
  plan = parallel::build_step(scenario(j), cm);
  CHECK(waits(plan.programs[0], parallel::kCompute) == 8 * 4);
  j["parallel"].erase("moe_a2a_overlap");
  // Every token dispatch waits for the CPU; the syncs cost time the GPU waits.
  const auto synced = parallel::simulate_step(scenario(j));
  j["training"]["host_overhead"] = false;
  const auto free = parallel::simulate_step(scenario(j));
  CHECK(synced.step_time_s > free.step_time_s);
  CHECK(synced.mean.host_bound_s > 0);
  CHECK(free.mean.host_bound_s == 0);

  // Pipeline: 1F1B's batched p2p calls end in torch.cuda.synchronize(): the CPU waits for each
  // send or receive (and the compute before it); the interleaved schedule does not sync.
  auto k = base(2, 1, 2, 8);
  k["training"]["host_overhead"] = true;
  plan = parallel::build_step(scenario(k), cm);
  // Stage 0 of 8 micro-batches: 8 sends forward, 8 receives backward.
  CHECK(waits(plan.programs[0], parallel::kPpSend) == 8);
  CHECK(waits(plan.programs[0], parallel::kPpRecv) == 8);
  k["parallel"]["schedule"] = "interleaved";
  k["parallel"]["virtual_stages"] = 2;
  plan = parallel::build_step(scenario(k), cm);
  CHECK(waits(plan.programs[0], parallel::kPpSend) + waits(plan.programs[0], parallel::kPpRecv) == 0);
}

TEST_CASE("host overhead: a symmetric run gives the full run's step time, with the syncs") {
  // Every rank of a class issues the same tasks and waits at the same syncs, so simulating one per
  // class stays exact with the host stream: MoE token-count syncs across nodes, 1F1B's p2p syncs.
  auto moe = moe_scenario(16, 1, 2, 4, 1);
  moe["training"]["host_overhead"] = true;
  auto dense = base(16, 2, 4, 16);
  dense["training"]["host_overhead"] = true;
  for (const auto& j : {moe, dense}) {
    const auto sc = scenario(j);
    parallel::BuildOptions all;
    all.all_ranks = true;
    const auto full = parallel::simulate_step(sc, all);
    const auto sym = parallel::simulate_step(sc);
    CHECK(sym.step_time_s == full.step_time_s);
    CHECK(sym.mean.host_bound_s == Approx(full.mean.host_bound_s).epsilon(1e-9));
    CHECK(sym.host_busy_fraction == Approx(full.host_busy_fraction).epsilon(1e-12));
  }
}

namespace {

// A small hybrid model over 2 pipeline stages: stage 0 holds "M*E" (layers 0-2), stage 1 "M-E".
nlohmann::json hybrid_scenario(int gpus, int ep) {
  return {
      {"model",
       {{"name", "hybrid"},
        {"hybrid_pattern", "M*EM-E"},
        {"hidden", 1024},
        {"heads", 16},
        {"kv_heads", 4},
        {"ffn_hidden", 2048},
        {"vocab", 32000},
        {"mlp", "squared_relu"},
        {"experts", 16},
        {"experts_per_token", 2},
        {"moe_ffn_hidden", 512},
        {"shared_expert_ffn_hidden", 1024},
        {"mamba_heads", 16},
        {"mamba_head_dim", 64},
        {"mamba_state", 64},
        {"mamba_groups", 2}}},
      {"cluster", "dgx-h100"},
      {"gpus", gpus},
      {"parallel",
       {{"tp", 1}, {"pp", 2}, {"ep", ep}, {"zero", 1}, {"overlap_grad_reduce", true}, {"overlap_param_gather", true}}},
      {"training", {{"micro_batch", 1}, {"global_batch", 4 * gpus / 2}, {"seq_len", 2048}}}};
}

}  // namespace

// Each stage holds its blocks' parameters by kind and the experts of its 'E' blocks; with the one
// copy of the embedding they add up to the model's total; symmetric and all-ranks runs agree.
TEST_CASE("hybrid model over pipeline stages: parameters by block kind, symmetric run exact") {
  const auto sc = scenario(hybrid_scenario(2, 1));
  const auto& m = sc.model;
  using workload::LayerBlock;
  const std::int64_t mamba = workload::layer_params_per_rank(m, 1, LayerBlock::mamba);
  const std::int64_t attention = workload::layer_params_per_rank(m, 1, LayerBlock::attention);
  const std::int64_t mlp = workload::layer_params_per_rank(m, 1, LayerBlock::mlp);
  const std::int64_t moe = workload::layer_params_per_rank(m, 1, LayerBlock::moe);
  const std::int64_t experts = workload::layer_expert_params_per_rank(m, 1, 1);
  const auto plan = parallel::build_step(sc, hardware::ComputeModel(sc.cluster.gpu));
  CHECK(plan.stages[0].params_per_rank == mamba + attention + moe + workload::embedding_params_per_rank(m, 1));
  CHECK(plan.stages[1].params_per_rank == mamba + mlp + moe + workload::head_params_per_rank(m, 1));
  CHECK(plan.stages[0].expert_params_per_rank == experts);
  CHECK(plan.stages[1].expert_params_per_rank == experts);
  CHECK(plan.stages[0].params_per_rank + plan.stages[1].params_per_rank + 2 * experts == m.total_params());
  const auto ep_sc = scenario(hybrid_scenario(16, 4));
  parallel::BuildOptions all;
  all.all_ranks = true;
  const auto full = parallel::simulate_step(ep_sc, all);
  const auto sym = parallel::simulate_step(ep_sc);
  CHECK(sym.step_time_s == full.step_time_s);
  CHECK(sym.memory[sym.peak_rank].peak_bytes == full.memory[full.peak_rank].peak_bytes);
}

TEST_CASE("compute floor: the collectives the compute stream waits for count, on the analytical network") {
  // Qwen3 30B-A3B on 16 H100 (configs/): pp 1, tp 1, ep 16 over two nodes, alltoall dispatch, 1024
  // sequences of 4,096 tokens in micro-batches of 1 over dp 16: m = 64. Each of the 48 MoE layers
  // waits for four token all-to-alls per micro-batch (dispatch and combine, forward and backward), of
  // 4,096 tokens x 8 experts x 2,048 x 2 bytes = 134,217,728 bytes each over the 16 ranks. With pp 1
  // the floor is m x the layer work, so it grows by exactly m x 48 x 4 all-to-alls over the
  // kernel-only floor the flow network (whose links may be shared) keeps.
  const std::string file = std::string(TRAINSIM_SOURCE_DIR) + "/configs/qwen3-30b-a3b-h100-16.json";
  auto j = nlohmann::json::parse(std::ifstream(file));
  const auto analytical = scenario(j);
  j["network"] = "flow";
  const auto flow = scenario(j);
  hardware::ComputeModel cm(analytical.cluster.gpu);
  std::vector<std::uint32_t> ep(16);
  for (std::uint32_t r = 0; r < 16; ++r) ep[r] = r;
  const double a2a = network::AnalyticalNetwork(analytical.cluster)
                         .collective_time_s(network::CollectiveOp::all_to_all, 134217728, ep);
  CHECK(parallel::compute_floor_s(analytical, cm) - parallel::compute_floor_s(flow, cm) ==
        Approx(64.0 * 48 * 4 * a2a).epsilon(1e-9));
  CHECK(parallel::compute_floor_s(analytical, cm) <= parallel::simulate_step(analytical).step_time_s);
  // Combined 1F1B (moe_a2a_overlap) runs them beside another micro-batch's compute: not counted.
  j = nlohmann::json::parse(std::ifstream(file));
  j["parallel"]["moe_a2a_overlap"] = true;
  CHECK(parallel::compute_floor_s(scenario(j), cm) == Approx(parallel::compute_floor_s(flow, cm)).epsilon(1e-12));
  // Tensor parallelism: without Transformer Engine's overlap its collectives wait; with it they run
  // beside their GEMMs and are not counted.
  nlohmann::json dense = base(8, 4, 2, 8);
  dense["parallel"]["sequence_parallel"] = true;
  dense["parallel"]["tp_comm_overlap"] = false;
  const auto waits = scenario(dense);
  dense["parallel"]["tp_comm_overlap"] = true;
  const auto overlapped = scenario(dense);
  dense["network"] = "flow";
  const auto kernels = scenario(dense);
  hardware::ComputeModel dcm(waits.cluster.gpu);
  CHECK(parallel::compute_floor_s(waits, dcm) > parallel::compute_floor_s(kernels, dcm));
  CHECK(parallel::compute_floor_s(overlapped, dcm) == Approx(parallel::compute_floor_s(kernels, dcm)).epsilon(1e-12));
  CHECK(parallel::compute_floor_s(waits, dcm) <= parallel::simulate_step(waits).step_time_s);
}

TEST_CASE("compute floor: 1F1B's (m + p - 1)(t_f + t_b) with equal stages, and never above the simulated step") {
  // The floor of stage p-1: the first micro-batch's forward through the p-1 stages before it, its
  // own m forwards and backwards, the last backward back through them: (p - 1 + m)(t_f + t_b) with
  // equal stages, the 1F1B step itself, which the simulation reaches up to the messages, the
  // optimizer and the embedding and head's share (the tolerance).
  for (std::int64_t m : {4, 8, 16}) {
    auto sc = scenario(base(4, 1, 4, m));
    hardware::ComputeModel cm(sc.cluster.gpu);
    const double floor = parallel::compute_floor_s(sc, cm);
    const double step = parallel::simulate_step(sc).step_time_s;
    CHECK(floor <= step);
    CHECK(floor == Approx(step).epsilon(0.1));
  }
  // Full recompute runs each layer's forward again before its backward: the floor grows by the
  // forward kernels, m (layers per stage) t_f more on the busiest stage.
  nlohmann::json j = base(4, 1, 4, 8);
  auto plain = scenario(j);
  j["training"]["recompute"] = "full";
  auto full = scenario(j);
  hardware::ComputeModel cm(plain.cluster.gpu);
  const double grew = parallel::compute_floor_s(full, cm) - parallel::compute_floor_s(plain, cm);
  CHECK(grew > 0);
  CHECK(parallel::compute_floor_s(full, cm) <= parallel::simulate_step(full).step_time_s);
  // Each schedule (zero-bubble, GPipe, interleaved), selective recompute, context parallelism, and
  // the shipped configs (a mixture of experts, multi-token prediction, FSDP with offloading, LoRA,
  // a hybrid model): under the step, and most of it (kernels are most of these steps).
  std::vector<config::Scenario> cases;
  for (const char* schedule : {"zb-h1", "gpipe", "interleaved"}) {
    nlohmann::json k = base(4, 1, 4, 8);
    k["parallel"]["schedule"] = schedule;
    if (std::string(schedule) == "interleaved") k["parallel"]["virtual_stages"] = 2;
    cases.push_back(scenario(k));
  }
  nlohmann::json sel = base(8, 2, 2, 8);
  sel["parallel"]["sequence_parallel"] = true;
  sel["parallel"]["cp"] = 2;
  sel["training"]["recompute"] = "selective";
  cases.push_back(scenario(sel));
  for (const char* file : {"configs/llama3.1-70b-h100-1024.json", "configs/deepseek-v3-gb200-256.json",
                           "configs/qwen3-30b-a3b-h100-16.json", "configs/llama3-70b-gb200-fsdp-offload.json",
                           "configs/llama3-70b-gb300-lora.json", "configs/nemotron-3-nano-gb300-8.json"})
    cases.push_back(config::load_scenario(std::string(TRAINSIM_SOURCE_DIR) + "/" + file, TRAINSIM_SOURCE_DIR));
  for (const auto& sc : cases) {
    INFO(sc.file << " pp " << sc.parallel.pp << " cp " << sc.parallel.cp);
    hardware::ComputeModel c(sc.cluster.gpu);
    const double floor = parallel::compute_floor_s(sc, c);
    const double step = parallel::simulate_step(sc).step_time_s;
    CHECK(floor <= step);
    CHECK(floor > 0.4 * step);
  }
}

namespace {

// The small model on 16 GPUs of data parallelism with the distributed optimizer and `optimizer` as
// training.optimizer (null: Megatron's default Adam).
nlohmann::json optimizer_scenario(const nlohmann::json& optimizer) {
  auto j = base(16, 1, 1, 16);
  j["parallel"]["zero"] = 1;
  if (!optimizer.is_null()) j["training"]["optimizer"] = optimizer;
  return j;
}

std::int64_t optimizer_shard(const config::Scenario& sc) {
  const std::int64_t params = 16 * workload::layer_params_per_rank(sc.model, 1) +
                              workload::embedding_params_per_rank(sc.model, 1) +
                              workload::head_params_per_rank(sc.model, 1);
  return (params + 15) / 16;
}

}  // namespace

TEST_CASE("precision-aware optimizer: the Adam states in their types, master weights as 16-bit remainders") {
  // Per parameter of the shard: Megatron's default 4 + 4 + 4 = 12 B (fp32 master, two fp32
  // moments). Precision-aware with bf16 moments and the fp32 master kept as the 16 bits the bf16
  // weight lacks (store_param_remainders, its default): 2 + 2 + 2 = 6 B. Without remainders: 4 + 2 +
  // 2 = 8 B. FP8 moments, fp16 master: 2 + 1 + 1 = 4 B.
  const auto plain = scenario(optimizer_scenario(nullptr));
  const std::int64_t shard = optimizer_shard(plain);
  auto states = [](const nlohmann::json& o) {
    const auto r = parallel::simulate_step(scenario(optimizer_scenario(o)));
    return r.memory[0].peak_breakdown_bytes[parallel::kOptimizer];
  };
  CHECK(states(nullptr) == 12 * shard);
  CHECK(states({{"use_precision_aware_optimizer", true}}) == (2 + 4 + 4) * shard);
  CHECK(states({{"use_precision_aware_optimizer", true}, {"exp_avg_dtype", "bf16"}, {"exp_avg_sq_dtype", "bf16"}}) ==
        6 * shard);
  CHECK(states({{"use_precision_aware_optimizer", true},
                {"exp_avg_dtype", "bf16"},
                {"exp_avg_sq_dtype", "bf16"},
                {"store_param_remainders", false}}) == 8 * shard);
  CHECK(states({{"use_precision_aware_optimizer", true},
                {"main_params_dtype", "fp16"},
                {"exp_avg_dtype", "fp8"},
                {"exp_avg_sq_dtype", "fp8"}}) == 4 * shard);
  // FP16 weights hold no bf16 high half: the fp32 master stays whole (4 + 4 + 4).
  auto fp16 = optimizer_scenario({{"use_precision_aware_optimizer", true}});
  fp16["training"]["precision"] = "fp16";
  CHECK(parallel::simulate_step(scenario(fp16)).memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 12 * shard);
}

TEST_CASE("precision-aware optimizer: the Adam step moves each state in its type") {
  // Adam reads and writes the master weight and both moments, reads the gradient, writes the
  // 16-bit weight (reads it too when it holds the master's high half), and clip_grad_norm reads
  // the gradient again. Default: 2 (4 + 4 + 4) + 4 + 2 + 4 = 34 B per parameter. Precision-aware,
  // bf16 moments, remainders, bf16 gradients (grad_reduce_in_fp32 false): 2 (2 + 2 + 2) + 2 + 4 + 2
  // = 20 B.
  const auto sc = scenario(optimizer_scenario(nullptr));
  const std::int64_t n = 1000000;
  CHECK(workload::optimizer_step(n).bytes == 34.0 * n);
  workload::AdamStates s;
  s.master = 2;
  s.exp_avg = s.exp_avg_sq = 2;
  s.grad = 2;
  s.remainders = true;
  CHECK(workload::optimizer_step(n, s).bytes == 20.0 * n);
  // The gradient norm covers the parameters stepped on the CPU too: 3 of 4 on the CPU.
  CHECK(workload::optimizer_step(n / 4, s, n).bytes == 18.0 * (n / 4) + 2.0 * n);
  (void)sc;
}

TEST_CASE("optimizer CPU offload: the offloaded states live in pinned host memory, the step waits for the CPU") {
  // All of the shard offloaded: no GPU optimizer states; the host keeps an fp32 weight, gradient and
  // two moments per parameter (16 B). The CPU step at the measured 596,049,920 / 0.926 parameters
  // per second (below the DGX H100 bandwidth bound: 614.4 GB/s x 0.78 / 8 GPUs / 28 B = 2.1e9); the
  // copies 4 B each way over the host link (55.6 GB/s). Without overlap the three add up; with it
  // the slowest (the CPU) sets the pace.
  const nlohmann::json offload = {{"use_precision_aware_optimizer", true}, {"optimizer_cpu_offload", true}};
  const auto plain = scenario(optimizer_scenario({{"use_precision_aware_optimizer", true}}));
  const auto off = scenario(optimizer_scenario(offload));
  nlohmann::json overlapped_json = offload;
  overlapped_json["overlap_cpu_optimizer_d2h_h2d"] = true;
  const auto overlapped = scenario(optimizer_scenario(overlapped_json));
  const std::int64_t shard = optimizer_shard(plain);
  const auto r_plain = parallel::simulate_step(plain);
  const auto r = parallel::simulate_step(off);
  const auto r_overlap = parallel::simulate_step(overlapped);
  CHECK(r.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 0);
  CHECK(r.host_offload_bytes == 16 * shard);
  CHECK(r_plain.host_offload_bytes == 0);
  const double n = static_cast<double>(shard);
  REQUIRE(596049920 / 0.926 < 614.4e9 * 0.78 / 8 / 28);
  const double cpu = n / (596049920 / 0.926), copy = 4 * n / 55.6e9;
  // The GPU's own step (only the gradient-norm pass is left) runs beside the CPU's and is shorter.
  // Precision-aware defaults: fp32 master weights as 16-bit remainders, fp32 moments and gradients.
  workload::AdamStates states;
  states.master = 2;
  states.remainders = true;
  const hardware::ComputeModel cm(plain.cluster.gpu);
  const double gpu_step = cm.time_s(workload::optimizer_step(shard, states, shard));
  const double gpu_norm = cm.time_s(workload::optimizer_step(0, states, shard));
  REQUIRE(cpu + 2 * copy > gpu_step);
  CHECK(r.step_time_s - r_plain.step_time_s == Approx(cpu + 2 * copy - gpu_step).epsilon(1e-6));
  CHECK(r_overlap.step_time_s - r_plain.step_time_s == Approx(cpu - gpu_step).epsilon(1e-6));
  CHECK(r.mean.offload_exposed_s == Approx(cpu + 2 * copy - gpu_norm).epsilon(1e-6));
  // Half offloaded: half the host bytes, half the GPU states (the precision-aware default: 10 B).
  nlohmann::json half = offload;
  half["optimizer_offload_fraction"] = 0.5;
  const auto r_half = parallel::simulate_step(scenario(optimizer_scenario(half)));
  const auto half_n = static_cast<std::int64_t>(std::llround(0.5 * n));
  CHECK(r_half.host_offload_bytes == 16 * half_n);
  CHECK(r_half.memory[0].peak_breakdown_bytes[parallel::kOptimizer] == 10 * (shard - half_n));
}

TEST_CASE("optimizer CPU offload: Qwen3-0.6B on one H100 as NeMo RL measured it") {
  // NVIDIA-NeMo/RL PR #3628, Qwen3-0.6B on one H100 (steps 11-100): 0.752 s per step without
  // offload, 1.678 s with all of it offloaded and overlapped (+0.926 s: the CPU rate is fitted to
  // it), 1.187 s with half offloaded and no overlap (+0.435 s: not fitted). The model adds exactly
  // the offloaded step's time to an otherwise identical step; half without overlap comes out within
  // 16% of the measured +0.435 s.
  const nlohmann::json qwen3_06b = {
      {"name", "qwen3-0.6b"}, {"layers", 28},       {"hidden", 1024},  {"heads", 16},     {"kv_heads", 8},
      {"head_dim", 128},      {"ffn_hidden", 3072}, {"vocab", 151936}, {"mlp", "swiglu"}, {"tied_embeddings", true},
      {"qk_norm", true}};
  auto step = [&](const nlohmann::json& optimizer) {
    nlohmann::json j = {{"model", qwen3_06b},
                        {"cluster", "dgx-h100"},
                        {"gpus", 1},
                        {"parallel", {{"zero", 1}}},
                        {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 4096}}}};
    j["training"]["optimizer"] = optimizer;
    return parallel::simulate_step(scenario(j));
  };
  const auto plain = step({{"use_precision_aware_optimizer", true}});
  const workload::ModelSpec& m = scenario({{"model", qwen3_06b},
                                           {"cluster", "dgx-h100"},
                                           {"gpus", 1},
                                           {"training", {{"global_batch", 1}, {"seq_len", 4096}}}})
                                     .model;
  CHECK(m.total_params() == 596049920);
  const auto all = step({{"use_precision_aware_optimizer", true},
                         {"optimizer_cpu_offload", true},
                         {"overlap_cpu_optimizer_d2h_h2d", true}});
  // The GPU's own Adam step (all but the gradient norm) leaves the step: the CPU's replaces it.
  CHECK(all.step_time_s - plain.step_time_s == Approx(0.926).epsilon(0.02));
  const auto half = step(
      {{"use_precision_aware_optimizer", true}, {"optimizer_cpu_offload", true}, {"optimizer_offload_fraction", 0.5}});
  CHECK(half.step_time_s - plain.step_time_s == Approx(0.435).epsilon(0.16));
}

TEST_CASE("training.optimizer is refused where Megatron refuses it") {
  auto j = optimizer_scenario({{"exp_avg_dtype", "bf16"}});
  CHECK(refusal(j) ==
        "test.json: training.optimizer.exp_avg_dtype: needs \"use_precision_aware_optimizer\": true (Megatron keeps "
        "every Adam state in fp32 without it)");
  j = optimizer_scenario({{"optimizer_cpu_offload", true}});
  CHECK(refusal(j) ==
        "test.json: training.optimizer.optimizer_cpu_offload: needs \"use_precision_aware_optimizer\": true (Megatron "
        "keeps every Adam state in fp32 without it)");
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}, {"optimizer_offload_fraction", 0.5}});
  CHECK(refusal(j) ==
        "test.json: training.optimizer.optimizer_offload_fraction: applies to \"optimizer_cpu_offload\": true only");
  j = optimizer_scenario(
      {{"use_precision_aware_optimizer", true}, {"optimizer_cpu_offload", true}, {"optimizer_offload_fraction", 1.5}});
  CHECK(refusal(j) ==
        "test.json: training.optimizer.optimizer_offload_fraction: 1.5 exceeds 1 (the fraction of this rank's "
        "parameters whose Adam step runs on the CPU)");
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}, {"exp_avg_dtype", "int4"}});
  CHECK(refusal(j).rfind("test.json: training.optimizer.exp_avg_dtype: unknown value \"int4\"", 0) == 0);
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}, {"lr", 1e-4}});
  CHECK(refusal(j).rfind("test.json: training.optimizer.lr: unknown key (expected one of: ", 0) == 0);
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}});
  j["parallel"]["zero"] = 0;
  CHECK(refusal(j) ==
        "test.json: training.optimizer.use_precision_aware_optimizer: needs the distributed optimizer or FSDP "
        "(parallel.zero 1 or more)");
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}, {"optimizer_cpu_offload", true}});
  j["parallel"]["zero"] = 3;
  CHECK(refusal(j) ==
        "test.json: training.optimizer.optimizer_cpu_offload: with FSDP (zero 3, or zero 2 per_unit) is not supported "
        "yet");
  std::ifstream in(std::string(TRAINSIM_SOURCE_DIR) + "/topologies/dgx-h100.json");
  nlohmann::json cluster = nlohmann::json::parse(in);
  cluster.erase("host_memory_GBps");
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}, {"optimizer_cpu_offload", true}});
  j["cluster"] = cluster;
  CHECK(refusal(j) ==
        "test.json: training.optimizer.optimizer_cpu_offload: the topology \"dgx-h100\" states no host_memory_GBps "
        "(the CPU's memory bandwidth, which the CPU's Adam step is bound by)");
  j = optimizer_scenario({{"use_precision_aware_optimizer", true}});
  j["gpus"] = 1;
  j["training"]["global_batch"] = 1;
  j["training"]["framework"] = "pytorch-eager";
  j["model"]["mlp"] = "swiglu";
  CHECK(refusal(j).rfind("test.json: training.optimizer: applies to \"framework\": \"megatron\" only", 0) == 0);
}

TEST_CASE("sync-free experts: no token-count wait, capacity-sized kept activations, paged stashing, whole-step graph") {
  // The MoE test model on 8 GPUs, ep 8, flex dispatcher, 4 micro-batches of 2048 tokens: each rank
  // routes 2048 x 4 copies and receives as many (balanced). Sync-free with factor 1.5: the experts
  // keep their three saved tensors (fc1 input, activation input with the fp32 routing weight, fc2
  // input) for 1.5 x 8192 rows; paged stashing keeps them at 8192 rows and copies them out and back
  // (2 x their bytes each way per layer and micro-batch).
  auto j = moe_scenario(8, 1, 1, 8, 1);
  j["parallel"]["moe_token_dispatcher"] = "flex";
  j["training"]["host_overhead"] = true;
  auto waits = [](const engine::Program& p) {
    std::set<std::uint32_t> waited;
    for (const auto& t : p.stream(parallel::kHost))
      for (const auto& d : p.deps(t))
        if (d.stream == parallel::kCompute) waited.insert(d.position);
    return waited.size();
  };
  const auto plain = scenario(j);
  j["parallel"]["moe_expert_rank_capacity_factor"] = 1.5;
  const auto sync_free = scenario(j);
  hardware::ComputeModel cm(plain.cluster.gpu);
  CHECK(waits(parallel::build_step(plain, cm).programs[0]) == 8 * 4);
  CHECK(waits(parallel::build_step(sync_free, cm).programs[0]) == 0);

  // Kept bytes of one layer's experts: rows x (1024 + 2 x 512 + 512) x 2 B + rows x 4 B.
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  lc.ep = 8;
  lc.moe_flex_dispatch = true;
  const double rows = 2048.0 * 4;
  const double kept = rows * (1024 + 2 * 512 + 512) * 2 + rows * 4;
  auto saved_of = [&](const workload::LayerConfig& c) { return saved(workload::layer_forward(plain.model, c)); };
  const std::int64_t base_saved = saved_of(lc);
  lc.moe_rank_capacity_factor = 1.5;
  CHECK(saved_of(lc) - base_saved == static_cast<std::int64_t>(0.5 * kept));
  lc.moe_paged_stash = true;
  const auto stashed = workload::layer_forward(plain.model, lc);
  CHECK(saved(stashed) == base_saved);
  double stash_bytes = 0;
  for (const auto& op : stashed)
    if (op.name == "moe_paged_stash") stash_bytes = op.bytes;
  CHECK(stash_bytes == Approx(2 * kept));
  double restore_bytes = 0;
  for (const auto& op : workload::layer_backward(plain.model, lc))
    if (op.name == "moe_paged_stash_restore") restore_bytes = op.bytes;
  CHECK(restore_bytes == Approx(2 * kept));

  // A whole-step CUDA graph needs the static buffers; with them, no host stream.
  j["training"]["cuda_graph_scope"] = {"full_iteration"};
  CHECK_FALSE(parallel::host_stream(scenario(j)));
  j["parallel"].erase("moe_expert_rank_capacity_factor");
  CHECK(refusal(j) ==
        "test.json: training.cuda_graph_scope: \"full_iteration\" with a dropless mixture of experts needs static "
        "buffers: parallel.moe_expert_rank_capacity_factor (sync-free experts) or token dropping with "
        "moe_pad_expert_input_to_capacity");
  // Token dropping padded to the capacity is static too.
  j["parallel"]["moe_token_dispatcher"] = "alltoall";
  j["parallel"]["moe_expert_capacity_factor"] = 1.0;
  j["parallel"]["moe_pad_expert_input_to_capacity"] = true;
  CHECK_FALSE(parallel::host_stream(scenario(j)));
}

TEST_CASE("sync-free experts are refused where Megatron-Core refuses them") {
  auto j = moe_scenario(8, 1, 1, 8, 1);
  j["parallel"]["moe_expert_rank_capacity_factor"] = 1.5;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_expert_rank_capacity_factor: needs the flex token dispatcher (moe_token_dispatcher "
        "\"flex\": Megatron-Core sizes HybridEP's buffers with it)");
  j["parallel"]["moe_token_dispatcher"] = "flex";
  j["training"]["moe_load_imbalance"] = 2;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_expert_rank_capacity_factor: 1.5 is below training.moe_load_imbalance 2: the "
        "busiest rank would exceed its buffers every step, which Megatron-Core then reruns without them");
  j["training"].erase("moe_load_imbalance");
  j["parallel"]["moe_expert_rank_capacity_factor"] = 0.8;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_expert_rank_capacity_factor: 0.8 is below 1: a rank receives the mean of the token "
        "copies even with balanced routing");
  j["parallel"].erase("moe_expert_rank_capacity_factor");
  j["parallel"]["moe_paged_stash"] = true;
  CHECK(refusal(j) == "test.json: parallel.moe_paged_stash: requires moe_expert_rank_capacity_factor");
  auto dense = base(8, 1, 1, 8);
  dense["parallel"]["moe_expert_rank_capacity_factor"] = 1.5;
  dense["parallel"]["moe_token_dispatcher"] = "flex";
  CHECK(refusal(dense).find("needs a mixture-of-experts model") != std::string::npos);
}

TEST_CASE("delay_wgrad_compute: the backward experts' weight gradients run after the dispatch is launched") {
  // Combined 1F1B on the MoE test model (2 layers, ep 8, 2 micro-batches): in each merged pair the
  // compute stream runs the backward experts' data gradients, then (the backward dispatch all-to-all
  // launched beside it) their weight gradients as a task of their own, then the forward experts.
  auto j = moe_scenario(8, 1, 1, 8, 1);
  j["model"]["layers"] = 2;
  j["training"]["global_batch"] = 16;
  j["parallel"]["moe_a2a_overlap"] = true;
  const auto plain = scenario(j);
  j["parallel"]["delay_wgrad_compute"] = true;
  const auto delayed = scenario(j);
  hardware::ComputeModel cm(plain.cluster.gpu);
  const auto compute_labels = [&](const config::Scenario& sc) {
    return labels(parallel::build_step(sc, cm).programs[0], parallel::kCompute);
  };
  const auto with = compute_labels(delayed);
  const auto without = compute_labels(plain);
  auto count = [](const std::vector<std::string>& l, const std::string& what) {
    return std::count(l.begin(), l.end(), what);
  };
  // The experts' part of a backward runs from the unsort of their output gradients by local expert
  // (4 local experts) to the sort of their input gradients back, with or without its weight
  // gradients; delayed, those are a task of their own in each merged pair.
  const std::string experts_part = "backward moe_unsort_by_local_expert_backward..moe_sort_by_local_expert_backward";
  CHECK(count(without, experts_part) > 0);
  CHECK(count(with, experts_part) == count(without, experts_part));
  CHECK(count(without, "backward experts_fc2_wgrad..experts_fc1_wgrad") == 0);
  CHECK(count(with, "backward experts_fc2_wgrad..experts_fc1_wgrad") > 0);
  // The backward dispatch starts no later, so the step is no longer; the kernels are the same.
  const auto a = parallel::simulate_step(plain), b = parallel::simulate_step(delayed);
  CHECK(b.step_time_s <= a.step_time_s);
  CHECK(b.stage_kernel_s[0][parallel::kGemmKernels] == Approx(a.stage_kernel_s[0][parallel::kGemmKernels]));
  // Megatron-Core delays them within combined 1F1B only.
  j["parallel"]["moe_a2a_overlap"] = false;
  CHECK(refusal(j) ==
        "test.json: parallel.delay_wgrad_compute: needs moe_a2a_overlap (Megatron-Core delays the experts' weight "
        "gradients within combined 1F1B)");
}

TEST_CASE("first and last layers in BF16 under FP8: each such layer costs what a BF16 run's layer costs") {
  // 16 uniform layers on one pipeline stage: the step's layer time is the sum of its layers', so
  // every layer moved to BF16 adds the same time, and all 16 moved give the BF16 run (gradients
  // reduced in fp32 either way), to the nanosecond, with its memory.
  auto j = base(8, 1, 1, 8);
  j["cluster"] = "dgx-b200";
  j["training"]["precision"] = "fp8";
  auto with = [&](int start, int end) {
    auto k = j;
    if (start > 0) k["training"]["bf16_layers_at_start"] = start;
    if (end > 0) k["training"]["bf16_layers_at_end"] = end;
    return parallel::simulate_step(scenario(k));
  };
  auto bf16 = j;
  bf16["training"]["precision"] = "bf16";
  const auto all_fp8 = with(0, 0);
  const auto all_bf16 = parallel::simulate_step(scenario(bf16));
  const auto half = with(3, 5);
  const auto sixteen = with(8, 8);
  CHECK(sixteen.step_time_s == Approx(all_bf16.step_time_s).epsilon(1e-9));
  CHECK(sixteen.memory[0].peak_bytes == all_bf16.memory[0].peak_bytes);
  CHECK(all_fp8.step_time_s < half.step_time_s);
  CHECK(half.step_time_s == Approx((all_fp8.step_time_s + all_bf16.step_time_s) / 2).epsilon(1e-6));
  // Where the layers are does not matter on one stage: 3 first + 5 last = 8 last.
  CHECK(with(0, 8).step_time_s == Approx(half.step_time_s).epsilon(1e-9));

  // Refused where it means nothing or cannot be.
  auto bad = j;
  bad["training"]["precision"] = "bf16";
  bad["training"]["bf16_layers_at_end"] = 2;
  CHECK(refusal(bad) ==
        "test.json: training.bf16_layers_at_end: applies to precision fp8 or nvfp4 only (the other layers' GEMMs are "
        "already 16-bit)");
  auto many = j;
  many["training"]["bf16_layers_at_start"] = 10;
  many["training"]["bf16_layers_at_end"] = 7;
  CHECK(refusal(many) == "test.json: training.bf16_layers_at_end: 10 + 7 BF16 layers exceed the model's 16 layers");
}

TEST_CASE("multi-token prediction in BF16 under FP8: the modules cost what they cost in a BF16 run") {
  // One multi-token prediction module on one pipeline stage: its time adds to the step's. Kept in
  // BF16 (Megatron-Core's keep_mtp_spec_in_bf16) it costs what the BF16 run's module costs, to the
  // nanosecond (gradients reduced in fp32 either way), and the layers around it keep FP8's time.
  auto j = base(8, 1, 1, 8);
  j["cluster"] = "dgx-b200";
  j["model"]["mtp_layers"] = 1;
  auto time = [&](const char* precision, bool mtp, bool bf16_mtp) {
    auto k = j;
    k["training"]["precision"] = precision;
    if (!mtp) k["model"].erase("mtp_layers");
    if (bf16_mtp) k["training"]["module_precision"] = {{"mtp", "bf16"}};
    return parallel::simulate_step(scenario(k)).step_time_s;
  };
  const double bf16_module = time("bf16", true, false) - time("bf16", false, false);
  const double fp8_module = time("fp8", true, false) - time("fp8", false, false);
  CHECK(fp8_module < bf16_module);
  CHECK(time("fp8", true, true) - time("fp8", false, false) == Approx(bf16_module).epsilon(1e-9));
  // Refused where there is nothing to keep.
  auto none = j;
  none["model"].erase("mtp_layers");
  none["training"]["precision"] = "fp8";
  none["training"]["module_precision"] = {{"mtp", "bf16"}};
  CHECK(refusal(none) == "test.json: training.module_precision.mtp: the model has no multi-token prediction layers");
}

TEST_CASE("context parallelism in a hybrid model: Mamba all-to-alls on the CP group, reported as CP") {
  // A small hybrid model (Mamba, attention, MLP) at cp 2: the Mamba blocks' all-to-alls run on the CP
  // group's stream, exposed (nothing overlaps them), and the attention block rings its K/V blocks.
  nlohmann::json model = {{"name", "hybrid"},  {"hybrid_pattern", "M*M-"}, {"hidden", 1024},    {"heads", 8},
                          {"kv_heads", 8},     {"ffn_hidden", 4096},       {"vocab", 1024},     {"mlp", "squared_relu"},
                          {"mamba_heads", 32}, {"mamba_head_dim", 64},     {"mamba_state", 64}, {"mamba_groups", 4}};
  nlohmann::json j = {{"model", model},
                      {"cluster", "dgx-h100"},
                      {"gpus", 2},
                      {"parallel", {{"cp", 2}}},
                      {"training", {{"micro_batch", 1}, {"global_batch", 4}, {"seq_len", 8192}}}};
  const auto r = parallel::simulate_step(scenario(j));
  CHECK(r.mean.cp_exposed_s > 0);
  auto no_cp = j;
  no_cp["gpus"] = 1;
  no_cp["parallel"]["cp"] = 1;
  no_cp["training"]["seq_len"] = 4096;  // the same tokens per GPU
  CHECK(parallel::simulate_step(scenario(no_cp)).mean.cp_exposed_s == 0);
  // Megatron-Core's checks: the CP size divides the Mamba heads per TP rank, and it and the groups
  // per TP rank divide one another.
  auto heads = j;
  heads["gpus"] = 64;
  heads["parallel"]["cp"] = 64;
  CHECK(refusal(heads) == "test.json: parallel.cp: 64 does not divide the Mamba heads per tensor-parallel rank (32)");
  auto groups = j;
  groups["model"]["mamba_groups"] = 8;
  groups["gpus"] = 16;
  groups["parallel"]["cp"] = 16;
  groups["training"]["seq_len"] = 16384;
  CHECK(refusal(groups) == "accepted");
  groups["model"]["mamba_groups"] = 32;
  groups["model"]["mamba_heads"] = 96;
  groups["gpus"] = 3;
  groups["parallel"]["cp"] = 3;
  groups["training"]["seq_len"] = 6144;
  CHECK(refusal(groups) ==
        "test.json: parallel.cp: 3 and the Mamba groups per tensor-parallel rank (32) must divide one another");
}

TEST_CASE("distributed optimizer instances: states sharded within an instance, the shard all-reduced across") {
  // 16 uniform layers on 8 GPUs, dp 8 in 2 instances of 4 consecutive ranks: the Adam states of a
  // rank are a quarter of its parameters' (not an eighth); the gradients are reduce-scattered within
  // the instance (the whole buffer, as without instances) and the quarter each rank holds is then
  // all-reduced with the other instance's rank at the same place: ranks 0 and 4.
  auto j = base(8, 1, 1, 16);
  j["parallel"]["zero"] = 1;
  auto two = j;
  two["parallel"]["distributed_optimizer_instances"] = 2;
  const auto one_r = parallel::simulate_step(scenario(j));
  const auto two_r = parallel::simulate_step(scenario(two));
  CHECK(two_r.memory[0].peak_breakdown_bytes[parallel::kOptimizer] ==
        2 * one_r.memory[0].peak_breakdown_bytes[parallel::kOptimizer]);
  const auto s = scenario(two);
  hardware::ComputeModel cm(s.cluster.gpu);
  const auto plan = parallel::build_step(s, cm);
  const std::int64_t params = plan.stages[0].params_per_rank;
  std::int64_t rs = 0, ar = 0;
  for (const auto& t : plan.programs[0].stream(parallel::kDpComm)) {
    if (t.op == static_cast<std::uint16_t>(network::CollectiveOp::reduce_scatter)) rs += t.bytes;
    if (t.op == static_cast<std::uint16_t>(network::CollectiveOp::all_reduce)) ar += t.bytes;
  }
  CHECK(rs == 4 * params);              // fp32 gradients, the whole buffer
  CHECK(ar == 4 * ((params + 3) / 4));  // the instance's shard of 4 ranks
  const auto& groups = plan.groups;
  const auto intra = groups.placement(plan.bindings[0].group[parallel::kDpGroup]);
  const auto inter = groups.placement(plan.bindings[0].group[parallel::kDpInterGroup]);
  CHECK(std::vector<std::uint32_t>(intra.begin(), intra.end()) == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK(std::vector<std::uint32_t>(inter.begin(), inter.end()) == std::vector<std::uint32_t>{0, 4});

  auto bad = two;
  bad["parallel"]["distributed_optimizer_instances"] = 3;
  CHECK(refusal(bad) ==
        "test.json: parallel.distributed_optimizer_instances: 3 does not divide the dp*cp = 8*1 = 8 ranks the "
        "optimizer is sharded over");
  auto no_zero = two;
  no_zero["parallel"]["zero"] = 0;
  CHECK(refusal(no_zero) ==
        "test.json: parallel.distributed_optimizer_instances: applies to the distributed optimizer (zero 1, "
        "Megatron's --num-distributed-optimizer-instances) and to fully sharded data parallelism (zero 3: hybrid "
        "sharding, HSDP) only");
}

TEST_CASE("hybrid sharding's outer optim strategy shards the optimizer states across the replicas") {
  // zero 3 on 8 GPUs in 2 replicas of 4-way sharding: each rank keeps the Adam states of a quarter of
  // its parameters (no_shard) or, with the states sharded across the replicas too, of an eighth, as
  // plain zero 3 over all 8; the weights and gradients stay sharded 4 ways either way.
  auto j = base(8, 1, 1, 16);
  j["parallel"]["zero"] = 3;
  j["parallel"]["distributed_optimizer_instances"] = 2;
  auto optim = j;
  optim["parallel"]["outer_dp_sharding_strategy"] = "optim";
  auto plain = j;
  plain["parallel"].erase("distributed_optimizer_instances");
  const auto hsdp_r = parallel::simulate_step(scenario(j));
  const auto optim_r = parallel::simulate_step(scenario(optim));
  const auto plain_r = parallel::simulate_step(scenario(plain));
  const auto bytes = [](const parallel::StepResult& r, parallel::MemCategory c) {
    return r.memory[0].peak_breakdown_bytes[c];
  };
  CHECK(bytes(optim_r, parallel::kOptimizer) == bytes(plain_r, parallel::kOptimizer));
  CHECK(bytes(hsdp_r, parallel::kOptimizer) ==
        Approx(2.0 * static_cast<double>(bytes(optim_r, parallel::kOptimizer))).epsilon(1e-6));
  CHECK(bytes(optim_r, parallel::kWeights) == bytes(hsdp_r, parallel::kWeights));
  auto bad = j;
  bad["parallel"]["distributed_optimizer_instances"] = 1;
  bad["parallel"]["outer_dp_sharding_strategy"] = "optim";
  CHECK(refusal(bad) ==
        "test.json: parallel.outer_dp_sharding_strategy: \"optim\" applies to hybrid sharding only "
        "(zero 3 with distributed_optimizer_instances > 1)");
}

TEST_CASE("context parallelism's all-to-all and all-gather types: the collectives around each attention") {
  // The uniform model (32 heads of 128, no GQA) at cp 2, micro-batch 1 of 4096 tokens: each rank
  // holds 2048 tokens, so Q is 2048·4096·2 B = 16 MiB and K with V 32 MiB. a2a: per layer forward
  // one all-to-all of Q, K and V (48 MiB) and one of the output (16 MiB); backward one of the output
  // gradient (16 MiB) and one of dQ, dK, dV (48 MiB). allgather: K and V gathered from both ranks
  // (64 MiB) in each pass, dK and dV reduce-scattered (64 MiB) in the backward.
  auto j = base(2, 1, 1, 2);
  j["parallel"]["cp"] = 2;
  j["training"]["seq_len"] = 4096;
  const std::int64_t mib = 1 << 20;
  auto cp_bytes = [&](const char* type, network::CollectiveOp op) {
    auto k = j;
    k["parallel"]["cp_comm_type"] = type;
    const auto s = scenario(k);
    hardware::ComputeModel cm(s.cluster.gpu);
    const auto plan = parallel::build_step(s, cm);
    std::int64_t bytes = 0;
    for (const auto& t : plan.programs[0].stream(parallel::kCpSend))
      if (t.kind == engine::TaskKind::collective && t.op == static_cast<std::uint16_t>(op)) bytes += t.bytes;
    return bytes;
  };
  const std::int64_t layers_and_micro_batches = 16 * 2;  // global batch 2 on one replica: 2 micro-batches
  CHECK(cp_bytes("a2a", network::CollectiveOp::all_to_all) == layers_and_micro_batches * (48 + 16 + 16 + 48) * mib);
  CHECK(cp_bytes("allgather", network::CollectiveOp::all_gather) == layers_and_micro_batches * 2 * 64 * mib);
  CHECK(cp_bytes("allgather", network::CollectiveOp::reduce_scatter) == layers_and_micro_batches * 64 * mib);
  CHECK(cp_bytes("p2p", network::CollectiveOp::all_to_all) == 0);
  // The same attention work either way; the exposed CP time differs.
  for (const char* type : {"a2a", "allgather"}) {
    auto k = j;
    k["parallel"]["cp_comm_type"] = type;
    const auto r = parallel::simulate_step(scenario(k));
    CHECK(r.mean.cp_exposed_s > 0);
  }
  // Transformer Engine's a2a splits the heads of each rank over the CP ranks.
  auto gqa = j;
  gqa["model"]["kv_heads"] = 1;
  gqa["parallel"]["cp_comm_type"] = "a2a";
  CHECK(refusal(gqa) ==
        "test.json: parallel.cp_comm_type: a2a needs cp (2) to divide the query heads (32) and the key/value heads (1) "
        "per tensor-parallel rank");
  auto one = base(2, 1, 1, 2);
  one["parallel"]["cp_comm_type"] = "a2a";
  CHECK(refusal(one) == "test.json: parallel.cp_comm_type: applies with cp > 1 only");
}

namespace {

// The scenario simulates with each of Transformer Engine's context-parallel types.
void runs_with_every_cp_type(const nlohmann::json& j) {
  for (const char* type : {"p2p", "allgather", "a2a"}) {
    auto k = j;
    k["parallel"]["cp_comm_type"] = type;
    INFO(type);
    CHECK(parallel::simulate_step(scenario(k)).step_time_s > 0);
  }
}

}  // namespace

TEST_CASE("context parallelism with sliding-window attention: the halo exchange, or the collectives on the window") {
  // cp_scenario's model (tp 2: 8 of its 32 heads... 4 key/value heads of 128 per rank) at cp 2 and
  // 16384 tokens, every other layer attending within 1024 tokens: each layer runs half its heads
  // full (the ring as before, half the bytes) and half windowed. p2p: of the 4 chunks of L = 4096
  // tokens, rank 1 holds chunks 1 and 2 and needs the 1024 keys before each, 2048 tokens of K and V
  // for the windowed half of the heads, each pass: 2 · 2048 · 4 · 128 · 2 B · 1/2 = 2 MiB; rank 0
  // needs less (chunk 0 has nothing before it), and the program moves the largest halo.
  auto j = cp_scenario(2, 16384);
  j["model"]["sliding_window"] = 1024;
  j["model"]["sliding_window_pattern"] = 2;
  auto plan_of = [&](const nlohmann::json& k) {
    const auto s = scenario(k);
    hardware::ComputeModel cm(s.cluster.gpu);
    return parallel::build_step(s, cm);
  };
  const std::int64_t layers_and_micro_batches = 8 * 2, mib = 1 << 20;  // global batch 2 on one replica
  {
    const auto plan = plan_of(j);
    const auto& p = plan.programs[0];
    CHECK(count(p, parallel::kCpSend, "send_kv_halo") == layers_and_micro_batches);
    CHECK(count(p, parallel::kCpSend, "send_kv_halo_grad") == layers_and_micro_batches);
    CHECK(count(p, parallel::kCpSend, "send_kv") == layers_and_micro_batches);  // the full half's ring: 1 hop
    const std::int64_t block = 2 * 8192 * (4 * 128) * 2 / 2;                    // s/cp tokens, half the heads
    for (const auto& t : p.stream(parallel::kCpSend)) {
      const std::string name = p.label_name(t.label);
      if (name.rfind("send_kv_halo", 0) == 0) CHECK(t.bytes == 2 * mib);
      if (name == "send_kv") CHECK(t.bytes == block);
    }
  }
  // allgather: the windowed half's K and V gathered whole (8 MiB a rank) like the full half's.
  {
    auto k = j;
    k["parallel"]["cp_comm_type"] = "allgather";
    const auto plan = plan_of(k);
    const auto& p = plan.programs[0];
    std::int64_t gathered = 0;
    for (const auto& t : p.stream(parallel::kCpSend))
      if (t.kind == engine::TaskKind::collective &&
          t.op == static_cast<std::uint16_t>(network::CollectiveOp::all_gather))
        gathered += t.bytes;
    CHECK(count(p, parallel::kCpSend, "send_kv_halo") == 0);
    // Per layer and pass (forward, backward): both halves, 2 ranks' K and V of 8192 tokens, half the heads each.
    CHECK(gathered == layers_and_micro_batches * 2 * 2 * (2 * 2 * 8192 * 4 * 128 * 2 / 2));
  }
  // A window wider than (cp − 1)·L = 4096 tokens: Transformer Engine all-gathers instead.
  {
    auto k = j;
    k["model"]["sliding_window"] = 6000;
    const auto plan = plan_of(k);
    const auto& p = plan.programs[0];
    CHECK(count(p, parallel::kCpSend, "send_kv_halo") == 0);
    int gathers = 0;
    for (const auto& t : p.stream(parallel::kCpSend))
      gathers += t.kind == engine::TaskKind::collective &&
                 t.op == static_cast<std::uint16_t>(network::CollectiveOp::all_gather);
    CHECK(gathers == layers_and_micro_batches * 2);  // the windowed half's, forward and backward
  }
  // Each type does the same attention work; the windowed kernels are 1/cp of cp 1's.
  workload::LayerConfig one, two;
  one.seq_len = two.seq_len = 16384;
  one.tp = two.tp = 2;
  one.sequence_parallel = two.sequence_parallel = true;
  two.cp = 2;
  const auto sc = scenario(j);
  auto windowed_flops = [&](const workload::LayerConfig& c) {
    double f = 0;
    for (const auto& op : workload::layer_forward(sc.model, c))
      if (op.kind == workload::OpKind::attention && op.attention.window > 0) f += op.flops;
    return f;
  };
  CHECK(windowed_flops(two) == Approx(windowed_flops(one) / 2));
  runs_with_every_cp_type(j);
}

TEST_CASE("context parallelism with packed sequences: each document split over the ranks, 1/cp of its attention") {
  // cp_scenario at 16384 tokens packed with documents of 2048: (s/L)·L²/2 causal pairs, half of them
  // on each of 2 CP ranks; the ring still passes the rank's whole K/V block, its kernels on blocks of
  // L/cp = 1024 keys.
  auto j = cp_scenario(2, 16384);
  j["training"]["document_tokens"] = 2048;
  const auto sc = scenario(j);
  workload::LayerConfig one, two;
  one.seq_len = two.seq_len = 16384;
  one.document_tokens = two.document_tokens = 2048;
  one.tp = two.tp = 2;
  one.sequence_parallel = two.sequence_parallel = true;
  two.cp = 2;
  auto attention_flops = [&](const workload::LayerConfig& c) {
    double f = 0;
    for (const auto& op : workload::layer_forward(sc.model, c))
      if (op.kind == workload::OpKind::attention) f += op.flops;
    return f;
  };
  const double heads = 32.0 / 2, hd = 128, s = 16384, l = 2048;
  CHECK(attention_flops(one) == Approx(4 * heads * hd * (s / l) * l * l / 2));
  CHECK(attention_flops(two) == Approx(attention_flops(one) / 2));
  runs_with_every_cp_type(j);
  // Packing cuts the attention time at the same layout.
  auto whole = j;
  whole["training"].erase("document_tokens");
  CHECK(parallel::simulate_step(sc).step_time_s < parallel::simulate_step(scenario(whole)).step_time_s);
}

TEST_CASE("context parallelism with multi-head latent attention: the ring moves K of the query-key head dim") {
  // configs/deepseek-v3-gb200-256.json at cp 2: each K/V block holds the rank's 2048 tokens of 128
  // heads, K of 128 + 64 dims and V of 128: 2048 · 128 · (192 + 128) · 2 B.
  auto j = util::read_json_file(std::string(TRAINSIM_SOURCE_DIR) + "/configs/deepseek-v3-gb200-256.json");
  j["parallel"]["cp"] = 2;
  const auto s = scenario(j);
  hardware::ComputeModel cm(s.cluster.gpu);
  const auto plan = parallel::build_step(s, cm);
  const auto& p = plan.programs[0];
  REQUIRE(count(p, parallel::kCpSend, "send_kv") > 0);
  for (const auto& t : p.stream(parallel::kCpSend))
    if (p.label_name(t.label) == "send_kv") CHECK(t.bytes == 2048 * 128 * (192 + 128) * 2);
  j["parallel"]["cp_comm_type"] = "a2a";
  CHECK(refusal(j) ==
        "test.json: parallel.cp_comm_type: context parallelism with multi-head latent attention runs on Transformer "
        "Engine's p2p ring only, not a2a");
}

TEST_CASE("shared expert overlap: the shared expert beside the token all-to-alls, the routed experts after them") {
  // DeepSeek-V3 on 256 GB200 with the alltoall dispatcher (configs/deepseek-v3-gb200-256.json): with
  // the overlap the shared expert's forward runs beside each dispatch all-to-all and its backward
  // beside each combine's, so less expert-parallel time is exposed and the step is shorter; the
  // work is the same.
  auto j = util::read_json_file(std::string(TRAINSIM_SOURCE_DIR) + "/configs/deepseek-v3-gb200-256.json");
  const auto off = parallel::simulate_step(scenario(j));
  j["parallel"]["moe_shared_expert_overlap"] = true;
  const auto on = parallel::simulate_step(scenario(j));
  CHECK(on.mean.ep_exposed_s < off.mean.ep_exposed_s);
  CHECK(on.step_time_s < off.step_time_s);
  CHECK(on.mean.compute_s == Approx(off.mean.compute_s).epsilon(1e-9));
  // Refused where there is nothing to overlap, or with the combined 1F1B.
  j["parallel"]["ep"] = 1;
  CHECK(refusal(j) ==
        "test.json: parallel.moe_shared_expert_overlap: needs ep > 1 (it overlaps the token all-to-alls)");
}

// Experts on every other layer (Megatron-Core's --moe-layer-freq 2): layers 0, 2, 4 and 6 of 8 run
// the experts and their token all-to-alls, the others a dense MLP of 2048 (the same FLOPs per token
// as top 4 of experts of 512 here: 3·1024·2048 = 4·3·1024·512). Nothing overlaps the all-to-alls on
// one pipeline stage, so half the MoE layers expose half the all-to-all time; the parameters are four
// layers' experts and four dense MLPs; a pipelined run's symmetric simulation gives the full one's
// step time.
TEST_CASE("MoE on every other layer: half the all-to-alls, dense MLPs between") {
  auto all = moe_scenario(8, 1, 1, 8, 1);
  auto half = all;
  half["model"]["moe_layer_freq"] = 2;
  half["model"]["ffn_hidden"] = 2048;
  const auto a = parallel::simulate_step(scenario(all));
  const auto sc = scenario(half);
  CHECK(sc.model.moe_layer_pattern == "10101010");
  const auto h = parallel::simulate_step(sc);
  CHECK(h.mean.ep_exposed_s == Approx(a.mean.ep_exposed_s / 2).epsilon(1e-6));
  const auto& m = sc.model;
  CHECK(m.main_params() ==
        4 * m.params_per_layer() + 4 * m.dense_variant().params_per_layer() + 2 * m.embedding_params() + m.hidden);
  auto piped = moe_scenario(16, 1, 2, 8, 1);
  piped["model"]["moe_layer_freq"] = nlohmann::json::array({0, 1, 1, 0, 0, 1, 1, 0});
  piped["model"]["ffn_hidden"] = 2048;
  const auto ps = scenario(piped);
  parallel::BuildOptions full;
  full.all_ranks = true;
  CHECK(parallel::simulate_step(ps).step_time_s == parallel::simulate_step(ps, full).step_time_s);
}

// DualPipeV, pp 4, 8 micro-batches (2p), 16 layers in 8 virtual stages of 2 placed in a V: rank r
// holds stages r and 7 - r, so rank 0 the embedding with layers 0-1 and layers 14-15 with the output
// layer, rank 3 layers 6-7 and 8-9. Rank 0's passes, by the schedule's phases (r = 0, p = 4):
// 6 F0; F0 F1; 3 x (B1 input, W, F1); F0 with B1, F1 with B0; 3 x (B1, F1 with B0); B1, B0 input;
// 3 x (W, B0 input); W. Its chunk-1 forwards receive from rank 1 and its chunk-0 backwards receive
// from rank 1 (its chunk-0 forwards start at the embedding, its chunk-1 backwards at the loss):
// f (F1), 3 f, then f b (the pair), 3 x f b, b, 3 b. Seven passes are deferred (3 + 1 + 3), each
// a weight task per unit of its chunk: 3 units (2 layers and the output layer, or the embedding).
TEST_CASE("dualpipev: the layers in a V, the embedding and the output layer on rank 0, DualPipeV's order") {
  auto j = base(4, 1, 4, 8);
  j["parallel"]["schedule"] = "dualpipev";
  const auto sc = scenario(j);
  CHECK(sc.parallel.virtual_stages == 2);
  CHECK(config::chunk_first_layer(sc, 0, 0) == 0);
  CHECK(config::chunk_first_layer(sc, 0, 1) == 14);
  CHECK(config::chunk_first_layer(sc, 1, 1) == 12);
  CHECK(config::chunk_first_layer(sc, 3, 0) == 6);
  CHECK(config::chunk_first_layer(sc, 3, 1) == 8);
  hardware::ComputeModel cm(sc.cluster.gpu);
  auto plan = parallel::build_step(sc, cm);
  const std::string f = "recv_forward", b = "recv_backward";
  CHECK(labels(plan.programs[0], parallel::kPpRecv) ==
        std::vector<std::string>{f, f, f, f, f, b, f, b, f, b, f, b, b, b, b, b});
  int weights = 0;
  for (const auto& t : plan.programs[0].stream(parallel::kCompute))
    if (plan.programs[0].label_name(t.label).rfind("weight_grad", 0) == 0) ++weights;
  CHECK(weights == 7 * 3);
  // The output layer lives on rank 0: its parameters there, none on rank 3.
  CHECK(plan.stages[0].has_head);
  CHECK(!plan.stages[3].has_head);
  CHECK(plan.stages[0].params_per_rank > plan.stages[3].params_per_rank);
}

// Every rank pairs its sends and receives in order for any pipeline depth and micro-batch count the
// schedule takes (a symmetric run gives the full run's step time; a mismatched pair would hang or
// deadlock); with equal stages DualPipeV beats 1F1B, and on a mixture of experts it hides token
// all-to-alls behind the other chunk's compute.
TEST_CASE("dualpipev: every pipeline depth runs, faster than 1f1b; refused where it cannot run") {
  parallel::BuildOptions full;
  full.all_ranks = true;
  for (auto [pp, mbs] : {std::pair{2, 4}, std::pair{2, 7}, std::pair{4, 9}, std::pair{8, 16}, std::pair{8, 21}}) {
    auto j = base(pp, 1, pp, mbs);
    j["parallel"]["schedule"] = "dualpipev";
    const auto sc = scenario(j);
    INFO("pp " << pp << " micro-batches " << mbs);
    const auto sym = parallel::simulate_step(sc);
    CHECK(sym.step_time_s == parallel::simulate_step(sc, full).step_time_s);
    j["parallel"]["schedule"] = "1f1b";
    CHECK(sym.step_time_s < parallel::simulate_step(scenario(j)).step_time_s);
  }
  auto moe = moe_scenario(16, 1, 2, 8, 1);
  moe["training"]["global_batch"] = 128;  // 16 micro-batches
  const auto one = parallel::simulate_step(scenario(moe));
  moe["parallel"]["schedule"] = "dualpipev";
  const auto dual = parallel::simulate_step(scenario(moe));
  CHECK(dual.mean.ep_exposed_s < 0.8 * one.mean.ep_exposed_s);
  CHECK(dual.step_time_s < one.step_time_s);
  auto j = base(4, 1, 4, 6);
  j["parallel"]["schedule"] = "dualpipev";
  CHECK(refusal(j) ==
        "test.json: training.global_batch: gives 6 micro-batches per pipeline; dualpipev needs at least 2 x pp = 8");
  j["training"]["global_batch"] = 8;
  j["parallel"]["virtual_stages"] = 4;
  CHECK(refusal(j) ==
        "test.json: parallel.virtual_stages: dualpipev places 2 virtual stages on each rank (in a V): "
        "give 2 or leave it out");
  j["parallel"].erase("virtual_stages");
  j["parallel"]["first_stage_layers"] = 4;
  CHECK(refusal(j).find("dualpipev splits the layers evenly over its 2 x pp virtual stages") != std::string::npos);
  j["parallel"].erase("first_stage_layers");
  j["parallel"]["pp"] = 8;
  j["gpus"] = 8;
  j["training"]["global_batch"] = 16;
  j["model"]["layers"] = 24;
  CHECK(refusal(j) ==
        "test.json: parallel.pp: 2 x pp = 16 virtual stages do not divide layers (24); give a "
        "pipeline_layout");
  j["model"]["layers"] = 16;
  j["parallel"]["zero"] = 3;
  CHECK(refusal(j).find("zero 3 with the dualpipev schedule is not supported yet") != std::string::npos);
}

// Chunked attention (Llama 4's attention_chunk): a sequence within one chunk is causal attention; a
// longer one is refused, not simulated as something else.
TEST_CASE("attention_chunk: sequences within one chunk run, longer ones are one error") {
  auto j = base(8, 1, 1, 8);
  j["model"]["attention_chunk"] = 2048;
  const auto within = parallel::simulate_step(scenario(j));
  j["model"].erase("attention_chunk");
  CHECK(within.step_time_s == parallel::simulate_step(scenario(j)).step_time_s);
  j["model"]["attention_chunk"] = 1024;
  CHECK(refusal(j) ==
        "test.json: training.seq_len: 2048 tokens exceed the model's attention chunk (1024): chunked "
        "attention over several chunks is not supported yet (within one chunk it is causal attention)");
}

namespace {

// offload_scenario's GPU with fine-grained activation offloading of `modules` instead of whole layers.
nlohmann::json fine_offload_scenario(double host_GBps, const nlohmann::json& modules) {
  auto j = offload_scenario(host_GBps, 0);
  j["training"].erase("cpu_offload_layers");
  j["training"]["offload_modules"] = modules;
  return j;
}

}  // namespace

TEST_CASE("fine-grained offloading: every layer's listed modules go out, the top layer stays, reloads one ahead") {
  // One micro-batch on one GPU, 8 layers: its backward comes next, so the handler keeps the top
  // layer's groups (layer 7) and offloads layers 0..6. Each layer's backward waits for its tensors,
  // which came back while the layer above ran backward. A fast link hides the copies.
  const nlohmann::json attention = {"qkv_linear", "core_attn", "attn_proj"};
  const auto plain = scenario(offload_scenario(1000, 0));
  const auto qkv = scenario(fine_offload_scenario(1000, {"qkv_linear"}));
  const auto all = scenario(fine_offload_scenario(1000, attention));
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const auto fwd = workload::layer_forward(all.model, lc);
  const std::int64_t b_all = workload::offloaded_bytes(fwd, all.training.offload_modules, 0);
  const std::int64_t b_qkv = workload::offloaded_bytes(fwd, qkv.training.offload_modules, 0);
  REQUIRE(b_qkv > 0);
  REQUIRE(b_all > b_qkv);
  const auto base_r = parallel::simulate_step(plain);
  const auto qkv_r = parallel::simulate_step(qkv);
  const auto r = parallel::simulate_step(all);
  const auto act = [](const parallel::StepResult& x) {
    return x.memory[x.peak_rank].peak_breakdown_bytes[kActivations];
  };
  // The peak comes in the top layers' backward, while six or seven layers are still out: the two
  // lists' peaks differ by six to seven layers' worth of what one offloads and the other keeps.
  CHECK(act(qkv_r) - act(r) >= 6 * (b_all - b_qkv));
  CHECK(act(qkv_r) - act(r) <= 7 * (b_all - b_qkv));
  CHECK(act(base_r) - act(r) >= 6 * b_all);
  CHECK(r.host_offload_bytes == 7 * b_all);
  CHECK(r.step_time_s == Approx(base_r.step_time_s).epsilon(1e-3));
  hardware::ComputeModel cm(all.cluster.gpu);
  const auto plan = parallel::build_step(all, cm);
  // The copies out on the host-copy stream, the copies back on their own (Megatron-Core's D2H and
  // H2D streams).
  std::vector<std::string> out, back;
  for (int l = 0; l < 7; ++l) out.push_back("offload_to_host chunk 0 layer " + std::to_string(l));
  for (int l = 6; l >= 0; --l) back.push_back("reload_from_host chunk 0 layer " + std::to_string(l));
  CHECK(labels(plan.programs[0], parallel::kHostCopy) == out);
  CHECK(labels(plan.programs[0], parallel::kHostReload) == back);
}

TEST_CASE("fine-grained offloading under 1F1B: micro-batches in flight hold the host memory") {
  // pp 2, 4 micro-batches of 8 layers per stage. Stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3: micro-batch
  // 0's backward is the next one after its forward (its top layer stays), the others' are not, so
  // after F2 micro-batches 1 and 2 are out whole: 16 layers. Stage 1 runs each backward right after
  // its forward: 7 layers out at a time.
  auto j = fine_offload_scenario(1000, {"qkv_linear", "core_attn"});
  j["gpus"] = 2;
  j["parallel"]["pp"] = 2;
  j["model"]["layers"] = 16;
  j["training"]["global_batch"] = 4;
  const auto s = scenario(j);
  workload::LayerConfig lc;
  lc.seq_len = 2048;
  const std::int64_t b = workload::offloaded_bytes(workload::layer_forward(s.model, lc), s.training.offload_modules, 0);
  const auto r = parallel::simulate_step(s);
  CHECK(r.host_offload_bytes == 16 * b);
  auto plain = j;
  plain["training"].erase("offload_modules");
  CHECK(parallel::simulate_step(scenario(plain)).memory[0].peak_bytes > r.memory[0].peak_bytes);
}

TEST_CASE("fine-grained offloading is refused where Megatron-Core refuses it") {
  auto j = fine_offload_scenario(50, {"attn_proj"});
  CHECK(refusal(j) ==
        "test.json: training.offload_modules: \"attn_proj\" needs \"core_attn\" (Megatron-Core: the projection's "
        "input is the attention's output)");
  j = fine_offload_scenario(50, {"expert_fc1"});
  CHECK(refusal(j) ==
        "test.json: training.offload_modules: \"expert_fc1\" and \"moe_act\" need a mixture-of-experts model");
  j = fine_offload_scenario(50, {"mlp_norm"});
  CHECK(refusal(j).starts_with("test.json: training.offload_modules: \"mlp_norm\" needs a mixture-of-experts model"));
  j = fine_offload_scenario(50, {"attn_norm"});
  CHECK(refusal(j).starts_with("test.json: training.offload_modules: \"attn_norm\" needs multi-head latent"));
  j = fine_offload_scenario(50, {"fused_group_mlp"});
  CHECK(refusal(j) ==
        "test.json: training.offload_modules[0]: \"fused_group_mlp\" (Transformer Engine's op-fuser grouped MLP) is "
        "not supported yet");
  j = fine_offload_scenario(50, {"core_attn", "mlp"});
  CHECK(
      refusal(j).starts_with("test.json: training.offload_modules[1]: unknown module \"mlp\" (expected one of: "
                             "attn_norm, qkv_linear, core_attn"));
  j = fine_offload_scenario(50, {"core_attn"});
  j["training"]["cpu_offload_layers"] = 2;
  CHECK(refusal(j) ==
        "test.json: training.offload_modules: cannot be combined with cpu_offload_layers (Megatron-Core)");
  j = fine_offload_scenario(50, {"core_attn"});
  j["cluster"].erase("host_link_GBps");
  CHECK(refusal(j).starts_with("test.json: training.offload_modules: the topology \"dgx-h100\" states no host_link"));
  j = fine_offload_scenario(50, {"core_attn"});
  j["parallel"]["schedule"] = "gpipe";
  CHECK(refusal(j) ==
        "test.json: training.offload_modules: needs schedule 1f1b or interleaved (Megatron-Core's pipeline schedules)");
  CHECK(refusal(fine_offload_scenario(50, nlohmann::json::array())) == "accepted");
}

TEST_CASE("fp8_param_gather: FP8 weights gathered in a byte, and no cached FP8 copies beside BF16 weights") {
  // 16 layers on one stage of 16 data-parallel ranks with the distributed optimizer, FP8 on H100
  // (delayed scaling). Without fp8_param_gather Transformer Engine keeps each FP8 layer weight's
  // row-wise and transposed FP8 copies (2 bytes) beside the BF16 weight (2 bytes); with it the
  // weight is the FP8 tensor itself (its data and transpose, 2 bytes), and the distributed
  // optimizer's all-gather moves the layers' weights in one byte, the embedding and output layer
  // in two.
  auto j = base(16, 1, 1, 16);
  j["parallel"]["zero"] = 1;
  j["training"]["precision"] = "fp8";
  auto on = j;
  on["training"]["fp8_param_gather"] = true;
  const auto sc = scenario(j);
  const std::int64_t layers = 16 * workload::layer_params_per_rank(sc.model, 1);
  const std::int64_t params =
      layers + workload::embedding_params_per_rank(sc.model, 1) + workload::head_params_per_rank(sc.model, 1);
  const auto off_r = parallel::simulate_step(sc);
  const auto on_r = parallel::simulate_step(scenario(on));
  CHECK(off_r.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params + 2 * layers);
  CHECK(on_r.memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params);
  auto gathered = [](const nlohmann::json& doc) {
    const auto s = scenario(doc);
    hardware::ComputeModel cm(s.cluster.gpu);
    const auto plan = parallel::build_step(s, cm);
    std::int64_t bytes = 0;
    for (const auto& t : plan.programs[0].stream(parallel::kDpComm))
      if (plan.programs[0].label_name(t.label).rfind("param_all_gather", 0) == 0) bytes += t.bytes;
    return bytes;
  };
  CHECK(gathered(j) == 2 * params);
  CHECK(gathered(on) == 2 * params - layers);
  CHECK(on_r.step_time_s < off_r.step_time_s);
  // Layers kept in BF16 keep BF16 weights: neither cached nor gathered in FP8.
  auto bf16_ends = on;
  bf16_ends["training"]["fp8_recipe"] = "tensorwise";
  bf16_ends["training"]["bf16_layers_at_start"] = 2;
  bf16_ends["training"]["bf16_layers_at_end"] = 2;
  CHECK(gathered(bf16_ends) == 2 * params - 12 * workload::layer_params_per_rank(sc.model, 1));

  // MXFP8 on B200: gathered in BF16 (into the gradient buffer) either way; off, the cached copies are
  // row-wise and column-wise, a byte each plus an E8M0 scale per 32 elements.
  auto mx = j;
  mx["cluster"] = "dgx-b200";
  auto mx_on = mx;
  mx_on["training"]["fp8_param_gather"] = true;
  CHECK(gathered(mx) == 2 * params);
  CHECK(gathered(mx_on) == 2 * params);
  CHECK(parallel::simulate_step(scenario(mx)).memory[0].peak_breakdown_bytes[parallel::kWeights] ==
        2 * params + std::llround(static_cast<double>(layers) * 2 * (1 + 1.0 / 32)));
  CHECK(parallel::simulate_step(scenario(mx_on)).memory[0].peak_breakdown_bytes[parallel::kWeights] == 2 * params);
  // Per-tensor FP8 on Blackwell: its tensor cores take either layout, one cached copy.
  auto cs = mx;
  cs["training"]["fp8_recipe"] = "tensorwise";
  CHECK(parallel::simulate_step(scenario(cs)).memory[0].peak_breakdown_bytes[parallel::kWeights] ==
        2 * params + layers);

  // NVFP4 (no FP4 parameters in Megatron-Core): half a byte each way plus an FP8 scale per 16.
  auto fp4 = mx;
  fp4["training"]["precision"] = "nvfp4";
  CHECK(parallel::simulate_step(scenario(fp4)).memory[0].peak_breakdown_bytes[parallel::kWeights] ==
        2 * params + std::llround(static_cast<double>(layers) * 2 * (0.5 + 1.0 / 16)));

  // Refused where Megatron has no FP8 parameters to gather.
  auto bf16 = on;
  bf16["training"]["precision"] = "bf16";
  CHECK(refusal(bf16) ==
        "test.json: training.fp8_param_gather: applies to precision fp8 only (Megatron-Core keeps NVFP4 weights in "
        "BF16)");
  auto ddp = on;
  ddp["parallel"]["zero"] = 0;
  CHECK(refusal(ddp) ==
        "test.json: training.fp8_param_gather: needs a distributed optimizer or FSDP (parallel.zero 1 or more): "
        "Megatron-Core gathers FP8 parameters only there");
}

TEST_CASE("defer_embedding_wgrad_compute: the output layer's weight gradients run in the flush, the bucket after") {
  // 16 layers over 4 stages of 2 data-parallel ranks (distributed optimizer, overlapped reduction),
  // 8 micro-batches, a 64k vocabulary so the output layer's weight-gradient GEMM counts. Deferring
  // moves the last stage's work, it adds none: its kernel time is the same; the steady state no
  // longer waits for those GEMMs, so the step is shorter; the held inputs and output gradients raise
  // the last stage's peak, the more micro-batches are held the more; and the output layer's bucket is
  // reduced after the flush, the last of the stage's reductions instead of the first.
  auto j = base(8, 1, 4, 16);
  j["model"]["vocab"] = 65536;
  j["parallel"]["zero"] = 1;
  j["parallel"]["overlap_grad_reduce"] = true;
  auto deferred = [&](std::int64_t limit) {
    auto k = j;
    k["parallel"]["defer_embedding_wgrad_compute"] = true;
    if (limit > 0) k["parallel"]["wgrad_deferral_limit"] = limit;
    return k;
  };
  auto plan_of = [](const nlohmann::json& doc) {
    const auto s = scenario(doc);
    hardware::ComputeModel cm(s.cluster.gpu);
    return parallel::build_step(s, cm);
  };
  const auto plain = plan_of(j), all = plan_of(deferred(0));
  double plain_s = 0, all_s = 0;
  for (double k : plain.stages[3].kernel_s) plain_s += k;
  for (double k : all.stages[3].kernel_s) all_s += k;
  CHECK(all_s == Approx(plain_s).epsilon(1e-12));
  const auto r_plain = parallel::simulate_step(scenario(j));
  const auto r_all = parallel::simulate_step(scenario(deferred(0)));
  const auto r_two = parallel::simulate_step(scenario(deferred(2)));
  CHECK(r_all.step_time_s < r_plain.step_time_s);
  CHECK(r_all.memory[3].peak_bytes > r_two.memory[3].peak_bytes);
  CHECK(r_two.memory[3].peak_bytes > r_plain.memory[3].peak_bytes);
  // The first stages are untouched.
  CHECK(r_all.memory[0].peak_bytes == r_plain.memory[0].peak_bytes);
  auto reductions = [](const parallel::StepPlan& plan) {
    std::vector<std::string> out;
    for (const auto& name : labels(plan.programs[3], parallel::kDpComm))
      if (name.rfind("grad_reduce_scatter", 0) == 0) out.push_back(name);
    return out;
  };
  const auto before = reductions(plain), after = reductions(all);
  REQUIRE(before.size() > 1);
  CHECK(before.front() == "grad_reduce_scatter bucket 0");
  CHECK(after.back() == "grad_reduce_scatter bucket 0");
  CHECK(after.size() == before.size());

  // Refused where Megatron-Core refuses it, or trainsim does not model it.
  auto flat = deferred(0);
  flat["parallel"]["pp"] = 1;
  flat["gpus"] = 2;
  CHECK(refusal(flat) ==
        "test.json: parallel.defer_embedding_wgrad_compute: needs pipeline parallelism (pp > 1): the weight gradients "
        "wait for the pipeline's flush");
  auto unfused = deferred(0);
  unfused["training"]["gradient_accumulation_fusion"] = false;
  CHECK(refusal(unfused) ==
        "test.json: parallel.defer_embedding_wgrad_compute: needs gradient_accumulation_fusion (Megatron-Core's drain "
        "accumulates into main_grad)");
  auto fsdp = deferred(0);
  fsdp["parallel"]["zero"] = 3;
  CHECK(refusal(fsdp) ==
        "test.json: parallel.defer_embedding_wgrad_compute: not with Megatron FSDP (zero 2 or 3; NeMo turns it off "
        "there)");
  auto limit_alone = j;
  limit_alone["parallel"]["wgrad_deferral_limit"] = 4;
  CHECK(refusal(limit_alone) ==
        "test.json: parallel.wgrad_deferral_limit: applies to defer_embedding_wgrad_compute true only");
}

TEST_CASE("parameter gathers: whole chunks with align_param_gather, else each bucket on demand") {
  // The interleaved schedule with 2 chunks per stage over 8 data-parallel ranks, the gathers
  // overlapped. Aligned (the default, as Megatron-LM and Megatron-Bridge's interleaved recipes run
  // it) the two chunks' gathers are dispatched at the step's start; on demand a chunk's first bucket
  // waits for its first forward and each next bucket for the previous one's arrival, so the first
  // forwards wait longer. With one chunk align_param_gather changes nothing (Megatron's 1F1B has no
  // param_sync_func: always on demand).
  auto j = base(16, 1, 2, 32);
  j["parallel"]["zero"] = 1;
  j["parallel"]["overlap_grad_reduce"] = true;
  j["parallel"]["overlap_param_gather"] = true;
  auto one_chunk = j;
  j["parallel"]["schedule"] = "interleaved";
  j["parallel"]["virtual_stages"] = 2;
  auto with = [](nlohmann::json doc, bool align) {
    doc["parallel"]["align_param_gather"] = align;
    return parallel::simulate_step(scenario(doc));
  };
  const auto aligned = parallel::simulate_step(scenario(j));
  CHECK(with(j, true).step_time_s == aligned.step_time_s);
  CHECK(with(j, false).step_time_s > aligned.step_time_s);
  CHECK(with(one_chunk, false).step_time_s == with(one_chunk, true).step_time_s);
  // Without the overlap there is nothing to align.
  auto plain = j;
  plain["parallel"]["overlap_param_gather"] = false;
  plain["parallel"]["align_param_gather"] = false;
  CHECK(refusal(plain) == "test.json: parallel.align_param_gather: applies to overlap_param_gather true only");
}
