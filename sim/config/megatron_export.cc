#include "config/megatron_export.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "config/deepspeed_config.h"
#include "util/error.h"

namespace trainsim::config {

namespace {

struct Arg {
  std::string flag;  // "--num-layers"
  std::vector<std::string> values;
  std::string comment;
};

struct Group {
  std::string name;  // the bash array: MODEL_ARGS
  std::vector<Arg> args;
};

// A word bash passes through unchanged; anything else goes in single quotes (no value here holds
// one), but a variable of the user's.
std::string shell_word(const std::string& w) {
  // A variable for the user to set ("${DATA_PATH}") goes in double quotes, which expand it.
  if (w.size() > 3 && w.starts_with("${") && w.ends_with('}') && std::all_of(w.begin() + 2, w.end() - 1, [](char c) {
        return std::isupper(static_cast<unsigned char>(c)) != 0 || c == '_';
      }))
    return fmt::format("\"{}\"", w);
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-.,/:=+@%").find(c) != std::string_view::npos;
  });
  return plain ? w : fmt::format("'{}'", w);
}

std::string num(double v) {
  return fmt::format("{}", v);
}
std::string num(std::int64_t v) {
  return fmt::format("{}", v);
}

class Exporter {
 public:
  Exporter(const nlohmann::json& doc, const Scenario& s, std::string_view tool)
      : doc_(doc), s_(s), m_(s.model), tool_(tool) {}

  MegatronExport run() {
    if (s_.training.framework != Framework::megatron)
      fail("training.framework", fmt::format("{} is a PyTorch training step, not a Megatron-LM run",
                                             config::framework_name(s_.training.framework)));
    if (m_.post_norms)
      fail("model.post_norms",
           "Megatron-LM has no flag for post-norms; Megatron-Bridge runs them only inside its Gemma 2 and Gemma 3 "
           "model providers, which trainsim does not write");
    if (m_.attention_softcap > 0 || m_.logit_softcap > 0)
      fail(m_.attention_softcap > 0 ? "model.attention_softcap" : "model.logit_softcap",
           "Megatron-LM has no flag for soft-capped logits; Megatron-Bridge runs them only inside its Gemma 2 model "
           "provider, which trainsim does not write");
    if (m_.csa())
      fail("model.compress_ratios",
           "DeepSeek V4's attention runs in Megatron-Bridge's DeepSeek V4 model (its hybrid layer specs), which no "
           "Megatron-LM command line builds: not exported");
    if (s_.training.deepspeed) return run_deepspeed();
    if (s_.training.lora)
      fail("training.peft",
           "LoRA is Megatron-Bridge's (its peft config); Megatron-LM's pretrain_gpt.py has no flag for it");
    model();
    parallel();
    training();
    outside();
    std::vector<MegatronFlag> flags;
    for (const Group* g : {&model_, &parallel_, &training_, &data_})
      for (const Arg& a : g->args) flags.push_back({a.flag, a.values});
    return {render(), std::move(notes_), std::move(flags)};
  }

 private:
  // Megatron-DeepSpeed (the microsoft / deepspeedai fork's flags; BigScience's --pp-partition-method
  // where the split is its own): pretrain_gpt.py with --deepspeed, and the DeepSpeed configuration the
  // script writes with a here-document, as the fork's examples_deepspeed scripts do. `import megatron`
  // reads both back (docs/import-megatron.md, "Megatron-DeepSpeed commands").
  MegatronExport run_deepspeed() {
    const ParallelSpec& p = s_.parallel;
    const TrainingSpec& t = s_.training;
    Group& g = model_;
    if (m_.mlp == workload::MlpKind::squared_relu)
      fail("model.mlp", "Megatron-DeepSpeed has no squared-ReLU MLP (gelu or swiglu)");
    add(g, "--num-layers", {num(m_.layers)});
    add(g, "--hidden-size", {num(m_.hidden)});
    add(g, "--num-attention-heads", {num(m_.heads)});
    if (m_.kv_heads != m_.heads) add(g, "--num-key-value-heads", {num(m_.kv_heads)}, "grouped-query attention");
    if (m_.head_dim != 0 && m_.head_dim * m_.heads != m_.hidden) add(g, "--kv-channels", {num(m_.head_dim)});
    add(g, "--ffn-hidden-size", {num(m_.ffn_hidden)});
    if (m_.mlp == workload::MlpKind::swiglu) {
      add(g, "--swiglu");
      add(g, "--normalization", {"rmsnorm"});
      if (!m_.linear_bias) add(g, "--disable-bias-linear");
      add(g, "--use-rotary-position-embeddings");
    }
    if (!m_.tied_embeddings) add(g, "--untie-embeddings-and-output-weights");
    add(g, "--hidden-dropout", {num(m_.dropout)});
    add(g, "--attention-dropout", {num(m_.dropout)});
    add(g, "--seq-length", {num(t.seq_len)});
    add(g, "--max-position-embeddings", {num(t.seq_len)});

    Group& q = parallel_;
    add(q, "--tensor-model-parallel-size", {num(p.tp)});
    add(q, "--pipeline-model-parallel-size", {num(p.pp)});
    if (p.sequence_parallel && p.tp > 1) add(q, "--sequence-parallel");
    if (p.cp > 1) add(q, "--ds-sequence-parallel-size", {num(p.cp)}, "DeepSpeed-Ulysses");
    // At pp 1 the script leaves the pipeline engine out (DeepSpeed's engine, which overlaps and runs
    // every ZeRO stage); above it, the layers go as DeepSpeed's PipelineModule splits them.
    const bool pipeline = p.pp > 1;
    if (!pipeline) add(q, "--no-pipeline-parallel", {}, "DeepSpeed's engine, not its pipeline engine");
    if (pipeline) {
      // The microsoft fork's GPTModelPipe splits by type:transformer; BigScience's fork takes any
      // --pp-partition-method (its layer list has two more functions, which only uniform counts).
      struct Method {
        const char* name;
        bool bigscience;
      };
      constexpr std::array<Method, 3> kMethods{
          {{"type:transformer", false}, {"type:transformer|embedding", true}, {"uniform", true}}};
      std::string problem;
      const std::string layout = p.pipeline_layout.empty() ? "" : canonical_layout(p.pipeline_layout);
      std::array<std::optional<std::string>, kMethods.size()> splits;
      const Method* found = nullptr;
      for (std::size_t i = 0; i < kMethods.size(); ++i) {
        const Method& method = kMethods[i];
        splits[i] =
            deepspeed_pipeline_layout(m_.layers, p.pp, method.name, method.bigscience, m_.tied_embeddings, problem);
        const bool matches =
            layout.empty() ? i == 0 && m_.layers % p.pp == 0 : splits[i] && layout == canonical_layout(*splits[i]);
        if (matches && found == nullptr) found = &method;
      }
      if (found == nullptr)
        fail("parallel.pipeline_layout",
             layout.empty()
                 ? "give DeepSpeed's split of the layers (import megatron computes it)"
                 : fmt::format("{} is not a split DeepSpeed's PipelineModule makes (type:transformer gives {})",
                               p.pipeline_layout, splits[0].value_or("none")));
      if (found != &kMethods[0]) add(q, "--pp-partition-method", {found->name}, "BigScience's fork");
    }

    // The optimizer wrapper DeepSpeed picks (the inverse of import's reading): the whole gradients
    // all-reduced are BF16_Optimizer at stage 0 under the pipeline engine (bf16), else ZeRO-1 with
    // reduce_scatter off.
    const bool bf16 = t.precision == Precision::bf16;
    std::int64_t stage = p.zero;
    std::string zero_extra;
    if (p.zero1_grad_all_reduce) {
      stage = pipeline && bf16 ? 0 : 1;
      if (stage == 1) zero_extra = R"(, "reduce_scatter": false)";
    }
    const std::string wire = t.grad_reduce_in_fp32 ? "fp32" : bf16 ? "bf16" : "fp16";
    std::string zero_json = fmt::format(R"("stage": {}{})", stage, zero_extra);
    if (p.overlap_grad_reduce) {
      zero_json += R"(, "overlap_comm": true)";
      if (p.dp_bucket_mb > 0)
        zero_json += fmt::format(R"(, "reduce_bucket_size": {})",
                                 std::llround(p.dp_bucket_mb * 1e6 / (t.grad_reduce_in_fp32 ? 4.0 : 2.0)));
    } else if (stage >= 2) {
      zero_json += R"(, "overlap_comm": false)";
    }
    // Pipeline messages sent whole where DeepSpeed's engine would partition them (its default).
    const bool whole = p.pipeline_message_whole_per_tp_rank() && !p.scatter_gather_tensors_in_pipeline;
    ds_config_ =
        fmt::format(R"({{
  "train_batch_size": {},
  "train_micro_batch_size_per_gpu": {},
  "steps_per_print": 1,
  "gradient_clipping": 1.0,
  "zero_optimization": {{{}}},{}
  "{}": {{"enabled": true}},
  "communication_data_type": "{}"
}}
)",
                    t.global_batch, t.micro_batch, zero_json,
                    whole ? "\n  \"pipeline\": {\"pipe_partitioned\": false, \"grad_partitioned\": false}," : "",
                    bf16 ? "bf16" : "fp16", wire);
    ds_stage_ = stage;

    Group& r = training_;
    batch(r);
    add(r, bf16 ? "--bf16" : "--fp16");
    switch (t.recompute) {
      case Recompute::none:
        break;
      case Recompute::selective:
        add(r, "--recompute-granularity", {"selective"});
        break;
      case Recompute::full:
        add(r, "--checkpoint-activations", {}, "every layer");
        add(r, "--deepspeed-activation-checkpointing");
        break;
    }
    switch (t.attention) {
      case workload::AttentionImpl::softmax:
        break;
      case workload::AttentionImpl::flash1:
        add(r, "--use-flash-attn-v1");
        break;
      case workload::AttentionImpl::flash:
        notes_.push_back("training.attention flash: Megatron-DeepSpeed runs FlashAttention-2 (--use-flash-attn-v2)");
        [[fallthrough]];
      case workload::AttentionImpl::flash2:
        add(r, "--use-flash-attn-v2");
        break;
    }
    add(r, "--lr", {"3.0e-4"}, "the optimizer's hyperparameters do not change a step's time: set your own");
    add(r, "--min-lr", {"3.0e-5"});
    add(r, "--lr-decay-style", {"cosine"});
    Group& d = data_;
    add(d, "--data-path", {"${DATA_PATH}"}, "your data");
    add(d, "--tokenizer-type", {"GPTSentencePieceTokenizer"});
    add(d, "--tokenizer-model", {"${TOKENIZER_MODEL}"},
        fmt::format("a tokenizer of {} tokens (import with --vocab {})", m_.vocab, m_.vocab));
    if (s_.network == NetworkModel::flow)
      notes_.push_back("network flow: how trainsim times communication, not a setting of the run");
    if (t.document_tokens > 0)
      notes_.push_back(fmt::format("training.document_tokens {}: packed documents come from the dataset, not a flag",
                                   t.document_tokens));
    return {render(), std::move(notes_), {}};
  }

  // A pipeline layout with its repeats written out, for comparing two spellings of one split.
  static std::string canonical_layout(const std::string& layout) {
    const auto flat = expand_pipeline_layout(layout);
    return flat ? *flat : layout;
  }

  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw util::InputError(s_.file, path, fmt::format("{} ({})", problem, tool_));
  }

  void add(Group& g, std::string flag, std::vector<std::string> values = {}, std::string comment = {}) {
    g.args.push_back({std::move(flag), std::move(values), std::move(comment)});
  }

  void model() {
    Group& g = model_;
    const bool hybrid = m_.hybrid();
    add(g, "--num-layers", {num(m_.layers)});
    if (hybrid) {
      add(g, "--hybrid-override-pattern", {m_.hybrid_pattern},
          "M Mamba-2, * attention, - MLP, E experts (pretrain_mamba.py)");
    }
    add(g, "--hidden-size", {num(m_.hidden)});
    add(g, "--num-attention-heads", {num(m_.heads)});
    if (m_.mla()) {
      add(g, "--multi-latent-attention");
      add(g, "--kv-lora-rank", {num(m_.kv_lora_rank)});
      if (m_.q_lora_rank > 0) add(g, "--q-lora-rank", {num(m_.q_lora_rank)});
      add(g, "--qk-head-dim", {num(m_.head_dim)});
      add(g, "--qk-pos-emb-head-dim", {num(m_.qk_rope_head_dim)});
      add(g, "--v-head-dim", {num(m_.v_head_dim)});
    } else {
      if (m_.kv_heads != m_.heads) {
        add(g, "--group-query-attention");
        add(g, "--num-query-groups", {num(m_.kv_heads)});
      }
      if (m_.head_dim != 0 && m_.head_dim * m_.heads != m_.hidden) add(g, "--kv-channels", {num(m_.head_dim)});
    }
    if (m_.qk_norm) add(g, "--qk-layernorm");
    switch (m_.mlp) {
      case workload::MlpKind::swiglu:
        if (m_.glu_clamp > 0) {
          // A clamped gated activation is Megatron-Core's quick-GeGLU (GPT-OSS's); its experts clamp it.
          add(g, "--quick-geglu");
          add(g, "--activation-func-clamp-value", {num(m_.glu_clamp)});
        } else {
          add(g, "--swiglu");
        }
        break;
      case workload::MlpKind::squared_relu:
        add(g, "--squared-relu");
        break;
      case workload::MlpKind::gelu:
        break;
    }
    if (m_.rms_norm()) {
      add(g, "--normalization", {"RMSNorm"});
      if (!m_.linear_bias) add(g, "--disable-bias-linear");
    }
    if (hybrid)
      add(g, "--position-embedding-type", {"none"}, "Megatron-Core MambaModel's default");
    else if (m_.rotary())
      add(g, "--position-embedding-type", {"rope"});
    if (m_.has_dense_mlp()) add(g, "--ffn-hidden-size", {num(m_.ffn_hidden)});
    if (!m_.tied_embeddings) add(g, "--untie-embeddings-and-output-weights");
    add(g, "--hidden-dropout", {num(m_.dropout)});
    add(g, "--attention-dropout", {num(m_.dropout)});
    if (m_.sliding_window > 0) {
      // Transformer Engine's window (left, 0) sees `left` keys back and the query's own.
      add(g, "--window-size", {fmt::format("{},0", m_.sliding_window - 1)},
          fmt::format("each query sees {} tokens", m_.sliding_window));
      if (m_.sliding_window_pattern > 1)
        add(g, "--window-attn-skip-freq", {num(m_.sliding_window_pattern)}, "every N-th layer full attention");
    }
    if (m_.moe()) {
      add(g, "--num-experts", {num(m_.experts)});
      add(g, "--moe-router-topk", {num(m_.experts_per_token)});
      add(g, "--moe-ffn-hidden-size", {num(m_.moe_ffn_hidden)});
      if (m_.shared_expert_ffn_hidden > 0)
        add(g, "--moe-shared-expert-intermediate-size", {num(m_.shared_expert_ffn_hidden)});
      if (m_.moe_latent > 0) add(g, "--moe-latent-size", {num(m_.moe_latent)});
      if (m_.router_groups > 0) {
        add(g, "--moe-router-num-groups", {num(m_.router_groups)});
        add(g, "--moe-router-group-topk", {num(m_.router_group_topk)}, "group-limited routing");
      }
      if (!hybrid && !m_.moe_layer_pattern.empty()) {
        std::string list;
        for (const char c : m_.moe_layer_pattern) list += fmt::format("{}{}", list.empty() ? "" : ",", c);
        add(g, "--moe-layer-freq", {"[" + list + "]"}, "the layers with experts (1) and dense (0)");
      }
      if (!hybrid && m_.first_dense_layers > 0)
        add(g, "--moe-layer-freq",
            {fmt::format("([0]*{}+[1]*{})", m_.first_dense_layers, m_.layers - m_.first_dense_layers)},
            fmt::format("the first {} layers dense", m_.first_dense_layers));
      // Off by default in Megatron-LM: written where the scenario runs Transformer Engine's kernels.
      if (s_.training.moe_grouped_gemm) add(g, "--moe-grouped-gemm");
      if (s_.training.moe_router_fusion) add(g, "--moe-router-fusion");
      if (s_.training.moe_permute_fusion) add(g, "--moe-permute-fusion");
      add(g, "--moe-router-force-load-balancing", {},
          "balanced routing, as trainsim simulates it and NVIDIA's benchmarks run; drop it to train");
    }
    if (m_.mtp_layers > 0) add(g, "--mtp-num-layers", {num(m_.mtp_layers)});
    if (hybrid && m_.hybrid_has('M')) {
      add(g, "--mamba-num-heads", {num(m_.mamba_heads)});
      add(g, "--mamba-head-dim", {num(m_.mamba_head_dim)});
      add(g, "--mamba-state-dim", {num(m_.mamba_state)});
      add(g, "--mamba-num-groups", {num(m_.mamba_groups)});
      // Megatron-Core's MambaMixer fixes d_conv 4 and chunk_size 128.
      if (m_.mamba_conv != 4 || m_.mamba_chunk != 128)
        notes_.push_back(fmt::format(
            "model: Megatron-Core's Mamba mixer has a 4-tap convolution and 128-token chunks, not {} and {}",
            m_.mamba_conv, m_.mamba_chunk));
    }
    add(g, "--seq-length", {num(s_.training.seq_len)});
    add(g, "--max-position-embeddings", {num(s_.training.seq_len)});
  }

  void parallel() {
    const ParallelSpec& p = s_.parallel;
    Group& g = parallel_;
    add(g, "--tensor-model-parallel-size", {num(p.tp)});
    add(g, "--pipeline-model-parallel-size", {num(p.pp)});
    if (p.cp > 1) {
      add(g, "--context-parallel-size", {num(p.cp)});
      add(g, "--cp-comm-type", {std::string(cp_comm_name(p.cp_comm))});
    }
    if (m_.moe()) {
      add(g, "--expert-model-parallel-size", {num(p.ep)});
      add(g, "--expert-tensor-parallel-size", {num(p.etp)});
    }
    if (p.sequence_parallel && p.tp > 1) add(g, "--sequence-parallel");
    switch (p.schedule) {
      case Schedule::one_f_one_b:
        break;
      case Schedule::interleaved:
        add(g, "--num-virtual-stages-per-pipeline-rank", {num(p.virtual_stages)}, "the interleaved 1F1B schedule");
        break;
      case Schedule::gpipe:
        fail("parallel.schedule", "Megatron-LM has no GPipe schedule (its pipeline runs 1F1B or interleaved 1F1B)");
      case Schedule::zb_h1:
        fail("parallel.schedule", "Megatron-LM has no zero-bubble (ZB-H1) schedule");
      case Schedule::dualpipev:
        fail("parallel.schedule", "Megatron-LM has no DualPipe schedule (its combined 1F1B is moe_a2a_overlap)");
    }
    if (p.first_stage_layers > 0) add(g, "--decoder-first-pipeline-num-layers", {num(p.first_stage_layers)});
    if (p.last_stage_layers > 0) add(g, "--decoder-last-pipeline-num-layers", {num(p.last_stage_layers)});
    if (p.account_for_embedding) add(g, "--account-for-embedding-in-pipeline-split");
    if (p.account_for_loss) add(g, "--account-for-loss-in-pipeline-split");
    if (!p.pipeline_layout.empty())
      add(g, "--pipeline-model-parallel-layout", {p.pipeline_layout},
          "E embedding, t layer, m MTP module, L loss; | between virtual stages");

    // Data-parallel sharding: the distributed optimizer is ZeRO-1, Megatron FSDP's strategies ZeRO 2
    // and 3 (ecosystem.md §2.1).
    if (p.zero1_grad_all_reduce)
      fail("parallel.zero1_grad_reduce",
           "all_reduce is DeepSpeed's BF16_Optimizer; Megatron's distributed optimizer reduce-scatters the gradients "
           "(reduce_scatter)");
    if (p.zero == 1) add(g, "--use-distributed-optimizer", {}, "zero 1");
    if (p.dist_opt_instances > 1) add(g, "--num-distributed-optimizer-instances", {num(p.dist_opt_instances)});
    if (p.outer_optim_shard) add(g, "--outer-dp-sharding-strategy", {"optim"});
    if (p.zero >= 2) {
      if (p.zero == 2 && p.zero2_param_gather == ParallelSpec::Zero2Gather::per_unit)
        fail("parallel.zero2_param_gather",
             "per_unit is PyTorch FSDP's SHARD_GRAD_OP; Megatron FSDP's optim_grads gathers after the optimizer "
             "(after_optimizer)");
      add(g, "--use-megatron-fsdp");
      add(g, "--data-parallel-sharding-strategy", {p.zero == 2 ? "optim_grads" : "optim_grads_params"},
          fmt::format("zero {}", p.zero));
      if (!p.fsdp_prefetch && p.zero == 3)
        notes_.push_back(
            "parallel.fsdp_prefetch false: Megatron FSDP always prefetches the next unit's parameters; the script "
            "runs with prefetching");
    }
    if (p.overlap_grad_reduce) add(g, "--overlap-grad-reduce");
    // Megatron FSDP prefetches with --overlap-param-gather.
    if (p.overlap_param_gather || (p.zero == 3 && p.fsdp_prefetch && p.overlap_grad_reduce))
      add(g, "--overlap-param-gather");
    if (p.dp_bucket_mb > 0) {
      // trainsim counts the bucket in MB of gradients, Megatron in parameters.
      const double bytes = s_.training.grad_reduce_in_fp32 ? 4.0 : 2.0;
      add(g, "--ddp-bucket-size", {num(static_cast<std::int64_t>(std::llround(p.dp_bucket_mb * 1e6 / bytes)))},
          fmt::format("parameters: {} MB of gradients", num(p.dp_bucket_mb)));
    }
    if (p.tp_comm_overlap) add(g, "--tp-comm-overlap");
    if (p.scatter_gather_tensors_in_pipeline && !s_.training.deepspeed)
      notes_.push_back(
          "parallel.scatter_gather_tensors_in_pipeline: Megatron-Core sends every tensor-parallel rank the whole "
          "hidden states between pipeline stages (the scatter and gather of Megatron-LM 2021-2022 is gone); the "
          "script runs without it");
    if (p.overlap_param_gather && p.align_param_gather == false)
      add(g, "--no-align-param-gather", {}, "each bucket's parameter gather dispatched on demand");
    if (p.defer_embedding_wgrad) {
      add(g, "--defer-embedding-wgrad-compute", {}, "the output layer's weight gradients in the pipeline's flush");
      if (p.wgrad_deferral_limit > 0)
        add(g, "--wgrad-deferral-limit", {num(p.wgrad_deferral_limit)}, "of the first N micro-batches");
    }
    if (m_.moe()) {
      if (p.moe_flex_dispatch())
        add(g, "--moe-token-dispatcher-type", {"flex"}, "DeepEP or HybridEP");
      else
        add(g, "--moe-token-dispatcher-type", {std::string(dispatcher_name(p.moe_dispatcher))});
      if (p.moe_capacity_factor > 0) add(g, "--moe-expert-capacity-factor", {num(p.moe_capacity_factor)});
      if (p.moe_pad_to_capacity) add(g, "--moe-pad-expert-input-to-capacity");
      if (p.moe_rank_capacity_factor > 0)
        add(g, "--moe-expert-rank-capacity-factor", {num(p.moe_rank_capacity_factor)});
      if (p.moe_paged_stash) add(g, "--moe-paged-stash");
      if (p.moe_a2a_overlap) add(g, "--overlap-moe-expert-parallel-comm");
      if (p.moe_shared_expert_overlap) add(g, "--moe-shared-expert-overlap");
      if (p.delay_wgrad_compute) add(g, "--delay-wgrad-compute");
    }
  }

  // The batch and the token budget (Megatron-LM's and Megatron-DeepSpeed's flags alike).
  void batch(Group& g) {
    const TrainingSpec& t = s_.training;
    add(g, "--micro-batch-size", {num(t.micro_batch)});
    add(g, "--global-batch-size", {num(t.global_batch)});
    if (t.train_tokens > 0) {
      const auto samples = static_cast<std::int64_t>(std::ceil(t.train_tokens / static_cast<double>(t.seq_len)));
      add(g, "--train-samples", {num(samples)}, fmt::format("{:g} tokens", t.train_tokens));
    } else {
      add(g, "--train-iters", {"100"}, "steps to time; a training run's budget is --train-samples");
    }
  }

  void training() {
    const TrainingSpec& t = s_.training;
    Group& g = training_;
    batch(g);
    switch (t.precision) {
      case Precision::fp16:
        add(g, "--fp16");
        if (t.grad_reduce_in_fp32) add(g, "--accumulate-allreduce-grads-in-fp32");
        break;
      case Precision::bf16:
      case Precision::fp8:
      case Precision::nvfp4:
        add(g, "--bf16");
        if (!t.grad_reduce_in_fp32) add(g, "--grad-reduce-in-bf16");
        break;
    }
    if (t.precision == Precision::fp8) {
      // The scenario's recipe (config::fp8_recipe: MXFP8 on Blackwell, delayed scaling on Hopper
      // unless layers stay in BF16). MXFP8 and block scaling cast every tensor to E4M3; the
      // per-tensor recipes keep E5M2 for the gradients (hybrid).
      const config::Fp8Recipe recipe = config::fp8_recipe(s_);
      const bool e4m3 = recipe == config::Fp8Recipe::mxfp8 || recipe == config::Fp8Recipe::blockwise;
      add(g, "--fp8-format", {e4m3 ? "e4m3" : "hybrid"});
      add(g, "--fp8-recipe", {std::string(config::fp8_recipe_name(recipe))});
      if (t.fp8_param_gather) {
        add(g, "--fp8-param-gather", {}, "FP8 parameters, all-gathered in FP8 by the distributed optimizer");
        if (recipe == config::Fp8Recipe::mxfp8)
          add(g, "--reuse-grad-buf-for-mxfp8-param-ag", {}, "MXFP8 parameters gathered in BF16 into the grad buffer");
      }
    }
    if (t.precision == Precision::nvfp4) {
      add(g, "--fp4-format", {"e2m1"});
      add(g, "--fp4-recipe", {"nvfp4"});
    }
    if (t.bf16_mtp) add(g, "--keep-mtp-spec-in-bf16", {}, "the multi-token prediction layers' GEMMs in BF16");
    if (t.bf16_modules & workload::kQuantAttentionLinears) {
      if (!m_.hybrid())
        fail("training.module_precision.attention_linears",
             "Megatron-LM keeps attention linears in BF16 in hybrid (Mamba) models only "
             "(--keep-mamba-stack-attention-linear-in-bf16); a per-module Transformer Engine recipe is not written");
      add(g, "--keep-mamba-stack-attention-linear-in-bf16", {}, "the attention layers' GEMMs in BF16");
    }
    if ((t.bf16_modules | t.fp8_modules) & (workload::kQuantMambaOutProj | workload::kQuantMoeLatentProj))
      fail((t.bf16_modules | t.fp8_modules) & workload::kQuantMambaOutProj
               ? "training.module_precision.mamba_out_proj"
               : "training.module_precision.moe_latent_proj",
           "Megatron-LM takes this module's precision from a per-module Transformer Engine recipe (Megatron-Core's "
           "quant_recipe), which trainsim does not write");
    if (t.bf16_layers_at_start + t.bf16_layers_at_end > 0) {
      add(g, "--first-last-layers-bf16", {}, "their GEMMs in BF16");
      add(g, "--num-layers-at-start-in-bf16", {num(t.bf16_layers_at_start)});
      add(g, "--num-layers-at-end-in-bf16", {num(t.bf16_layers_at_end)});
    }
    switch (t.recompute) {
      case Recompute::none:
        break;
      case Recompute::selective:
        add(g, "--recompute-granularity", {"selective"});
        if (t.recompute_modules != workload::kRecomputeCoreAttn)
          add(g, "--recompute-modules", recompute_module_names(t.recompute_modules));
        break;
      case Recompute::full:
        add(g, "--recompute-granularity", {"full"});
        if (t.recompute_layers > 0) {
          add(g, "--recompute-method", {"block"});
          add(g, "--recompute-num-layers", {num(t.recompute_layers)}, "the first N layers of each stage");
        } else {
          add(g, "--recompute-method", {"uniform"});
          add(g, "--recompute-num-layers", {"1"});
        }
        break;
    }
    switch (t.attention) {
      case workload::AttentionImpl::flash:
        break;
      case workload::AttentionImpl::softmax:
        add(g, "--attention-backend", {"unfused"});
        break;
      case workload::AttentionImpl::flash2:
        add(g, "--attention-backend", {"flash"}, "the flash-attn package");
        notes_.push_back(
            "training.attention flash2: written as --attention-backend flash (the flash-attn package, FlashAttention-2 "
            "unless FlashAttention-3 is installed on Hopper); `import megatron` reads it back as flash");
        break;
      case workload::AttentionImpl::flash1:
        fail("training.attention", "FlashAttention v1 is not among Megatron-LM's attention backends");
    }
    if (t.fused_cross_entropy) add(g, "--cross-entropy-loss-fusion");
    if (!t.gradient_accumulation_fusion) add(g, "--no-gradient-accumulation-fusion");
    if (t.cpu_offload_layers > 0) {
      add(g, "--cpu-offloading");
      add(g, "--cpu-offloading-num-layers", {num(t.cpu_offload_layers)});
    }
    if (t.offload_modules != 0) {
      add(g, "--fine-grained-activation-offloading", {}, "needs NVTE_CPU_OFFLOAD_V1=1 in the environment");
      add(g, "--offload-modules", offload_module_names(t.offload_modules));
    }
    if (t.cuda_graph_full_iteration) {
      add(g, "--cuda-graph-impl", {"local"});
      add(g, "--cuda-graph-scope", {"full_iteration"}, "the whole step one graph");
    } else if (t.cuda_graph_scope != 0) {
      add(g, "--cuda-graph-impl", {"transformer_engine"});
      add(g, "--cuda-graph-scope", graph_scope_names(t));
    }
    optimizer(g);
    // Megatron needs a learning rate; it does not change a step's time.
    add(g, "--lr", {"3.0e-4"}, "the optimizer's hyperparameters do not change a step's time: set your own");
    add(g, "--min-lr", {"3.0e-5"});
    add(g, "--lr-decay-style", {"cosine"});
  }

  void optimizer(Group& g) {
    const OptimizerSpec& o = s_.training.optimizer;
    if (!o.use_precision_aware_optimizer) return;
    add(g, "--use-precision-aware-optimizer");
    add(g, "--main-params-dtype", {std::string(state_dtype_name(o.main_params_dtype))});
    add(g, "--exp-avg-dtype", {std::string(state_dtype_name(o.exp_avg_dtype))});
    add(g, "--exp-avg-sq-dtype", {std::string(state_dtype_name(o.exp_avg_sq_dtype))});
    if (!o.store_param_remainders) add(g, "--no-store-param-remainders");
    if (o.optimizer_cpu_offload) {
      add(g, "--optimizer-cpu-offload");
      add(g, "--optimizer-offload-fraction", {num(o.optimizer_offload_fraction)});
      if (o.overlap_cpu_optimizer_d2h_h2d) add(g, "--overlap-cpu-optimizer-d2h-h2d");
    }
  }

  // The data: synthetic tokens from a NullTokenizer, whose vocabulary is --vocab-size plus its
  // end-of-document token (Megatron-LM's _NullTokenizer).
  void data() {
    Group& g = data_;
    add(g, "--mock-data", {}, "synthetic tokens; for real data give --data-path and your tokenizer instead");
    add(g, "--tokenizer-type", {"NullTokenizer"});
    add(g, "--vocab-size", {num(m_.vocab - 1)},
        fmt::format("NullTokenizer adds an end-of-document token: {} in all", m_.vocab));
  }

  // Settings outside a Megatron command.
  void outside() {
    data();
    const TrainingSpec& t = s_.training;
    if (s_.network == NetworkModel::flow)
      notes_.push_back("network flow: how trainsim times communication, not a setting of the run");
    if (doc_.contains("collectives"))
      notes_.push_back(
          fmt::format("collectives {}: NCCL chooses its algorithms unless the job sets NCCL_ALGO; the script does not",
                      doc_["collectives"].dump()));
    if (doc_.contains("gpu_profile"))
      notes_.push_back("gpu_profile: a calibrated profile of the GPUs, not a setting of the run");
    if (!t.host_overhead && !t.cuda_graph_full_iteration)
      notes_.push_back(
          "training.host_overhead false: the script's CPU issues every kernel (only --cuda-graph-impl local "
          "--cuda-graph-scope full_iteration takes it away)");
    if (t.host_cost_scale != 1)
      notes_.push_back(
          fmt::format("training.host_cost_scale {}: the speed of the job's CPUs, not a flag", t.host_cost_scale));
    if (t.moe_load_imbalance != 1)
      notes_.push_back(
          fmt::format("training.moe_load_imbalance {}: a what-if of the routing; the script forces balanced routing",
                      t.moe_load_imbalance));
    if (t.document_tokens > 0)
      notes_.push_back(fmt::format(
          "training.document_tokens {}: packed documents come from the dataset (a packed THD dataset), not a flag",
          t.document_tokens));
  }

  static void render_group(std::string& out, const Group& g) {
    if (g.args.empty()) return;
    std::vector<std::string> lines;
    std::size_t width = 0;
    for (const Arg& a : g.args) {
      std::string line = a.flag;
      // A value that starts with a dash is glued to its flag, which argparse needs.
      if (a.values.size() == 1 && a.values[0].starts_with("-")) {
        line += fmt::format("={}", shell_word(a.values[0]));
      } else {
        for (const auto& v : a.values) line += fmt::format(" {}", shell_word(v));
      }
      width = std::max(width, line.size());
      lines.push_back(std::move(line));
    }
    width = std::min<std::size_t>(width, 48);
    out += g.name;
    out += "=(\n";
    for (std::size_t i = 0; i < lines.size(); ++i) {
      out += "    ";
      out += lines[i];
      if (!g.args[i].comment.empty()) {
        out += std::string(width > lines[i].size() ? width - lines[i].size() : 0, ' ');
        out += "  # ";
        out += g.args[i].comment;
      }
      out += "\n";
    }
    out += ")\n\n";
  }

  std::string render() const {
    const auto [per_host, nodes] = launch_hosts(s_);
    std::string out = "#!/bin/bash\n";
    out += fmt::format("# The {} run of {}, written by `trainsim export megatron`.\n",
                       s_.training.deepspeed ? "Megatron-DeepSpeed" : "Megatron-LM", s_.file);
    out += fmt::format("# {} GPUs: {} host{} of {} ({}, {}). Run this script on every host with NODE_RANK\n", s_.gpus,
                       nodes, nodes == 1 ? "" : "s", per_host, s_.cluster.name, s_.cluster.gpu.name);
    out += s_.training.deepspeed
               ? "# (0 .. hosts-1), MASTER_ADDR and MASTER_PORT set, MEGATRON_DEEPSPEED pointing at a "
                 "Megatron-DeepSpeed checkout,\n# DATA_PATH and TOKENIZER_MODEL at your data.\n"
               : "# (0 .. hosts-1), MASTER_ADDR and MASTER_PORT set, and MEGATRON_LM pointing at a "
                 "Megatron-LM checkout.\n";
    if (doc_.contains("segment_gpus"))
      out += fmt::format("# Place the ranks in blocks of {} GPUs inside one NVLink domain (Slurm: --segment={}).\n",
                         doc_["segment_gpus"].get<std::int64_t>(), doc_["segment_gpus"].get<std::int64_t>() / per_host);
    if (!s_.training.deepspeed)
      out += "# Megatron pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-by).\n";
    out += "\n";
    out += "set -euo pipefail\n\n";
    out += "DISTRIBUTED_ARGS=(\n";
    out += fmt::format("    --nproc-per-node {}\n", per_host);
    out += fmt::format("    --nnodes {}\n", nodes);
    out += "    --node-rank \"${NODE_RANK:-0}\"\n";
    out += "    --master-addr \"${MASTER_ADDR:-localhost}\"\n";
    out += "    --master-port \"${MASTER_PORT:-6000}\"\n";
    out += ")\n\n";
    render_group(out, model_);
    render_group(out, parallel_);
    render_group(out, training_);
    render_group(out, data_);
    if (s_.training.deepspeed) {
      out += "# DeepSpeed's configuration, written where --deepspeed_config reads it.\n";
      out += "DS_CONFIG=./ds_config.json\n";
      out += "cat <<EOT > \"$DS_CONFIG\"\n" + ds_config_ + "EOT\n\n";
      out += fmt::format(
          "DEEPSPEED_ARGS=(\n    --deepspeed\n    --deepspeed_config \"$DS_CONFIG\"\n    --zero-stage {}\n)\n\n",
          ds_stage_);
      out += "LOGGING_ARGS=(\n    --log-interval 1\n    --eval-iters 0\n)\n\n";
      out +=
          "torchrun \"${DISTRIBUTED_ARGS[@]}\" \"${MEGATRON_DEEPSPEED:-.}/pretrain_gpt.py\" \\\n"
          "    \"${MODEL_ARGS[@]}\" \\\n"
          "    \"${PARALLEL_ARGS[@]}\" \\\n"
          "    \"${TRAINING_ARGS[@]}\" \\\n"
          "    \"${DATA_ARGS[@]}\" \\\n"
          "    \"${DEEPSPEED_ARGS[@]}\" \\\n"
          "    \"${LOGGING_ARGS[@]}\"\n";
      return out;
    }
    out += "LOGGING_ARGS=(\n    --log-interval 1\n    --log-throughput\n    --eval-iters 0\n)\n\n";
    out += fmt::format(
        "torchrun \"${{DISTRIBUTED_ARGS[@]}}\" \"${{MEGATRON_LM:-.}}/{}\" \\\n"
        "    \"${{MODEL_ARGS[@]}}\" \\\n"
        "    \"${{PARALLEL_ARGS[@]}}\" \\\n"
        "    \"${{TRAINING_ARGS[@]}}\" \\\n"
        "    \"${{DATA_ARGS[@]}}\" \\\n"
        "    \"${{LOGGING_ARGS[@]}}\"\n",
        m_.hybrid() ? "pretrain_mamba.py" : "pretrain_gpt.py");
    return out;
  }

  const nlohmann::json& doc_;
  const Scenario& s_;
  const workload::ModelSpec& m_;
  std::string_view tool_;  // the command that asked, in error messages
  Group model_{"MODEL_ARGS", {}};
  Group parallel_{"PARALLEL_ARGS", {}};
  Group training_{"TRAINING_ARGS", {}};
  Group data_{"DATA_ARGS", {}};
  std::vector<std::string> notes_;
  std::string ds_config_;      // Megatron-DeepSpeed: the DeepSpeed configuration's JSON
  std::int64_t ds_stage_ = 0;  // and its ZeRO stage
};

}  // namespace

MegatronExport export_megatron(const nlohmann::json& doc, const Scenario& scenario, std::string_view tool) {
  return Exporter(doc, scenario, tool).run();
}

}  // namespace trainsim::config
