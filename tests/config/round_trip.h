#pragma once
// What the Megatron-LM and Megatron-Bridge export tests share: a scenario parsed from its JSON, every
// field a step depends on as text (so that a round trip's difference names itself), and what a
// Megatron command or configuration cannot carry, set on the original the way import reads it back.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "util/json_node.h"

namespace trainsim::test {

using config::Scenario;

inline Scenario parse(const nlohmann::json& doc, const std::string& file) {
  return trainsim::config::parse_scenario(trainsim::util::JsonNode(doc, file), trainsim::config::default_data_dir());
}

// Every field of the model, the layout and the training settings that a step depends on (the
// model's name and the cluster's placement apart), one per line, so a difference names itself.
inline std::string describe(const Scenario& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const auto& t = s.training;
  const auto& o = t.optimizer;
  std::string out;
  out += fmt::format("cluster {} gpus {}\n", s.cluster.name, s.gpus);
  out += fmt::format("model layers {} hidden {} heads {} kv {} head_dim {} ffn {} vocab {} mlp {} tied {} dropout {}\n",
                     m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab,
                     static_cast<int>(m.mlp), m.tied_embeddings, m.dropout);
  out += fmt::format("window {} pattern {} qk_norm {} linear_bias {} post_norms {} glu_clamp {}\n", m.sliding_window,
                     m.sliding_window_pattern, m.qk_norm, m.linear_bias, m.post_norms, m.glu_clamp);
  out += fmt::format("experts {} k {} moe_ffn {} shared {} dense {} latent {} groups {} of {} pattern {}\n", m.experts,
                     m.experts_per_token, m.moe_ffn_hidden, m.shared_expert_ffn_hidden, m.first_dense_layers,
                     m.moe_latent, m.router_group_topk, m.router_groups, m.moe_layer_pattern);
  out += fmt::format("mla q {} kv {} rope {} v {} mtp {}\n", m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim,
                     m.v_head_dim, m.mtp_layers);
  out += fmt::format("hybrid {} mamba {} {} {} {} {} {}\n", m.hybrid_pattern, m.mamba_heads, m.mamba_head_dim,
                     m.mamba_state, m.mamba_groups, m.mamba_conv, m.mamba_chunk);
  out += fmt::format("params {}\n", m.total_params());
  out += fmt::format("tp {} pp {} cp {} dp {} ep {} etp {} sp {} schedule {} vp {} zero {} instances {}\n", p.tp, p.pp,
                     p.cp, p.dp, p.ep, p.etp, p.sequence_parallel, static_cast<int>(p.schedule), p.virtual_stages,
                     p.zero, p.dist_opt_instances);
  out += fmt::format("cp comm {} shared expert overlap {}\n", static_cast<int>(p.cp_comm), p.moe_shared_expert_overlap);
  out +=
      fmt::format("overlap grad {} param {} bucket {} tp_overlap {} a2a {} delay_wgrad {}\n", p.overlap_grad_reduce,
                  p.overlap_param_gather, p.dp_bucket_mb, p.tp_comm_overlap, p.moe_a2a_overlap, p.delay_wgrad_compute);
  out += fmt::format("stages first {} last {} account {} {}\n", p.first_stage_layers, p.last_stage_layers,
                     p.account_for_embedding, p.account_for_loss);
  std::string layout;
  for (auto n : p.layout_layers) layout += fmt::format("{} ", n);
  out += fmt::format("layout {}\n", layout);
  out += fmt::format("dispatcher {} capacity {} pad {} rank_capacity {} paged {} prefetch {} zero2 {}\n",
                     static_cast<int>(p.moe_dispatcher), p.moe_capacity_factor, p.moe_pad_to_capacity,
                     p.moe_rank_capacity_factor, p.moe_paged_stash, p.fsdp_prefetch,
                     static_cast<int>(p.zero2_param_gather));
  out += fmt::format("mbs {} gbs {} seq {} recompute {} modules {} layers {} attention {} precision {}\n",
                     t.micro_batch, t.global_batch, t.seq_len, static_cast<int>(t.recompute), t.recompute_modules,
                     t.recompute_layers, static_cast<int>(t.attention), static_cast<int>(t.precision));
  out += fmt::format("offload {} micro-batches {} host {} scale {} graphs {} full {} fp32 grads {} fused ce {}\n",
                     t.cpu_offload_layers, t.num_micro_batches, t.host_overhead, t.host_cost_scale, t.cuda_graph_scope,
                     t.cuda_graph_full_iteration, t.grad_reduce_in_fp32, t.fused_cross_entropy);
  out += fmt::format("documents {} tokens {} imbalance {} lora {} bf16 layers {} {}\n", t.document_tokens,
                     t.train_tokens, t.moe_load_imbalance, t.lora, t.bf16_layers_at_start, t.bf16_layers_at_end);
  out += fmt::format("deepspeed {} grad all-reduce {}\n", t.deepspeed, p.zero1_grad_all_reduce);
  out += fmt::format("module precision bf16 {} fp8 {} mtp {}\n", t.bf16_modules, t.fp8_modules, t.bf16_mtp);
  // The recipe the scenario runs (stated, or the GPU's: an export states the default explicitly).
  if (config::runs_fp8_recipe(t)) out += fmt::format("fp8 recipe {}\n", config::fp8_recipe_name(config::fp8_recipe(s)));
  if (t.fp8_param_gather) out += "fp8 param gather\n";
  if (s.parallel.align_param_gather == false) out += "parameter gathers on demand\n";
  if (s.parallel.defer_embedding_wgrad)
    out += fmt::format("output-layer wgrad deferred, limit {}\n", s.parallel.wgrad_deferral_limit);
  out += fmt::format("fusions: grad accumulation {} moe router {} moe permute {} moe grouped gemm {}\n",
                     t.gradient_accumulation_fusion, t.moe_router_fusion, t.moe_permute_fusion, t.moe_grouped_gemm);
  out += fmt::format("optimizer {} {} {} {} {} {} {} {}\n", o.use_precision_aware_optimizer,
                     static_cast<int>(o.main_params_dtype), static_cast<int>(o.exp_avg_dtype),
                     static_cast<int>(o.exp_avg_sq_dtype), o.store_param_remainders, o.optimizer_cpu_offload,
                     o.optimizer_offload_fraction, o.overlap_cpu_optimizer_d2h_h2d);
  return out;
}

// What the script cannot carry, as the export's notes say: set on the original the way the imported
// scenario has it.
inline Scenario expected_after_round_trip(Scenario s) {
  auto& t = s.training;
  // Megatron-LM's flash backend reads back as flash; Megatron-DeepSpeed runs FlashAttention-2.
  if (t.attention == trainsim::workload::AttentionImpl::flash2 && !t.deepspeed)
    t.attention = trainsim::workload::AttentionImpl::flash;
  if (t.attention == trainsim::workload::AttentionImpl::flash && t.deepspeed)
    t.attention = trainsim::workload::AttentionImpl::flash2;
  if (s.parallel.zero == 3) s.parallel.fsdp_prefetch = true;
  t.host_overhead = true;
  t.host_cost_scale = 1;
  t.moe_load_imbalance = 1;
  t.document_tokens = 0;
  // Without a token budget the script times 100 steps, which import reads as one.
  if (t.train_tokens == 0)
    t.train_tokens = 100.0 * static_cast<double>(t.global_batch) * static_cast<double>(t.seq_len);
  else
    t.train_tokens = std::ceil(t.train_tokens / static_cast<double>(t.seq_len)) * static_cast<double>(t.seq_len);
  return s;
}

// Every shipped config and every validation record's scenario, by file name.
inline std::vector<std::pair<std::string, nlohmann::json>> shipped_scenarios() {
  namespace fs = std::filesystem;
  const fs::path root = TRAINSIM_SOURCE_DIR;
  std::vector<std::pair<std::string, nlohmann::json>> docs;
  for (const auto& e : fs::directory_iterator(root / "configs"))
    if (e.path().extension() == ".json")
      docs.emplace_back(e.path().string(), trainsim::util::read_json_file(e.path().string()));
  for (const auto& e : fs::directory_iterator(root / "validation" / "records")) {
    auto record = trainsim::util::read_json_file(e.path().string());
    docs.emplace_back(e.path().string(), record["scenario"]);
  }
  std::sort(docs.begin(), docs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return docs;
}

}  // namespace trainsim::test
