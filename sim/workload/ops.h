#pragma once
// A transformer layer, the embedding, the output layer with its loss, and the optimizer step as
// the kernels one tensor-parallel rank runs: each op with its FLOPs, HBM bytes, GEMM or attention
// shape, and the activation bytes it keeps for backward. Tensor-parallel communication appears as
// ops of kind tp_comm exactly where Megatron-LM inserts it (all-reduce without sequence
// parallelism; all-gather / reduce-scatter with it). A mixture-of-experts layer's token dispatch and
// combine are all-to-alls of kind tp_comm over the expert-parallel group (CommGroup::ep), as
// Megatron-Core's alltoall token dispatcher runs them.

#include <cstdint>
#include <string>
#include <vector>

#include "workload/model.h"

namespace trainsim::workload {

enum class OpKind : std::uint8_t {
  gemm,       // dense matrix multiply: (m x k) * (k x n), `batch` independent copies
  attention,  // attention core: fused flash kernel, or the score/softmax/context kernels
  memory,     // memory-bound kernel: norm, activation, dropout, residual add, loss, optimizer...
  tp_comm,    // collective in the layer's critical path: over the TP group, or the expert groups
};

enum class Comm : std::uint8_t { none, all_reduce, all_gather, reduce_scatter, all_to_all };
// The group a tp_comm op runs over: the tensor-parallel group, the expert-parallel group (token
// dispatch and combine), the expert tensor-parallel group, or the context-parallel group (a Mamba
// mixer's all-to-alls between sequence and head sharding).
// ep_etp: the expert tensor x expert parallel group (Megatron-Core's tp_ep_group), over which the
// allgather token dispatcher gathers and scatters.
enum class CommGroup : std::uint8_t { tp, ep, etp, cp, ep_etp };

// How the attention core runs: one fused flash kernel (scores never stored) -- `flash`, the fastest
// fused kernel of the GPU as Megatron / Transformer Engine use it (cuDNN or FlashAttention-3 on
// Hopper and later, FlashAttention-2 on Ampere), `flash2`, FlashAttention-2 everywhere (PyTorch
// SDPA, Hugging Face, llm-foundry since 2024), `flash1`, the first-generation FlashAttention kernels
// (flash-attn 1.x CUDA or its Triton port, as 2023 llm-foundry ran) -- or Megatron's older path
// (batched GEMMs with the s x s scores materialised, fused scale-mask-softmax, dropout).
enum class AttentionImpl : std::uint8_t { flash, flash2, flash1, softmax };

// Megatron-Core's selective recompute modules (--recompute-granularity selective
// --recompute-modules), as bits. core_attn, mlp, moe and shared_experts are checkpointed as a whole
// (their input kept, everything inside run again); layernorm, moe_act and mla_up_proj discard their
// output after use and run again before the backward needs it.
// The linears a LoRA adapter can target (Megatron-Bridge's target_modules names).
enum LoraTarget : std::uint8_t {
  kLoraQkv = 1,   // linear_qkv
  kLoraProj = 2,  // linear_proj
  kLoraFc1 = 4,   // linear_fc1
  kLoraFc2 = 8,   // linear_fc2
};

enum RecomputeModule : std::uint8_t {
  kRecomputeCoreAttn = 1,
  kRecomputeLayernorm = 2,
  kRecomputeMlaUpProj = 4,
  kRecomputeMlp = 8,
  kRecomputeMoe = 16,
  kRecomputeMoeAct = 32,
  kRecomputeSharedExperts = 64,
  // Not a Megatron module: torchtitan's op-level selective activation checkpointing (its "op"
  // policy), which the step builder applies to a torchtitan layer's ops (workload/torchtitan_ops.h).
  kRecomputeTorchtitanOp = 128,
};

// Megatron-Core's fine-grained activation offloading (--offload-modules): the modules whose saved
// tensors go to host memory after their forward and come back before their backward. attn_norm and
// mlp_norm are norms that run as modules of their own (multi-head latent attention's input norm, a
// mixture-of-experts layer's pre-MLP norm); a norm fused into the next linear belongs to that
// linear's module (qkv_linear), or to none (a dense MLP's fc1).
enum OffloadModule : std::uint8_t {
  kOffloadAttnNorm = 1,   // the separate input norm's input
  kOffloadQkvLinear = 2,  // what the QKV projection keeps: its (fused norm's) input, the q/k norms', MLA's projections'
  kOffloadCoreAttn = 4,   // Q, K, V and the attention's output and statistics
  kOffloadAttnProj = 8,   // the output projection's input
  kOffloadMlpNorm = 16,   // the separate pre-MLP norm's input
  kOffloadExpertFc1 = 32,  // the experts' permuted input to fc1
  kOffloadMoeAct = 64,     // the experts' activation input (fc1's output)
};

// Modules whose linear GEMMs a quantised run keeps above its precision (config::TrainingSpec::
// module_precision; Transformer Engine's per-module recipes, as Megatron-Core's quant_recipe and
// Megatron-Bridge's Nemotron 3 Super NVFP4 recipe set them): the attention's linear projections (QKV or
// MLA's down / up projections, and the output projection), the Mamba mixer's output projection, and a
// latent mixture-of-experts layer's down and up projections to and from the latent width.
enum QuantModule : std::uint8_t {
  kQuantAttentionLinears = 1,
  kQuantMambaOutProj = 2,
  kQuantMoeLatentProj = 4,
};

// How a micro-batch's weight gradient is accumulated, per element of the weight (d: the 16-bit
// type's 2 bytes, g: LayerConfig::grad_bytes):
//   fused          Megatron's gradient accumulation fusion (on unless --no-gradient-accumulation-fusion;
//                  Transformer Engine's fuse_wgrad_accumulation): the weight-gradient GEMM accumulates
//                  into main_grad itself. Nothing more, but for the embedding's dense gradient, which
//                  the DDP hook adds as under main_grad_add.
//   main_grad_add  Megatron without the fusion: the GEMM writes a 16-bit gradient that the DDP hook
//                  (param.main_grad.add_(param.grad)) adds to main_grad: read d + g, write g; 1 kernel.
//   autograd       DeepSpeed's engine with its FP16 optimizer or ZeRO stage 0-1 (no BF16_Optimizer):
//                  autograd's AccumulateGrad adds the new 16-bit gradient into the parameter's .grad in
//                  place: read 2d, write d; 1 kernel (the first micro-batch of a step only hands it over:
//                  counted alike).
//   fp32_buffer    DeepSpeed's BF16_Optimizer: after each micro-batch's backward update_hp_grads casts
//                  every bf16 gradient to fp32 (read d, write 4) and adds it to the fp32 gradient (read
//                  4 + 4, write 4): 2 kernels, both copies alive meanwhile; the bf16 .grad is set to
//                  None before the next backward.
enum class GradAccumulation : std::uint8_t { fused, main_grad_add, autograd, fp32_buffer };

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
};

struct AttentionShape {
  std::int64_t batch_heads = 0;  // micro-batch x heads on this rank
  std::int64_t seq_q = 0;
  std::int64_t seq_kv = 0;
  std::int64_t head_dim = 0;
  bool causal = true;
  bool backward = false;
  AttentionImpl impl = AttentionImpl::flash;
  // Sliding-window attention: the keys each query sees (0: the whole sequence); and the share of the
  // layer's heads the op runs (a model alternating windowed and full layers runs each layer as both
  // parts, workload/ops.cc flash()), which scales the keys and values context parallelism moves.
  std::int64_t window = 0;
  double head_share = 1;
};

struct Op {
  std::string name;
  OpKind kind = OpKind::memory;
  double flops = 0;          // executed (causal attention counts the half it computes)
  double bytes = 0;          // HBM bytes read + written
  std::int32_t kernels = 1;  // kernel launches the op stands for
  GemmShape gemm;
  AttentionShape attention;
  Comm comm = Comm::none;  // tp_comm only
  CommGroup group = CommGroup::tp;
  std::int64_t comm_bytes = 0;   // tp_comm: full (unsharded) tensor size, nccl-tests convention
  std::int64_t saved_bytes = 0;  // forward ops: activation bytes kept until the layer's backward
  bool attention_core = false;   // the attention core (selective recompute's core_attn)
  // Selective recompute: the modules (RecomputeModule bits) whose recomputation runs this op again
  // before the layer's backward (`rerun`), and those whose recomputation drops the op's saved bytes
  // in the forward and restores them in the recompute (`discards`). A checkpointed module's kept
  // input is an op of its own (no work; saved bytes only), emitted when LayerConfig asks for it.
  std::uint8_t rerun = 0;
  std::uint8_t discards = 0;
  // Fine-grained activation offloading: the module (OffloadModule bit) whose saved tensors its saved
  // bytes are, and the module of the last `offload_tail_bytes` of them when they are two modules'
  // (the QKV projection keeps its input for qkv_linear and Q, K, V for the core attention).
  std::uint8_t offload = 0;
  std::uint8_t offload_tail = 0;
  std::int64_t offload_tail_bytes = 0;
  // Not run again by a full recompute of its layer (FSDP2's copy-out of the gathered parameters: the
  // backward gathers and copies them out itself).
  bool skip_in_recompute = false;
  // One of the Mamba-2 mixer's own kernels (the causal conv1d, the SSD scan's Triton kernels, the
  // gated RMSNorm), which run at the GPU's share of the roofline model's speed
  // (hardware::GpuSpec::mamba_scan_achieved; ops.cc says where each comes from).
  bool mamba_scan = false;
  // A GEMM that stays BF16 under FP8 and NVFP4 (DeepSeek V4's compressors, its indexer's weights,
  // compressor and scores, and its grouped output projection, which Megatron-Core runs outside Transformer
  // Engine's quantised linears).
  bool bf16 = false;
  bool fp8 = false;  // gemm: runs in FP8 (Transformer Engine), at the FP8 peak
  bool fp4 = false;  // gemm, with fp8: runs in NVFP4 instead, at the FP4 peak
  // Backward ops that compute weight gradients (the W pass of zero-bubble schedules); what such an
  // op reads that must outlive the input-gradient pass: the output gradient (written by that pass)
  // and the input the forward saved.
  bool weight_grad = false;
  std::int64_t grad_output_bytes = 0;
  std::int64_t held_input_bytes = 0;
  // Bytes alive only while the op runs (temporaries beyond its saved tensors): PyTorch eager mode's
  // (eager_ops.h), and in Megatron's lists the embedding's dense weight gradient.
  std::int64_t workspace_bytes = 0;
  // The CPU time to issue the op's kernels: set by eager_ops.h, and by the step builder for
  // Megatron's op lists from the following.
  double host_s = 0;
  // Megatron's host overhead: the framework calls the CPU makes for the op (a PyTorch, Transformer
  // Engine or NCCL call that launches a kernel; a grouped GEMM launches one per local expert), the
  // CUDA graph scopes (GraphScope bits) that capture it, and whether the CPU reads its result
  // before issuing more (a device-to-host copy of the MoE token counts).
  std::int32_t host_calls = 1;
  std::int32_t host_launches = 0;  // kernels launched from C++ inside those calls (per-expert GEMMs)
  std::uint8_t graph = 0;
  bool host_sync = false;
  // A tp_comm op that runs beside the ops after it (comm_side) until the first op that needs its
  // result (comm_join): the shared expert's compute beside the token all-to-all.
  bool comm_side = false;
  bool comm_join = false;
  // The step builder's memo of ComputeModel::time_s(*this), set once per build on the finished op
  // lists (negative: not set; whoever copies an op and changes its work resets it).
  double time_memo_s = -1;
};

// Megatron-Core's partial CUDA graph scopes (--cuda-graph-scope with Transformer Engine graphs), as
// bits: a captured op costs the CPU nothing; each captured region one graph launch.
enum GraphScope : std::uint8_t {
  kGraphAttn = 1,           // the attention block: input norm to the residual add
  kGraphMlp = 2,            // a dense layer's MLP block
  kGraphMoeRouter = 4,      // the pre-MLP norm, the router and the shared expert
  kGraphMoePreprocess = 8,  // the token dispatcher's preprocessing (token counts, permutation)
  kGraphMamba = 16,         // a hybrid model's Mamba block: input norm to the residual add
};

struct LayerConfig {
  std::int64_t micro_batch = 1;
  std::int64_t seq_len = 2048;  // the whole sequence; each context-parallel rank holds seq_len / cp of it
  std::int64_t tp = 1;
  std::int64_t cp = 1;
  // Mixture of experts: each expert-parallel rank holds experts / ep experts, each split ep-wise
  // over etp ranks (Megatron-Core's expert tensor parallelism).
  std::int64_t ep = 1;
  std::int64_t etp = 1;
  // Megatron-Core's flex token dispatcher (DeepEP / HybridEP): each token goes once to every node
  // (once to every rank, inside one node) that holds any of its experts, not once per expert.
  // ep_nodes: the nodes (NVLink domains) one expert-parallel group spans.
  bool moe_flex_dispatch = false;
  // Megatron-Core's allgather token dispatcher (moe_forward): every rank of the ep x etp group gets
  // all of the group's tokens, its experts pick theirs, the outputs are reduce-scattered back.
  bool moe_allgather_dispatch = false;
  // Megatron-Core's --moe-shared-expert-overlap: the shared expert's forward runs beside the dispatch
  // all-to-all and its backward beside the combine's (Op::comm_side / comm_join).
  bool moe_shared_expert_overlap = false;
  // Megatron-Core's --moe-router-fusion and --moe-permute-fusion (Transformer Engine's fused router
  // and permutation kernels; both off by default in Megatron-LM, on in Megatron-Bridge's MoE recipes).
  // Off, the router runs as eager PyTorch ops and the permutation as masked_select / index_select /
  // scatter_add (moe_forward, moe_backward).
  bool moe_router_fusion = true;
  bool moe_permute_fusion = true;
  // Megatron-Core's --moe-grouped-gemm (off by default in Megatron-LM, on in Megatron-Bridge's MoE
  // providers): on, the local experts run as Transformer Engine's GroupedLinear; off, as SequentialMLP,
  // a loop over the experts' own MLP modules (a module call per expert and linear, an activation call
  // per expert, the outputs concatenated; moe_forward, moe_backward).
  bool moe_grouped_gemm = true;
  std::int64_t ep_nodes = 1;
  // Token dropping (config::ParallelSpec): the capacity factor (0: dropless) and padding to it.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // Routing imbalance (config::TrainingSpec::moe_load_imbalance): the busiest expert-parallel rank
  // receives this many times the mean of the token copies (capped by a capacity), and every rank is
  // modelled as that one, whose pace the all-to-alls impose on its group.
  double moe_load_imbalance = 1;
  // Sync-free experts (config::ParallelSpec::moe_rank_capacity_factor, 0: off): no token count goes
  // to the CPU; the experts' buffers hold this many times the mean of a rank's received copies, and
  // so do the activations they keep for the backward unless moe_paged_stash packs those at their
  // real size (copied out after the forward and back before the backward).
  double moe_rank_capacity_factor = 0;
  bool moe_paged_stash = false;
  bool sequence_parallel = false;
  bool causal = true;
  AttentionImpl attention = AttentionImpl::flash;
  std::int64_t dtype_bytes = 2;  // activations and weights (bf16)
  // Transformer Engine FP8: the layers' linear GEMMs (forward, data and weight gradients) run in FP8
  // with their operands cast (and transposed) to FP8 by extra memory-bound kernels; attention, the
  // output layer and everything else stay in BF16 (NeMo / Megatron defaults).
  bool fp8 = false;
  // With fp8: Transformer Engine's NVFP4 recipe (NVFP4BlockScaling) in place of FP8 for the same
  // GEMMs, at the FP4 peak: E2M1 values with an E4M3 scale per 16 elements and a per-tensor scale,
  // 16x16 blocks for the weights, a random Hadamard transform on both weight-gradient operands and
  // stochastic rounding of the gradients (Megatron-Bridge's bf16_with_nvfp4_mixed, every layer).
  bool fp4 = false;
  // With fp8: the FP8 recipe quantises a grouped GEMM's operands one local expert at a time
  // (Transformer Engine's split_quantize loops for MXFP8, current and block scaling; only per-tensor
  // delayed scaling has a fused multi-tensor cast). Set for every recipe but delayed scaling
  // (config::fp8_recipe: training.fp8_recipe, or the GPU's).
  bool fp8_split_casts = false;
  // With fp8: the QuantModule bits whose GEMMs run in BF16 instead, and (with fp4) those that run in
  // FP8 (the GPU's FP8 recipe: MXFP8 on Blackwell) instead of NVFP4. Their operands' casts are still
  // counted with the pass's others, as the run's precision makes them.
  std::uint8_t bf16_modules = 0;
  std::uint8_t fp8_modules = 0;
  // Parameter-efficient fine-tuning (LoRA, Megatron-Bridge's peft "lora"): the base weights are
  // frozen, so no weight gradient is computed for them and Transformer Engine keeps no GEMM input for
  // one (nor casts a transposed FP8 copy); the embedding and the output layer are frozen too. Each
  // targeted linear (LoraTarget bits) gets an adapter of rank lora_rank: A (in -> r) and B (r -> out)
  // in BF16, added to the linear's output, with their own data and weight gradients.
  // Sequence packing (Megatron's packed THD format with cu_seqlens): each sequence holds documents of
  // this many tokens and attention stays inside each; 0: one document per sequence.
  std::int64_t document_tokens = 0;
  bool frozen_weights = false;
  std::int64_t lora_rank = 0;
  std::uint8_t lora_targets = 0;
  // One-pass cross-entropy kernels (Megatron's --cross-entropy-loss-fusion, Transformer Engine's
  // parallel cross-entropy, apex xentropy / flash-attn's CrossEntropyLoss): the forward reads the
  // bf16 logits once and keeps them, the backward writes the gradient over them. Otherwise Megatron's
  // unfused vocab-parallel cross-entropy in fp32.
  bool fused_cross_entropy = false;
  // Bytes per element of Megatron's gradient buffer (main_grad): 4, or 2 where gradients are reduced
  // in bf16 (training.grad_reduce_in_fp32 false). The embedding's dense gradient is added into it.
  std::int64_t grad_bytes = 4;
  // How each micro-batch's weight gradients reach the gradient the optimizer reads (GradAccumulation):
  // the ops layer_backward, head_backward, mtp_backward and embedding_backward add after each
  // weight-gradient GEMM and the embedding's dense gradient.
  GradAccumulation grad_accumulation = GradAccumulation::fused;
  // Selective recompute's modules (RecomputeModule bits): adds the kept input of each checkpointed
  // module (mlp, moe) to the forward's ops. The ops' rerun / discards bits are set regardless.
  std::uint8_t recompute_modules = kRecomputeCoreAttn;
};

// One layer: a transformer layer, or one block of a hybrid model (ModelSpec::block).
std::vector<Op> layer_forward(const ModelSpec& m, const LayerConfig& c, LayerBlock block = LayerBlock::transformer);
// Backward of one layer (data and weight gradients), without any recomputation.
std::vector<Op> layer_backward(const ModelSpec& m, const LayerConfig& c, LayerBlock block = LayerBlock::transformer);
// Bytes of the layer input (what full recompute keeps per layer; divided by tp under SP).
std::int64_t layer_input_bytes(const ModelSpec& m, const LayerConfig& c);
// Context parallelism (ring attention): the K and V of this rank's seq_len / cp tokens, per TP rank,
// which travel one hop around the CP ring at each of the cp - 1 steps of the forward.
std::int64_t ring_attention_kv_bytes(const ModelSpec& m, const LayerConfig& c);
// The query block of the rank's tokens (the attention output has its size too): what context
// parallelism's all-to-all type moves besides K and V.
std::int64_t attention_q_bytes(const ModelSpec& m, const LayerConfig& c);

// First pipeline stage: token + position embedding lookup (vocab-parallel under TP).
std::vector<Op> embedding_forward(const ModelSpec& m, const LayerConfig& c);
std::vector<Op> embedding_backward(const ModelSpec& m, const LayerConfig& c);
// Last pipeline stage: final norm, output projection (vocab-parallel) and cross-entropy loss.
std::vector<Op> head_forward(const ModelSpec& m, const LayerConfig& c);
std::vector<Op> head_backward(const ModelSpec& m, const LayerConfig& c);

// A multi-token prediction module's own ops around its transformer layer and output layer: the
// embedding of the shifted tokens, the two RMSNorms and the 2h -> h projection (forward); their
// backward. The module runs these, one layer (layer_forward) and the output layer with its loss
// (head_forward).
std::vector<Op> mtp_forward(const ModelSpec& m, const LayerConfig& c);
std::vector<Op> mtp_backward(const ModelSpec& m, const LayerConfig& c);
// Parameters one TP rank holds for one module's norms and projection (its layer: layer_*params).
std::int64_t mtp_params_per_rank(const ModelSpec& m, std::int64_t tp);

// How Megatron's Adam keeps and reads its state, in bytes per parameter (training.optimizer resolved
// by parallel/step_builder.cc): Megatron's default is fp32 master weights and moments, reading the
// fp32 gradient; the precision-aware optimizer (Transformer Engine's FusedAdam) keeps each in its
// own type, and with store_param_remainders only the 16 bits of each fp32 master weight its bf16
// weight lacks.
struct AdamStates {
  std::int64_t master = 4;
  std::int64_t exp_avg = 4;
  std::int64_t exp_avg_sq = 4;
  std::int64_t grad = 4;    // the gradient the step reads
  bool remainders = false;  // the master weight rebuilt from the bf16 weight and its remainder
  // GPU memory per parameter of the optimizer's shard.
  std::int64_t state_bytes() const { return master + exp_avg + exp_avg_sq; }
};

// Adam step over `params` parameters held by this rank (states as above; the 16-bit weight written
// back), plus the gradient-norm pass of clip_grad_norm over `norm_params` of them (every parameter
// of the rank's shard, also those whose step runs on the CPU; -1: `params`).
Op optimizer_step(std::int64_t params, const AdamStates& states = {}, std::int64_t norm_params = -1);
// The gradient buffer of `params` parameters set to zero at the start of a step: fp32 (4 bytes), or
// the 16-bit type where gradients are reduced in it (2 bytes; training.grad_reduce_in_fp32 false).
Op zero_grad_buffer(std::int64_t params, std::int64_t bytes_per_param = 4);

// Parameters one TP rank holds for one layer / the embedding / the output layer. The output layer
// counts the final norm, plus its vocab-parallel weight unless embeddings are tied (then the
// embedding's weight serves; a last pipeline stage without the embedding keeps a copy of it).
// The saved bytes of a layer's forward ops that fine-grained activation offloading moves to host
// memory with `modules` (OffloadModule bits): those of the ops kept in the forward (all but what
// selective recompute's `recompute_modules` discard; nothing under full recompute, `saves_none`).
// The core attention recomputed (core_attn) is not offloaded: Megatron-Core's checkpointed branch
// bypasses the offload.
std::int64_t offloaded_bytes(const std::vector<Op>& forward, std::uint8_t modules, std::uint8_t recompute_modules,
                             bool saves_none = false);

// For a mixture-of-experts layer, layer_params_per_rank counts what data parallelism reduces
// (attention, norms, router, shared expert) and layer_expert_params_per_rank the routed experts one
// rank holds, which the expert data-parallel group reduces.
std::int64_t layer_params_per_rank(const ModelSpec& m, std::int64_t tp, LayerBlock block = LayerBlock::transformer);
std::int64_t layer_expert_params_per_rank(const ModelSpec& m, std::int64_t ep, std::int64_t etp);
std::int64_t embedding_params_per_rank(const ModelSpec& m, std::int64_t tp);
std::int64_t head_params_per_rank(const ModelSpec& m, std::int64_t tp);
// The LoRA adapters' parameters on one TP rank for one layer (c.lora_rank, c.lora_targets): per
// targeted linear, A (the rank's input width x r) and B (r x the rank's output width).
std::int64_t lora_params_per_rank(const ModelSpec& m, const LayerConfig& c);

}  // namespace trainsim::workload
