#include "config/bridge_export.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "config/megatron_export.h"
#include "util/error.h"

namespace trainsim::config {

namespace {

// A YAML scalar that needs no quotes: a name or a number (YAML's words for true, false and null
// apart).
bool plain(std::string_view s) {
  if (s.empty()) return false;
  static const std::set<std::string_view> kWords{"true", "false", "null",  "yes",  "no",   "on",
                                                 "off",  "True",  "False", "None", "Null", "~"};
  if (kWords.contains(s)) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
  });
}

bool number(std::string_view s) {
  if (s.empty()) return false;
  std::size_t digits = 0;
  for (char c : s) {
    if (std::isdigit(static_cast<unsigned char>(c)) != 0)
      ++digits;
    else if (std::string_view("+-.eE").find(c) == std::string_view::npos)
      return false;
  }
  return digits > 0;
}

// A value as YAML writes it and as a Hydra override writes it (none for an object).
struct Value {
  std::string yaml;
  std::optional<std::string> hydra;
};

Value null_value() {
  return {"null", "null"};
}
Value boolean(bool b) {
  return {b ? "true" : "false", b ? "true" : "false"};
}
// A number or a name, as the flag spelled it.
Value scalar(const std::string& v) {
  if (number(v)) return {v, v};
  if (plain(v)) return {v, v};
  return {fmt::format("\"{}\"", v), fmt::format("'{}'", v)};
}
Value list(const std::vector<std::string>& items) {
  std::string yaml, hydra;
  for (const auto& i : items) {
    const Value v = scalar(i);
    yaml += fmt::format("{}{}", yaml.empty() ? "" : ", ", v.yaml);
    hydra += fmt::format("{}{}", hydra.empty() ? "" : ",", *v.hydra);
  }
  return {"[" + yaml + "]", "[" + hydra + "]"};
}
// An object Megatron-Bridge's YAML builds by calling (or, with _call_ false, naming) its target.
Value object(const std::string& target, const std::string& rest) {
  return {fmt::format("{{_target_: {}{}}}", target, rest), std::nullopt};
}

struct Entry {
  std::string key;
  Value value;
  std::string comment;
};

struct Section {
  std::string name;
  std::vector<Entry> entries;
};

class Exporter {
 public:
  Exporter(const nlohmann::json& doc, const Scenario& s) : doc_(doc), s_(s), m_(s.model) {}

  BridgeExport run() {
    if (s_.training.framework == Framework::megatron && s_.training.deepspeed)
      fail("training.framework",
           "megatron-deepspeed runs under DeepSpeed's engine; Megatron-Bridge runs Megatron-Core's (export megatron "
           "writes the Megatron-DeepSpeed script)");
    // Megatron-LM's command has no LoRA; Megatron-Bridge's peft section has: the flags of the same
    // run without it, and the adapters below.
    Scenario base = s_;
    base.training.lora = false;
    MegatronExport flags = export_megatron(doc_, base, "trainsim export bridge");
    for (auto& f : flags.flags) flags_[f.flag] = std::move(f.values);
    for (std::string& n : flags.notes) {
      const std::string script = "the script";
      for (auto p = n.find(script); p != std::string::npos; p = n.find(script, p + 1))
        n.replace(p, script.size(), "the configuration");
      notes_.push_back(std::move(n));
    }
    model();
    parallel();
    train();
    ddp();
    optimizer();
    mixed_precision();
    dataset();
    peft();
    leftover();
    std::vector<std::string> override_notes;
    std::vector<std::string> hydra = overrides(override_notes);
    return {render(), std::move(hydra), std::move(notes_), std::move(override_notes)};
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw util::InputError(s_.file, path, fmt::format("{} (trainsim export bridge)", problem));
  }

  // The flag of the same name as a key: "mamba_num_heads" is --mamba-num-heads.
  static std::string flag_of(std::string_view key) {
    std::string flag = fmt::format("--{}", key);
    std::replace(flag.begin(), flag.end(), '_', '-');
    return flag;
  }

  // The flag's values, marking it read; none when the command lacks it.
  std::optional<std::vector<std::string>> take(const std::string& flag) {
    const auto it = flags_.find(flag);
    if (it == flags_.end()) return std::nullopt;
    read_.insert(flag);
    return it->second;
  }
  std::optional<std::string> value(const std::string& flag) {
    auto v = take(flag);
    if (!v || v->empty()) return std::nullopt;
    return v->front();
  }
  bool on(const std::string& flag) { return take(flag).has_value(); }

  void put(Section& s, std::string key, Value v, std::string comment = {}) {
    s.entries.push_back({std::move(key), std::move(v), std::move(comment)});
  }
  // The flag's value, or null (the recipe's setting taken away) when the command lacks it.
  void put_flag(Section& s, std::string key, const std::string& flag, std::string comment = {}) {
    const auto v = value(flag);
    put(s, std::move(key), v ? scalar(*v) : null_value(), std::move(comment));
  }
  void put_switch(Section& s, std::string key, const std::string& flag, std::string comment = {}) {
    put(s, std::move(key), boolean(on(flag)), std::move(comment));
  }

  void model() {
    Section& g = model_;
    put_flag(g, "num_layers", "--num-layers");
    put_flag(g, "hidden_size", "--hidden-size");
    if (flags_.contains("--ffn-hidden-size")) put_flag(g, "ffn_hidden_size", "--ffn-hidden-size");
    put_flag(g, "num_attention_heads", "--num-attention-heads");
    if (m_.mla()) {
      put_switch(g, "multi_latent_attention", "--multi-latent-attention");
      put_flag(g, "q_lora_rank", "--q-lora-rank");
      put_flag(g, "kv_lora_rank", "--kv-lora-rank");
      put_flag(g, "qk_head_dim", "--qk-head-dim");
      put_flag(g, "qk_pos_emb_head_dim", "--qk-pos-emb-head-dim");
      put_flag(g, "v_head_dim", "--v-head-dim");
    } else {
      put(g, "multi_latent_attention", boolean(false));
      on("--group-query-attention");
      const auto groups = value("--num-query-groups");
      put(g, "num_query_groups", scalar(groups ? *groups : fmt::format("{}", m_.heads)),
          groups ? "grouped-query attention" : "");
      put_flag(g, "kv_channels", "--kv-channels");
    }
    put_switch(g, "qk_layernorm", "--qk-layernorm");
    const bool quick_geglu = on("--quick-geglu");
    const bool swiglu = on("--swiglu");
    const bool squared_relu = on("--squared-relu");
    put(g, "gated_linear_unit", boolean(swiglu || quick_geglu));
    put(g, "activation_func",
        object(quick_geglu    ? "megatron.core.fusions.fused_bias_geglu.quick_gelu"
               : swiglu       ? "torch.nn.functional.silu"
               : squared_relu ? "megatron.core.activations.squared_relu"
                              : "torch.nn.functional.gelu",
               ", _call_: false"),
        quick_geglu    ? "quick-GeGLU"
        : swiglu       ? "SwiGLU"
        : squared_relu ? "squared ReLU"
                       : "GELU");
    if (const auto clamp = value("--activation-func-clamp-value"))
      put(g, "activation_func_clamp_value", scalar(*clamp), "the experts' activation clamped");
    const auto norm = value("--normalization");
    put(g, "normalization", scalar(norm ? *norm : "LayerNorm"));
    put(g, "add_bias_linear", boolean(!on("--disable-bias-linear")));
    const auto position = value("--position-embedding-type");
    put(g, "position_embedding_type", scalar(position ? *position : "learned_absolute"));
    put(g, "share_embeddings_and_output_weights", boolean(!on("--untie-embeddings-and-output-weights")));
    put_flag(g, "hidden_dropout", "--hidden-dropout");
    put_flag(g, "attention_dropout", "--attention-dropout");
    if (const auto window = value("--window-size")) {
      // "left,0": Transformer Engine's window of `left` keys back and the query's own.
      const auto comma = window->find(',');
      put(g, "window_size",
          list({window->substr(0, comma), comma == std::string::npos ? "0" : window->substr(comma + 1)}),
          fmt::format("each query sees {} tokens", m_.sliding_window));
      put_flag(g, "window_attn_skip_freq", "--window-attn-skip-freq");
    } else {
      put(g, "window_size", null_value());
    }
    if (const auto pattern = value("--hybrid-override-pattern")) {
      put(g, "hybrid_override_pattern", scalar(*pattern), "M Mamba-2, * attention, - MLP, E experts");
      for (const char* k : {"mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups"})
        if (flags_.contains(flag_of(k))) put_flag(g, k, flag_of(k));
    }
    moe();
    put_flag(g, "mtp_num_layers", "--mtp-num-layers");
    if (m_.mtp_layers > 0) put_switch(g, "keep_mtp_spec_in_bf16", "--keep-mtp-spec-in-bf16");
    if (m_.hybrid())
      put_switch(g, "keep_mamba_stack_attention_linear_in_bf16", "--keep-mamba-stack-attention-linear-in-bf16");
    put(g, "vocab_size", scalar(fmt::format("{}", m_.vocab)),
        "Megatron-Bridge pads it to a multiple of 128 x tp (make_vocab_size_divisible_by)");
    put_flag(g, "seq_length", "--seq-length");
    take("--max-position-embeddings");
  }

  void moe() {
    Section& g = model_;
    if (!m_.moe()) {
      put(g, "num_moe_experts", null_value());
      return;
    }
    put_flag(g, "num_moe_experts", "--num-experts");
    put_flag(g, "moe_router_topk", "--moe-router-topk");
    put_flag(g, "moe_ffn_hidden_size", "--moe-ffn-hidden-size");
    put_flag(g, "moe_shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size");
    if (flags_.contains("--moe-latent-size")) put_flag(g, "moe_latent_size", "--moe-latent-size");
    put_flag(g, "moe_router_num_groups", "--moe-router-num-groups");
    put_flag(g, "moe_router_group_topk", "--moe-router-group-topk");
    // --moe-layer-freq's list, or 1 (every layer): Megatron-Bridge takes the list itself.
    take("--moe-layer-freq");
    if (!m_.hybrid()) {
      std::vector<std::string> layers;
      for (const char c : m_.moe_layer_pattern) layers.emplace_back(1, c);
      if (layers.empty() && m_.first_dense_layers > 0)
        for (std::int64_t i = 0; i < m_.layers; ++i) layers.emplace_back(i < m_.first_dense_layers ? "0" : "1");
      if (layers.empty())
        put(g, "moe_layer_freq", scalar("1"), "experts on every layer");
      else
        put(g, "moe_layer_freq", list(layers), "the layers with experts (1) and dense (0)");
    }
    put_switch(g, "moe_grouped_gemm", "--moe-grouped-gemm");
    put_switch(g, "moe_router_fusion", "--moe-router-fusion");
    put_switch(g, "moe_permute_fusion", "--moe-permute-fusion");
    put_switch(g, "moe_router_force_load_balancing", "--moe-router-force-load-balancing",
               "balanced routing, as trainsim simulates it and NVIDIA's benchmarks run; false to train");
  }

  void parallel() {
    Section& g = model_;
    const ParallelSpec& p = s_.parallel;
    put_flag(g, "tensor_model_parallel_size", "--tensor-model-parallel-size");
    put_flag(g, "pipeline_model_parallel_size", "--pipeline-model-parallel-size");
    put_flag(g, "virtual_pipeline_model_parallel_size", "--num-virtual-stages-per-pipeline-rank",
             p.schedule == Schedule::interleaved ? "the interleaved 1F1B schedule" : "");
    put(g, "context_parallel_size", scalar(fmt::format("{}", p.cp)));
    take("--context-parallel-size");
    if (const auto cp_comm = value("--cp-comm-type")) put(g, "cp_comm_type", scalar(*cp_comm));
    if (m_.moe()) {
      put_flag(g, "expert_model_parallel_size", "--expert-model-parallel-size");
      put_flag(g, "expert_tensor_parallel_size", "--expert-tensor-parallel-size");
    }
    put_switch(g, "sequence_parallel", "--sequence-parallel");
    put_flag(g, "num_layers_in_first_pipeline_stage", "--decoder-first-pipeline-num-layers");
    put_flag(g, "num_layers_in_last_pipeline_stage", "--decoder-last-pipeline-num-layers");
    put_switch(g, "account_for_embedding_in_pipeline_split", "--account-for-embedding-in-pipeline-split");
    put_switch(g, "account_for_loss_in_pipeline_split", "--account-for-loss-in-pipeline-split");
    put_flag(g, "pipeline_model_parallel_layout", "--pipeline-model-parallel-layout",
             flags_.contains("--pipeline-model-parallel-layout") ? "E embedding, t layer, m MTP module, L loss" : "");
    if (m_.moe()) {
      put_flag(g, "moe_token_dispatcher_type", "--moe-token-dispatcher-type");
      put_flag(g, "moe_expert_capacity_factor", "--moe-expert-capacity-factor");
      put_switch(g, "moe_pad_expert_input_to_capacity", "--moe-pad-expert-input-to-capacity");
      if (flags_.contains("--moe-expert-rank-capacity-factor"))
        put_flag(g, "moe_expert_rank_capacity_factor", "--moe-expert-rank-capacity-factor");
      if (flags_.contains("--moe-paged-stash")) put_switch(g, "moe_paged_stash", "--moe-paged-stash");
      put_switch(g, "moe_shared_expert_overlap", "--moe-shared-expert-overlap");
      moe_a2a_overlap_ = on("--overlap-moe-expert-parallel-comm");
      delay_wgrad_ = on("--delay-wgrad-compute");
      put(g, "overlap_moe_expert_parallel_comm", boolean(moe_a2a_overlap_));
      put(g, "delay_wgrad_compute", boolean(delay_wgrad_));
    }
    tp_comm_overlap_ = on("--tp-comm-overlap");
    put(g, "tp_comm_overlap", boolean(tp_comm_overlap_));
    recompute();
    put_switch(g, "cross_entropy_loss_fusion", "--cross-entropy-loss-fusion");
    if (on("--no-gradient-accumulation-fusion")) put(g, "gradient_accumulation_fusion", boolean(false));
    const bool offload = on("--cpu-offloading");
    put(g, "cpu_offloading", boolean(offload));
    if (offload) put_flag(g, "cpu_offloading_num_layers", "--cpu-offloading-num-layers");
    if (on("--fine-grained-activation-offloading")) {
      put(g, "fine_grained_activation_offloading", boolean(true));
      if (const auto modules = take("--offload-modules")) put(g, "offload_modules", list(*modules));
    }
    const auto graphs = value("--cuda-graph-impl");
    put(g, "cuda_graph_impl", scalar(graphs ? *graphs : "none"));
    if (const auto scope = take("--cuda-graph-scope")) put(g, "cuda_graph_scope", list(*scope));
    // Megatron-Core's AttnBackend by value, as a ConfigContainer dump writes it (enums.py: flash 1,
    // fused 2, unfused 3, local 4, auto 5).
    const std::string backend = value("--attention-backend").value_or("auto");
    constexpr std::array<std::string_view, 5> kBackends{"flash", "fused", "unfused", "local", "auto"};
    const auto at = std::find(kBackends.begin(), kBackends.end(), backend);
    TRAINSIM_ASSERT(at != kBackends.end());
    put(g, "attention_backend",
        object("megatron.core.transformer.enums.AttnBackend",
               fmt::format(", _call_: true, _args_: [{}]", at - kBackends.begin() + 1)),
        fmt::format("{}{}", backend,
                    backend == "auto" ? ": Transformer Engine's fused attention where it applies" : ""));
  }

  void recompute() {
    Section& g = model_;
    put_flag(g, "recompute_granularity", "--recompute-granularity");
    const auto granularity = value("--recompute-granularity");
    if (!granularity) return;
    if (*granularity == "selective") {
      const auto modules = take("--recompute-modules");
      put(g, "recompute_modules", list(modules ? *modules : std::vector<std::string>{"core_attn"}));
      return;
    }
    put_flag(g, "recompute_method", "--recompute-method");
    put_flag(g, "recompute_num_layers", "--recompute-num-layers");
  }

  void train() {
    Section& g = train_;
    put_flag(g, "micro_batch_size", "--micro-batch-size");
    put_flag(g, "global_batch_size", "--global-batch-size");
    if (flags_.contains("--train-samples"))
      put_flag(g, "train_samples", "--train-samples", fmt::format("{:g} tokens", s_.training.train_tokens));
    else
      put_flag(g, "train_iters", "--train-iters", "steps to time; a training run's budget is train_samples");
  }

  void ddp() {
    const ParallelSpec& p = s_.parallel;
    Section& g = ddp_;
    const bool distributed = on("--use-distributed-optimizer");
    put(g, "use_distributed_optimizer", boolean(distributed), distributed ? "zero 1" : "");
    const auto instances = value("--num-distributed-optimizer-instances");
    put(g, "num_distributed_optimizer_instances", scalar(instances ? *instances : "1"));
    if (const auto outer = take("--outer-dp-sharding-strategy"))
      put(g, "outer_dp_sharding_strategy", scalar(outer->front()));
    const bool fsdp = on("--use-megatron-fsdp");
    put(g, "use_megatron_fsdp", boolean(fsdp));
    if (fsdp)
      put_flag(g, "data_parallel_sharding_strategy", "--data-parallel-sharding-strategy",
               fmt::format("zero {}", p.zero));
    const bool grad = on("--overlap-grad-reduce");
    const bool param = on("--overlap-param-gather");
    put(g, "overlap_grad_reduce", boolean(grad));
    put(g, "overlap_param_gather", boolean(param));
    // Megatron-LM's default bucket, max(40 Mi, 1 Mi x dp x cp) parameters (the data-parallel ranks with
    // context parallelism's), written out: Megatron-Bridge's communication-overlap set-up would
    // otherwise make it 128 Mi.
    const auto bucket = value("--ddp-bucket-size");
    const double default_bucket = std::max(40e6, 1e6 * static_cast<double>(p.dp * p.cp));
    const std::string bucket_size = bucket ? *bucket : fmt::format("{}", static_cast<std::int64_t>(default_bucket));
    put(g, "bucket_size", scalar(bucket_size),
        bucket ? fmt::format("parameters: {} MB of gradients", p.dp_bucket_mb)
               : "parameters: Megatron-LM's default, max(40M, 1M x dp x cp)");
    put(g, "grad_reduce_in_fp32", boolean(grad_reduce_in_fp32()));
    // Megatron-Bridge applies comm_overlap's settings over the model's and ddp's at set-up.
    Section& c = comm_overlap_;
    put(c, "tp_comm_overlap", boolean(tp_comm_overlap_));
    put(c, "overlap_grad_reduce", boolean(grad));
    put(c, "overlap_param_gather", boolean(param));
    // Megatron-Bridge aligns the chunks' gathers where pp > 1 and vp > 1, as trainsim does unless told not to.
    if (on("--no-align-param-gather") && param) put(c, "align_param_gather", boolean(false), "gathers on demand");
    // Megatron-Bridge takes comm_overlap's bucket for the distributed optimizer only.
    if (distributed) put(c, "bucket_size", scalar(bucket_size));
    if (m_.moe()) {
      put(c, "overlap_moe_expert_parallel_comm", boolean(moe_a2a_overlap_));
      put(c, "delay_wgrad_compute", boolean(delay_wgrad_));
    }
    if (on("--defer-embedding-wgrad-compute")) {
      put(c, "defer_embedding_wgrad_compute", boolean(true), "the output layer's weight gradients in the flush");
      const auto limit = take("--wgrad-deferral-limit");
      put(c, "wgrad_deferral_limit", scalar(limit && !limit->empty() ? limit->front() : "0"), "0: every micro-batch");
    }
    put(optimizer_, "use_distributed_optimizer", boolean(distributed));
  }

  // fp32 gradient reduction: BF16's unless --grad-reduce-in-bf16, FP16's with
  // --accumulate-allreduce-grads-in-fp32.
  bool grad_reduce_in_fp32() {
    if (on("--fp16")) return on("--accumulate-allreduce-grads-in-fp32");
    return !on("--grad-reduce-in-bf16");
  }

  // A torch dtype as Megatron-Bridge's YAML names one.
  static Value dtype(const std::string& megatron) {
    const std::string_view torch = megatron == "bf16"   ? "bfloat16"
                                   : megatron == "fp16" ? "float16"
                                   : megatron == "fp8"  ? "uint8"
                                                        : "float32";
    return object(fmt::format("torch.{}", torch), ", _call_: false");
  }

  void optimizer() {
    Section& g = optimizer_;
    const bool aware = on("--use-precision-aware-optimizer");
    put(g, "use_precision_aware_optimizer", boolean(aware));
    if (aware) {
      for (const char* k : {"main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"}) {
        const auto v = value(flag_of(k));
        put(g, k, dtype(v ? *v : "fp32"), std::string_view(k) == "exp_avg_dtype" && v == "fp8" ? "fp8 as uint8" : "");
      }
      put(g, "store_param_remainders", boolean(!on("--no-store-param-remainders")));
    }
    const bool offload = on("--optimizer-cpu-offload");
    put(g, "optimizer_cpu_offload", boolean(offload));
    if (offload) {
      put_flag(g, "optimizer_offload_fraction", "--optimizer-offload-fraction");
      put_switch(g, "overlap_cpu_optimizer_d2h_h2d", "--overlap-cpu-optimizer-d2h-h2d");
    }
  }

  void mixed_precision() {
    Section& g = mixed_precision_;
    put_switch(g, "bf16", "--bf16");
    put_switch(g, "fp16", "--fp16");
    put_flag(g, "fp8", "--fp8-format");
    if (flags_.contains("--fp8-format"))
      put_flag(g, "fp8_recipe", "--fp8-recipe",
               s_.cluster.gpu.arch == hardware::Arch::blackwell ? "Blackwell: Transformer Engine's MXFP8" : "");
    if (on("--fp8-param-gather")) {
      put(g, "fp8_param_gather", boolean(true), "FP8 parameters (sets fp8_param too)");
      if (on("--reuse-grad-buf-for-mxfp8-param-ag"))
        put(g, "reuse_grad_buf_for_mxfp8_param_ag", boolean(true), "required with MXFP8");
    }
    put_flag(g, "fp4", "--fp4-format");
    if (flags_.contains("--fp4-format")) put_flag(g, "fp4_recipe", "--fp4-recipe");
    const bool bf16_layers = on("--first-last-layers-bf16");
    put(g, "first_last_layers_bf16", boolean(bf16_layers));
    if (bf16_layers) {
      put_flag(g, "num_layers_at_start_in_bf16", "--num-layers-at-start-in-bf16");
      put_flag(g, "num_layers_at_end_in_bf16", "--num-layers-at-end-in-bf16");
    }
    put(g, "grad_reduce_in_fp32", boolean(grad_reduce_in_fp32()));
  }

  void dataset() {
    // GPTDatasetConfig's field; the fine-tuning datasets' (LoRA's) is seq_length.
    put(dataset_, s_.training.lora ? "seq_length" : "sequence_length", scalar(fmt::format("{}", s_.training.seq_len)),
        "the recipe's data at this length");
    if (s_.training.document_tokens > 0)
      notes_.push_back(fmt::format(
          "training.document_tokens {}: packed documents come from the dataset (packed_sequence_specs), not a key",
          s_.training.document_tokens));
  }

  void peft() {
    const TrainingSpec& t = s_.training;
    if (!t.lora) return;
    Section& g = peft_;
    put(g, "_target_", scalar("megatron.bridge.peft.lora.LoRA"), "LoRA: the base model frozen");
    put(g, "dim", scalar(fmt::format("{}", t.lora_rank)));
    put(g, "target_modules", list(lora_target_names(t)));
  }

  // The command's flags this file has no key for: data and learning-rate settings the recipe keeps.
  void leftover() {
    static const std::set<std::string_view> kRecipes{"--mock-data", "--tokenizer-type", "--vocab-size",
                                                     "--lr",        "--min-lr",         "--lr-decay-style"};
    for (const auto& [flag, values] : flags_)
      if (!read_.contains(flag) && !kRecipes.contains(flag))
        notes_.push_back(fmt::format("{}: no Megatron-Bridge key written for it", flag));
  }

  static void render_section(std::string& out, const Section& s) {
    if (s.entries.empty()) return;
    out += s.name + ":\n";
    std::size_t width = 0;
    for (const Entry& e : s.entries) width = std::max(width, e.key.size() + e.value.yaml.size() + 2);
    width = std::min<std::size_t>(width, 56);
    for (const Entry& e : s.entries) {
      std::string line = fmt::format("  {}: {}", e.key, e.value.yaml);
      if (!e.comment.empty()) {
        line += std::string(width + 2 > line.size() ? width + 2 - line.size() : 0, ' ');
        line += "  # " + e.comment;
      }
      out += line + "\n";
    }
  }

  std::vector<const Section*> sections() const {
    return {&model_, &train_, &ddp_, &comm_overlap_, &optimizer_, &mixed_precision_, &dataset_, &peft_};
  }

  std::vector<std::string> overrides(std::vector<std::string>& notes) const {
    std::vector<std::string> out;
    std::vector<std::string> objects;
    for (const Section* s : sections())
      for (const Entry& e : s->entries) {
        if (s == &peft_) continue;
        if (e.value.hydra)
          out.push_back(fmt::format("{}.{}={}", s->name, e.key, *e.value.hydra));
        else
          objects.push_back(fmt::format("{}.{}", s->name, e.key));
      }
    if (!objects.empty()) {
      std::string joined;
      for (const auto& o : objects) joined += (joined.empty() ? "" : ", ") + o;
      notes.push_back(fmt::format(
          "{}: objects, which an override cannot build; the recipe's stand (the YAML writes them)", joined));
    }
    if (s_.training.lora)
      notes.push_back(
          fmt::format("peft: LoRA of rank {} comes from run_recipe.py's --peft_scheme lora, and "
                      "peft.dim={} (the YAML writes the section)",
                      s_.training.lora_rank, s_.training.lora_rank));
    return out;
  }

  std::string render() const {
    const auto [per_host, nodes] = launch_hosts(s_);
    std::string out;
    out += fmt::format("# The Megatron-Bridge configuration of {}, written by `trainsim export bridge`.\n", s_.file);
    out += "# The ConfigContainer keys that decide a training step, to lay over a recipe of the same model\n";
    out += "# (its data, tokenizer, learning rate, checkpoints and logging stay the recipe's).\n";
    out += fmt::format("# {} GPUs: {} host{} of {} ({}, {}).\n# On every host, in a Megatron-Bridge checkout:\n",
                       s_.gpus, nodes, nodes == 1 ? "" : "s", per_host, s_.cluster.name, s_.cluster.gpu.name);
    out += fmt::format(
        "#   torchrun --nproc-per-node {} --nnodes {} --node-rank \"$NODE_RANK\" --master-addr \"$MASTER_ADDR\" \\\n"
        "#     scripts/training/run_recipe.py --recipe RECIPE --dataset llm-pretrain-mock \\\n"
        "#     $(trainsim export bridge SCENARIO --overrides)   # these keys as Hydra overrides\n",
        per_host, nodes);
    if (doc_.contains("segment_gpus"))
      out += fmt::format("# Place the ranks in blocks of {} GPUs inside one NVLink domain (Slurm: --segment={}).\n",
                         doc_["segment_gpus"].get<std::int64_t>(), doc_["segment_gpus"].get<std::int64_t>() / per_host);
    out += "# `trainsim import bridge` reads this file back.\n\n";
    for (const Section* s : sections()) render_section(out, *s);
    return out;
  }

  const nlohmann::json& doc_;
  const Scenario& s_;
  const workload::ModelSpec& m_;
  std::map<std::string, std::vector<std::string>> flags_;
  std::set<std::string> read_;
  std::vector<std::string> notes_;
  bool tp_comm_overlap_ = false;
  bool moe_a2a_overlap_ = false;
  bool delay_wgrad_ = false;
  Section model_{"model", {}};
  Section train_{"train", {}};
  Section ddp_{"ddp", {}};
  Section comm_overlap_{"comm_overlap", {}};
  Section optimizer_{"optimizer", {}};
  Section mixed_precision_{"mixed_precision", {}};
  Section dataset_{"dataset", {}};
  Section peft_{"peft", {}};
};

}  // namespace

BridgeExport export_bridge(const nlohmann::json& doc, const Scenario& scenario) {
  return Exporter(doc, scenario).run();
}

}  // namespace trainsim::config
