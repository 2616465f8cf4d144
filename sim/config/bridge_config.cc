#include "config/bridge_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "util/error.h"

namespace trainsim::config {

namespace {

// How a key becomes a flag: its value; a switch when true; a switch when false (add_bias_linear
// false is --disable-bias-linear); its list of values; a torch dtype as Megatron's name for it.
enum class Kind { value, on, off, list, dtype };

struct Key {
  std::string_view path;  // "section.key"
  std::string_view flag;
  Kind kind;
  // Read only when this key is set (not null, false, 0 or "none"): the MoE keys with experts, the
  // MLA keys with multi_latent_attention, the Mamba keys with a hybrid pattern, ... (a dump carries
  // every key at its default).
  std::string_view needs = {};
};

// Read in this order; a later key of the same flag overrides an earlier one (comm_overlap's, when
// set, override the model's and ddp's, as Megatron-Bridge applies them at set-up).
constexpr auto kKeys = std::to_array<Key>({
    {"model.num_layers", "num-layers", Kind::value},
    {"model.hidden_size", "hidden-size", Kind::value},
    {"model.ffn_hidden_size", "ffn-hidden-size", Kind::value},
    {"model.num_attention_heads", "num-attention-heads", Kind::value},
    {"model.kv_channels", "kv-channels", Kind::value},
    {"model.normalization", "normalization", Kind::value},
    {"model.add_bias_linear", "disable-bias-linear", Kind::off},
    {"model.add_qkv_bias", "add-qkv-bias", Kind::on},
    {"model.activation_func_clamp_value", "activation-func-clamp-value", Kind::value},
    {"model.position_embedding_type", "position-embedding-type", Kind::value},
    {"model.share_embeddings_and_output_weights", "untie-embeddings-and-output-weights", Kind::off},
    {"tokenizer.vocab_size", "vocab-size", Kind::value},
    {"model.vocab_size", "vocab-size", Kind::value},
    {"model.hidden_dropout", "hidden-dropout", Kind::value},
    {"model.attention_dropout", "attention-dropout", Kind::value},
    {"model.qk_layernorm", "qk-layernorm", Kind::on},
    {"model.window_attn_skip_freq", "window-attn-skip-freq", Kind::value, "model.window_size"},
    {"model.num_moe_experts", "num-experts", Kind::value},
    {"model.moe_router_topk", "moe-router-topk", Kind::value, "model.num_moe_experts"},
    {"model.moe_ffn_hidden_size", "moe-ffn-hidden-size", Kind::value, "model.num_moe_experts"},
    {"model.moe_shared_expert_intermediate_size", "moe-shared-expert-intermediate-size", Kind::value,
     "model.num_moe_experts"},
    {"model.moe_latent_size", "moe-latent-size", Kind::value, "model.num_moe_experts"},
    {"model.moe_router_num_groups", "moe-router-num-groups", Kind::value, "model.num_moe_experts"},
    {"model.moe_router_group_topk", "moe-router-group-topk", Kind::value, "model.num_moe_experts"},
    {"model.moe_grouped_gemm", "moe-grouped-gemm", Kind::on, "model.num_moe_experts"},
    {"model.moe_router_fusion", "moe-router-fusion", Kind::on, "model.num_moe_experts"},
    {"model.moe_permute_fusion", "moe-permute-fusion", Kind::on, "model.num_moe_experts"},
    {"model.multi_latent_attention", "multi-latent-attention", Kind::on},
    {"model.q_lora_rank", "q-lora-rank", Kind::value, "model.multi_latent_attention"},
    {"model.kv_lora_rank", "kv-lora-rank", Kind::value, "model.multi_latent_attention"},
    {"model.qk_head_dim", "qk-head-dim", Kind::value, "model.multi_latent_attention"},
    {"model.qk_pos_emb_head_dim", "qk-pos-emb-head-dim", Kind::value, "model.multi_latent_attention"},
    {"model.v_head_dim", "v-head-dim", Kind::value, "model.multi_latent_attention"},
    {"model.mtp_num_layers", "mtp-num-layers", Kind::value},
    {"model.hybrid_override_pattern", "hybrid-override-pattern", Kind::value},
    {"model.mamba_num_heads", "mamba-num-heads", Kind::value, "model.hybrid_override_pattern"},
    {"model.mamba_head_dim", "mamba-head-dim", Kind::value, "model.hybrid_override_pattern"},
    {"model.mamba_state_dim", "mamba-state-dim", Kind::value, "model.hybrid_override_pattern"},
    {"model.mamba_num_groups", "mamba-num-groups", Kind::value, "model.hybrid_override_pattern"},
    {"model.tensor_model_parallel_size", "tensor-model-parallel-size", Kind::value},
    {"model.pipeline_model_parallel_size", "pipeline-model-parallel-size", Kind::value},
    {"model.context_parallel_size", "context-parallel-size", Kind::value},
    {"model.expert_model_parallel_size", "expert-model-parallel-size", Kind::value, "model.num_moe_experts"},
    {"model.expert_tensor_parallel_size", "expert-tensor-parallel-size", Kind::value, "model.num_moe_experts"},
    {"model.sequence_parallel", "sequence-parallel", Kind::on},
    {"model.virtual_pipeline_model_parallel_size", "num-virtual-stages-per-pipeline-rank", Kind::value},
    {"model.num_layers_in_first_pipeline_stage", "decoder-first-pipeline-num-layers", Kind::value},
    {"model.num_layers_in_last_pipeline_stage", "decoder-last-pipeline-num-layers", Kind::value},
    {"model.account_for_embedding_in_pipeline_split", "account-for-embedding-in-pipeline-split", Kind::on},
    {"model.account_for_loss_in_pipeline_split", "account-for-loss-in-pipeline-split", Kind::on},
    {"model.recompute_granularity", "recompute-granularity", Kind::value},
    {"model.recompute_method", "recompute-method", Kind::value, "model.recompute_granularity"},
    {"model.recompute_num_layers", "recompute-num-layers", Kind::value, "model.recompute_granularity"},
    {"model.recompute_modules", "recompute-modules", Kind::list, "model.recompute_granularity"},
    {"model.moe_token_dispatcher_type", "moe-token-dispatcher-type", Kind::value, "model.num_moe_experts"},
    {"model.moe_flex_dispatcher_backend", "moe-flex-dispatcher-backend", Kind::value, "model.num_moe_experts"},
    {"model.moe_expert_capacity_factor", "moe-expert-capacity-factor", Kind::value, "model.num_moe_experts"},
    {"model.moe_pad_expert_input_to_capacity", "moe-pad-expert-input-to-capacity", Kind::on, "model.num_moe_experts"},
    {"model.moe_expert_rank_capacity_factor", "moe-expert-rank-capacity-factor", Kind::value, "model.num_moe_experts"},
    {"model.moe_paged_stash", "moe-paged-stash", Kind::on, "model.num_moe_experts"},
    {"model.overlap_moe_expert_parallel_comm", "overlap-moe-expert-parallel-comm", Kind::on, "model.num_moe_experts"},
    {"model.delay_wgrad_compute", "delay-wgrad-compute", Kind::on, "model.num_moe_experts"},
    {"model.tp_comm_overlap", "tp-comm-overlap", Kind::on},
    {"model.cuda_graph_impl", "cuda-graph-impl", Kind::value},
    {"model.cuda_graph_scope", "cuda-graph-scope", Kind::list, "model.cuda_graph_impl"},
    {"model.cross_entropy_loss_fusion", "cross-entropy-loss-fusion", Kind::on},
    {"model.gradient_accumulation_fusion", "no-gradient-accumulation-fusion", Kind::off},
    {"model.cpu_offloading", "cpu-offloading", Kind::on},
    {"model.fine_grained_activation_offloading", "fine-grained-activation-offloading", Kind::on},
    {"model.offload_modules", "offload-modules", Kind::list, "model.fine_grained_activation_offloading"},
    {"model.cpu_offloading_num_layers", "cpu-offloading-num-layers", Kind::value, "model.cpu_offloading"},
    {"model.transformer_impl", "transformer-impl", Kind::value},
    {"model.seq_length", "seq-length", Kind::value},
    {"dataset.sequence_length", "seq-length", Kind::value},
    {"dataset.seq_length", "seq-length", Kind::value},  // the fine-tuning datasets' name
    {"dataset.packed_sequence_specs.packed_sequence_size", "seq-length", Kind::value},
    {"ddp.use_distributed_optimizer", "use-distributed-optimizer", Kind::on},
    {"optimizer.use_distributed_optimizer", "use-distributed-optimizer", Kind::on},
    {"ddp.overlap_grad_reduce", "overlap-grad-reduce", Kind::on},
    {"ddp.overlap_param_gather", "overlap-param-gather", Kind::on},
    {"model.moe_shared_expert_overlap", "moe-shared-expert-overlap", Kind::on, "model.num_moe_experts"},
    {"model.cp_comm_type", "cp-comm-type", Kind::list},
    {"ddp.num_distributed_optimizer_instances", "num-distributed-optimizer-instances", Kind::value},
    {"ddp.outer_dp_sharding_strategy", "outer-dp-sharding-strategy", Kind::value},
    {"ddp.grad_reduce_in_fp32", "grad-reduce-in-bf16", Kind::off},
    // Megatron-Bridge's mixed-precision set-up writes its own value over ddp's.
    {"mixed_precision.grad_reduce_in_fp32", "grad-reduce-in-bf16", Kind::off},
    {"ddp.bucket_size", "ddp-bucket-size", Kind::value},
    {"ddp.use_megatron_fsdp", "use-megatron-fsdp", Kind::on},
    {"ddp.use_custom_fsdp", "use-custom-fsdp", Kind::on},
    {"ddp.data_parallel_sharding_strategy", "data-parallel-sharding-strategy", Kind::value, "ddp.use_megatron_fsdp"},
    {"comm_overlap.tp_comm_overlap", "tp-comm-overlap", Kind::on},
    {"comm_overlap.overlap_grad_reduce", "overlap-grad-reduce", Kind::on},
    {"comm_overlap.overlap_param_gather", "overlap-param-gather", Kind::on},
    // comm_overlap's own setting only: a dump's ddp.align_param_gather is the DDP default that
    // CommOverlapConfig overwrites at set-up (on where pp > 1 and vp > 1, trainsim's default).
    {"comm_overlap.align_param_gather", "no-align-param-gather", Kind::off},
    {"comm_overlap.overlap_moe_expert_parallel_comm", "overlap-moe-expert-parallel-comm", Kind::on,
     "model.num_moe_experts"},
    {"comm_overlap.delay_wgrad_compute", "delay-wgrad-compute", Kind::on, "model.num_moe_experts"},
    {"model.defer_embedding_wgrad_compute", "defer-embedding-wgrad-compute", Kind::on},
    {"model.wgrad_deferral_limit", "wgrad-deferral-limit", Kind::value, "model.defer_embedding_wgrad_compute"},
    {"comm_overlap.defer_embedding_wgrad_compute", "defer-embedding-wgrad-compute", Kind::on},
    {"comm_overlap.wgrad_deferral_limit", "wgrad-deferral-limit", Kind::value,
     "comm_overlap.defer_embedding_wgrad_compute"},
    {"optimizer.optimizer", "optimizer", Kind::value},
    {"optimizer.use_precision_aware_optimizer", "use-precision-aware-optimizer", Kind::on},
    {"optimizer.main_params_dtype", "main-params-dtype", Kind::dtype},
    {"optimizer.exp_avg_dtype", "exp-avg-dtype", Kind::dtype},
    {"optimizer.exp_avg_sq_dtype", "exp-avg-sq-dtype", Kind::dtype},
    {"optimizer.store_param_remainders", "no-store-param-remainders", Kind::off},
    {"optimizer.optimizer_cpu_offload", "optimizer-cpu-offload", Kind::on},
    {"optimizer.optimizer_offload_fraction", "optimizer-offload-fraction", Kind::value,
     "optimizer.optimizer_cpu_offload"},
});

// The flags of the training loop and the precision (their own sections).
constexpr auto kTrainKeys = std::to_array<Key>({
    {"optimizer.overlap_cpu_optimizer_d2h_h2d", "overlap-cpu-optimizer-d2h-h2d", Kind::on},
    {"train.micro_batch_size", "micro-batch-size", Kind::value},
    {"train.global_batch_size", "global-batch-size", Kind::value},
    {"train.train_iters", "train-iters", Kind::value},
    {"train.train_samples", "train-samples", Kind::value},
    {"model.bf16", "bf16", Kind::on},
    {"model.fp16", "fp16", Kind::on},
    {"model.fp8", "fp8-format", Kind::value},
    {"model.fp8_recipe", "fp8-recipe", Kind::value},
    {"model.fp4", "fp4-format", Kind::value},
    {"mixed_precision.bf16", "bf16", Kind::on},
    {"mixed_precision.fp16", "fp16", Kind::on},
    {"mixed_precision.fp8", "fp8-format", Kind::value},
    {"mixed_precision.fp8_recipe", "fp8-recipe", Kind::value},
    {"mixed_precision.fp4", "fp4-format", Kind::value},
    // FP8 parameters: the DDP's and the model's copies, which the mixed_precision section's set-up
    // overwrites (it keeps fp8_param and fp8_param_gather together).
    {"ddp.fp8_param_gather", "fp8-param-gather", Kind::on},
    {"model.fp8_param_gather", "fp8-param-gather", Kind::on},
    {"mixed_precision.fp8_param_gather", "fp8-param-gather", Kind::on},
    {"ddp.reuse_grad_buf_for_mxfp8_param_ag", "reuse-grad-buf-for-mxfp8-param-ag", Kind::on},
    {"mixed_precision.reuse_grad_buf_for_mxfp8_param_ag", "reuse-grad-buf-for-mxfp8-param-ag", Kind::on},
    {"model.first_last_layers_bf16", "first-last-layers-bf16", Kind::on},
    {"model.num_layers_at_start_in_bf16", "num-layers-at-start-in-bf16", Kind::value, "model.first_last_layers_bf16"},
    {"model.num_layers_at_end_in_bf16", "num-layers-at-end-in-bf16", Kind::value, "model.first_last_layers_bf16"},
    {"mixed_precision.first_last_layers_bf16", "first-last-layers-bf16", Kind::on},
    {"mixed_precision.num_layers_at_start_in_bf16", "num-layers-at-start-in-bf16", Kind::value,
     "mixed_precision.first_last_layers_bf16"},
    {"mixed_precision.num_layers_at_end_in_bf16", "num-layers-at-end-in-bf16", Kind::value,
     "mixed_precision.first_last_layers_bf16"},
    // The Nemotron 3 recipes' (and Megatron-Bridge's Nemotron-H provider's, for a model with MTP).
    {"model.keep_mtp_spec_in_bf16", "keep-mtp-spec-in-bf16", Kind::on},
    {"model.keep_mamba_stack_attention_linear_in_bf16", "keep-mamba-stack-attention-linear-in-bf16", Kind::on},
});

struct Setting {
  std::vector<std::string> values;
  int line = 0;
  std::string label;
  bool present = true;
};

class Reader {
 public:
  Reader(const std::string& text, const std::string& source, std::int64_t gpus) : source_(source), gpus_(gpus) {
    try {
      root_ = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw util::InputError(source, fmt::format("line {}", e.mark.line + 1), e.msg);
    }
    if (!is_map(root_)) throw util::InputError(source, "", "not a Megatron-Bridge configuration (a YAML mapping)");
    if (!is_map(root_["model"]))
      throw util::InputError(source, "", "no model section: not a Megatron-Bridge ConfigContainer");
  }

  BridgeFlags run() {
    for (const Key& k : kKeys) read(k);
    for (const Key& k : kTrainKeys) read(k);
    // An FP8 recipe without an FP8 format is Megatron-Bridge's default and means nothing.
    if (!on("fp8-format")) settings_.erase("fp8-recipe");
    model_specials();
    comm_overlap_defaults();
    unmodelled();
    BridgeFlags out;
    for (const auto& [flag, s] : settings_) {
      out.labels[flag] = s.label;
      if (!s.present) continue;
      out.command.words.push_back("--" + flag);
      out.command.lines.push_back(s.line);
      for (const auto& v : s.values) {
        out.command.words.push_back(v);
        out.command.lines.push_back(s.line);
      }
    }
    peft(out);
    out.model = std::move(model_);
    out.model_origin = std::move(model_origin_);
    out.notes = std::move(notes_);
    out.keys_not_read = std::max(0, count_leaves(root_) - read_);
    return out;
  }

 private:
  // yaml-cpp throws when asked the type or position of a key that is not there: ask first.
  static bool is_map(const YAML::Node& n) { return n.IsDefined() && n.IsMap(); }
  static bool is_sequence(const YAML::Node& n) { return n.IsDefined() && n.IsSequence(); }
  static int line_of(const YAML::Node& n) { return n.IsDefined() ? n.Mark().line + 1 : 0; }

  [[noreturn]] void fail(const YAML::Node& n, std::string_view path, const std::string& problem) const {
    const int line = line_of(n);
    throw util::InputError(source_, line > 0 ? fmt::format("line {}: {}", line, path) : std::string(path), problem);
  }

  // The node at "a.b.c"; undefined when a step is missing.
  YAML::Node lookup(std::string_view path) const {
    YAML::Node n = root_;
    while (true) {
      const auto dot = path.find('.');
      if (!is_map(n)) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node next = n[std::string(path.substr(0, dot))];
      if (dot == std::string_view::npos) return next;
      n.reset(next);
      path.remove_prefix(dot + 1);
    }
  }

  // Whether a key is set: present and not null, false, 0, empty or "none".
  bool set_in_file(std::string_view path) const {
    const YAML::Node n = lookup(path);
    if (!n.IsDefined() || n.IsNull()) return false;
    if (!n.IsScalar()) return true;
    const std::string v = n.Scalar();
    return !(v.empty() || v == "0" || v == "none" || v == "None" || v == "false" || v == "False");
  }

  std::string scalar(const YAML::Node& n, std::string_view path) const {
    if (!n.IsDefined() || !n.IsScalar()) fail(n, path, "expected a single value");
    return n.Scalar();
  }

  static bool truthy(const std::string& v) {
    std::string l = v;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return l == "true" || l == "yes" || l == "on" || l == "1";
  }

  // A torch dtype as `{_target_: torch.bfloat16}`, "torch.bfloat16" or "bf16": Megatron's name.
  std::string dtype(const YAML::Node& n, std::string_view path) const {
    std::string t = is_map(n) ? scalar(n["_target_"], path) : scalar(n, path);
    if (t.starts_with("torch.")) t = t.substr(6);
    if (t == "float32" || t == "fp32") return "fp32";
    if (t == "bfloat16" || t == "bf16") return "bf16";
    if (t == "float16" || t == "fp16" || t == "half") return "fp16";
    if (t == "uint8" || t == "fp8") return "fp8";  // Megatron keeps fp8 Adam states as torch.uint8
    fail(n, path, fmt::format("unknown dtype \"{}\"", t));
  }

  // The value of a repr like "AttnBackend.auto" or "CudaGraphScope.attn": the part after the dot.
  static std::string enum_value(const std::string& v) {
    const auto dot = v.rfind('.');
    return dot == std::string::npos ? v : v.substr(dot + 1);
  }

  // An enum member as a name: a repr ("AttnBackend.auto"), a name, or the object a ConfigContainer
  // dump writes for it ({_target_: megatron.core.transformer.enums.AttnBackend, _call_: true,
  // _args_: [5]}), whose value Megatron-Core's enums.py names (AttnBackend: flash 1, fused 2, unfused
  // 3, local 4, auto 5; CudaGraphScope: full_iteration 1, attn 2, mlp 3, moe 4, moe_router 5,
  // moe_preprocess 6, mamba 7, full_iteration_inference 8).
  std::string enum_name(const YAML::Node& n, std::string_view path) const {
    if (!is_map(n)) return enum_value(scalar(n, path));
    const std::string target = enum_value(scalar(n["_target_"], path));
    if (!is_sequence(n["_args_"]) || n["_args_"].size() != 1) fail(n, path, "expected an enum with one _args_ value");
    const std::string v = scalar(n["_args_"][0], path);
    static const std::map<std::string, std::vector<std::string>, std::less<>> kValues{
        {"AttnBackend", {"flash", "fused", "unfused", "local", "auto"}},
        {"CudaGraphScope",
         {"full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba",
          "full_iteration_inference"}}};
    const auto values = kValues.find(target);
    if (values == kValues.end() || v.empty() ||
        !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
      return enum_value(v);
    const auto i = std::stoul(v);
    if (i < 1 || i > values->second.size()) fail(n, path, fmt::format("{} has no member of value {}", target, v));
    return values->second[i - 1];
  }

  void set(std::string_view flag, std::vector<std::string> values, const YAML::Node& n, std::string_view path,
           bool present = true) {
    settings_[std::string(flag)] = {std::move(values), line_of(n), std::string(path), present};
  }

  void read(const Key& k) {
    if (!k.needs.empty() && !set_in_file(k.needs)) return;
    const YAML::Node n = lookup(k.path);
    // The mixed_precision section, when there is one, is what Megatron-Bridge applies to the model
    // at set-up: the model's own precision keys are then its copies, and its nulls mean off.
    const bool precision = k.path.starts_with("mixed_precision.") || k.path == "model.bf16" || k.path == "model.fp16" ||
                           k.path.starts_with("model.fp8") || k.path == "model.fp4" ||
                           k.path == "model.first_last_layers_bf16" || k.path.starts_with("model.num_layers_at_");
    if (precision && k.path.starts_with("model.") && is_map(root_["mixed_precision"])) return;
    if (precision && n.IsDefined() && n.IsNull()) return set(k.flag, {}, n, k.path, false);
    if (!n.IsDefined() || n.IsNull()) return;
    ++read_;
    switch (k.kind) {
      case Kind::value:
        return set(k.flag, {scalar(n, k.path)}, n, k.path);
      case Kind::on:
        return set(k.flag, {}, n, k.path, truthy(scalar(n, k.path)));
      case Kind::off:
        return set(k.flag, {}, n, k.path, !truthy(scalar(n, k.path)));
      case Kind::dtype:
        return set(k.flag, {dtype(n, k.path)}, n, k.path);
      case Kind::list: {
        std::vector<std::string> values;
        if (is_sequence(n)) {
          for (const auto& item : n) values.push_back(enum_name(item, k.path));
        } else {
          values.push_back(enum_name(n, k.path));
        }
        if (values.empty()) return;
        return set(k.flag, std::move(values), n, k.path);
      }
    }
  }

  bool on(const std::string& flag) const {
    const auto it = settings_.find(flag);
    return it != settings_.end() && it->second.present;
  }
  std::int64_t size(const std::string& flag) const {
    const auto it = settings_.find(flag);
    if (it == settings_.end() || it->second.values.empty()) return 1;
    try {
      return std::max<std::int64_t>(1, std::stoll(it->second.values[0]));
    } catch (const std::exception&) {
      return 1;
    }
  }

  // With a comm_overlap section, Megatron-Bridge sets the data-parallel overlaps itself when the
  // distributed optimizer runs over more than one replica: both overlaps on and buckets of 128 Mi
  // parameters (CommOverlapConfig._get_optimizer_overlap_cfgs), unless comm_overlap sets them.
  void comm_overlap_defaults() {
    if (!is_map(root_["comm_overlap"]) || !on("use-distributed-optimizer")) return;
    const std::int64_t replicas = gpus_ / (size("tensor-model-parallel-size") * size("pipeline-model-parallel-size") *
                                           size("context-parallel-size"));
    if (replicas <= 1) return;
    const YAML::Node section = root_["comm_overlap"];
    for (const char* key : {"overlap_grad_reduce", "overlap_param_gather"}) {
      const YAML::Node n = lookup(fmt::format("comm_overlap.{}", key));
      if (n.IsDefined() && !n.IsNull()) continue;
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      set(flag, {}, section, fmt::format("comm_overlap.{} (Megatron-Bridge's default with data parallelism)", key));
    }
    const YAML::Node bucket = lookup("comm_overlap.bucket_size");
    if (!bucket.IsDefined() || bucket.IsNull())
      set("ddp-bucket-size", {"134217728"}, section,
          "comm_overlap.bucket_size (Megatron-Bridge's default with data parallelism)");
    else {
      ++read_;
      set("ddp-bucket-size", {scalar(bucket, "comm_overlap.bucket_size")}, bucket, "comm_overlap.bucket_size");
    }
  }

  // A LoRA fine-tuning run (peft: Megatron-Bridge's LoRA): trainsim's training.peft "lora" with the
  // adapters' rank (dim) and target linears.
  void peft(BridgeFlags& out) {
    const YAML::Node p = root_["peft"];
    if (!is_map(p)) return;
    const std::string target = is_map(p) && p["_target_"].IsDefined() ? scalar(p["_target_"], "peft._target_") : "";
    const std::string kind = enum_value(target);
    if (kind != "LoRA") {
      notes_.push_back(fmt::format("peft {}: not modelled (LoRA is); the run is simulated as full training",
                                   kind.empty() ? "without a _target_" : kind));
      return;
    }
    ++read_;
    out.training["peft"] = "lora";
    out.training_origin["training.peft"] = fmt::format("line {}: peft._target_ {}", line_of(p["_target_"]), target);
    const YAML::Node dim = p["dim"];
    if (dim.IsDefined() && !dim.IsNull()) {
      ++read_;
      try {
        out.training["lora_rank"] = std::stoll(scalar(dim, "peft.dim"));
      } catch (const std::exception&) {
        fail(dim, "peft.dim", fmt::format("\"{}\" is not an integer", scalar(dim, "peft.dim")));
      }
      out.training_origin["training.lora_rank"] = fmt::format("line {}: peft.dim {}", line_of(dim), dim.Scalar());
    }
    const YAML::Node targets = p["target_modules"];
    if (is_sequence(targets)) {
      ++read_;
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      std::vector<std::string> other;
      for (const auto& t : targets) {
        const std::string name = scalar(t, "peft.target_modules");
        if (name == "linear_qkv" || name == "linear_proj" || name == "linear_fc1" || name == "linear_fc2")
          list.push_back(name);
        else
          other.push_back(name);
      }
      if (!other.empty()) {
        std::string joined;
        for (const auto& o : other) joined += (joined.empty() ? "" : ", ") + o;
        notes_.push_back(
            fmt::format("peft.target_modules {}: not modelled (linear_qkv, linear_proj, linear_fc1 and "
                        "linear_fc2 are)",
                        joined));
      }
      if (!list.empty()) {
        out.training["lora_targets"] = list;
        out.training_origin["training.lora_targets"] = fmt::format("line {}: peft.target_modules", line_of(targets));
      }
    }
  }

  // Gemma 2's and 3's layer specs (Megatron-Bridge's Gemma model providers) add a norm after each
  // row-parallel linear, which no flag says: the model built from the flags gets post_norms. Gemma
  // 2's runs its own unfused attention (Gemma2DotProductAttention, whatever attention_backend says),
  // soft-capping the scores by attn_logit_softcapping, and its output layer the logits by
  // final_logit_softcapping.
  void gemma_layer_spec() {
    const YAML::Node spec = lookup("model.transformer_layer_spec");
    if (!spec.IsDefined() || spec.IsNull()) return;
    const std::string target =
        is_map(spec)
            ? (spec["_target_"].IsDefined() && spec["_target_"].IsScalar() ? spec["_target_"].Scalar() : std::string())
            : (spec.IsScalar() ? spec.Scalar() : std::string());
    const bool gemma2 = target.ends_with("gemma2_layer_spec");
    if (!gemma2 && !target.ends_with("gemma3_layer_spec")) return;
    const std::string name = gemma2 ? "gemma2_layer_spec" : "gemma3_layer_spec";
    model_["post_norms"] = true;
    model_origin_["model.post_norms"] = fmt::format("line {}: model.transformer_layer_spec {}", line_of(spec), name);
    if (!gemma2) {
      notes_.push_back(
          "model.transformer_layer_spec gemma3_layer_spec: a norm after each row-parallel linear, "
          "which no flag says (model post_norms)");
      return;
    }
    set("attention-backend", {"unfused"}, spec, "model.transformer_layer_spec");
    // Its attention windows every other layer itself (no window_attn_skip_freq).
    if (const YAML::Node w = lookup("model.window_size"); w.IsDefined() && !w.IsNull()) {
      model_["sliding_window_pattern"] = 2;
      model_origin_["model.sliding_window_pattern"] =
          fmt::format("line {}: model.transformer_layer_spec gemma2_layer_spec", line_of(spec));
    }
    std::string caps;
    for (const auto& [path, key] : {std::pair{"model.attn_logit_softcapping", "attention_softcap"},
                                    std::pair{"model.final_logit_softcapping", "logit_softcap"}}) {
      const YAML::Node n = lookup(path);
      if (!n.IsDefined() || n.IsNull()) continue;
      ++read_;
      const std::string text = scalar(n, path);
      char* end = nullptr;
      const double cap = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !std::isfinite(cap) || cap <= 0)
        fail(n, path, fmt::format("\"{}\" is not a positive number", text));
      model_[key] = cap;
      model_origin_[std::string("model.") + key] = fmt::format("line {}: {} {}", line_of(n), path, n.Scalar());
      caps += fmt::format("{}{} {}", caps.empty() ? "" : ", ", key, n.Scalar());
    }
    notes_.push_back(fmt::format(
        "model.transformer_layer_spec gemma2_layer_spec: a norm after each row-parallel linear (model post_norms) and "
        "its own unfused attention (attention \"softmax\", whatever attention_backend says){}",
        caps.empty() ? "" : ", soft-capped (model " + caps + ")"));
  }

  // Settings that change a step but that trainsim does not model, when the file turns them on.
  void unmodelled() {
    const YAML::Node softmax = lookup("model.softmax_type");
    if (softmax.IsDefined() && softmax.IsScalar() && softmax.Scalar() != "vanilla")
      notes_.push_back(
          fmt::format("model.softmax_type {}: attention sinks are not modelled (the fused attention's "
                      "time is a plain softmax's)",
                      softmax.Scalar()));
    gemma_layer_spec();
    for (const char* path : {"model.cutedsl_fused_grouped_mlp", "model.fp8_dot_product_attention",
                             "mixed_precision.fp8_dot_product_attention", "model.use_transformer_engine_op_fuser"}) {
      const YAML::Node n = lookup(path);
      if (n.IsDefined() && n.IsScalar() && truthy(n.Scalar()))
        notes_.push_back(fmt::format("{} is on: not modelled", path));
    }
    if (is_map(root_["dataset"]) && is_map(root_["dataset"]["packed_sequence_specs"]) &&
        set_in_file("dataset.packed_sequence_specs.packed_sequence_size"))
      notes_.push_back(
          "dataset.packed_sequence_specs: packed sequences, whose documents' lengths the file does not give; the "
          "attention runs over whole sequences unless training.document_tokens is set (--set)");
  }

  void model_specials() {
    // Grouped-query attention: num_query_groups below the heads.
    const YAML::Node groups = lookup("model.num_query_groups");
    const YAML::Node heads = lookup("model.num_attention_heads");
    if (groups.IsDefined() && !groups.IsNull()) {
      ++read_;
      const std::string g = scalar(groups, "model.num_query_groups");
      if (!heads.IsDefined() || heads.IsNull() || scalar(heads, "model.num_attention_heads") != g) {
        set("group-query-attention", {}, groups, "model.num_query_groups");
        set("num-query-groups", {g}, groups, "model.num_query_groups");
      }
    }
    activation();
    // moe_layer_freq: N (every N-th layer), or one 0/1 per layer.
    const YAML::Node freq = lookup("model.moe_layer_freq");
    if (set_in_file("model.num_moe_experts") && freq.IsDefined() && !freq.IsNull()) {
      ++read_;
      std::string v;
      if (is_sequence(freq)) {
        for (const auto& item : freq) {
          v += v.empty() ? '[' : ',';
          v += scalar(item, "model.moe_layer_freq");
        }
        v += ']';
      } else {
        v = scalar(freq, "model.moe_layer_freq");
      }
      set("moe-layer-freq", {v}, freq, "model.moe_layer_freq");
    }
    // window_size: [left, right] keys around each query, or null.
    const YAML::Node window = lookup("model.window_size");
    if (window.IsDefined() && !window.IsNull()) {
      ++read_;
      const std::string left = is_sequence(window) && window.size() > 0 ? scalar(window[0], "model.window_size")
                                                                        : scalar(window, "model.window_size");
      set("window-size", {left}, window, "model.window_size");
    }
    const YAML::Node backend = lookup("model.attention_backend");
    if (backend.IsDefined() && !backend.IsNull()) {
      ++read_;
      const std::string b = enum_name(backend, "model.attention_backend");
      set("attention-backend", {b}, backend, "model.attention_backend");
    }
    pipeline_layout();
  }

  // gated_linear_unit with activation_func: SiLU is SwiGLU, squared ReLU Nemotron's, quick-GELU
  // Megatron's quick-GeGLU (GPT-OSS's, --quick-geglu: SwiGLU's GEMMs, and the clamp its experts
  // apply); the other gated activations (GeGLU) run the same GEMMs and are taken as SwiGLU.
  void activation() {
    const YAML::Node glu = lookup("model.gated_linear_unit");
    const YAML::Node func = lookup("model.activation_func");
    const bool gated = glu.IsDefined() && !glu.IsNull() && truthy(scalar(glu, "model.gated_linear_unit"));
    std::string name;
    if (func.IsDefined() && !func.IsNull())
      name = is_map(func) ? scalar(func["_target_"], "model.activation_func") : scalar(func, "model.activation_func");
    if (glu.IsDefined()) ++read_;
    if (func.IsDefined()) ++read_;
    const std::string leaf = enum_value(name);
    const YAML::Node& at = func.IsDefined() ? func : glu;
    if (leaf == "squared_relu") {
      set("squared-relu", {}, at, "model.activation_func");
    } else if (gated && leaf == "quick_gelu") {
      set("quick-geglu", {}, at, "model.activation_func");
    } else if (gated) {
      set("swiglu", {}, at, "model.gated_linear_unit");
      if (leaf != "silu" && !leaf.empty())
        notes_.push_back(
            fmt::format("model.activation_func {} with gated_linear_unit: modelled as SwiGLU (the same "
                        "GEMMs; its element-wise kernel differs)",
                        leaf));
    } else if (!leaf.empty() && leaf != "gelu") {
      notes_.push_back(fmt::format("model.activation_func {}: modelled as GELU", leaf));
    }
  }

  // A layout as a list of virtual stages, each a list of "embedding", "decoder", "mtp", "loss".
  void pipeline_layout() {
    const YAML::Node layout = lookup("model.pipeline_model_parallel_layout");
    if (!layout.IsDefined() || layout.IsNull()) return;
    ++read_;
    if (layout.IsScalar())
      return set("pipeline-model-parallel-layout", {layout.Scalar()}, layout, "model.pipeline_model_parallel_layout");
    if (!is_sequence(layout)) fail(layout, "model.pipeline_model_parallel_layout", "expected a string or a list");
    std::string text;
    for (std::size_t i = 0; i < layout.size(); ++i) {
      if (i > 0) text += '|';
      const YAML::Node stage = layout[i];
      if (!is_sequence(stage)) fail(stage, "model.pipeline_model_parallel_layout", "each stage must be a list");
      for (const auto& item : stage) {
        const std::string v = scalar(item, "model.pipeline_model_parallel_layout");
        if (v == "embedding")
          text += 'E';
        else if (v == "decoder")
          text += 't';
        else if (v == "mtp")
          text += 'm';
        else if (v == "loss")
          text += 'L';
        else
          fail(item, "model.pipeline_model_parallel_layout",
               fmt::format("unknown layer \"{}\" (embedding, decoder, mtp or loss)", v));
      }
    }
    set("pipeline-model-parallel-layout", {text}, layout, "model.pipeline_model_parallel_layout");
  }

  static int count_leaves(const YAML::Node& n) {
    if (!n.IsDefined()) return 0;
    if (n.IsMap()) {
      if (n["_target_"].IsDefined() && n.size() <= 3) return 1;  // an object reference counts as one value
      int c = 0;
      for (const auto& kv : n) c += count_leaves(kv.second);
      return c;
    }
    if (n.IsSequence()) return 1;
    return n.IsNull() ? 0 : 1;
  }

  const std::string& source_;
  std::int64_t gpus_;
  YAML::Node root_;
  std::map<std::string, Setting> settings_;
  std::vector<std::string> notes_;
  nlohmann::ordered_json model_ = nlohmann::ordered_json::object();
  std::map<std::string, std::string> model_origin_;
  int read_ = 0;
};

}  // namespace

util::ShellCommand read_megatron_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw util::InputError(source, fmt::format("line {}", e.mark.line + 1), e.msg);
  }
  const YAML::Node args = root.IsDefined() && root.IsMap() ? root["MODEL_ARGS"] : YAML::Node();
  if (!args.IsDefined() || !args.IsMap())
    throw util::InputError(source, "", "no MODEL_ARGS mapping: not a Megatron-LM model_config.yaml");
  util::ShellCommand out;
  for (const auto& kv : args) {
    const std::string flag = kv.first.IsScalar() ? kv.first.Scalar() : "";
    const int line = kv.first.Mark().line + 1;
    if (!flag.starts_with("--"))
      throw util::InputError(source, fmt::format("line {}", line),
                             fmt::format("MODEL_ARGS key \"{}\" is not a --flag", flag));
    const YAML::Node& v = kv.second;
    if (!v.IsDefined() || v.IsNull()) continue;
    auto add = [&](const std::string& word) {
      out.words.push_back(word);
      out.lines.push_back(line);
    };
    if (v.IsScalar()) {
      // The test harness hands each value through xargs and eval: its backslash escapes (two levels
      // of them) go, and a "[a b c]" list becomes its words.
      std::string value;
      for (char c : v.Scalar())
        if (c != '\\') value += c;
      const bool word_list = value.size() >= 2 && value.front() == '[' && value.back() == ']' &&
                             value.find_first_of(",*+()") == std::string::npos;
      if (value == "true" || value == "True") {
        add(flag);
      } else if (word_list) {
        add(flag);
        std::size_t at = 1;
        while (at < value.size() - 1) {
          const std::size_t end = std::min(value.find(' ', at), value.size() - 1);
          if (end > at) add(value.substr(at, end - at));
          at = end + 1;
        }
      } else if (value != "false" && value != "False") {
        add(flag);
        add(value);
      }
    } else if (v.IsSequence()) {
      add(flag);
      for (const auto& item : v)
        if (item.IsScalar()) add(item.Scalar());
    } else {
      throw util::InputError(source, fmt::format("line {}: {}", line, flag), "expected a value or a list");
    }
  }
  return out;
}

BridgeFlags read_bridge_config(const std::string& text, const std::string& source, std::int64_t gpus) {
  return Reader(text, source, gpus).run();
}

}  // namespace trainsim::config
