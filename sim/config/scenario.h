#pragma once
// The scenario file: which model, which cluster, how many GPUs, the parallel layout and the
// training settings. load_scenario() resolves model and cluster references, checks every key and
// rejects impossible layouts with an InputError naming the file and JSON path.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "network/cluster.h"
#include "network/collective.h"
#include "workload/model.h"
#include "workload/ops.h"

namespace trainsim::config {

enum class Recompute : std::uint8_t { none, selective, full };
// zb_h1: zero-bubble ZB-H1 (Qi et al. 2023): backward split into input- and weight-gradient passes,
// weight passes deferred into the bubbles, peak memory as 1F1B's.
// dualpipev: DeepSeek's DualPipeV ("cut-in-half" DualPipe; PyTorch's ScheduleDualPipeV): 2·pp
// virtual stages placed in a V, rank r holding stages r and 2·pp - 1 - r (the embedding and the
// output layer both on rank 0); a forward of one chunk runs together with a backward of the other
// (their expert all-to-alls beside each other's compute), and deferred weight-gradient passes fill
// the ends (DeepSeek-V3 technical report §3.2.1; deepseek-ai/DualPipe).
enum class Schedule : std::uint8_t { one_f_one_b, gpipe, interleaved, zb_h1, dualpipev };
// Mixed precision as Megatron-LM runs it: bf16 accumulates and reduces gradients in fp32 (forced by
// arguments.py for bf16); fp16 keeps them in fp16 unless told otherwise. Both use the 16-bit peak.
// fp8: Transformer Engine FP8 for the layers' linear GEMMs, bf16 elsewhere (gradients as bf16's).
// nvfp4: Transformer Engine's NVFP4 recipe for the same GEMMs (Blackwell), bf16 elsewhere.
// Megatron-Core's --moe-token-dispatcher-type. alltoall: NCCL all-to-alls of one copy per routed
// expert. allgather (Megatron-LM's default): every token of the expert tensor x expert parallel
// group all-gathered to every rank of it, each rank's experts picking theirs, and the outputs
// reduce-scattered back. flex (DeepEP / HybridEP): one copy per destination rank inside a node, per
// destination node across nodes.
enum class MoeDispatcher : std::uint8_t { alltoall, allgather, flex };
std::string_view dispatcher_name(MoeDispatcher d);
// parallel.schedule's value for a schedule: "1f1b", "gpipe", "interleaved", "zb-h1", "dualpipev".
std::string_view schedule_key(Schedule s);

enum class Precision : std::uint8_t { bf16, fp16, fp8, nvfp4 };
// Transformer Engine's FP8 recipe (Megatron-Core's --fp8-recipe; training.fp8_recipe): per-tensor
// delayed scaling, per-tensor current scaling (tensorwise), MXFP8 (a scale per 32 elements, Blackwell)
// or block scaling (128-element and 128x128-block scales). The GEMMs are timed alike; the recipes
// differ in how a grouped GEMM's operands are cast (LayerConfig::fp8_split_casts).
enum class Fp8Recipe : std::uint8_t { delayed, tensorwise, mxfp8, blockwise };
// Which software runs the step. megatron: Megatron-LM / Transformer Engine with fused kernels (every
// published run of validation/). pytorch_eager: a Llama-style model in eager PyTorch on one GPU,
// every element-wise op its own kernel, pure bf16 with fused AdamW (workload/eager_ops.h), as
// tools/device/torch_steps.py runs it. torchtitan: a Llama model trained by PyTorch's torchtitan
// (FSDP2 over data parallelism, fp32 master weights with bf16 compute, eager or torch.compile'd
// blocks, its activation-checkpointing modes; workload/torchtitan_ops.h).
enum class Framework : std::uint8_t { megatron, pytorch_eager, torchtitan };
// The type an Adam state is kept in (Megatron's --main-params-dtype, --exp-avg-dtype,
// --exp-avg-sq-dtype with --use-precision-aware-optimizer).
enum class StateDtype : std::uint8_t { fp32, bf16, fp16, fp8 };

// training.optimizer: Megatron-Core's OptimizerConfig for Adam, under its own names.
struct OptimizerSpec {
  // --use-precision-aware-optimizer: Transformer Engine's FusedAdam keeps the master weights and
  // moments in the types below and reads the gradients in their own type.
  bool use_precision_aware_optimizer = false;
  StateDtype main_params_dtype = StateDtype::fp32;  // fp32 or fp16
  StateDtype exp_avg_dtype = StateDtype::fp32;
  StateDtype exp_avg_sq_dtype = StateDtype::fp32;
  // With the precision-aware optimizer, fp32 master weights and 16-bit bf16 weights: keep only the
  // 16 bits of each master weight the bf16 weight lacks (Megatron's default since TE 2.1).
  bool store_param_remainders = true;
  // --optimizer-cpu-offload: the Adam step of optimizer_offload_fraction of this rank's parameters
  // runs on the CPU (Megatron-Core's HybridDeviceOptimizer: gradients to host, torch AdamW, weights
  // back); --overlap-cpu-optimizer-d2h-h2d pipelines the copies with the CPU step.
  bool optimizer_cpu_offload = false;
  double optimizer_offload_fraction = 1;
  bool overlap_cpu_optimizer_d2h_h2d = false;
  // The settings differ from Megatron's defaults (plain fp32 Adam on the GPU); every other setting
  // needs the precision-aware optimizer.
  bool non_default() const { return use_precision_aware_optimizer; }
};

struct ParallelSpec {
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t cp = 1;
  std::int64_t dp = 1;  // derived: gpus / (tp * pp * cp)
  // Mixture of experts (Megatron-Core's parallel folding): the tp*cp*dp ranks of a pipeline stage
  // are regrouped for the expert layers as etp (fastest) x ep x expert-dp; each ep group holds every
  // expert once. etp 0 in a file means Megatron's default, tp; resolved when the scenario is checked.
  std::int64_t ep = 1;
  std::int64_t etp = 0;
  std::int64_t expert_dp() const { return tp * cp * dp / (ep * etp); }
  bool sequence_parallel = false;
  Schedule schedule = Schedule::one_f_one_b;
  std::int64_t virtual_stages = 1;
  std::int64_t zero = 0;  // 0: plain DP all-reduce; 1: distributed optimizer
  // Megatron's --cp-comm-type: how context parallelism's attention communicates. p2p: ring attention
  // (K/V blocks passed around the CP ring beside the block computations); a2a: all-to-alls turn the
  // sequence shards of Q, K and V into head shards of the whole sequence and the output back
  // (DeepSpeed-Ulysses style); allgather: K and V all-gathered before the attention of the rank's
  // queries, their gradients reduce-scattered after its backward.
  enum class CpComm : std::uint8_t { p2p, a2a, allgather };
  CpComm cp_comm = CpComm::p2p;
  // Megatron's --num-distributed-optimizer-instances: with zero 1, the DP x CP ranks form this many
  // instances of consecutive ranks; the optimizer states are sharded within an instance, gradients
  // reduce-scattered within it and then all-reduced across the instances, parameters all-gathered
  // within it.
  std::int64_t dist_opt_instances = 1;
  // With zero 3 and instances (Megatron FSDP's HSDP): --outer-dp-sharding-strategy optim also shards
  // the optimizer states (and fp32 main weights) across the replicas (false: no_shard, its default,
  // each replica holds its shard's states).
  bool outer_optim_shard = false;
  // With zero 1: the gradients all-reduced whole (each rank then updates its shard and the shards
  // are all-gathered) instead of reduce-scattered: DeepSpeed's BF16_Optimizer and its ZeRO-1 with
  // reduce_scatter false (parallel.zero1_grad_reduce "all_reduce").
  bool zero1_grad_all_reduce = false;
  // Megatron's --overlap-grad-reduce: gradients reduced in buckets during the last backward.
  bool overlap_grad_reduce = false;
  // Megatron's --overlap-param-gather: the distributed optimizer's parameter all-gather runs in
  // buckets ahead of the next step's forward instead of after the optimizer.
  bool overlap_param_gather = false;
  // With overlap_param_gather and model chunks (virtual stages): Megatron-Core's --align-param-gather,
  // the schedule dispatching whole chunks' gathers, the first two at its start and each next one as
  // the previous chunk's first forward begins. Absent: on, as Megatron-Bridge's and NeMo's
  // CommOverlapConfig set it where pp > 1 and vp > 1 (Megatron-LM's own default is off, which
  // `import megatron` writes). Off, and always with one chunk, each bucket's gather is dispatched on
  // demand: a chunk's first bucket when its first forward needs it, each next one once the previous
  // one has arrived.
  std::optional<bool> align_param_gather;
  // Gradient bucket size in MB (0: Megatron's default of max(40M, 1M x dp) parameters, fp32).
  double dp_bucket_mb = 0;
  // Megatron's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (0: even);
  // the other stages split the remaining layers evenly.
  std::int64_t first_stage_layers = 0;
  std::int64_t last_stage_layers = 0;
  // Megatron-Core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split:
  // the embedding (loss) takes the place of one transformer layer in the first (last) model chunk
  // when the layers are split evenly over the pp x virtual_stages chunks.
  bool account_for_embedding = false;
  bool account_for_loss = false;
  // Megatron-Core's --pipeline-model-parallel-layout: the transformer layers ("t") of each virtual
  // stage, stages separated by "|", "E" the embedding (first stage), "L" the loss (last stage), "m"
  // a multi-token prediction module (last stage); "X*N" and "(...)*N" repeat. Parsed into the layers
  // of each virtual stage k = chunk * pp + stage (empty: no layout).
  std::string pipeline_layout;
  std::vector<std::int64_t> layout_layers;
  // Transformer Engine's --tp-comm-overlap: TP all-gathers and reduce-scatters run concurrently with
  // the GEMM that consumes or produces them.
  bool tp_comm_overlap = false;
  // Megatron-LM before Megatron-Core (its --scatter-gather-tensors-in-pipeline, on by default until
  // 2023): with tp > 1 and without sequence parallelism each tensor-parallel rank sends 1/tp of the
  // hidden states between pipeline stages and the receiving stage all-gathers them over its TP group
  // (Narayanan et al. 2021, section 4.1). Megatron-Core sends every rank the whole tensor. DeepSpeed's
  // pipeline engine partitions them so by default (its pipeline.pipe_partitioned and grad_partitioned):
  // with framework megatron-deepspeed an absent key is true where it applies.
  bool scatter_gather_tensors_in_pipeline = false;
  bool scatter_gather_given = false;  // the scenario said it
  // Whether a pipeline message is whole on every tensor-parallel rank, which the scatter needs.
  bool pipeline_message_whole_per_tp_rank() const { return tp > 1 && pp > 1 && !sequence_parallel; }
  // Megatron-Core's --overlap-moe-expert-parallel-comm (Megatron-Bridge moe_a2a_overlap): in the
  // pipeline's steady state a forward and a backward of different micro-batches run merged layer by
  // layer, each one's token all-to-alls beside the other's compute (combined 1F1B); one more
  // warm-up forward makes room for it.
  bool moe_a2a_overlap = false;
  // With moe_a2a_overlap: Megatron-Core's --delay-wgrad-compute, the backward experts' weight
  // gradients after the backward dispatch all-to-all is launched.
  bool delay_wgrad_compute = false;
  // Megatron-Core's --defer-embedding-wgrad-compute with --wgrad-deferral-limit (Megatron-Bridge
  // comm_overlap.defer_embedding_wgrad_compute, wgrad_deferral_limit): the last pipeline stage keeps
  // the output layer's input and output gradient of the first `limit` micro-batches (0: all) and runs
  // their weight-gradient GEMMs in the pipeline's flush (drain_embedding_wgrad_compute).
  bool defer_embedding_wgrad = false;
  std::int64_t wgrad_deferral_limit = 0;
  // Megatron-Core's --moe-token-dispatcher-type (MoeDispatcher).
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;
  bool moe_flex_dispatch() const { return moe_dispatcher == MoeDispatcher::flex; }
  // Megatron-Core's --moe-shared-expert-overlap: the shared expert's forward beside the dispatch
  // all-to-all, its backward beside the combine's backward all-to-all.
  bool moe_shared_expert_overlap = false;
  // Token dropping (Megatron-Core's --moe-expert-capacity-factor and --moe-pad-expert-input-to-capacity):
  // each expert takes at most ceil(factor · tokens · k / experts) of a rank's routed tokens (0:
  // dropless), and with padding exactly that many, so every shape is static.
  double moe_capacity_factor = 0;
  bool moe_pad_to_capacity = false;
  // Sync-free dropless experts (Megatron-Core's --moe-expert-rank-capacity-factor, with HybridEP and
  // Transformer Engine's fused grouped experts): the dispatch and expert buffers are sized ahead for
  // this many times a rank's mean of received token copies, so no token count goes to the CPU and a
  // whole step can be one CUDA graph (0: off). --moe-paged-stash then packs the experts' saved
  // activations into paged buffers at their real size instead of keeping the capacity-sized ones.
  double moe_rank_capacity_factor = 0;
  bool moe_paged_stash = false;
  // ZeRO-3 / FSDP: each unit's parameter all-gather is issued one unit ahead of the compute in both
  // passes (Megatron FSDP; PyTorch FSDP with forward_prefetch and BACKWARD_PRE), or, when false, when
  // the unit is reached, so the unit's compute waits for it (PyTorch FSDP with forward_prefetch off
  // and BACKWARD_POST or no backward prefetch: Composer's defaults).
  bool fsdp_prefetch = true;
  // ZeRO-2: how the updated parameter shards become whole again. after_optimizer: one all-gather
  // after the optimizer step (DeepSpeed ZeRO-2, Megatron FSDP optim_grads). per_unit: PyTorch FSDP
  // SHARD_GRAD_OP: each unit's parameters are all-gathered before its forward in every micro-batch
  // (fsdp_prefetch says when it is issued), kept through its backward and freed after it.
  enum class Zero2Gather : std::uint8_t { after_optimizer, per_unit };
  Zero2Gather zero2_param_gather = Zero2Gather::after_optimizer;
  // Parameters gathered unit by unit as FSDP does (zero 3, or zero 2 per_unit).
  bool fsdp_units() const { return zero >= 3 || (zero == 2 && zero2_param_gather == Zero2Gather::per_unit); }
};

struct TrainingSpec {
  std::int64_t micro_batch = 1;
  std::int64_t global_batch = 1;
  std::int64_t seq_len = 2048;
  Recompute recompute = Recompute::none;
  workload::AttentionImpl attention = workload::AttentionImpl::flash;
  Precision precision = Precision::bf16;
  // With precision fp8 under Megatron: the recipe stated; absent, the GPU's (config::fp8_recipe).
  std::optional<Fp8Recipe> fp8_recipe;
  // With precision fp8 under Megatron and a distributed optimizer or FSDP (zero >= 1): Megatron-Core's
  // --fp8-param-gather (Megatron-Bridge mixed_precision.fp8_param_gather, which sets fp8_param): the
  // FP8 layers' weights are FP8 tensors themselves, all-gathered in FP8 (under MXFP8 in BF16 into the
  // gradient buffer, reuse_grad_buf_for_mxfp8_param_ag, and cast on arrival), and no BF16 copy is kept;
  // without it Transformer Engine keeps cached FP8 copies beside the BF16 weights.
  bool fp8_param_gather = false;
  // Full recompute of only the first N layers of each stage (Megatron --recompute-method block
  // --recompute-num-layers N); 0: every layer.
  std::int64_t recompute_layers = 0;
  // Selective recompute's modules (Megatron-Core's --recompute-modules; workload::RecomputeModule
  // bits): core_attn by default.
  std::uint8_t recompute_modules = workload::kRecomputeCoreAttn;
  // Activation offloading to host memory (Megatron-Core's --cpu-offloading with
  // --cpu-offloading-num-layers N, Transformer Engine's offload handler): the saved activations of
  // the first N transformer layers are copied to pinned host memory during the forward and back
  // during the backward; 0: none.
  std::int64_t cpu_offload_layers = 0;
  // Fine-grained activation offloading (Megatron-Core's --fine-grained-activation-offloading with
  // --offload-modules; workload::OffloadModule bits; 0: off): after each layer's forward the saved
  // tensors of these modules are copied to pinned host memory and freed when the copy ends; they
  // come back one layer ahead of the backward.
  std::uint8_t offload_modules = 0;
  std::int64_t num_micro_batches = 1;  // derived: global_batch / (micro_batch * dp), per pipeline
  Framework framework = Framework::megatron;
  // training.framework "megatron-deepspeed": Megatron-DeepSpeed, Megatron's model and kernels under
  // DeepSpeed's engine (framework megatron, and DeepSpeed's rules: check_deepspeed in scenario.cc).
  bool deepspeed = false;
  // torchtitan: each transformer block compiled by torch.compile (Inductor's fused kernels) instead
  // of run eagerly.
  bool torch_compile = false;
  // torchtitan: the loss compiled too (its build_cross_entropy_loss with compile on, since early
  // 2025): Inductor's fused cross-entropy over the bf16 logits, no fp32 copy of them.
  bool torch_compile_loss = false;
  // pytorch_eager, torchtitan: CPU time to issue one kernel in the forward (Python, dispatcher, autograd
  // recording) and in the backward (autograd engine). [A] 8 and 4 µs: typical of PyTorch 2.x on a
  // server CPU; tools/device/torch_steps.py measures both on the machine it runs on.
  double host_forward_s = 8e-6;
  double host_backward_s = 4e-6;
  // framework megatron: model the CPU that issues the kernels (parallel/step_builder.cc's host
  // stream: each op's host time, the MoE dispatcher's and the pipeline's device-to-host syncs), and
  // the Transformer Engine CUDA graph scopes that take ops off it (workload::GraphScope bits).
  bool host_overhead = true;
  double host_cost_scale = 1;  // multiplies every host cost (a slower or busier CPU: > 1)
  std::uint8_t cuda_graph_scope = 0;
  bool cuda_graph_full_iteration = false;  // the whole step one graph (--cuda-graph-impl local): no host time
  // Megatron's gradient buffer and data-parallel reduction in fp32 (its default for bf16 and fp8,
  // forced by arguments.py unless --grad-reduce-in-bf16) or in the 16-bit type (fp16's default;
  // Megatron-Bridge's and NeMo's ddp.grad_reduce_in_fp32 false). Resolved from precision when unset.
  bool grad_reduce_in_fp32 = true;
  // Megatron's gradient accumulation fusion (on unless --no-gradient-accumulation-fusion): each
  // linear's weight-gradient GEMM accumulates into main_grad itself; off, the GEMM writes a 16-bit
  // gradient that the DDP hook adds to main_grad (workload::LayerConfig::gradient_accumulation_fusion).
  bool gradient_accumulation_fusion = true;
  // Megatron-Core's --moe-router-fusion and --moe-permute-fusion (training.moe_router_fusion,
  // training.moe_permute_fusion; workload::LayerConfig): true, Transformer Engine's fused kernels.
  bool moe_router_fusion = true;
  bool moe_permute_fusion = true;
  // Megatron-Core's --moe-grouped-gemm (training.moe_grouped_gemm; workload::LayerConfig): true, the
  // experts as Transformer Engine's GroupedLinear; false, SequentialMLP (one MLP module per expert).
  bool moe_grouped_gemm = true;
  // training.cross_entropy "fused": one-pass loss kernels (workload::LayerConfig::fused_cross_entropy).
  bool fused_cross_entropy = false;
  // training.peft "lora": LoRA fine-tuning (workload::LayerConfig::frozen_weights, lora_rank,
  // lora_targets): the base model frozen, adapters of rank lora_rank on the targeted linears trained.
  // Megatron-Core's --first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
  // --num-layers-at-end-in-bf16: under fp8 or nvfp4, the model's first and last this many layers
  // (hybrid blocks counted as layers) run their linear GEMMs in BF16, as Transformer Engine's autocast
  // is left off for them.
  std::int64_t bf16_layers_at_start = 0;
  std::int64_t bf16_layers_at_end = 0;
  // training.module_precision: under fp8 or nvfp4, modules whose linear GEMMs run in a higher
  // precision than the run's (Transformer Engine's per-module recipes): workload::QuantModule bits in
  // BF16, and under nvfp4 in FP8; and the multi-token prediction layers in BF16 (Megatron-Core's
  // keep_mtp_spec_in_bf16).
  std::uint8_t bf16_modules = 0;
  std::uint8_t fp8_modules = 0;
  bool bf16_mtp = false;
  bool module_precision() const { return bf16_modules != 0 || fp8_modules != 0 || bf16_mtp; }
  bool bf16_layer(std::int64_t layer, std::int64_t layers) const {
    return (precision == Precision::fp8 || precision == Precision::nvfp4) &&
           (layer < bf16_layers_at_start || layer >= layers - bf16_layers_at_end);
  }
  // training.document_tokens: packed sequences of documents this long (workload::LayerConfig); 0: none.
  std::int64_t document_tokens = 0;
  // training.train_tokens: a training run's token budget; the reports add how many steps, days and
  // GPU-hours it takes at the predicted step time (0: not asked).
  double train_tokens = 0;
  // training.moe_load_imbalance: the busiest expert-parallel rank's received token copies over the
  // mean (workload::LayerConfig); 1: balanced, as the published benchmarks force it.
  double moe_load_imbalance = 1;
  OptimizerSpec optimizer;
  bool lora = false;
  std::int64_t lora_rank = 32;
  std::uint8_t lora_targets = workload::kLoraQkv | workload::kLoraProj | workload::kLoraFc1 | workload::kLoraFc2;
};

// Which network model times communication: the closed-form one, or flows sharing the topology
// graph's links max-min fairly (every rank simulated, since ranks no longer time alike).
enum class NetworkModel : std::uint8_t { analytical, flow };

// One kind of run's step-time error over the published runs (config/accuracy.h).
struct PublishedAccuracy {
  std::string group;  // e.g. "moe/blackwell"
  int runs = 0;
  double mape = 0;        // mean |predicted - measured| / measured
  double mean_error = 0;  // mean signed error: < 0, the runs were predicted fast on average
  // PyTorch's caching allocator: where the group's published runs logged their reserved memory
  // peak (torchtitan's max_reserved_gib), its ratio to the allocated peak trainsim predicts, lowest
  // and highest over reserved_runs runs (0: none published).
  int reserved_runs = 0;
  double reserved_min = 0, reserved_max = 0;
};

// One model's step-time error over its published runs (config/accuracy.h): the runs of the same
// architecture under the same framework, whatever their GPUs, layouts and precisions.
struct PublishedModelAccuracy {
  std::string key;  // config::accuracy_model_key, e.g. "megatron:36x2880:e128:p115670887488"
  // The model file of models/ with that architecture (e.g. "gpt-oss-120b"), else the name most of
  // the published runs give it.
  std::string name;
  int runs = 0;
  double mape = 0;
  double mean_error = 0;
};

// How full the published runs keep their GPUs, by trainsim's memory model: the allocated peak it
// predicts over the GPU's memory that `quantile` of the `runs` compared step runs stay within
// (config/accuracy.h). A prediction above it is tight: the published runs seldom go there, since
// the caching allocator, the CUDA context and NCCL's buffers need memory the allocated peak does not
// count.
struct PublishedMemoryFill {
  int runs = 0;
  double quantile = 0;
  double fill = 0;
};

struct Scenario {
  std::string file;
  NetworkModel network = NetworkModel::analytical;
  // `collectives`: the algorithm forced per collective op (NCCL_ALGO-like); automatic by default.
  network::AlgorithmChoice collectives{};
  workload::ModelSpec model;
  network::ClusterSpec cluster;
  std::int64_t gpus = 0;
  ParallelSpec parallel;
  TrainingSpec training;
  // Legal but pointless settings, each "FILE: JSON path: what" (printed as warnings, never fatal).
  std::vector<std::string> warnings;
  // The step-time error of published runs of this kind, when the caller looked it up
  // (config::published_accuracy; `run` does): the summary quotes it.
  std::optional<PublishedAccuracy> accuracy;
  // The step-time error of the published runs of this very model, when there are enough of them
  // (config::published_model_accuracy; `run` looks it up): the summary quotes it beside the kind's.
  std::optional<PublishedModelAccuracy> model_accuracy;
  // How full the published runs keep their GPUs (config::published_memory_fill; `run` looks it up):
  // the summary calls a peak above it tight.
  std::optional<PublishedMemoryFill> memory_fill;
  // What one GPU-hour of the cluster costs, US dollars (0: not given): the commands' `--price`, not a
  // scenario key. The reports then add what the tokens cost (report::cost).
  double gpu_hour_price_usd = 0;
};

// Where named models and topologies live: <data_dir>/models/NAME.json, <data_dir>/topologies/NAME.json.
// Defaults to the source tree the binary was built from; TRAINSIM_DATA_DIR overrides it.
std::filesystem::path default_data_dir();

// A cluster by topology name (<data_dir>/topologies/NAME.json) or file path; errors name `what`
// (e.g. the command-line option) as the file.
network::ClusterSpec load_cluster(const std::string& name_or_path, const std::filesystem::path& data_dir,
                                  const std::string& what);

// A model by name (<data_dir>/models/NAME.json) or file path; errors name `what` as the file.
workload::ModelSpec load_model(const std::string& name_or_path, const std::filesystem::path& data_dir,
                               const std::string& what);

// torchrun's hosts for the scenario's GPUs: {GPUs per host, hosts}. 4 GPUs per Grace-Blackwell
// compute tray (GB200 / GB300 NVL72: 18 trays of 2 superchips, 2 GPUs each), the node's GPUs
// otherwise.
std::pair<std::int64_t, std::int64_t> launch_hosts(const Scenario& scenario);

// The virtual stage (0 .. pp·chunks - 1, in model order) of chunk `chunk` of pipeline stage `stage`:
// chunk·pp + stage (interleaved), or the V of dualpipev (stage, then 2·pp - 1 - stage).
std::int64_t virtual_stage(const ParallelSpec& parallel, std::int64_t stage, std::int64_t chunk);
// Model chunks per pipeline stage: virtual_stages with the interleaved schedule, 2 with dualpipev,
// else one.
std::int64_t chunks_per_stage(const ParallelSpec& parallel);
// Transformer layers on pipeline stage `stage` (uneven first/last stages as the scenario says).
std::int64_t stage_layers(const Scenario& scenario, std::int64_t stage);
// Transformer layers in model chunk `chunk` (0 .. virtual_stages - 1; 0 without interleaving) of a
// pipeline stage.
std::int64_t chunk_layers(const Scenario& scenario, std::int64_t stage, std::int64_t chunk);
// The model's index of that chunk's first transformer layer (virtual stage chunk * pp + stage holds
// the layers after those of the virtual stages before it).
std::int64_t chunk_first_layer(const Scenario& scenario, std::int64_t stage, std::int64_t chunk);

// The CUDA graph scopes of a training spec, as Megatron-Core's --cuda-graph-scope spells them (empty:
// none).
std::vector<std::string> graph_scope_names(const TrainingSpec& training);
// The precision-aware optimizer keeps fp32 master weights as the 16 bits their bf16 weights lack
// (store_param_remainders, fp32 masters, weights not in fp16).
bool keeps_param_remainders(const TrainingSpec& training);
// Context parallelism's communication type as parallel.cp_comm_type and Megatron's --cp-comm-type
// spell it ("p2p", "a2a", "allgather").
std::string_view cp_comm_name(ParallelSpec::CpComm c);
// An Adam state type as training.optimizer spells it ("fp32", "bf16", "fp16", "fp8").
std::string_view state_dtype_name(StateDtype d);
// The linears LoRA adapters wrap, as Megatron-Bridge's target_modules names them.
std::vector<std::string> lora_target_names(const TrainingSpec& training);
// training.module_precision as the scenario spells it: (module, precision) pairs in the order mtp,
// attention_linears, mamba_out_proj, moe_latent_proj; empty when no module is kept above the run's.
std::vector<std::pair<std::string_view, std::string_view>> module_precision_entries(const TrainingSpec& training);

// The names of selective recompute's modules in `mask` (workload::RecomputeModule bits), as
// Megatron-Core's --recompute-modules spells them, in bit order.
std::vector<std::string> recompute_module_names(std::uint8_t mask);
// training.offload_modules' names (Megatron-Core's --offload-modules) of the OffloadModule bits.
std::vector<std::string> offload_module_names(std::uint8_t mask);
// The FP8 recipe a Megatron scenario with precision fp8 runs: training.fp8_recipe, or the GPU's:
// MXFP8 on Blackwell (Megatron-Bridge's choice there); on Hopper per-tensor delayed scaling
// (Megatron-LM's default), or current scaling (tensorwise) where layers stay in BF16, which delayed
// scaling cannot do.
Fp8Recipe fp8_recipe(const Scenario& scenario);
// Whether the training runs one of Transformer Engine's FP8 recipes: precision fp8 under Megatron
// (not DeepSpeed's engine, not torchtitan's torchao Float8).
bool runs_fp8_recipe(const TrainingSpec& training);
// training.fp8_recipe's and Megatron-Core's --fp8-recipe name of a recipe ("delayed", "tensorwise",
// "mxfp8", "blockwise"), and the recipe of such a name (none for another).
std::string_view fp8_recipe_name(Fp8Recipe r);
std::optional<Fp8Recipe> fp8_recipe_named(std::string_view name);
// The framework's name as training.framework spells it ("megatron", "pytorch-eager", "torchtitan").
std::string_view framework_name(Framework f);
// The training.framework key of a scenario's settings ("megatron-deepspeed" for DeepSpeed's engine).
std::string_view framework_key(const TrainingSpec& t);

Scenario load_scenario(const std::string& file, const std::filesystem::path& data_dir);
// Applies `--set PATH=VALUE` overrides to a scenario's JSON, in order: PATH names object keys by dots
// (`parallel.tp`, `training.train_tokens`, `cluster`), VALUE is JSON (`8`, `true`,
// `["core_attn","mlp"]`, `"fp8"`) or else taken as a string (`fp8`). A key missing on the way is
// created; a value on the way that is not an object is an InputError naming --set and `where`.
void apply_overrides(nlohmann::json& doc, const std::vector<std::string>& sets, std::string_view where);

// Megatron-Core's pipeline layout with its repeats expanded ("Et*2|(tt|)*2L" -> "Ett|tt|tt|L");
// nullopt when it does not parse (parallel.pipeline_layout's checks then say why).
std::optional<std::string> expand_pipeline_layout(std::string_view layout);
// What parse_scenario leaves unchecked: by default nothing. A search's base scenario skips how the
// global batch splits over its layout (micro-batch times data parallelism, the micro-batches a
// schedule needs) and the rules that tie a parallel key to that layout (cp_comm_type to cp > 1,
// zero1_grad_reduce to zero 1, tp_comm_overlap to sequence parallelism, ...): the search replaces the
// layout with each of its own, which are checked in full. Every key's value is still checked.
struct ParseOptions {
  bool check_batch_split = true;
  bool check_layout_rules = true;
};
Scenario parse_scenario(const util::JsonNode& root, const std::filesystem::path& data_dir, ParseOptions options = {});

}  // namespace trainsim::config
