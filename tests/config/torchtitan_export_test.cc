// A torchtitan scenario written out as the torchtitan job configuration that runs it: importing the
// TOML gives the scenario back, on every torchtitan validation record and shipped config and on
// variants of them (hybrid sharding, the ring, checkpointing every other block), and what torchtitan
// cannot run as simulated is one error naming the key.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "config/torchtitan_config.h"
#include "config/torchtitan_export.h"
#include "util/error.h"
#include "util/json_node.h"

namespace fs = std::filesystem;
using trainsim::config::export_torchtitan;
using trainsim::config::Scenario;
using trainsim::util::InputError;

namespace {

Scenario parse(const nlohmann::json& doc, const std::string& file) {
  return trainsim::config::parse_scenario(trainsim::util::JsonNode(doc, file), trainsim::config::default_data_dir());
}

// What a torchtitan step depends on, one line per group of fields, so a difference names itself.
std::string describe(const Scenario& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const auto& t = s.training;
  std::string out;
  out += fmt::format("cluster {} gpus {}\n", s.cluster.name, s.gpus);
  out += fmt::format("model layers {} hidden {} heads {} kv {} head_dim {} ffn {} vocab {} params {}\n", m.layers,
                     m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab, m.total_params());
  out += fmt::format("tp {} pp {} cp {} dp {} sp {} schedule {} vp {} zero {} instances {} cp comm {} async tp {}\n",
                     p.tp, p.pp, p.cp, p.dp, p.sequence_parallel, static_cast<int>(p.schedule), p.virtual_stages,
                     p.zero, p.dist_opt_instances, static_cast<int>(p.cp_comm), p.tp_comm_overlap);
  std::string layout;
  for (std::int64_t k = 0; k < p.pp * trainsim::config::chunks_per_stage(p); ++k)
    layout += fmt::format("{} ", trainsim::config::chunk_layers(s, k % p.pp, k / p.pp));
  out += fmt::format("layout {}\n", layout);
  out += fmt::format("mbs {} gbs {} micro-batches {} seq {} recompute {} layers {} modules {} attention {}\n",
                     t.micro_batch, t.global_batch, t.num_micro_batches, t.seq_len, static_cast<int>(t.recompute),
                     t.recompute_layers, t.recompute_modules, static_cast<int>(t.attention));
  // The token budget as the steps it takes (torchtitan counts steps).
  const double steps = std::ceil(t.train_tokens / static_cast<double>(t.global_batch * t.seq_len));
  out += fmt::format("precision {} compile {} loss {} fp32 reduce {} framework {} steps {}\n",
                     static_cast<int>(t.precision), t.torch_compile, t.torch_compile_loss, t.grad_reduce_in_fp32,
                     static_cast<int>(t.framework), steps);
  return out;
}

// The scenario of `doc` exported, the TOML imported on the same cluster and GPUs, both parsed.
void round_trip(const nlohmann::json& doc, const std::string& name) {
  INFO(name);
  const Scenario original = parse(doc, name);
  const auto exported = export_torchtitan(original);
  INFO(exported.toml);
  trainsim::config::ImportOptions o;
  o.source = name + ".toml";
  o.cluster = doc["cluster"].get<std::string>();
  o.gpus = original.gpus;
  const auto imported = trainsim::config::import_torchtitan(exported.toml, {}, o);
  const Scenario back = parse(nlohmann::json::parse(imported.scenario.dump()), name + ".toml");
  CHECK(describe(back) == describe(original));
  CHECK(imported.unknown.empty());
  CHECK(imported.not_modelled.empty());
}

std::vector<std::pair<std::string, nlohmann::json>> torchtitan_scenarios() {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  const fs::path root = TRAINSIM_SOURCE_DIR;
  for (const auto& e : fs::directory_iterator(root / "validation/records")) {
    if (!e.path().filename().string().starts_with("torchtitan_")) continue;
    std::ifstream in(e.path());
    const auto record = nlohmann::json::parse(in);
    out.emplace_back(e.path().filename().string(), record["scenario"]);
  }
  for (const auto& e : fs::directory_iterator(root / "configs")) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const auto doc = nlohmann::json::parse(in);
    if (doc.contains("training") && doc["training"].value("framework", "") == "torchtitan")
      out.emplace_back(e.path().filename().string(), doc);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::string error_of(const nlohmann::json& doc) {
  try {
    export_torchtitan(parse(doc, "s.json"));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("export torchtitan: every torchtitan record and config imports back to the same scenario") {
  const auto scenarios = torchtitan_scenarios();
  REQUIRE(scenarios.size() >= 49);  // 48 torchtitan records (4 of them compiling the loss) and the 70B example
  for (const auto& [name, doc] : scenarios) round_trip(doc, name);
}

TEST_CASE("export torchtitan: hybrid sharding, the ring, every other block checkpointed, a token budget") {
  nlohmann::json doc = {{"model", "llama3.1-8b"},
                        {"cluster", "dgx-h100"},
                        {"gpus", 64},
                        {"parallel", {{"zero", 3}, {"distributed_optimizer_instances", 4}}},
                        {"training",
                         {{"framework", "torchtitan"},
                          {"micro_batch", 1},
                          {"global_batch", 256},
                          {"seq_len", 8192},
                          {"attention", "flash2"},
                          {"recompute", "full"},
                          {"recompute_layers", 16},
                          {"train_tokens", 2e9}}}};
  round_trip(doc, "hsdp");
  const auto exported = export_torchtitan(parse(doc, "hsdp"));
  // 64 data-parallel ranks as 4 replicas of 16; 16 of 32 blocks checkpointed: one block in 2;
  // ceil(2e9 / (256 x 8192)) = 954 steps.
  CHECK(exported.toml.find("data_parallel_replicate_degree = 4\ndata_parallel_shard_degree = 16\n") !=
        std::string::npos);
  CHECK(exported.toml.find("selective_ac_option = \"2\"") != std::string::npos);
  CHECK(exported.toml.find("steps = 954\n") != std::string::npos);
  CHECK(exported.toml.find("# run on each of the 8 hosts: torchrun --nnodes 8 --nproc_per_node 8") !=
        std::string::npos);

  auto ring = doc;
  ring["parallel"] = {{"zero", 3}, {"cp", 2}, {"cp_comm_type", "p2p"}, {"tp", 2}, {"sequence_parallel", true}};
  ring["training"]["global_batch"] = 32;
  ring["training"]["recompute"] = "selective";
  ring["training"].erase("recompute_layers");
  round_trip(ring, "ring");
  CHECK(export_torchtitan(parse(ring, "ring")).toml.find("context_parallel_rotate_method = \"alltoall\"") !=
        std::string::npos);

  auto gpipe = ring;
  gpipe["parallel"] = {{"zero", 3}, {"pp", 4}, {"schedule", "gpipe"}};
  gpipe["training"]["micro_batch"] = 2;
  gpipe["training"]["global_batch"] = 256;
  gpipe["training"]["grad_reduce_in_fp32"] = false;
  round_trip(gpipe, "gpipe");

  // FSDP2 without resharding after the forward.
  auto kept = ring;
  kept["parallel"] = {{"zero", 2}, {"zero2_param_gather", "per_unit"}};
  kept["training"]["global_batch"] = 64;
  round_trip(kept, "kept");
  CHECK(export_torchtitan(parse(kept, "kept")).toml.find("fsdp_reshard_after_forward = \"never\"") !=
        std::string::npos);
}

TEST_CASE("export torchtitan: what torchtitan cannot run as simulated is one error naming the key") {
  nlohmann::json doc = {{"model", "llama3.1-8b"},
                        {"cluster", "dgx-h100"},
                        {"gpus", 8},
                        {"parallel", {{"zero", 1}}},
                        {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 8192}}}};
  CHECK(error_of(doc) ==
        "s.json: training.framework: megatron is not a torchtitan step (training.framework "
        "\"torchtitan\"; --set training.framework=torchtitan predicts torchtitan's) (trainsim export "
        "torchtitan)");
  doc["parallel"]["zero"] = 3;
  doc["training"]["framework"] = "torchtitan";
  doc["training"]["attention"] = "flash2";
  auto wide = doc;
  wide["model"] = "qwen2-7b";
  CHECK(
      error_of(wide).starts_with("s.json: model: qwen2-7b has the widths of none of torchtitan's Llama flavors "
                                 "(llama3 8B, llama3 70B, llama3 405B, llama2 7B, llama2 13B, llama2 70B)"));
  // 5 of 32 blocks per chunk: no interval k checkpoints 32 / k = 5 of them.
  auto five = doc;
  five["training"]["recompute"] = "full";
  five["training"]["recompute_layers"] = 5;
  CHECK(error_of(five) ==
        "s.json: training.recompute_layers: 5 checkpointed blocks per chunk of the first stage's 32 "
        "has no torchtitan block interval (selective_ac_option checkpoints one block in k) (trainsim "
        "export torchtitan)");
  // 4 replicas (of 2 ranks each) cannot split the batch of 2 data-parallel ranks x cp 4.
  auto cp_replicas = doc;
  cp_replicas["parallel"] = {{"zero", 3}, {"cp", 4}, {"distributed_optimizer_instances", 4}};
  cp_replicas["training"]["global_batch"] = 2;
  CHECK(error_of(cp_replicas) ==
        "s.json: parallel.distributed_optimizer_instances: 4 replicas do not divide the 2 data-parallel ranks "
        "(torchtitan's replicas split the batch; context-parallel ranks shard within one) (trainsim export "
        "torchtitan)");
}
