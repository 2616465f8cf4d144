// `trainsim run --ops`: the op lists of each part of the model with the compute model's time for
// each op, as a table and as JSON.

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "config/scenario.h"
#include "hardware/compute_model.h"
#include "parallel/step_builder.h"
#include "report/ops_table.h"
#include "util/error.h"

using namespace trainsim;

namespace {

// GPT-style: 4 layers of 1024 with 16 heads, a GeLU MLP of 4096, on 8 H100 at tp 2 · pp 2, without
// sequence parallelism (so every tensor-parallel collective is an all-reduce).
config::Scenario gpt_scenario() {
  const nlohmann::json j = {{"model",
                             {{"name", "gpt"},
                              {"layers", 4},
                              {"hidden", 1024},
                              {"heads", 16},
                              {"kv_heads", 16},
                              {"ffn_hidden", 4096},
                              {"vocab", 1024},
                              {"mlp", "gelu"}}},
                            {"cluster", "dgx-h100"},
                            {"gpus", 8},
                            {"parallel", {{"tp", 2}, {"pp", 2}}},
                            {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 1024}}}};
  return config::parse_scenario(util::JsonNode(j, "gpt.json"), TRAINSIM_SOURCE_DIR);
}

const workload::Op& find(const parallel::OpList& list, const std::string& name) {
  for (const workload::Op& op : list.ops)
    if (op.name == name) return op;
  FAIL("no op " << name << " in " << list.part << " " << list.pass);
  return list.ops.front();
}

}  // namespace

TEST_CASE("op lists: the embedding, one list per kind of layer, the output layer; forward then backward") {
  const config::Scenario sc = gpt_scenario();
  const hardware::ComputeModel compute(sc.cluster.gpu);
  const auto lists = parallel::op_lists(sc, compute);
  REQUIRE(lists.size() == 6);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"embedding", "forward"}, {"embedding", "backward"},   {"layer", "forward"},
      {"layer", "backward"},    {"output layer", "forward"}, {"output layer", "backward"}};
  for (std::size_t i = 0; i < lists.size(); ++i) {
    CHECK(lists[i].part == expected[i].first);
    CHECK(lists[i].pass == expected[i].second);
  }
  CHECK(lists[2].layers == 4);

  // The QKV projection of one micro-batch (1 x 1024 tokens) on one of 2 TP ranks: 2 · 1024 · 1024 ·
  // 3072 / 2 FLOPs, timed as the catalog's GEMM model gives it: the FLOPs at the GPU's BF16 peak times
  // e_max · g(m) · g(n) · g(k), g(x) = x / (x + x0), or the bytes at the achieved HBM bandwidth if
  // longer, plus one launch and the fixed per-GEMM cost.
  const workload::Op& qkv = find(lists[2], "qkv");
  CHECK(qkv.flops == Approx(2.0 * 1024 * 1024 * 3072 / 2));
  const hardware::GpuSpec& g = sc.cluster.gpu;
  auto sat = [&g](double x) { return x / (x + g.gemm_half_dim); };
  const double compute_s = qkv.flops / (g.bf16_flops * g.gemm_efficiency * sat(1024) * sat(1536) * sat(1024));
  const double memory_s = qkv.bytes / (g.hbm_Bps * g.hbm_efficiency);
  const hardware::OpTime t = compute.breakdown(qkv);
  CHECK(t.compute_s == Approx(compute_s));
  CHECK(t.memory_s == Approx(memory_s));
  CHECK(t.fixed_s == Approx(g.launch_s + g.gemm_overhead_s));
  CHECK(t.total_s == Approx(std::max(compute_s, memory_s) + g.launch_s + g.gemm_overhead_s));
  CHECK(t.total_s == compute.time_s(qkv));
  CHECK(std::string(t.bound()) == "compute");

  // The attention's all-reduce carries the layer's whole output: 1024 tokens x 1024 in bf16.
  const workload::Op& ar = find(lists[2], "attention_all_reduce");
  CHECK(ar.kind == workload::OpKind::tp_comm);
  CHECK(ar.comm_bytes == 1024 * 1024 * 2);
}

TEST_CASE("op lists cover every layer: a MoE model's dense first layers are a kind of their own") {
  const nlohmann::json j = {{"model", "deepseek-v3"},
                            {"cluster", "hgx-h800"},
                            {"gpus", 16},
                            {"parallel", {{"ep", 16}}},
                            {"training", {{"micro_batch", 1}, {"global_batch", 16}, {"seq_len", 4096}}}};
  const config::Scenario sc = config::parse_scenario(util::JsonNode(j, "dsv3.json"), TRAINSIM_SOURCE_DIR);
  const hardware::ComputeModel compute(sc.cluster.gpu);
  std::int64_t layers = 0;
  std::vector<std::string> parts;
  for (const auto& list : parallel::op_lists(sc, compute))
    if (list.pass == "forward") {
      parts.push_back(list.part);
      if (list.part != "embedding" && list.part != "output layer") layers += list.layers;
    }
  CHECK(layers == sc.model.layers);
  CHECK(parts == std::vector<std::string>{"embedding", "layer", "dense layer", "output layer"});
}

// The FP8 recipe follows the GPU as `export megatron` writes it: MXFP8 on Blackwell casts each of the
// 256 / 16 = 16 local experts' GEMM operands on its own (2 · (16 − 1) kernels beyond the layer's 4
// casts; ops.cc's expert_cast_kernels), Hopper's delayed scaling casts them in one multi-tensor kernel.
TEST_CASE("op lists: MoE FP8 casts per local expert on Blackwell (MXFP8), in one kernel on Hopper") {
  for (const char* cluster : {"dgx-b200", "hgx-h800"}) {
    INFO(cluster);
    const nlohmann::json j = {
        {"model", "deepseek-v3"},
        {"cluster", cluster},
        {"gpus", 16},
        {"parallel", {{"ep", 16}}},
        {"training", {{"micro_batch", 1}, {"global_batch", 16}, {"seq_len", 4096}, {"precision", "fp8"}}}};
    const config::Scenario sc = config::parse_scenario(util::JsonNode(j, "dsv3.json"), TRAINSIM_SOURCE_DIR);
    const hardware::ComputeModel compute(sc.cluster.gpu);
    const bool blackwell = std::string(cluster) == "dgx-b200";
    int seen = 0;
    for (const auto& list : parallel::op_lists(sc, compute)) {
      if (list.part != "layer") continue;
      const workload::Op& cast = find(list, list.pass == "forward" ? "fp8_cast_transpose" : "fp8_grad_cast_transpose");
      CHECK(cast.kernels == (blackwell ? 4 + 2 * (16 - 1) : 4));
      ++seen;
    }
    CHECK(seen == 2);
    // The alltoall dispatcher's CPU waits for the token counts after the permutation, once per MoE
    // layer's forward: the JSON says so (the output layer's list holds the MoE layer of the
    // multi-token prediction module).
    const nlohmann::json lists = report::ops_json(parallel::op_lists(sc, compute), compute);
    for (const auto& list : lists) {
      int syncs = 0;
      for (const auto& op : list.at("ops"))
        if (op.contains("host_sync")) {
          CHECK(op.at("name") == "moe_permute");
          ++syncs;
        }
      const bool moe_forward =
          list.at("pass") == "forward" && (list.at("part") == "layer" || list.at("part") == "output layer");
      CHECK(syncs == (moe_forward ? 1 : 0));
    }
  }
}

TEST_CASE("ops table and JSON: each op's time, the list's compute total, communication by bytes") {
  const config::Scenario sc = gpt_scenario();
  const hardware::ComputeModel compute(sc.cluster.gpu);
  const auto lists = parallel::op_lists(sc, compute);
  const nlohmann::json j = report::ops_json(lists, compute);
  REQUIRE(j.size() == lists.size());
  const nlohmann::json& fwd = j.at(2);
  CHECK(fwd.at("part") == "layer");
  CHECK(fwd.at("layers") == 4);
  double sum = 0, host = 0;
  bool saw_comm = false;
  for (const auto& op : fwd.at("ops")) {
    host += op.at("host_s").get<double>();
    if (op.at("kind") == "communication") {
      saw_comm = true;
      CHECK(op.at("collective") == "all_reduce");
      CHECK(op.at("group") == "tp");
      CHECK(!op.contains("time_s"));
      continue;
    }
    sum += op.at("time_s").get<double>();
  }
  CHECK(saw_comm);
  CHECK(fwd.at("compute_s").get<double>() == Approx(sum));
  CHECK(fwd.at("host_s").get<double>() == Approx(host));
  // A BF16 GEMM is one Transformer Engine module call on the CPU (parallel::host_costs, x86 host).
  const auto qkv = std::ranges::find_if(fwd.at("ops"), [](const nlohmann::json& op) { return op.at("name") == "qkv"; });
  REQUIRE(qkv != fwd.at("ops").end());
  CHECK(qkv->at("host_s").get<double>() == Approx(parallel::host_costs(sc.cluster).module_s));
  CHECK(!qkv->contains("host_sync"));

  const std::string text = report::ops_text(lists, compute);
  CHECK(text.find("  layer · 4 layers · forward\n") != std::string::npos);
  CHECK(text.find("  embedding · forward\n") != std::string::npos);
  CHECK(text.find("    qkv ") != std::string::npos);
  CHECK(text.find("all_reduce tp") != std::string::npos);
  CHECK(text == report::ops_text(lists, compute));
}
