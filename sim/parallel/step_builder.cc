#include "parallel/step_builder.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "network/analytical_network.h"
#include "network/collective.h"
#include "parallel/rank_grid.h"
#include "util/error.h"
#include "workload/eager_ops.h"
#include "workload/ops.h"
#include "workload/torchtitan_ops.h"

namespace trainsim::parallel {

using engine::Dep;
using engine::Program;
using engine::Task;
using engine::TaskKind;
using workload::Op;

const char* stream_name(int stream) {
  static constexpr const char* kNames[] = {"compute", "tp-comm", "dp-comm", "pp-send",   "pp-recv", "dp-gather",
                                           "cp-send", "cp-recv", "ep-comm", "host-copy", "host",    "host-reload"};
  return stream >= 0 && stream < kStreamCount ? kNames[stream] : "?";
}

const char* mem_category_name(int category) {
  static constexpr const char* kNames[] = {"weights", "gradients", "optimizer_states", "activations"};
  return category >= 0 && category < kMemCategoryCount ? kNames[category] : "?";
}

network::CollectiveOp collective_of(workload::Comm c) {
  switch (c) {
    case workload::Comm::all_reduce:
      return network::CollectiveOp::all_reduce;
    case workload::Comm::all_gather:
      return network::CollectiveOp::all_gather;
    case workload::Comm::reduce_scatter:
      return network::CollectiveOp::reduce_scatter;
    case workload::Comm::all_to_all:
      return network::CollectiveOp::all_to_all;
    case workload::Comm::none:
      break;
  }
  TRAINSIM_ASSERT(false);
}

namespace {

// Bytes per parameter under Megatron's mixed precision with the Adam optimizer: 16-bit weights, a
// gradient buffer (main_grad: fp32 with bf16, where Megatron forces gradient accumulation and
// reduction in fp32; fp16 with fp16, its default), and fp32 master weights plus two fp32 moments
// (12 bytes, sharded over DP by the distributed optimizer; adam_states). Megatron-LM
// docs/theoretical memory: 18 bytes/param with bf16, or 6 + 12/dp with ZeRO-1.
constexpr std::int64_t kWeightBytes = 2;

// Megatron's FP8 layers (precision fp8 under Megatron-Core, not LoRA's BF16 adapters): their weights
// are what fp8_param_gather gathers in FP8.
bool fp8_weights(const config::Scenario& sc) {
  return config::runs_fp8_recipe(sc.training) && !sc.training.lora;
}
// The parameter all-gathers move the FP8 layers' weights in FP8: fp8_param_gather, but not under
// MXFP8 (gathered in BF16, see ChunkBuckets::unit_gather_bytes).
bool fp8_gathers(const config::Scenario& sc) {
  return fp8_weights(sc) && sc.training.fp8_param_gather && config::fp8_recipe(sc) != config::Fp8Recipe::mxfp8;
}

// Transformer Engine's cached quantised copies of a weight beside its BF16 master, bytes per weight
// element, where Megatron-Core runs FP8 or NVFP4 without fp8_param_gather: its linears pass
// is_first_microbatch, so the first micro-batch's cast of each weight is kept in the module's
// workspace for the others and the next step (transformer_engine/pytorch/module/base.py,
// get_weight_workspace). Row-wise and column-wise copies (the column-wise one for the input-gradient
// GEMM): per-tensor FP8 on Hopper a byte each (the transpose; Blackwell's tensor cores take either
// layout, so one copy), MXFP8 a byte each plus an E8M0 scale per 32 elements, block scaling a byte
// each (its scales per 128 x 128 block are negligible), NVFP4 half a byte each plus an FP8 scale per
// 16 elements. 0 where no copy is cached: BF16, fp8_param_gather (the weights are FP8 tensors
// themselves), FSDP units (gathered per unit, quantised per use), other frameworks.
double cached_quantised_weight_bytes(const config::Scenario& sc) {
  const config::TrainingSpec& t = sc.training;
  if (t.framework != config::Framework::megatron || t.deepspeed || sc.parallel.fsdp_units()) return 0;
  if (t.precision == config::Precision::nvfp4) return 2 * (0.5 + 1.0 / 16);
  if (t.precision != config::Precision::fp8 || t.fp8_param_gather) return 0;
  switch (config::fp8_recipe(sc)) {
    case config::Fp8Recipe::mxfp8:
      return 2 * (1 + 1.0 / 32);
    case config::Fp8Recipe::blockwise:
      return 2;
    case config::Fp8Recipe::delayed:
    case config::Fp8Recipe::tensorwise:
      break;
  }
  return sc.cluster.gpu.arch == hardware::Arch::blackwell ? 1 : 2;
}

constexpr std::int64_t state_dtype_bytes(config::StateDtype d) {
  switch (d) {
    case config::StateDtype::fp32:
      return 4;
    case config::StateDtype::bf16:
    case config::StateDtype::fp16:
      return 2;
    case config::StateDtype::fp8:
      return 1;  // Transformer Engine's FusedAdam: one byte and a scale per tensor
  }
  return 4;
}

// The Adam states of training.optimizer. Megatron's default (no precision-aware optimizer): fp32
// master weights and moments, the step reading fp32 gradients (the distributed optimizer's fp32
// copy of a bf16 gradient shard). The precision-aware optimizer (Transformer Engine's FusedAdam)
// keeps each state in its type and reads the gradient in the buffer's; with fp32 master weights of
// bf16 weights and store_param_remainders (Megatron's default since TE 2.1), only the 16 low bits
// of each master weight (the bf16 weight holds the high 16). FP16 weights keep full fp32 masters.
workload::AdamStates adam_states(const config::Scenario& sc) {
  const config::OptimizerSpec& o = sc.training.optimizer;
  workload::AdamStates s;
  if (!o.use_precision_aware_optimizer) return s;
  s.exp_avg = state_dtype_bytes(o.exp_avg_dtype);
  s.exp_avg_sq = state_dtype_bytes(o.exp_avg_sq_dtype);
  s.grad = sc.training.grad_reduce_in_fp32 ? 4 : 2;
  s.remainders = config::keeps_param_remainders(sc.training);
  s.master = s.remainders ? 2 : state_dtype_bytes(o.main_params_dtype);
  return s;
}

// optimizer_cpu_offload (Megatron-Core's HybridDeviceOptimizer with param_update_in_fp32, as
// Megatron builds it): for each offloaded parameter the host keeps pinned an fp32 weight, an fp32
// gradient and torch AdamW's two fp32 moments (16 bytes).
constexpr std::int64_t kCpuAdamHostBytes = 4 + 4 + 4 + 4;

// The offloaded parameters' share of the step, seconds: their gradients copied to host memory (into
// fp32 buffers, 4 bytes each over the host link; [A] the type conversion on the GPU side, so the
// link carries fp32), torch.optim.AdamW(fused=True) on the CPU, and the fp32 weights copied back (4
// bytes). The CPU's Adam runs at [M] 0.644e9 parameters per second per process: NVIDIA-NeMo/RL PR
// #3628 measured Qwen3-0.6B (596,049,920 parameters, from its config.json) on one H100 at 0.752 s
// per step without offload and 1.678 s with all of it offloaded and overlapped, 0.926 s more, the
// copies (43 ms each way) hidden under the CPU's step. It is not bound by memory bandwidth there
// (28 bytes per parameter, one fused pass reading the fp32 weight, gradient and moments and writing
// weight and moments: 18 GB/s), but a node whose GPUs all offload at once can be: each process gets
// at most its GPU's share of the node's CPU memory bandwidth (host_memory_GBps / gpus_per_node) at
// STREAM's efficiency, [A] 0.78 (the triad's 78% of the DRAM wire rate in TI's STREAM measurements,
// SPRAD45 Table 3-3, taken for server DDR5 and LPDDR5X). [A] every process keeps the measured rate
// when all of a node's GPUs offload (on DGX H100 the bandwidth bound is 2.1e9 per second). With
// overlap_cpu_optimizer_d2h_h2d the three run as a pipeline (one CPU optimizer per parameter:
// copies on their own streams, the CPU stepping each parameter once its gradient has arrived), so
// the slowest sets the pace; without it they run one after the other. The same measurement with half
// offloaded and no overlap (0.435 s more) is reproduced within 16% (tests/parallel/step_test.cc).
double cpu_adam_s(const config::Scenario& sc, std::int64_t params) {
  constexpr double kLinkBytes = 4, kCpuAdamBytes = 4 * 4 + 3 * 4, kStreamEfficiency = 0.78;
  constexpr double kCpuAdamParamsPerS = 596049920 / 0.926;
  const double n = static_cast<double>(params);
  const double host_memory_Bps =
      sc.cluster.host_memory_Bps * kStreamEfficiency / static_cast<double>(sc.cluster.gpus_per_node);
  const double cpu_params_per_s = std::min(kCpuAdamParamsPerS, host_memory_Bps / kCpuAdamBytes);
  const double copy = kLinkBytes * n / sc.cluster.host_link_Bps;  // each way
  const double cpu = n / cpu_params_per_s;
  return sc.training.optimizer.overlap_cpu_optimizer_d2h_h2d ? std::max(copy, cpu) : copy + cpu + copy;
}

// `n` split `ways` ways, rounded up: one rank's shard.
std::int64_t shard(std::int64_t n, std::int64_t ways) {
  return (n + ways - 1) / ways;
}

// What a rank of `stage` holds from the start of the step: its weights (FSDP: their shard), its
// gradient buffer and its optimizer states (those the CPU offload keeps on the GPU), bytes; and the
// pinned host memory the optimizer's CPU offload takes. ZeRO-2 shards the gradients, ZeRO-3 the
// weights too (Megatron's theoretical-memory accounting); FSDP's SHARD_GRAD_OP (zero 2 per_unit)
// keeps its weights sharded between steps as well. (A mixture-of-experts model runs zero 0 or 1:
// its experts are sharded over expert dp.)
struct StaticMemory {
  std::int64_t weights = 0, gradients = 0, optimizer = 0;
  std::int64_t opt_params = 0, cpu_params = 0;  // the optimizer's shard, and the part the CPU steps
  std::int64_t host_bytes = 0;
  std::int64_t device_bytes() const { return weights + gradients + optimizer; }
};

StaticMemory static_memory(const config::Scenario& sc, const StagePlan& stage) {
  const auto& par = sc.parallel;
  const bool eager = sc.training.framework == config::Framework::pytorch_eager;
  const bool titan = sc.training.framework == config::Framework::torchtitan;
  const std::int64_t grad_bytes = eager                             ? workload::kEagerGradBytes
                                  : titan                           ? workload::kTorchtitanGradBytes
                                  : sc.training.grad_reduce_in_fp32 ? 4
                                                                    : 2;
  const std::int64_t params = stage.params_per_rank;
  const std::int64_t expert_params = stage.expert_params_per_rank;
  const std::int64_t dp = par.dp * par.cp;
  // Distributed optimizer instances shard within an instance only (the experts' within their expert
  // data-parallel instance).
  const std::int64_t edp = sc.model.moe() ? par.expert_dp() / par.dist_opt_instances : 1;
  StaticMemory m;
  m.opt_params =
      par.zero >= 1 ? shard(params, dp / par.dist_opt_instances) + shard(expert_params, edp) : params + expert_params;
  // Megatron FSDP's outer "optim" sharding: the states sharded across the replicas as well, over every
  // data-parallel rank (the replicas' shards, reduced across them, go on to one rank each).
  if (par.outer_optim_shard)
    m.opt_params = shard(params, dp) + shard(expert_params, sc.model.moe() ? par.expert_dp() : 1);
  const config::OptimizerSpec& opt = sc.training.optimizer;
  m.cpu_params =
      opt.optimizer_cpu_offload
          ? static_cast<std::int64_t>(std::llround(opt.optimizer_offload_fraction * static_cast<double>(m.opt_params)))
          : 0;
  const std::int64_t weight_bytes = eager   ? workload::kEagerWeightBytes
                                    : titan ? workload::kTorchtitanWeightBytes
                                            : kWeightBytes;
  const std::int64_t optimizer_bytes = eager   ? workload::kEagerOptimizerBytes
                                       : titan ? workload::kTorchtitanOptimizerBytes
                                               : adam_states(sc).state_bytes();
  // Hybrid sharding (zero 3 with instances) shards the weights and gradients within an instance too.
  const std::int64_t shard_ranks = dp / par.dist_opt_instances;
  // A mixture of experts' routed experts are sharded over the expert data-parallel ranks.
  m.weights = ((par.fsdp_units() ? shard(params, shard_ranks) + shard(expert_params, edp) : params + expert_params) +
               stage.frozen_params_per_rank) *
                  weight_bytes +
              static_cast<std::int64_t>(std::llround(static_cast<double>(stage.quantised_params_per_rank) *
                                                     cached_quantised_weight_bytes(sc)));
  m.gradients =
      (par.zero >= 2 ? shard(params, shard_ranks) + shard(expert_params, edp) : params + expert_params) * grad_bytes;
  m.optimizer = (m.opt_params - m.cpu_params) * optimizer_bytes;
  m.host_bytes = m.cpu_params * kCpuAdamHostBytes;
  return m;
}

enum class Saves : std::uint8_t {
  all,        // allocate every op's saved bytes
  none,       // allocate nothing (full recompute keeps only the layer input)
  selective,  // selective recompute: all but what the recomputed modules discard
};

// Appends ops to one stage's program: compute ops between communication points become one
// compute task; each tp_comm op a collective on the TP stream that the next compute waits for.
class StageWriter {
 public:
  // `recompute`: selective recompute's modules (workload::RecomputeModule bits).
  StageWriter(Program& program, const hardware::ComputeModel& compute, bool tp_comm, bool tp_overlap,
              std::uint8_t recompute)
      : p_(program), compute_(compute), tp_comm_(tp_comm), tp_overlap_(tp_overlap), recompute_(recompute) {}

  // The CPU that issues the kernels (Megatron's host overhead, eager PyTorch): one CPU thread issues
  // every task in program order on the host stream, `launch_s` per communication task or bare
  // compute task and op.host_s per op; a GPU task cannot start before the CPU has issued it (see
  // issue() and flush()), and the CPU waits for ops marked host_sync.
  void use_host_stream(double launch_s) {
    host_stream_ = true;
    launch_s_ = launch_s;
  }

  // The next task waits for `d` as well.
  void after(Dep d) { pending_.push_back(d); }
  void alloc(std::int64_t bytes) { seg_alloc_ += bytes; }

  // Emits ops: all of them, or with `recomputing` (selective recompute's pass before a layer's
  // backward) only those the recomputed modules run again, allocating again the saved bytes the
  // forward discarded (also of ops that do not run again: an output-discarding module's consumer).
  void emit(const std::vector<Op>& ops, std::string_view phase, Saves saves, bool recomputing = false) {
    for (const Op& op : ops) {
      if (op.skip_in_recompute && phase == "recompute") continue;
      if (recomputing && !(op.rerun & recompute_)) {
        if (op.discards & recompute_) {  // joins the next compute task's allocation, no work
          if (seg_.first.empty()) seg_.first = op.name;
          seg_.last = op.name;
          seg_.phase = phase;
          seg_.alloc += op.saved_bytes;
          tail_gemm_ = false;
        }
        continue;
      }
      if (op.comm_join && side_comm_) {  // the first op that needs the side collective's result
        flush();
        pending_.push_back(*side_comm_);
        side_comm_.reset();
      }
      if (op.kind == workload::OpKind::tp_comm) {
        if (op.comm_side) {
          side_comm_ = side(tp_task(op, phase));
        } else if (tp_comm_ || op.group != workload::CommGroup::tp) {
          tp_collective(op, phase);
        }
        if (op.host_sync) host_sync();
        continue;
      }
      const bool keep = recomputing ? (op.discards & recompute_) != 0
                                    : saves == Saves::all || (saves == Saves::selective && !(op.discards & recompute_));
      const std::int64_t saved = keep ? op.saved_bytes : 0;
      if (overlapped_ && op.kind == workload::OpKind::gemm) {
        // The GEMM that consumes an overlapped all-gather runs as its own task beside it.
        flush();
        accumulate(op, phase, saved);
        flush();
        pending_.push_back(*overlapped_);
        overlapped_.reset();
        continue;
      }
      accumulate(op, phase, saved);
      if (op.host_sync) host_sync();
    }
    flush();
    if (overlapped_) {
      pending_.push_back(*overlapped_);
      overlapped_.reset();
    }
  }

  // Adds a task of another kind (send, recv, collective on the DP stream) after the last task.
  // With `host_waits` the CPU then waits for it and for the last task (torch.cuda.synchronize()).
  Dep add(Task t, bool depends_on_last, bool host_waits = false) {
    flush();
    const std::optional<Dep> before = last_;
    if (depends_on_last && last_) pending_.push_back(*last_);
    const Dep d = push(t);
    if (host_waits && host_stream_) {
      if (before) host_wait_.push_back(*before);
      host_wait_.push_back(d);
      restart_host_bounds();
    }
    return d;
  }

  // A task that starts when `d` is done, beside everything else (the second collective of a
  // bucket's reduction).
  Dep chain(Task t, Dep d) {
    flush();
    std::vector<Dep> deps{d};
    issue(t, deps, launch_s_, launch_s_);
    return p_.add(t, deps);
  }

  // Adds a task that starts after the last task but that later tasks do not wait for (a bucket's
  // gradient reduction during backward, a collective overlapped with a GEMM).
  Dep side(Task t, std::optional<Dep> also = std::nullopt) {
    flush();
    std::vector<Dep> deps = pending_;
    if (last_) deps.push_back(*last_);
    if (also) deps.push_back(*also);
    issue(t, deps, launch_s_, launch_s_);
    return p_.add(t, deps);
  }

  // The collective of a communication op beside the compute stream (combined 1F1B's token
  // all-to-alls): it starts after the last task and the pending dependencies; only tasks told to
  // wait for it (after()) do.
  Dep comm_side(const Op& op, std::string_view phase) { return side(tp_task(op, phase)); }

  // The kernel time emitted so far, by KernelKind.
  const std::array<double, kKernelKinds>& kernel_s() const { return kernel_s_; }

  void compute_task(std::string_view name, double seconds, KernelKind kind) {
    kernel_s_[kind] += seconds;
    flush();
    if (last_) pending_.push_back(*last_);
    Task t;
    t.stream = kCompute;
    t.duration = engine::Time::from_seconds(seconds);
    t.label = p_.label(name);
    issue(t, pending_, launch_s_, launch_s_);
    push(t);
  }

  // Releases `bytes` of activations when the most recent task ends.
  void free_at_last(std::int64_t bytes) {
    flush();
    if (bytes == 0) return;
    TRAINSIM_ASSERT(last_.has_value());
    Task& t = p_.task(*last_);
    TRAINSIM_ASSERT(t.mem_alloc_bytes == 0 || t.mem_category == kActivations);
    t.mem_category = kActivations;
    t.mem_free_bytes += bytes;
  }

  // A zero-time marker after the last task that frees `bytes` of `category` (a gathered layer's
  // parameters once its compute is done), or allocates them (memory that outlives the ops: FSDP2's
  // unsharded gradients over a step's micro-batches).
  void release(std::int64_t bytes, MemCategory category, std::string_view name) {
    memory_marker(0, bytes, category, name);
  }
  void reserve(std::int64_t bytes, MemCategory category, std::string_view name) {
    memory_marker(bytes, 0, category, name);
  }

  std::optional<Dep> last() const { return last_; }

  // Ends the program: the CPU's work no task has carried yet (a last issue's rest) as a host task
  // of its own, so the host stream's busy time is all of it.
  void finish() {
    flush();
    if (!host_stream_ || host_rest_s_ <= 0) return;
    Task h;
    h.stream = kHost;
    h.label = p_.label("issue");
    h.duration = engine::Time::from_seconds(host_rest_s_);
    p_.add(h, host_wait_);
    host_wait_.clear();
    host_rest_s_ = 0;
  }

 private:
  Task tp_task(const Op& op, std::string_view phase) {
    Task t;
    t.stream = op.group == workload::CommGroup::tp ? kTpComm : op.group == workload::CommGroup::cp ? kCpSend : kEpComm;
    t.kind = TaskKind::collective;
    t.slot = op.group == workload::CommGroup::ep       ? kEpGroup
             : op.group == workload::CommGroup::etp    ? kEtpGroup
             : op.group == workload::CommGroup::ep_etp ? kEpEtpGroup
             : op.group == workload::CommGroup::cp     ? kCpGroup
                                                       : kTpGroup;
    t.op = static_cast<std::uint16_t>(collective_of(op.comm));
    t.bytes = op.comm_bytes;
    t.label = label_of(phase, op.name, op.name);
    return t;
  }

  // Without overlap a TP collective is exposed: it follows the last compute and the next compute
  // waits for it. (Megatron issues the backward input-grad all-reduce / reduce-scatter and the
  // saved-input all-gather asynchronously beside the next GEMM, but Korthikanti et al.'s measured
  // layer times show little of that gain: modelled as full overlap, Table 4's backward times come
  // out 9-12% fast. The communication kernels contend with the GEMM for SMs and HBM; until an
  // overlap slowdown is calibrated, they stay exposed.) With Transformer Engine's overlap (sequence
  // parallelism) an all-gather runs beside the GEMM that consumes it and a reduce-scatter beside the
  // GEMM that produces it, chunk by chunk; whatever follows waits for both.
  // Expert-parallel communication (token dispatch and combine) is exposed here: Megatron-Core's
  // alltoall dispatcher runs it in the layer's critical path (combined 1F1B, moe_a2a_overlap, puts
  // it beside the other micro-batch's compute instead: see `merged` in build_stage_program).
  void tp_collective(const Op& op, std::string_view phase) {
    const bool overlap = tp_overlap_ && op.group == workload::CommGroup::tp;
    if (overlap && op.comm == workload::Comm::all_gather) {
      flush();
      overlapped_ = side(tp_task(op, phase));
      return;
    }
    if (overlap && op.comm == workload::Comm::reduce_scatter && tail_gemm_) {
      Segment gemm = split_tail();
      flush();
      const Dep c = side(tp_task(op, phase));
      seg_ = gemm;
      if (host_stream_) seg_host_.push_back(tail_host_);
      flush();
      pending_.push_back(c);
      return;
    }
    flush();
    if (last_) pending_.push_back(*last_);
    push(tp_task(op, phase));
  }

  // The names are views of the ops' own (and the callers' phase literals): a segment is flushed
  // before the emit() that filled it returns, while its ops live.
  struct Segment {
    std::string_view first, last, phase;
    double s = 0;
    std::int64_t alloc = 0;
    double flops = 0;
  };

  void memory_marker(std::int64_t alloc, std::int64_t free, MemCategory category, std::string_view name) {
    flush();
    if (last_) pending_.push_back(*last_);
    Task t;
    t.stream = kCompute;
    t.mem_alloc_bytes = alloc;
    t.mem_free_bytes = free;
    t.mem_category = category;
    t.label = p_.label(name);
    push(t);
  }

  void accumulate(const Op& op, std::string_view phase, std::int64_t saved) {
    const double t = op.time_memo_s >= 0 ? op.time_memo_s : compute_.time_s(op);
    kernel_s_[phase == "optimizer"                     ? kOptimizerKernels
              : op.kind == workload::OpKind::gemm      ? kGemmKernels
              : op.kind == workload::OpKind::attention ? kAttentionKernels
                                                       : kMemoryKernels] += t;
    if (host_stream_) seg_host_.push_back({op.host_s, t, std::max(1, op.kernels)});
    seg_ws_ = std::max(seg_ws_, op.workspace_bytes);
    if (seg_.first.empty()) seg_.first = op.name;
    before_tail_ = seg_.last;
    seg_.last = op.name;
    seg_.phase = phase;
    seg_.s += t;
    seg_.alloc += saved;
    seg_.flops += op.flops;
    tail_gemm_ = op.kind == workload::OpKind::gemm;
    tail_ = Segment{op.name, op.name, phase, t, saved, op.flops};
  }

  // Removes the trailing GEMM from the open segment and returns it as a segment of its own.
  Segment split_tail() {
    if (host_stream_) {
      tail_host_ = seg_host_.back();
      seg_host_.pop_back();
    }
    seg_.s -= tail_.s;
    seg_.alloc -= tail_.alloc;
    seg_.flops -= tail_.flops;
    if (seg_.first == tail_.first && before_tail_.empty()) seg_.first = {};
    seg_.last = before_tail_;
    if (seg_.first.empty()) seg_ = Segment{};
    tail_gemm_ = false;
    return tail_;
  }

  void flush() {
    tail_gemm_ = false;
    before_tail_ = {};
    if (seg_.first.empty() && seg_.alloc == 0 && seg_alloc_ == 0) return;
    Task t;
    t.stream = kCompute;
    t.duration = engine::Time::from_seconds(seg_.s);
    t.flops = seg_.flops;
    t.mem_alloc_bytes = seg_.alloc + seg_alloc_;
    t.mem_category = kActivations;
    t.label = label_of(seg_.phase, seg_.first, seg_.last);
    seg_ = Segment{};
    seg_alloc_ = 0;
    // The largest temporary of the merged ops is held while the task runs.
    t.mem_alloc_bytes += seg_ws_;
    t.mem_free_bytes += seg_ws_;
    seg_ws_ = 0;
    // Compute runs in program order: after the previous task, whatever stream it was on.
    if (last_) pending_.push_back(*last_);
    if (host_stream_) {
      // The CPU issues kernel i (h_i) after kernels 0..i-1; the GPU runs it (g_i) once it is issued
      // and kernel i-1 has ended (an op of k kernels: h/k and g/k each). From the moment the CPU
      // starts issuing the task's kernels (T_h) and the GPU is free (T_g), the last one ends at
      // max(T_g + G, T_h + max_i(H_<=i + G_>=i)): the task waits for the first
      // lead = max_i(H_<=i - G_<i) of the CPU's work, which is at most H = sum h_i. Within an op
      // H_<=i - G_<i is linear in i, so its largest value is at the op's first or last kernel.
      double host = 0, device = 0, lead = 0;
      for (const auto& [h, g, kernels] : seg_host_) {
        const double k = kernels;
        lead = std::max({lead, host + h / k - device, host + h - device - g * (k - 1) / k});
        host += h;
        device += g;
      }
      seg_host_.clear();
      issue(t, pending_, host, lead);
    }
    push(t);
  }

  // A task's label, "phase first" or "phase first..last", interned once per distinct triple: the
  // cache is keyed by where the three names live and checks their text, so a temporary op whose
  // name reuses an address cannot alias another's label.
  std::uint32_t label_of(std::string_view phase, std::string_view first, std::string_view last) {
    auto [it, added] = labels_.try_emplace({phase.data(), first.data(), last.data()});
    LabelEntry& e = it->second;
    if (added || e.phase != phase || e.first != first || e.last != last) {
      e.phase = phase;
      e.first = first;
      e.last = last;
      e.id =
          p_.label(first == last ? fmt::format("{} {}", phase, first) : fmt::format("{} {}..{}", phase, first, last));
    }
    return e.id;
  }

  Dep push(const Task& t) {
    if (t.kind != TaskKind::compute) issue(t, pending_, launch_s_, launch_s_);
    if (t.stream == kCompute) gpu_floor_s_ += t.duration.seconds();
    Dep d = p_.add(t, pending_);
    pending_.clear();
    last_ = d;
    if (t.stream == kCompute) last_compute_ = d;
    return d;
  }

  // With the host stream: the CPU issues task `t` (`host_s` of CPU time in all) after everything
  // issued before; the task waits for the first `lead_s` of it (see flush), the rest runs beside
  // it. Nothing waits for that rest, so it joins the next host task (one host task per GPU task),
  // unless the CPU must first wait for the GPU (a sync): the rest then runs before the wait. Zero-
  // time markers are not issued.
  //
  // A task the CPU has provably issued before the GPU can run it gets no host task (its CPU time
  // joins the next one): since the last sync (or the step's start) the CPU has worked
  // host_issued_s_ and the compute stream has run at least gpu_floor_s_, every compute task waiting
  // for the previous one, so the task's issue ends by host_issued_s_ + lead_s after that point,
  // while a compute task, or a task that waits for the latest compute task, starts no earlier than
  // gpu_floor_s_ after it. (The margin covers the engine's picosecond rounding; the dependency it
  // drops could never bind, so results are the same.)
  void issue(const Task& t, std::vector<Dep>& deps, double host_s, double lead_s) {
    if (!host_stream_ || (t.kind == TaskKind::compute && t.duration.seconds() == 0 && t.flops == 0) || host_s <= 0)
      return;
    constexpr double kMargin_s = 1e-6;
    const bool after_compute = (t.stream == kCompute && t.kind == TaskKind::compute) ||
                               (last_compute_ && std::any_of(deps.begin(), deps.end(), [&](const Dep& d) {
                                  return d.stream == last_compute_->stream && d.position == last_compute_->position;
                                }));
    const bool ahead = after_compute && host_wait_.empty() && host_issued_s_ + lead_s + kMargin_s <= gpu_floor_s_;
    host_issued_s_ += host_s;
    if (ahead) {
      host_rest_s_ += host_s;
      return;
    }
    Task h;
    h.stream = kHost;
    h.label = p_.label("issue");
    if (!host_wait_.empty() && host_rest_s_ > 0) {
      h.duration = engine::Time::from_seconds(host_rest_s_);
      p_.add(h);
      host_rest_s_ = 0;
    }
    h.duration = engine::Time::from_seconds(host_rest_s_ + lead_s);
    deps.push_back(p_.add(h, host_wait_));
    host_wait_.clear();
    host_rest_s_ = host_s - lead_s;
  }

  // The CPU waits for the last task (a device-to-host copy it reads) before issuing more.
  void host_sync() {
    flush();
    if (host_stream_ && last_) {
      host_wait_.push_back(*last_);
      restart_host_bounds();
    }
  }

  // At a sync the CPU resumes once the awaited tasks have ended, which is no earlier than
  // gpu_floor_s_ after the previous such point: from there it is at most host_issued_s_ -
  // gpu_floor_s_ behind.
  void restart_host_bounds() {
    host_issued_s_ = std::max(0.0, host_issued_s_ - gpu_floor_s_);
    gpu_floor_s_ = 0;
  }

  Program& p_;
  const hardware::ComputeModel& compute_;
  bool tp_comm_;
  bool tp_overlap_;
  std::vector<Dep> pending_;
  std::optional<Dep> last_;
  // A collective running beside the ops that follow it until one joins it (Op::comm_side / comm_join).
  std::optional<Dep> side_comm_;
  std::optional<Dep> overlapped_;                // an all-gather the next GEMM runs beside
  std::array<double, kKernelKinds> kernel_s_{};  // kernel time emitted, by KernelKind
  Segment seg_;                                  // compute ops merged into the next compute task
  Segment tail_;                                 // the last op added to seg_
  std::string_view before_tail_;                 // seg_.last before the tail was added
  using LabelKey = std::array<const char*, 3>;
  struct LabelKeyHash {
    std::size_t operator()(const LabelKey& k) const {
      std::size_t h = 0;
      for (const char* p : k) h = h * 1000003u ^ std::hash<const char*>{}(p);
      return h;
    }
  };
  struct LabelEntry {
    std::string phase, first, last;
    std::uint32_t id = 0;
  };
  std::unordered_map<LabelKey, LabelEntry, LabelKeyHash> labels_;
  bool tail_gemm_ = false;
  std::int64_t seg_alloc_ = 0;  // extra allocation for the next compute task (layer inputs)
  std::int64_t seg_ws_ = 0;     // largest workspace_bytes of the ops in seg_
  bool host_stream_ = false;
  double launch_s_ = 0;  // host stream: CPU time to issue a communication task
  struct OpIssue {
    double host_s = 0, device_s = 0;
    int kernels = 1;
  };
  std::vector<OpIssue> seg_host_;    // host stream: CPU and GPU seconds and kernels of each op in seg_
  OpIssue tail_host_{};              // ... of the op split_tail took out
  std::vector<Dep> host_wait_;       // tasks the next host task waits for (syncs)
  double host_rest_s_ = 0;           // the CPU's work after the last issued task's lead, not yet a task
  double host_issued_s_ = 0;         // the CPU's work since the last sync (see issue())
  double gpu_floor_s_ = 0;           // the compute stream's task time since the last sync
  std::optional<Dep> last_compute_;  // the latest task on the compute stream
  std::uint8_t recompute_ = 0;
};

std::int64_t sum_saved(const std::vector<Op>& ops) {
  std::int64_t s = 0;
  for (const Op& op : ops) s += op.saved_bytes;
  return s;
}

// The kinds of layer (LayerOps::fwd / bwd index): the model's own transformer layer (a mixture-of-
// experts layer for a MoE model), a MoE model's dense layers (first_dense_layers, moe_layer_pattern), and a hybrid
// model's blocks ('M', '*', '-', 'E'; the transformer kind then serves its multi-token prediction layers); then the
// same kinds with their GEMMs in BF16 (kBaseKinds further on: the layers training.bf16_layers_at_start / _at_end keep
// out of FP8 and NVFP4).
enum LayerKind : std::uint8_t {
  kMainKind,
  kDenseKind,
  kMambaKind,
  kAttentionKind,
  kMlpKind,
  kMoeKind,
  kBaseKinds,
  kLayerKinds = 2 * kBaseKinds
};

// The kind without its precision.
LayerKind base_kind(LayerKind k) {
  return static_cast<LayerKind>(k % kBaseKinds);
}
bool bf16_kind(LayerKind k) {
  return k >= kBaseKinds;
}

LayerKind layer_kind(const config::Scenario& sc, std::int64_t layer) {
  const int bf16 = sc.training.bf16_layer(layer, sc.model.layers) ? kBaseKinds : 0;
  switch (sc.model.block(layer)) {
    case workload::LayerBlock::mamba:
      return static_cast<LayerKind>(kMambaKind + bf16);
    case workload::LayerBlock::attention:
      return static_cast<LayerKind>(kAttentionKind + bf16);
    case workload::LayerBlock::mlp:
      return static_cast<LayerKind>(kMlpKind + bf16);
    case workload::LayerBlock::moe:
      return static_cast<LayerKind>(kMoeKind + bf16);
    case workload::LayerBlock::transformer:
      break;
  }
  return static_cast<LayerKind>((sc.model.moe() && !sc.model.moe_layer(layer) ? kDenseKind : kMainKind) + bf16);
}

workload::LayerBlock kind_block(LayerKind k) {
  switch (base_kind(k)) {
    case kMambaKind:
      return workload::LayerBlock::mamba;
    case kAttentionKind:
      return workload::LayerBlock::attention;
    case kMlpKind:
      return workload::LayerBlock::mlp;
    case kMoeKind:
      return workload::LayerBlock::moe;
    default:
      return workload::LayerBlock::transformer;
  }
}

// The model and block a kind of layer is built from: a MoE model's dense first layers are its dense
// variant's transformer layers.
workload::ModelSpec kind_model(const config::Scenario& sc, LayerKind k) {
  return base_kind(k) == kDenseKind ? sc.model.dense_variant() : sc.model;
}

// One TP rank's parameters in a layer of this kind.
std::int64_t kind_layer_params(const config::Scenario& sc, LayerKind k) {
  return workload::layer_params_per_rank(kind_model(sc, k), sc.parallel.tp, kind_block(k));
}

// Whether a kind of layer has routed experts.
bool kind_has_experts(const config::Scenario& sc, LayerKind k) {
  return base_kind(k) == kMoeKind || (base_kind(k) == kMainKind && sc.model.moe());
}

// The ops of the model's layers, by kind (empty for kinds the model lacks). The last stage's head
// runs the multi-token prediction modules (their embedding, projection, layer, output layer and
// loss) before the output layer (Megatron-Core's GPTModel), so head_* include them.
struct LayerOps {
  std::array<std::vector<Op>, kLayerKinds> fwd, bwd;
  std::vector<Op> emb_fwd, emb_bwd, head_fwd, head_bwd;
  std::int64_t input_bytes = 0;
  std::int64_t ring_kv_bytes = 0;  // context parallelism: one K/V block
  std::int64_t cp_q_bytes = 0;     // ... and the rank's query block
  // torchtitan under context parallelism: PyTorch's context_parallel kernels around each step.
  std::optional<workload::TorchtitanCpKernels> titan_cp;
};

// The backward ops split for zero-bubble schedules: the input-gradient pass, the weight-gradient
// pass, and what the input pass keeps for the weight pass (the weight GEMMs' saved inputs and the
// output gradients it writes for them).
struct SplitBackward {
  std::vector<Op> input, weight;
  std::int64_t held_inputs = 0;  // of the forward's saved bytes
  std::int64_t grad_outputs = 0;
};

SplitBackward split_backward(const std::vector<Op>& backward) {
  SplitBackward out;
  for (const Op& op : backward) {
    (op.weight_grad ? out.weight : out.input).push_back(op);
    out.grad_outputs += op.grad_output_bytes;
    out.held_inputs += op.held_input_bytes;
  }
  return out;
}

// A layer pass cut at its expert-parallel all-to-alls, for combined 1F1B: a MoE layer's forward is
// attention (with router and permutation) | dispatch | experts | combine | unpermutation, its
// backward the reverse; a dense layer is one part. parts.size() == a2a.size() + 1.
struct A2aParts {
  std::vector<std::vector<Op>> parts{{}};
  std::vector<Op> a2a;
  // delay_wgrad_compute: the backward experts' weight-gradient GEMMs, taken out of parts[1] to run
  // after the dispatch's backward all-to-all is launched.
  std::vector<Op> delayed;
};

A2aParts cut_at_all_to_alls(const std::vector<Op>& ops) {
  A2aParts out;
  for (const Op& op : ops) {
    if (op.kind == workload::OpKind::tp_comm && op.group == workload::CommGroup::ep) {
      out.a2a.push_back(op);
      out.parts.emplace_back();
    } else {
      out.parts.back().push_back(op);
    }
  }
  TRAINSIM_ASSERT(out.a2a.empty() || out.a2a.size() == 2);
  return out;
}

enum class Pass : std::uint8_t {
  forward,
  backward,        // input and weight gradients together
  backward_input,  // zb-h1: input gradients only, sent upstream at once
  weight,          // zb-h1: the weight gradients of the oldest micro-batch whose input pass ran
  merged,          // combined 1F1B (moe_a2a_overlap): a forward of `chunk` and a backward of `backward_chunk`
};

struct ScheduleStep {
  Pass pass = Pass::forward;
  std::int64_t chunk = 0;
  std::int64_t backward_chunk = 0;  // Pass::merged
};

// The order in which pipeline rank r runs the passes of its m micro-batches (per model chunk), as
// Megatron-LM's schedules.py does:
//   gpipe:       all m forwards, then all m backwards.
//   1f1b:        min(p - r - 1, m) warm-up forwards, then one forward and one backward alternately,
//                then the remaining backwards (PipeDream-Flush).
//   interleaved: v chunks per rank, m·v passes each way; warm-up (p - r - 1)·2 + (v - 1)·p forwards;
//                the k-th forward runs chunk (k / p) mod v, the k-th backward chunk v - 1 - (k / p) mod v.
//   zb-h1:       1F1B's warm-up; then r forward / input-gradient pairs whose weight passes wait;
//                then forward, input gradient, weight; then input gradient, weight; finally the r
//                deferred weight passes, which fill the bubble 1F1B leaves at the end of rank r
//                (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", ZB-H1; the order of the
//                authors' reference schedule). At most p - r micro-batches are between forward and
//                input gradient, as in 1F1B.
// With `merged` (Megatron-Core's combined 1F1B for --overlap-moe-expert-parallel-comm; 1f1b at pp 1
// or interleaved) one more warm-up forward, so that every steady-state forward / backward pair
// belongs to different micro-batches, and each pair is one merged step.
// DualPipeV (DeepSeek's "cut-in-half" DualPipe, deepseek-ai/DualPipe; PyTorch's ScheduleDualPipeV),
// rank r of p with m >= 2p micro-batches per chunk; chunk 0 is the V's way down (virtual stage r),
// chunk 1 its way back (stage 2p - 1 - r). In eight phases: 2(p - r - 1) forwards of chunk 0; r + 1
// pairs of forwards of chunks 0 and 1; p - r - 1 rounds of a chunk-1 input-gradient pass, a deferred
// weight pass and a chunk-1 forward; m - 2p + r + 1 rounds of a chunk-0 forward with a chunk-1
// backward and a chunk-1 forward with a chunk-0 backward, each pair run together (Pass::merged;
// the last rank's first round runs its pair one after the other); p - r - 1 rounds of a chunk-1
// backward and a chunk-1 forward with a chunk-0 backward; r + 1 rounds of backwards of chunks 1 and
// 0, the second half as input-gradient passes; p - r - 1 rounds of a weight pass and a chunk-0
// input-gradient pass; the r + 1 weight passes left. A weight pass runs the oldest deferred one.
std::vector<ScheduleStep> dualpipev_schedule(std::int64_t p, std::int64_t m, std::int64_t r) {
  std::vector<ScheduleStep> out;
  std::deque<std::int64_t> deferred;  // the chunks whose weight passes wait, oldest first
  auto forward = [&](std::int64_t c) { out.push_back(ScheduleStep{Pass::forward, c, 0}); };
  auto backward = [&](std::int64_t c, bool deferring) {
    out.push_back(ScheduleStep{deferring ? Pass::backward_input : Pass::backward, c, 0});
    if (deferring) deferred.push_back(c);
  };
  auto weight = [&] {
    TRAINSIM_ASSERT(!deferred.empty());
    out.push_back(ScheduleStep{Pass::weight, deferred.front(), 0});
    deferred.pop_front();
  };
  auto together = [&](std::int64_t f, std::int64_t b) { out.push_back(ScheduleStep{Pass::merged, f, b}); };
  for (std::int64_t i = 0; i < 2 * (p - r - 1); ++i) forward(0);
  for (std::int64_t i = 0; i < r + 1; ++i) {
    forward(0);
    forward(1);
  }
  for (std::int64_t i = 0; i < p - r - 1; ++i) {
    backward(1, true);
    weight();
    forward(1);
  }
  for (std::int64_t i = 0; i < m - 2 * p + r + 1; ++i) {
    if (i == 0 && r == p - 1) {
      forward(0);
      backward(1, false);
    } else {
      together(0, 1);
    }
    together(1, 0);
  }
  for (std::int64_t i = 0; i < p - r - 1; ++i) {
    backward(1, false);
    together(1, 0);
  }
  bool deferring = false;
  for (std::int64_t i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) deferring = true;
    backward(1, deferring);
    if (i == (r + 1) / 2 && r % 2 == 0) deferring = true;
    backward(0, deferring);
  }
  for (std::int64_t i = 0; i < p - r - 1; ++i) {
    weight();
    backward(0, true);
  }
  for (std::int64_t i = 0; i < r + 1; ++i) weight();
  TRAINSIM_ASSERT(deferred.empty());
  return out;
}

std::vector<ScheduleStep> schedule(config::Schedule kind, std::int64_t p, std::int64_t v, std::int64_t m,
                                   std::int64_t r, bool merged = false) {
  if (kind == config::Schedule::dualpipev) return dualpipev_schedule(p, m, r);
  std::vector<ScheduleStep> out;
  const ScheduleStep f{Pass::forward, 0}, b{Pass::backward, 0}, bi{Pass::backward_input, 0}, w{Pass::weight, 0};
  if (kind == config::Schedule::gpipe) {
    out.insert(out.end(), static_cast<std::size_t>(m), f);
    out.insert(out.end(), static_cast<std::size_t>(m), b);
    return out;
  }
  if (kind == config::Schedule::zb_h1) {
    std::int64_t forwards = std::min(p - r - 1, m), inputs = 0, deferred = 0;
    out.insert(out.end(), static_cast<std::size_t>(forwards), f);
    for (; forwards < m; ++forwards, ++inputs) {
      out.push_back(f);
      out.push_back(bi);
      if (deferred < r)
        ++deferred;
      else
        out.push_back(w);
    }
    for (; inputs < m; ++inputs) {
      out.push_back(bi);
      out.push_back(w);
    }
    out.insert(out.end(), static_cast<std::size_t>(deferred), w);
    return out;
  }
  const std::int64_t total = m * v;
  const std::int64_t extra = merged ? 1 : 0;
  const std::int64_t warmup = kind == config::Schedule::interleaved
                                  ? std::min((p - r - 1) * 2 + (v - 1) * p + extra, total)
                                  : std::min(p - r - 1 + extra, m);
  auto fwd = [&](std::int64_t k) { return ScheduleStep{Pass::forward, (k / p) % v, 0}; };
  auto bwd = [&](std::int64_t k) { return ScheduleStep{Pass::backward, v - 1 - (k / p) % v, 0}; };
  for (std::int64_t k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (std::int64_t i = 0; i < total - warmup; ++i) {
    if (merged) {
      out.push_back(ScheduleStep{Pass::merged, fwd(warmup + i).chunk, bwd(i).chunk});
      continue;
    }
    out.push_back(fwd(warmup + i));
    out.push_back(bwd(i));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

// The kinds of the layers of model chunk `chunk` on pipeline stage `stage`, in forward order.
std::vector<LayerKind> chunk_kinds(const config::Scenario& sc, std::int64_t stage, std::int64_t chunk) {
  const std::int64_t first = config::chunk_first_layer(sc, stage, chunk);
  std::vector<LayerKind> out(static_cast<std::size_t>(config::chunk_layers(sc, stage, chunk)));
  for (std::size_t l = 0; l < out.size(); ++l) out[l] = layer_kind(sc, first + static_cast<std::int64_t>(l));
  return out;
}

// The pipeline stage holding the output layer: the last, or with dualpipev (whose V ends where it
// starts) the first.
std::int64_t head_stage(const config::ParallelSpec& par) {
  return par.schedule == config::Schedule::dualpipev ? 0 : par.pp - 1;
}

// The first and last pipeline stages both hold the word embedding, kept equal by an all-reduce of
// its gradient (Megatron's shared embedding): with tied embeddings (the output layer's weight), and
// with multi-token prediction, whose modules on the last stage embed tokens too.
bool shares_embedding(const config::Scenario& sc) {
  return sc.model.tied_embeddings || sc.model.mtp_layers > 0;
}

// Full recompute applies to the first recompute_layers layers of each model chunk (Megatron's
// --recompute-method block; all of them by default, as uniform with one layer per group); the others
// keep their activations. `layer`: the index within its chunk.
bool recomputes_fully(const config::Scenario& sc, std::int64_t layer) {
  return sc.training.recompute == config::Recompute::full &&
         (sc.training.recompute_layers == 0 || layer < sc.training.recompute_layers);
}

void build_stage_program(const config::Scenario& sc, StagePlan& stage, std::int64_t stage_index, const LayerOps& ops,
                         const hardware::ComputeModel& compute, Program& p) {
  const auto& par = sc.parallel;
  const auto recompute = sc.training.recompute;
  const std::int64_t pp = par.pp;
  const std::int64_t m = sc.training.num_micro_batches;
  const bool first = stage_index == 0, last = stage_index == pp - 1;
  const bool eager = sc.training.framework == config::Framework::pytorch_eager;
  const bool titan = sc.training.framework == config::Framework::torchtitan;
  const std::int64_t megatron_grad_bytes = sc.training.grad_reduce_in_fp32 ? 4 : 2;
  const std::int64_t grad_bytes = eager ? workload::kEagerGradBytes : megatron_grad_bytes;
  // Selective recompute's modules (none without it).
  const std::uint8_t recompute_modules =
      recompute == config::Recompute::selective ? sc.training.recompute_modules : std::uint8_t{0};
  StageWriter w(p, compute, par.tp > 1, par.tp_comm_overlap && par.sequence_parallel && par.tp > 1, recompute_modules);
  const workload::EagerHost host{sc.training.host_forward_s, sc.training.host_backward_s};
  if (host_stream(sc))
    w.use_host_stream(eager || titan ? host.forward_s
                                     : host_costs(sc.cluster, sc.training.host_cost_scale).forward_call_s);

  auto full_recompute = [&](std::int64_t l) { return recomputes_fully(sc, l); };
  auto fwd_saves = [&](std::int64_t l) {
    return full_recompute(l) ? Saves::none : recompute == config::Recompute::selective ? Saves::selective : Saves::all;
  };
  // The kind of each layer of each chunk.
  std::vector<std::vector<LayerKind>> kinds(static_cast<std::size_t>(stage.chunks));
  for (std::int64_t c = 0; c < stage.chunks; ++c) kinds[static_cast<std::size_t>(c)] = chunk_kinds(sc, stage_index, c);
  auto kind_of = [&](std::int64_t c, std::int64_t l) {
    return kinds[static_cast<std::size_t>(c)][static_cast<std::size_t>(l)];
  };
  auto layer_fwd = [&](std::int64_t c, std::int64_t l) -> const std::vector<Op>& { return ops.fwd[kind_of(c, l)]; };
  auto layer_bwd = [&](std::int64_t c, std::int64_t l) -> const std::vector<Op>& { return ops.bwd[kind_of(c, l)]; };
  std::array<std::int64_t, kLayerKinds> kind_saved{};
  for (std::size_t k = 0; k < kLayerKinds; ++k) kind_saved[k] = sum_saved(ops.fwd[k]);
  auto layer_free = [&](std::int64_t c, std::int64_t l) {
    return kind_saved[kind_of(c, l)] + (full_recompute(l) ? ops.input_bytes : 0);
  };

  // Activation offloading (Transformer Engine's asynchronous group offload handler, which
  // Megatron-Core's --cpu-offloading runs; pp 1, so chunk 0 holds every layer): the saved
  // activations of layers 0..n-1 go to host memory on a copy stream of their own. The copy of
  // layer 0 starts when its forward ends; at the end of layer window[k] the forward waits for copy
  // k, frees layer k's activations and starts copy k + 1. window[] spreads the n copies over the L
  // layers: window[k] = (L / n)(k + 1) - 1, plus k + 1 for the first L mod n windows and L mod n
  // after them. In the backward, before layer window[k] the compute waits for the reloads issued
  // so far and issues reload k, which allocates layer k's activations again; layer 0 waits for all.
  const std::int64_t offload_layers = sc.training.cpu_offload_layers;
  std::vector<std::int64_t> offload_window(static_cast<std::size_t>(offload_layers));
  for (std::int64_t k = 0, extra = 0, total = sc.model.layers; k < offload_layers; ++k) {
    if (k < total % offload_layers) extra = k + 1;
    offload_window[static_cast<std::size_t>(k)] = total / offload_layers * (k + 1) - 1 + extra;
  }
  // A copy of `bytes` of activations between GPU and host memory over the host link.
  auto host_copy_task = [&](const std::string& label, std::uint8_t stream, std::int64_t bytes) {
    Task t;
    t.stream = stream;
    t.duration = engine::Time::from_seconds(static_cast<double>(bytes) / sc.cluster.host_link_Bps);
    t.label = p.label(label);
    t.mem_category = kActivations;
    return t;
  };
  auto host_copy = [&](std::string_view name, std::int64_t layer, std::int64_t bytes, bool reload) {
    Task t = host_copy_task(fmt::format("{} layer {}", name, layer), kHostCopy, bytes);
    if (reload) t.mem_alloc_bytes = bytes;
    return t;
  };
  auto offload_bytes = [&](std::int64_t l) { return kind_saved[kind_of(0, l)]; };
  std::int64_t offloaded = 0;  // the handler's count of copies completed (forward) / reloads to issue (backward)
  std::optional<Dep> host_copy_issued;
  // After layer l's forward.
  auto offload_after_forward = [&](std::int64_t l) {
    if (offload_layers == 0) return;
    if (l == 0) {
      offloaded = 0;
      host_copy_issued = w.side(host_copy("offload_to_host", 0, offload_bytes(0), false));
    }
    if (offloaded < offload_layers && offload_window[static_cast<std::size_t>(offloaded)] == l) {
      w.after(*host_copy_issued);
      w.release(offload_bytes(offloaded), kActivations, fmt::format("offloaded layer {} freed", offloaded));
      if (++offloaded < offload_layers)
        host_copy_issued = w.side(host_copy("offload_to_host", offloaded, offload_bytes(offloaded), false));
    }
  };
  // Before layer l's backward.
  auto reload_before_backward = [&](std::int64_t l) {
    if (offload_layers == 0) return;
    if (offloaded > 0 && offload_window[static_cast<std::size_t>(offloaded - 1)] == l) {
      w.after(*host_copy_issued);
      --offloaded;
      host_copy_issued = w.side(host_copy("reload_from_host", offloaded, offload_bytes(offloaded), true));
    }
    if (l == 0) w.after(*host_copy_issued);
  };

  // Fine-grained activation offloading (Megatron-Core's --offload-modules; fine_grained_activation_
  // offload.py): after each layer's forward the saved tensors of the listed modules go to pinned host
  // memory on the copy stream, freed on the GPU when the copy ends (the compute never waits for it);
  // in the backward, layer l's come back while layer l + 1's backward runs (the handler reloads about
  // one layer ahead), and layer l's backward waits for them. A chunk's top layer comes back while the
  // stage's previous backward pass ends (its pre-reload of the next backward chunk), or, for the
  // stage's first backward, not at all: the handler keeps the last layer's groups of a chunk whose
  // backward comes next on the GPU. The copies out and back run on two streams, as Megatron-Core's
  // D2H and H2D streams (a link's two directions). Micro-batches of a chunk run their backwards in
  // forward order (a FIFO).
  const std::uint8_t fg_modules = sc.training.offload_modules;
  std::array<std::int64_t, kLayerKinds> fg_kind_bytes{};
  for (std::size_t k = 0; k < kLayerKinds; ++k)
    fg_kind_bytes[k] = workload::offloaded_bytes(
        ops.fwd[k], fg_modules, recompute == config::Recompute::selective ? sc.training.recompute_modules : 0);
  struct FgRecord {
    std::vector<std::optional<Dep>> offload, reload;  // per layer: the copy out, the copy back
    std::int64_t bytes = 0;                           // what the micro-batch's chunk holds in host memory
  };
  std::vector<std::deque<FgRecord>> fg_queue(static_cast<std::size_t>(stage.chunks));
  std::int64_t fg_host_bytes = 0, fg_host_peak = 0;
  auto fg_bytes = [&](std::int64_t c, std::int64_t l) {
    return full_recompute(l) ? std::int64_t{0} : fg_kind_bytes[kind_of(c, l)];
  };
  // A copy out frees its bytes when it ends; a copy back allocates them when it starts.
  auto fg_copy = [&](std::string_view name, std::int64_t c, std::int64_t l, std::int64_t bytes, bool reload) {
    Task t = host_copy_task(fmt::format("{} chunk {} layer {}", name, c, l), reload ? kHostReload : kHostCopy, bytes);
    (reload ? t.mem_alloc_bytes : t.mem_free_bytes) = bytes;
    return t;
  };

  auto p2p = [&p](TaskKind kind, std::uint8_t stream, std::uint8_t slot, std::int64_t bytes, const char* name) {
    Task t;
    t.kind = kind;
    t.stream = stream;
    t.slot = slot;
    t.bytes = bytes;
    t.label = p.label(name);
    return t;
  };
  // Pipeline messages carry one micro-batch of hidden states (sequence-sharded under SP). Megatron-LM
  // before Megatron-Core (scatter_gather_tensors_in_pipeline) sent each tensor-parallel rank's 1/tp of
  // them and all-gathered the pieces over the TP group on arrival, before the pass that reads them.
  const bool scatter_gather = par.scatter_gather_tensors_in_pipeline;
  const std::int64_t p2p_bytes = scatter_gather ? ops.input_bytes / par.tp : ops.input_bytes;
  auto gather_op = [&ops](const char* name) {
    Op op;
    op.name = name;
    op.kind = workload::OpKind::tp_comm;
    op.comm = workload::Comm::all_gather;
    op.group = workload::CommGroup::tp;
    op.comm_bytes = ops.input_bytes;
    op.kernels = 1;
    return std::vector<Op>{op};
  };
  const std::vector<Op> gather_forward = gather_op("pipeline_gather_forward");
  const std::vector<Op> gather_backward = gather_op("pipeline_gather_backward");
  // Without interleaving Megatron-Core batches each step's sends and receives and then calls
  // torch.cuda.synchronize() (ModelParallelConfig.batch_p2p_sync, on by default; the interleaved
  // schedule overlaps its p2p communication instead, without the sync).
  // (PyTorch's pipelining schedules, torchtitan's, wait on their p2p requests without a device sync.)
  // (DualPipeV batches its sends and receives and waits for them, without a device sync.)
  const bool dualpipev = par.schedule == config::Schedule::dualpipev;
  const bool p2p_sync = par.schedule != config::Schedule::interleaved && !dualpipev &&
                        sc.training.framework == config::Framework::megatron;

  auto dp_collective = [&p](network::CollectiveOp op, std::uint8_t slot, std::int64_t bytes, std::string_view name) {
    Task t;
    t.kind = TaskKind::collective;
    t.stream = kDpComm;
    t.slot = slot;
    t.op = static_cast<std::uint16_t>(op);
    t.bytes = bytes;
    t.label = p.label(name);
    return t;
  };

  // Context parallelism: each attention op becomes Megatron's ring attention over the cp ranks. At
  // step j the rank computes its queries against the K/V block it holds (its own at j = 0) while it
  // sends that block on to the next CP rank and receives the next one from the previous rank; step
  // j + 1 waits for the block. With the causal load balancing every step does 1/cp of the rank's
  // attention work, on blocks of s/cp tokens. The backward passes K/V and their gradients around
  // the ring (twice the bytes) and sends the accumulated dK/dV home at the end.
  const std::int64_t cp = par.cp;
  // The keys and values of the op's heads (a sliding-window model's attention op runs a share of
  // them, workload::AttentionShape::head_share).
  auto share_of = [](const Op& op, std::int64_t bytes) {
    return static_cast<std::int64_t>(static_cast<double>(bytes) * op.attention.head_share);
  };
  // Each step's kernel: the rank's queries against one block of s/cp keys (with packed documents,
  // each document's 1/cp in it), 1/cp of the op's work.
  auto ring_step = [cp](const Op& op) {
    Op step = op;
    step.time_memo_s = -1;
    step.flops /= static_cast<double>(cp);
    step.bytes /= static_cast<double>(cp);
    step.attention.seq_kv = std::min(op.attention.seq_kv / cp, op.attention.seq_q);
    return step;
  };
  auto ring_attention = [&](const Op& op, std::string_view phase, Saves saves) {
    const std::int64_t kv_bytes = share_of(op, ops.ring_kv_bytes);
    const bool bwd = op.attention.backward;
    Op step = ring_step(op);
    std::optional<Dep> arrived;
    for (std::int64_t j = 0; j < cp; ++j) {
      if (arrived) w.after(*arrived);
      if (j + 1 < cp) {
        const std::int64_t bytes = bwd ? 2 * kv_bytes : kv_bytes;
        w.side(p2p(TaskKind::send, kCpSend, kCpNext, bytes, bwd ? "send_kv_and_grad" : "send_kv"));
        arrived = w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, bytes, bwd ? "recv_kv_and_grad" : "recv_kv"));
      }
      if (j == 1) step.saved_bytes = 0;  // the logsumexp is saved once
      w.emit({step}, phase, saves);
    }
    if (bwd) {
      w.side(p2p(TaskKind::send, kCpSend, kCpNext, kv_bytes, "send_kv_grad_home"));
      w.after(w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, kv_bytes, "recv_kv_grad_home")));
    }
  };
  // The other --cp-comm-type values: the attention op between collectives over the CP group, in the
  // critical path. a2a: Q, K and V of the rank's s/cp tokens go to head shards of the whole
  // sequence (one all-to-all of them), the attention runs on the whole sequence for heads/cp, and
  // the output comes back (one all-to-all); the backward sends the output gradient out and dQ, dK,
  // dV back (the forward saves Q, K and V in their head shards). allgather: K and V are all-gathered
  // (the forward's and again the backward's) and the rank's queries attend to all of them; the
  // backward reduce-scatters dK and dV. Either does the attention work of the rank's queries, as
  // the ring does.
  auto cp_comm_op = [](const char* name, workload::Comm what, std::int64_t bytes) {
    Op c;
    c.name = name;
    c.kind = workload::OpKind::tp_comm;
    c.comm = what;
    c.group = workload::CommGroup::cp;
    c.comm_bytes = bytes;
    return c;
  };
  auto collective_attention = [&](const Op& op, std::string_view phase, Saves saves, bool all_gather) {
    const std::int64_t kv_bytes = share_of(op, ops.ring_kv_bytes), q_bytes = share_of(op, ops.cp_q_bytes);
    const bool bwd = op.attention.backward;
    std::vector<Op> list;
    Op core = op;
    core.time_memo_s = -1;
    if (!all_gather) {
      core.attention.seq_q = op.attention.seq_q * cp;
      // The whole sequence's keys, or a window, or a packed document's.
      core.attention.seq_kv = std::min(op.attention.seq_kv, core.attention.seq_q);
      core.attention.batch_heads = op.attention.batch_heads / cp;
      using workload::Comm;
      if (bwd) {
        list = {cp_comm_op("attention_output_grad_cp_all_to_all", Comm::all_to_all, q_bytes), core,
                cp_comm_op("attention_qkv_grad_cp_all_to_all", Comm::all_to_all, q_bytes + kv_bytes)};
      } else {
        list = {cp_comm_op("attention_qkv_cp_all_to_all", Comm::all_to_all, q_bytes + kv_bytes), core,
                cp_comm_op("attention_output_cp_all_to_all", Comm::all_to_all, q_bytes)};
      }
    } else {
      using workload::Comm;
      list = {cp_comm_op("attention_kv_cp_all_gather", Comm::all_gather, kv_bytes * cp), core};
      if (bwd) list.push_back(cp_comm_op("attention_kv_grad_cp_reduce_scatter", Comm::reduce_scatter, kv_bytes * cp));
    }
    w.emit(list, phase, saves);
  };
  // torchtitan: PyTorch's context_parallel (workload::TorchtitanCpKernels), as the last rank of the CP
  // group runs it. Step j attends the rank's queries to the j-th block of s/cp keys (1/cp of its
  // attention work, as the ring above); the keys and values arrive by one all-gather, issued after
  // the first concatenation and waited for by the second step (allgather, torchtitan's default
  // rotate method), or around the ring, each block sent on as the step that uses it starts (p2p,
  // its alltoall method). The backward gathers or rings the keys and values again, and passes the
  // fp32 dK and dV on around the ring after every step: step j + 1 adds its gradients into the
  // buffer step j's sender passed on, after its own attention backward.
  auto titan_cp_attention = [&](const Op& op, std::string_view phase, Saves saves) {
    const workload::TorchtitanCpKernels& k = *ops.titan_cp;
    const std::int64_t kv_bytes = share_of(op, ops.ring_kv_bytes);
    const bool bwd = op.attention.backward;
    const bool gather = par.cp_comm == config::ParallelSpec::CpComm::allgather;
    Op step = ring_step(op);
    if (bwd) w.emit({k.grad_zeros}, phase, saves);
    std::optional<Dep> arrived, grad_arrived;
    for (std::int64_t j = 0; j < cp; ++j) {
      if (arrived) w.after(*arrived);
      if (j + 1 < cp) {
        w.emit({k.kv_cat}, phase, saves);
        if (!gather) {
          w.side(p2p(TaskKind::send, kCpSend, kCpNext, kv_bytes, "send_kv"));
          arrived = w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, kv_bytes, "recv_kv"));
        } else if (j == 0) {
          arrived =
              w.comm_side(cp_comm_op("attention_kv_cp_all_gather", workload::Comm::all_gather, kv_bytes * cp), phase);
        }
      }
      if (j == 1) step.saved_bytes = 0;  // the logsumexp is saved once
      w.emit({step}, phase, saves);
      if (!bwd) {
        w.emit({j == 0 ? k.first_merge : k.merge}, phase, saves);
        continue;
      }
      if (grad_arrived) w.after(*grad_arrived);
      w.emit({j == 0 ? k.first_grad_kv_accumulate : k.grad_kv_accumulate, k.grad_kv_cat}, phase, saves);
      w.side(p2p(TaskKind::send, kCpSend, kCpNext, k.grad_kv_bytes, "send_kv_grad"));
      grad_arrived = w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, k.grad_kv_bytes, "recv_kv_grad"));
      w.emit({k.grad_q_accumulate}, phase, saves);
    }
    if (bwd) w.after(*grad_arrived);
    w.emit({bwd ? k.grad_to_bf16 : k.out_to_bf16}, phase, saves);
  };
  // Sliding-window attention under context parallelism (the op's queries each see `window` keys).
  // allgather and a2a as above, the attention on the window. p2p: Transformer Engine's halo
  // exchange (AttnFuncWithCPAndKVP2PSWA): of the 2·cp chunks of L = s/(2·cp) tokens, the rank holds
  // chunks r and 2·cp − 1 − r and fetches, for each, the min(W, a·L) keys and values before chunk a
  // from their owners, attends per chunk over [halo, chunk], and in the backward sends the halo's
  // dK and dV back, where they are added. The program is the CP group's, so it moves the largest
  // halo any rank does. A window wider than (cp − 1)·L moves more than an all-gather would, and TE
  // all-gathers instead.
  auto windowed_attention = [&](const Op& op, std::string_view phase, Saves saves) {
    const std::int64_t s = sc.training.seq_len, chunk = s / (2 * cp), window = op.attention.window;
    if (par.cp_comm == config::ParallelSpec::CpComm::a2a) return collective_attention(op, phase, saves, false);
    if (par.cp_comm == config::ParallelSpec::CpComm::allgather || window > (cp - 1) * chunk)
      return collective_attention(op, phase, saves, true);
    std::int64_t halo = 0;
    for (std::int64_t r = 0; r < cp; ++r)
      halo = std::max(halo, std::min(window, r * chunk) + std::min(window, (2 * cp - 1 - r) * chunk));
    // ring_kv_bytes holds the K/V of the rank's s/cp tokens.
    const std::int64_t bytes = share_of(op, ops.ring_kv_bytes) / (s / cp) * halo;
    Op core = op;
    core.time_memo_s = -1;
    if (!op.attention.backward) {
      w.side(p2p(TaskKind::send, kCpSend, kCpNext, bytes, "send_kv_halo"));
      w.after(w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, bytes, "recv_kv_halo")));
      w.emit({core}, phase, saves);
      return;
    }
    w.emit({core}, phase, saves);
    w.side(p2p(TaskKind::send, kCpSend, kCpNext, bytes, "send_kv_halo_grad"));
    w.after(w.side(p2p(TaskKind::recv, kCpRecv, kCpPrev, bytes, "recv_kv_halo_grad")));
  };
  // Emits a list of ops (a layer's forward or backward, or with `recomputing` what selective
  // recompute runs again), with ring attention in place of each attention op when cp > 1.
  auto emit = [&](const std::vector<Op>& list, std::string_view phase, Saves saves, bool recomputing = false) {
    if (cp == 1) {
      w.emit(list, phase, saves, recomputing);
      return;
    }
    std::vector<Op> run;
    for (const Op& op : list) {
      if (op.kind != workload::OpKind::attention || (recomputing && !(op.rerun & recompute_modules))) {
        run.push_back(op);  // (an attention op the recompute does not rerun: the writer skips it)
        continue;
      }
      w.emit(run, phase, saves, recomputing);
      run.clear();
      const Saves kept = recomputing ? Saves::all : saves;
      if (ops.titan_cp)
        titan_cp_attention(op, phase, kept);
      else if (op.attention.window > 0)
        windowed_attention(op, phase, kept);
      else if (par.cp_comm == config::ParallelSpec::CpComm::p2p)
        ring_attention(op, phase, kept);
      else
        collective_attention(op, phase, kept, par.cp_comm == config::ParallelSpec::CpComm::allgather);
    }
    w.emit(run, phase, saves, recomputing);
  };

  // The rank's model chunks: one, or virtual_stages with the interleaved schedule (chunk c of
  // pipeline rank r holds the layers of virtual stage c * pp + r). The embedding lives in chunk 0 of
  // the first rank, the output layer in the last chunk of the last rank.
  const std::int64_t v = stage.chunks;
  auto chunk_layers = [&](std::int64_t c) { return config::chunk_layers(sc, stage_index, c); };
  auto has_embedding = [&](std::int64_t c) { return stage.has_embedding && c == 0; };
  auto has_head = [&](std::int64_t c) { return stage.has_head && c == v - 1; };
  // A chunk's neighbours along its forward direction: the peer slot of the stage before it (where
  // its forwards come from and its backwards go) and of the stage after it; none where the chunk
  // starts or ends the pipeline, or (dualpipev) hands over to the rank's other chunk. dualpipev's
  // chunk 1 runs the V's way back, on its own slots.
  auto upstream = [&](std::int64_t c) -> std::optional<std::uint8_t> {
    if (dualpipev && c == 1) return last ? std::nullopt : std::optional<std::uint8_t>(kVNext);
    if (first && c == 0) return std::nullopt;
    return kPrevStage;
  };
  auto downstream = [&](std::int64_t c) -> std::optional<std::uint8_t> {
    if (dualpipev)
      return c == 1 ? (first ? std::nullopt : std::optional<std::uint8_t>(kVPrev))
                    : (last ? std::nullopt : std::optional<std::uint8_t>(kNextStage));
    if (last && c == v - 1) return std::nullopt;
    return kNextStage;
  };

  // Gradient buckets, as Megatron's DDP forms them for each model chunk: parameters in backward
  // order (output layer, layers last to first, embedding) filled into buckets of bucket_size
  // parameters (default max(40M, 1M x dp), distributed.py). A mixture-of-experts model's routed
  // experts live in a buffer of their own (Megatron's expert-parallel buffers: one unit per layer),
  // reduced over the expert data-parallel group with the same bucket size.
  const std::int64_t params = stage.params_per_rank;
  const std::int64_t expert_params = stage.expert_params_per_rank;
  const std::int64_t dp = par.dp * par.cp;
  // Distributed optimizer instances: kDpGroup is an instance of `intra` ranks; each bucket's
  // reduce-scattered shard is then all-reduced over the instances (Megatron's
  // param_and_grad_buffer start_grad_sync with num_distributed_optimizer_instances > 1).
  const std::int64_t instances = par.dist_opt_instances, intra = dp / instances;
  const bool moe = sc.model.moe();
  // The experts' data-parallel ranks, and those of one instance.
  const std::int64_t edp = moe ? par.expert_dp() : 1, edp_intra = moe ? edp / instances : 1;
  // LoRA: the units hold their adapters only (no gradient reaches the frozen embedding and head).
  const bool lora = sc.training.lora;
  std::array<std::int64_t, kLayerKinds> kind_params{};
  for (std::size_t k = 0; k < kLayerKinds; ++k)
    if (!ops.fwd[k].empty()) kind_params[k] = kind_layer_params(sc, static_cast<LayerKind>(k));
  if (lora)
    for (const LayerKind k : {kMainKind, static_cast<LayerKind>(kMainKind + kBaseKinds)})
      kind_params[k] = stage.params_per_rank / std::max<std::int64_t>(stage.layers, 1);
  const std::int64_t layer_expert_params = workload::layer_expert_params_per_rank(sc.model, par.ep, par.etp);
  const std::int64_t emb_params =
      stage.has_embedding && !lora ? workload::embedding_params_per_rank(sc.model, par.tp) : 0;
  auto unit_layer_params = [&](std::int64_t c, std::int64_t l) { return kind_params[kind_of(c, l)]; };
  std::int64_t layer_params_sum = 0;
  for (std::int64_t c = 0; c < v; ++c)
    for (std::int64_t l = 0; l < chunk_layers(c); ++l) layer_params_sum += unit_layer_params(c, l);
  const std::int64_t head_params = params - layer_params_sum - emb_params;
  // The head's multi-token prediction layers have routed experts of their own (a unit of the expert
  // buffer before the chunk's layers in backward order); dense first layers have none.
  const std::int64_t mtp_experts = stage.has_head && moe ? sc.model.mtp_layers : 0;
  auto moe_layers_in = [&](std::int64_t c) {
    const auto& ks = kinds[static_cast<std::size_t>(c)];
    return static_cast<std::int64_t>(
        std::count_if(ks.begin(), ks.end(), [&](LayerKind k) { return kind_has_experts(sc, k); }));
  };
  const bool overlap_grad = par.overlap_grad_reduce && dp > 1;
  const bool overlap_expert_grad = par.overlap_grad_reduce && edp > 1;
  const double bucket_limit = par.dp_bucket_mb > 0 ? par.dp_bucket_mb * 1e6 / static_cast<double>(grad_bytes)
                                                   : std::max(40e6, 1e6 * static_cast<double>(dp));
  struct ChunkBuckets {
    std::vector<std::int64_t> unit_params;        // backward order: [head], layers last to first, [embedding]
    std::vector<std::int64_t> unit_gather_bytes;  // each unit's bytes in a parameter all-gather
    std::vector<std::size_t> bucket_of;
    std::vector<bool> closes_bucket;
    std::vector<std::int64_t> bucket_params;
    std::vector<std::int64_t> bucket_gather_bytes;
    std::vector<std::optional<Dep>> gathered;
    std::size_t first_bucket_id = 0;  // for labels
  };
  std::size_t bucket_ids = 0;
  auto fill_buckets = [&](ChunkBuckets& cb, bool overlapped) {
    cb.bucket_of.resize(cb.unit_params.size());
    cb.closes_bucket.assign(cb.unit_params.size(), false);
    cb.first_bucket_id = bucket_ids;
    double acc = 0;
    for (std::size_t u = 0; u < cb.unit_params.size(); ++u) {
      if (acc == 0) {
        cb.bucket_params.push_back(0);
        cb.bucket_gather_bytes.push_back(0);
      }
      cb.bucket_of[u] = cb.bucket_params.size() - 1;
      cb.bucket_params.back() += cb.unit_params[u];
      cb.bucket_gather_bytes.back() += cb.unit_gather_bytes[u];
      acc += static_cast<double>(cb.unit_params[u]);
      const bool end = u + 1 == cb.unit_params.size();
      // FSDP (zero 3, zero 2 per_unit) reduces each unit (a layer, the embedding, the output layer)
      // on its own.
      if (par.fsdp_units() || ((overlapped || par.zero == 2) && acc >= bucket_limit) || end) {
        cb.closes_bucket[u] = true;
        acc = 0;
      }
    }
    bucket_ids += cb.bucket_params.size();
    cb.gathered.resize(cb.bucket_params.size());
  };
  // A unit's bytes in a parameter all-gather: BF16, but with fp8_param_gather the FP8 layers' weights
  // (not the embedding, the output layer or the layers kept in BF16) in FP8, one byte, except under
  // MXFP8, whose parameters Megatron-Core gathers in BF16 into the gradient buffer and casts on
  // arrival (reuse_grad_buf_for_mxfp8_param_ag). The norms, biases and router of an FP8 layer are
  // counted with its weights (under 1% of them).
  const std::int64_t fp8_gather_bytes = fp8_gathers(sc) ? 1 : kWeightBytes;
  auto gather_bytes_of = [&](std::int64_t unit_params, std::int64_t fp8_params) {
    return unit_params * kWeightBytes - fp8_params * (kWeightBytes - fp8_gather_bytes);
  };
  auto add_unit = [&](ChunkBuckets& cb, std::int64_t unit_params, bool fp8) {
    cb.unit_params.push_back(unit_params);
    cb.unit_gather_bytes.push_back(gather_bytes_of(unit_params, fp8 ? unit_params : 0));
  };
  // The multi-token prediction layers in the head unit run FP8 like the other layers.
  const std::int64_t mtp_fp8_params = stage.has_head && fp8_weights(sc) && !sc.training.bf16_mtp
                                          ? sc.model.mtp_layers * workload::layer_params_per_rank(sc.model, par.tp)
                                          : 0;
  std::vector<ChunkBuckets> chunks(static_cast<std::size_t>(v));
  std::vector<ChunkBuckets> expert_chunks(moe ? static_cast<std::size_t>(v) : 0);
  for (std::int64_t c = 0; c < v; ++c) {
    ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
    if (has_head(c)) {
      cb.unit_params.push_back(head_params);
      cb.unit_gather_bytes.push_back(gather_bytes_of(head_params, mtp_fp8_params));
    }
    for (std::int64_t l = chunk_layers(c) - 1; l >= 0; --l)
      add_unit(cb, unit_layer_params(c, l), fp8_weights(sc) && !bf16_kind(kind_of(c, l)));
    if (has_embedding(c)) add_unit(cb, emb_params, false);
    fill_buckets(cb, overlap_grad);
    const std::int64_t expert_units = moe_layers_in(c) + (has_head(c) ? mtp_experts : 0);
    if (moe && expert_units > 0) {
      ChunkBuckets& eb = expert_chunks[static_cast<std::size_t>(c)];
      if (has_head(c) && mtp_experts > 0)
        add_unit(eb, mtp_experts * layer_expert_params, fp8_weights(sc) && !sc.training.bf16_mtp);
      for (std::int64_t l = chunk_layers(c) - 1; l >= 0; --l)
        if (kind_has_experts(sc, kind_of(c, l)))
          add_unit(eb, layer_expert_params, fp8_weights(sc) && !bf16_kind(kind_of(c, l)));
      fill_buckets(eb, overlap_expert_grad);
    }
  }
  // zero1_grad_all_reduce: DeepSpeed's BF16_Optimizer all-reduces the whole gradients, each rank
  // then updating its shard (the experts' gradients too).
  const bool grad_rs = par.zero >= 1 && !par.zero1_grad_all_reduce;
  const auto grad_op = grad_rs ? network::CollectiveOp::reduce_scatter : network::CollectiveOp::all_reduce;
  const char* grad_name = grad_rs ? "grad_reduce_scatter" : "grad_all_reduce";
  const char* expert_grad_name = grad_rs ? "expert_grad_reduce_scatter" : "expert_grad_all_reduce";
  std::vector<Dep> grad_deps;
  // With --overlap-grad-reduce each bucket is reduced as soon as the chunk's last micro-batch's
  // backward has produced all its gradients, while backward goes on. With sharded gradients (ZeRO-2
  // and 3) there is no full gradient buffer to accumulate into, so every micro-batch's backward
  // reduce-scatters its buckets (FSDP without no_sync).
  // torchtitan with pipeline parallelism: FSDP2 keeps each unit gathered from its first forward to
  // its last backward (reshard_after_forward false; the pipelining schedule turns gradient sync and
  // resharding off until the last micro-batch) and accumulates its unsharded gradients meanwhile:
  // one gather per unit and step, one reduce-scatter after the last micro-batch's backward.
  const bool step_gather = titan && pp > 1 && par.fsdp_units();
  const bool sharded_grads = par.zero >= 2 && dp > 1 && !step_gather;
  const bool sharded_expert_grads = par.zero >= 2 && edp > 1;
  // The expert buffer's unit of chunk c's unit u: the head's multi-token prediction experts (its
  // first unit), then each layer with routed experts in backward order; none for the other units or
  // a dense model.
  std::vector<std::vector<std::optional<std::size_t>>> expert_units(static_cast<std::size_t>(v));
  for (std::int64_t c = 0; c < v; ++c) {
    auto& eu = expert_units[static_cast<std::size_t>(c)];
    eu.assign(chunks[static_cast<std::size_t>(c)].unit_params.size(), std::nullopt);
    if (!moe) continue;
    const std::size_t head = has_head(c) ? 1 : 0;
    std::size_t next = 0;
    if (head == 1 && mtp_experts > 0) eu[0] = next++;
    for (std::int64_t l = chunk_layers(c) - 1; l >= 0; --l)
      if (kind_has_experts(sc, kind_of(c, l))) eu[head + static_cast<std::size_t>(chunk_layers(c) - 1 - l)] = next++;
  }
  auto expert_unit = [&](std::int64_t c, std::size_t u) { return expert_units[static_cast<std::size_t>(c)][u]; };
  // defer_embedding_wgrad_compute: the output layer's bucket is reduced only once the pipeline's
  // flush has run the deferred weight gradients (head_drained).
  const bool defer_head_wgrad = par.defer_embedding_wgrad && stage.has_head;
  bool head_drained = false;
  auto held_for_drain = [&](std::int64_t c, std::size_t u) {
    if (!defer_head_wgrad || head_drained || !has_head(c)) return false;
    const ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
    return cb.bucket_of[u] == cb.bucket_of[0];  // the head is the chunk's first unit
  };
  auto unit_done = [&](std::int64_t c, std::size_t u, bool last_micro_batch) {
    const ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
    if (cb.closes_bucket[u] && !held_for_drain(c, u) &&
        (sharded_grads || ((overlap_grad || (step_gather && dp > 1)) && last_micro_batch))) {
      const std::size_t b = cb.bucket_of[u];
      const Dep rs = w.side(dp_collective(grad_op, kDpGroup, cb.bucket_params[b] * grad_bytes,
                                          fmt::format("{} bucket {}", grad_name, cb.first_bucket_id + b)));
      grad_deps.push_back(instances > 1
                              ? w.chain(dp_collective(network::CollectiveOp::all_reduce, kDpInterGroup,
                                                      shard(cb.bucket_params[b], intra) * grad_bytes,
                                                      fmt::format("grad_all_reduce_across_instances bucket {}",
                                                                  cb.first_bucket_id + b)),
                                        rs)
                              : rs);
    }
    const auto eu = expert_unit(c, u);
    // Sharded expert gradients (zero 2, FSDP) are reduce-scattered every micro-batch, as the dense ones.
    if (!eu || !(sharded_expert_grads || (overlap_expert_grad && last_micro_batch))) return;
    const ChunkBuckets& eb = expert_chunks[static_cast<std::size_t>(c)];
    if (!eb.closes_bucket[*eu]) return;
    const std::size_t b = eb.bucket_of[*eu];
    const Dep rs = w.side(dp_collective(grad_op, kEdpGroup, eb.bucket_params[b] * grad_bytes,
                                        fmt::format("{} bucket {}", expert_grad_name, eb.first_bucket_id + b)));
    grad_deps.push_back(instances > 1 ? w.chain(dp_collective(network::CollectiveOp::all_reduce, kEdpInterGroup,
                                                              shard(eb.bucket_params[b], edp_intra) * grad_bytes,
                                                              fmt::format("expert_grad_all_reduce_across_instances "
                                                                          "bucket {}",
                                                                          eb.first_bucket_id + b)),
                                                rs)
                                      : rs);
  };
  // With --overlap-param-gather the distributed optimizer's all-gather of the updated parameters
  // runs bucket by bucket ahead of the next step's forward, each unit's first forward waiting for its
  // bucket, dispatched as Megatron-Core dispatches them. With align_param_gather under a schedule of
  // model chunks, whole chunks (their expert buckets too: DistributedDataParallel.start_param_sync):
  // the first two at the step's start, each next one as the previous chunk's first forward begins
  // (the interleaved schedule's param_sync_func). Otherwise, and always with one chunk, on demand:
  // the forward pre-hook dispatches a chunk's first bucket when its first unit needs it and each next
  // bucket, in forward order, once the previous one has arrived (finish_param_sync).
  const bool overlap_gather = par.overlap_param_gather && par.zero >= 1 && !par.fsdp_units() && dp > 1;
  const bool overlap_expert_gather = par.overlap_param_gather && par.zero >= 1 && !par.fsdp_units() && edp > 1;
  const bool chunk_gathers = par.align_param_gather.value_or(true) && v > 1;
  auto issue_gather = [&](ChunkBuckets& cb, std::size_t b, std::uint8_t slot, const char* name,
                          std::optional<Dep> after) {
    if (cb.gathered[b]) return;
    cb.gathered[b] = w.side(dp_collective(network::CollectiveOp::all_gather, slot, cb.bucket_gather_bytes[b],
                                          fmt::format("{} bucket {}", name, cb.first_bucket_id + b)),
                            after);
  };
  auto issue_chunk = [&](std::int64_t c) {  // a whole chunk's gathers, in forward order
    if (c >= v) return;
    if (overlap_gather) {
      ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
      for (std::size_t b = cb.bucket_params.size(); b-- > 0;) issue_gather(cb, b, kDpGroup, "param_all_gather", {});
    }
    if (overlap_expert_gather) {
      ChunkBuckets& eb = expert_chunks[static_cast<std::size_t>(c)];
      for (std::size_t b = eb.bucket_params.size(); b-- > 0;)
        issue_gather(eb, b, kEdpGroup, "expert_param_all_gather", {});
    }
  };
  if (chunk_gathers) {
    issue_chunk(0);
    issue_chunk(1);
  }
  std::vector<bool> chunk_started(static_cast<std::size_t>(v), false);
  auto need_bucket = [&](ChunkBuckets& cb, std::size_t b, std::uint8_t slot, const char* name) {
    issue_gather(cb, b, slot, name, std::nullopt);
    w.after(*cb.gathered[b]);
    if (b > 0) issue_gather(cb, b - 1, slot, name, cb.gathered[b]);
  };
  auto unit_needed = [&](std::int64_t c, std::size_t u, bool first_micro_batch) {
    if (!first_micro_batch) return;
    if (chunk_gathers && !chunk_started[static_cast<std::size_t>(c)]) {
      chunk_started[static_cast<std::size_t>(c)] = true;
      issue_chunk(c + 1);
    }
    ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
    if (overlap_gather) need_bucket(cb, cb.bucket_of[u], kDpGroup, "param_all_gather");
    if (const auto eu = expert_unit(c, u); overlap_expert_gather && eu) {
      ChunkBuckets& eb = expert_chunks[static_cast<std::size_t>(c)];
      need_bucket(eb, eb.bucket_of[*eu], kEdpGroup, "expert_param_all_gather");
    }
  };
  auto head_unit = [](std::int64_t) { return std::size_t{0}; };
  auto layer_unit = [&](std::int64_t c, std::int64_t l) {  // l: forward numbering within the chunk
    return (has_head(c) ? 1u : 0u) + static_cast<std::size_t>(chunk_layers(c) - 1 - l);
  };
  auto emb_unit = [&](std::int64_t c) { return chunks[static_cast<std::size_t>(c)].unit_params.size() - 1; };

  // Megatron zeroes the gradient buffer when a step starts.
  // (Eager PyTorch: optimizer.zero_grad(set_to_none=False) zeroes the bf16 .grad tensors.)
  // (torchtitan: zero_grad sets the gradients to None, no kernel.)
  if (eager)
    w.emit({workload::eager_zero_grad(sc.model, host)}, "step", Saves::none);
  else if (!titan)
    w.compute_task("zero_grad_buffer", compute.time_s(workload::zero_grad_buffer(params + expert_params, grad_bytes)),
                   kOptimizerKernels);

  // ZeRO-3 / FSDP FULL_SHARD: each unit's parameters are all-gathered (bf16) before its forward and
  // again before its backward and freed when the unit's compute is done; the gather buffer is
  // counted with the weights. With fsdp_prefetch the next unit's gather is issued with the current
  // one (forward and backward prefetch), so it runs beside the current unit's compute and two units
  // are held; without it the gather is issued when its unit is reached and the compute waits for it.
  // (PyTorch FSDP's BACKWARD_POST issues the next all-gather only after the current unit's gradient
  // computation, torch.distributed.fsdp.BackwardPrefetch; validation/README.md shows the MPT runs.)
  const bool gather_params = par.fsdp_units() && dp > 1;
  // FULL_SHARD frees each unit's gathered parameters after its forward and gathers them again for
  // its backward; SHARD_GRAD_OP (zero 2 per_unit) keeps them from the forward to the end of the
  // backward.
  const bool reshard_after_forward = par.zero >= 3;
  // Units kept gathered from their forward to their backward even so. torchtitan (December 2024)
  // shards each block, then the whole model: the embedding, the final norm and the output layer
  // form FSDP2's root unit, which FSDP2 never reshards after the forward (fully_shard's lazy_init:
  // it would be gathered again at once), and the last block is sharded with
  // reshard_after_forward False (torchtitan's apply_fsdp). With pipelining every unit is held for
  // the step anyway (step_gather).
  auto kept = [&](std::int64_t c, std::size_t u) {
    if (!reshard_after_forward) return true;
    if (!titan || pp > 1) return false;
    return (has_head(c) && u == head_unit(c)) || (has_embedding(c) && u == emb_unit(c)) ||
           (chunk_layers(c) > 0 && u == layer_unit(c, chunk_layers(c) - 1));
  };
  // torchtitan: FSDP2 copies a unit out of its all-gather buffer into its parameters after each
  // gather, on the compute stream before the unit runs (foreach_all_gather_copy_out).
  std::vector<std::vector<bool>> copy_pending(static_cast<std::size_t>(v));
  for (std::int64_t c = 0; c < v; ++c)
    copy_pending[static_cast<std::size_t>(c)].assign(chunks[static_cast<std::size_t>(c)].unit_params.size(), false);
  std::vector<std::optional<Dep>> pass_gathers;
  // step_gather: each chunk's units' gathers, held for the whole step.
  std::vector<std::vector<std::optional<Dep>>> step_gathers(static_cast<std::size_t>(v));
  for (std::int64_t c = 0; c < v; ++c)
    step_gathers[static_cast<std::size_t>(c)].assign(chunks[static_cast<std::size_t>(c)].unit_params.size(),
                                                     std::nullopt);
  // A unit's gathered bytes: bf16, but a torchtitan block's linears in fp8 under Float8 (FSDP float8
  // all-gather).
  const bool fp8_gather = titan && sc.training.precision == config::Precision::fp8;
  auto gather_bytes = [&](std::int64_t c, std::size_t u) {
    const std::int64_t bytes = chunks[static_cast<std::size_t>(c)].unit_gather_bytes[u];
    const std::size_t first_layer = has_head(c) ? 1 : 0;
    const bool layer = u >= first_layer && u < first_layer + static_cast<std::size_t>(chunk_layers(c));
    return fp8_gather && layer ? workload::torchtitan_block_gather_bytes(sc.model, par.tp, true) : bytes;
  };
  // A unit's routed experts (Megatron FSDP with a mixture of experts): gathered over the expert
  // data-parallel group, after the unit's other parameters on the same stream.
  auto expert_gather_bytes = [&](std::int64_t c, std::size_t u) -> std::int64_t {
    const auto eu = expert_unit(c, u);
    return eu && edp_intra > 1 ? expert_chunks[static_cast<std::size_t>(c)].unit_gather_bytes[*eu] : 0;
  };
  auto gather = [&](std::int64_t c, std::size_t u) {
    auto& slot = step_gather ? step_gathers[static_cast<std::size_t>(c)][u] : pass_gathers[u];
    if (!slot) {
      const std::int64_t bytes = gather_bytes(c, u);
      Task t = dp_collective(network::CollectiveOp::all_gather, kDpGatherGroup, bytes, "fsdp_param_all_gather");
      t.stream = kDpGather;
      t.mem_alloc_bytes = bytes;
      t.mem_category = kWeights;
      slot = w.side(t);
      if (const std::int64_t experts = expert_gather_bytes(c, u); experts > 0) {
        Task e =
            dp_collective(network::CollectiveOp::all_gather, kEdpGatherGroup, experts, "fsdp_expert_param_all_gather");
        e.stream = kDpGather;
        e.mem_alloc_bytes = experts;
        e.mem_category = kWeights;
        slot = w.side(e);
      }
      copy_pending[static_cast<std::size_t>(c)][u] = titan;
    }
    return *slot;
  };
  // Before unit order[i] of a pass: its gather (issued now if not prefetched) and the next one's.
  // in_backward: the unit's backward pass, which a unit kept since its forward does not gather for
  // (nor free).
  auto enter_unit = [&](std::int64_t c, const std::vector<std::size_t>& order, std::size_t i, bool in_backward) {
    if (!gather_params) return;
    auto needs_gather = [&](std::size_t u) { return !(in_backward && kept(c, u)); };
    const std::size_t u = order[i];
    std::optional<Dep> mine;
    if (needs_gather(u)) mine = gather(c, u);
    if (par.fsdp_prefetch && i + 1 < order.size() && needs_gather(order[i + 1])) gather(c, order[i + 1]);
    if (!mine) return;
    w.after(*mine);
    if (copy_pending[static_cast<std::size_t>(c)][u]) {
      copy_pending[static_cast<std::size_t>(c)][u] = false;
      w.emit({workload::torchtitan_copy_out(static_cast<double>(gather_bytes(c, u)),
                                            in_backward ? sc.training.host_backward_s : sc.training.host_forward_s)},
             in_backward ? "backward" : "forward", Saves::none);
    }
  };
  auto leave_unit = [&](std::int64_t c, std::size_t u, bool in_backward, bool last_mb = false) {
    if (step_gather) {
      // Its unsharded gradients, accumulated from the first micro-batch's backward on, and its
      // gathered parameters are freed after the last micro-batch's backward.
      if (in_backward && last_mb) {
        if (gather_params) w.release(gather_bytes(c, u), kWeights, "fsdp_free_params");
        w.release(chunks[static_cast<std::size_t>(c)].unit_params[u] * grad_bytes, kGradients,
                  "fsdp_free_unsharded_grads");
      }
      return;
    }
    if (gather_params && (in_backward || !kept(c, u)))
      w.release(gather_bytes(c, u) + expert_gather_bytes(c, u), kWeights, "fsdp_free_params");
  };
  auto start_pass = [&](std::int64_t c) {
    pass_gathers.assign(chunks[static_cast<std::size_t>(c)].unit_params.size(), std::nullopt);
  };
  // Units of chunk c in backward order are 0..U-1; forward runs them in reverse.
  auto backward_order = [&](std::int64_t c) {
    std::vector<std::size_t> order(chunks[static_cast<std::size_t>(c)].unit_params.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    return order;
  };
  auto forward_order = [&](std::int64_t c) {
    auto order = backward_order(c);
    std::reverse(order.begin(), order.end());
    return order;
  };

  std::vector<std::int64_t> forwards(static_cast<std::size_t>(v), 0), backwards(static_cast<std::size_t>(v), 0);
  const std::vector<ScheduleStep> steps = schedule(par.schedule, pp, v, m, stage_index, par.moe_a2a_overlap);
  std::size_t step_at = 0;  // the step being built
  // The chunk of the first backward pass after the current step (none: -1).
  auto next_backward_chunk = [&]() -> std::int64_t {
    for (std::size_t i = step_at + 1; i < steps.size(); ++i) {
      const ScheduleStep& st = steps[i];
      if (st.pass == Pass::backward || st.pass == Pass::backward_input) return st.chunk;
      if (st.pass == Pass::merged) return st.backward_chunk;
    }
    return -1;
  };
  auto fg_start_forward = [&](std::int64_t c) {
    if (fg_modules == 0) return;
    FgRecord r;
    r.offload.resize(static_cast<std::size_t>(chunk_layers(c)));
    r.reload.resize(r.offload.size());
    fg_queue[static_cast<std::size_t>(c)].push_back(std::move(r));
  };
  // After layer l of chunk c's forward (the micro-batch at the back of its queue).
  auto fg_after_forward = [&](std::int64_t c, std::int64_t l) {
    if (fg_modules == 0) return;
    auto& queue = fg_queue[static_cast<std::size_t>(c)];
    const std::int64_t bytes = fg_bytes(c, l);
    const bool next_up = l == chunk_layers(c) - 1 && queue.size() == 1 && next_backward_chunk() == c;
    if (bytes == 0 || next_up) return;
    queue.back().offload[static_cast<std::size_t>(l)] = w.side(fg_copy("offload_to_host", c, l, bytes, false));
    queue.back().bytes += bytes;
    fg_host_bytes += bytes;
    fg_host_peak = std::max(fg_host_peak, fg_host_bytes);
  };
  // Issues the copy back of layer l of the oldest micro-batch of chunk c, if it went out and is not
  // coming back yet.
  auto fg_reload = [&](std::int64_t c, std::int64_t l) {
    auto& queue = fg_queue[static_cast<std::size_t>(c)];
    if (queue.empty() || l < 0) return;
    FgRecord& r = queue.front();
    const auto i = static_cast<std::size_t>(l);
    if (!r.offload[i] || r.reload[i]) return;
    r.reload[i] = w.side(fg_copy("reload_from_host", c, l, fg_bytes(c, l), true), r.offload[i]);
  };
  // Before layer l of chunk c's backward: its tensors (reloaded now if not already), and the next
  // layer's reload.
  auto fg_before_backward = [&](std::int64_t c, std::int64_t l) {
    if (fg_modules == 0) return;
    fg_reload(c, l);
    auto& queue = fg_queue[static_cast<std::size_t>(c)];
    if (const auto& back = queue.front().reload[static_cast<std::size_t>(l)]) w.after(*back);
    fg_reload(c, l - 1);
  };
  // After chunk c's backward pass: its micro-batch leaves the queue, and the next backward pass's top
  // layer starts coming back.
  auto fg_end_backward = [&](std::int64_t c) {
    if (fg_modules == 0) return;
    auto& queue = fg_queue[static_cast<std::size_t>(c)];
    fg_host_bytes -= queue.front().bytes;
    queue.pop_front();
    if (const std::int64_t next = next_backward_chunk(); next >= 0) fg_reload(next, chunk_layers(next) - 1);
  };
  auto forward = [&](std::int64_t c) {
    const bool first_mb = forwards[static_cast<std::size_t>(c)]++ == 0;
    if (const auto in = upstream(c)) {
      w.after(w.add(p2p(TaskKind::recv, kPpRecv, *in, p2p_bytes, "recv_forward"), false, p2p_sync));
      if (scatter_gather) w.emit(gather_forward, "forward", Saves::none);
    }
    start_pass(c);
    fg_start_forward(c);
    const auto order = forward_order(c);
    std::size_t i = 0;
    if (has_embedding(c)) {
      unit_needed(c, emb_unit(c), first_mb);
      enter_unit(c, order, i++, false);
      w.emit(ops.emb_fwd, "forward", Saves::all);
      leave_unit(c, emb_unit(c), false);
    }
    for (std::int64_t l = 0; l < chunk_layers(c); ++l) {
      unit_needed(c, layer_unit(c, l), first_mb);
      enter_unit(c, order, i++, false);
      if (full_recompute(l)) w.alloc(ops.input_bytes);
      emit(layer_fwd(c, l), "forward", fwd_saves(l));
      leave_unit(c, layer_unit(c, l), false);
      offload_after_forward(l);
      fg_after_forward(c, l);
    }
    if (has_head(c)) {
      unit_needed(c, head_unit(c), first_mb);
      enter_unit(c, order, i++, false);
      w.emit(ops.head_fwd, "forward", Saves::all);
      leave_unit(c, head_unit(c), false);
    }
    // Megatron's p2p calls block, so the next compute waits for the send to finish.
    if (const auto out = downstream(c))
      w.after(w.add(p2p(TaskKind::send, kPpSend, *out, p2p_bytes, "send_forward"), true, p2p_sync));
  };
  // Zero-bubble split: the input pass keeps the weight GEMMs' inputs and writes their output
  // gradients; the weight pass, later, frees both.
  const bool split = par.schedule == config::Schedule::zb_h1 || dualpipev;
  std::array<SplitBackward, kLayerKinds> kind_split;
  for (std::size_t k = 0; k < kLayerKinds; ++k) kind_split[k] = split_backward(ops.bwd[k]);
  auto layer_split = [&](std::int64_t c, std::int64_t l) -> const SplitBackward& { return kind_split[kind_of(c, l)]; };
  const SplitBackward head_split = split_backward(ops.head_bwd);
  const SplitBackward emb_split = split_backward(ops.emb_bwd);
  std::int64_t deferred_head_wgrads = 0;  // defer_embedding_wgrad_compute: the micro-batches held
  // A split unit's input pass (it allocates the output gradients its weight pass reads and frees what
  // the forward saved but the inputs that pass needs) and, later, its weight pass (which frees both).
  auto input_pass = [&](const SplitBackward& sb, std::int64_t freed, std::string_view phase) {
    w.alloc(sb.grad_outputs);
    emit(sb.input, phase, Saves::none);
    w.free_at_last(freed - sb.held_inputs);
  };
  auto weight_pass = [&](const SplitBackward& sb) {
    w.emit(sb.weight, "weight_grad", Saves::none);
    w.free_at_last(sb.held_inputs + sb.grad_outputs);
  };
  std::vector<std::int64_t> weight_passes(static_cast<std::size_t>(v), 0);

  // One backward pass of chunk c: input and weight gradients (Pass::backward), or the input
  // gradients alone (Pass::backward_input), whose weight pass `weight` runs later.
  auto backward = [&](std::int64_t c, bool input_only) {
    const bool last_mb = ++backwards[static_cast<std::size_t>(c)] == m;
    const bool first_bwd = backwards[static_cast<std::size_t>(c)] == 1;
    if (const auto in = downstream(c)) {
      w.after(w.add(p2p(TaskKind::recv, kPpRecv, *in, p2p_bytes, "recv_backward"), false, p2p_sync));
      if (scatter_gather) w.emit(gather_backward, "backward", Saves::none);
    }
    start_pass(c);
    // step_gather: the unsharded gradients each unit accumulates over the micro-batches, in the
    // reduce dtype (FSDP2's unsharded_accumulated_grad, to_accumulated_grad_if_needed: fp32 by default).
    auto grads_from_first = [&](std::size_t u) {
      if (step_gather && first_bwd)
        w.reserve(chunks[static_cast<std::size_t>(c)].unit_params[u] * grad_bytes, kGradients, "fsdp_unsharded_grads");
    };
    // torchtitan: FSDP2's gradient kernels after a unit's backward, before its reduce-scatter (with
    // pipelining, the accumulation every micro-batch and the copy-in after the last one).
    auto fsdp_grads = [&](std::size_t u) {
      if (!titan || !gather_params) return;
      const auto n = static_cast<double>(chunks[static_cast<std::size_t>(c)].unit_params[u]);
      const auto reduce = static_cast<double>(grad_bytes);
      const double host_s = sc.training.host_backward_s;
      std::vector<Op> kernels;
      if (step_gather) kernels.push_back(workload::torchtitan_grad_accumulate(n, first_bwd, reduce, host_s));
      if (!step_gather || last_mb)
        kernels.push_back(workload::torchtitan_reduce_scatter_copy_in(n, step_gather ? reduce : 2.0, reduce, host_s));
      w.emit(kernels, "backward", Saves::none);
    };
    const auto order = backward_order(c);
    std::size_t i = 0;
    // Emits one unit's backward and frees what its forward saved (all of it, or all but what the
    // weight pass needs, allocating the output gradients that pass will read).
    auto unit = [&](const std::vector<Op>& full, const SplitBackward& sb, std::int64_t freed) {
      if (!input_only) {
        emit(full, "backward", Saves::none);
        w.free_at_last(freed);
        return;
      }
      input_pass(sb, freed, "backward_input");
    };
    if (has_head(c)) {
      enter_unit(c, order, i++, true);
      grads_from_first(head_unit(c));
      const std::int64_t limit = par.wgrad_deferral_limit;
      if (defer_head_wgrad && !input_only && (limit == 0 || deferred_head_wgrads < limit)) {
        // Megatron-Core keeps the output layer's input and its output gradient for the flush.
        ++deferred_head_wgrads;
        input_pass(head_split, sum_saved(ops.head_fwd), "backward");
      } else {
        unit(ops.head_bwd, head_split, sum_saved(ops.head_fwd));
      }
      leave_unit(c, head_unit(c), true, last_mb);
      fsdp_grads(head_unit(c));
      if (!input_only) unit_done(c, head_unit(c), last_mb);
    }
    for (std::int64_t l = chunk_layers(c) - 1; l >= 0; --l) {
      reload_before_backward(l);
      fg_before_backward(c, l);
      enter_unit(c, order, i++, true);
      grads_from_first(layer_unit(c, l));
      if (full_recompute(l)) emit(layer_fwd(c, l), "recompute", Saves::all);
      if (recompute == config::Recompute::selective)
        emit(layer_fwd(c, l), "recompute", Saves::all, /*recomputing=*/true);
      unit(layer_bwd(c, l), layer_split(c, l), layer_free(c, l));
      leave_unit(c, layer_unit(c, l), true, last_mb);
      fsdp_grads(layer_unit(c, l));
      if (!input_only) unit_done(c, layer_unit(c, l), last_mb);
    }
    if (has_embedding(c)) {
      enter_unit(c, order, i++, true);
      grads_from_first(emb_unit(c));
      unit(ops.emb_bwd, emb_split, sum_saved(ops.emb_fwd));
      leave_unit(c, emb_unit(c), true, last_mb);
      fsdp_grads(emb_unit(c));
      if (!input_only) unit_done(c, emb_unit(c), last_mb);
    }
    fg_end_backward(c);
    if (const auto out = upstream(c))
      w.after(w.add(p2p(TaskKind::send, kPpSend, *out, p2p_bytes, "send_backward"), true, p2p_sync));
  };
  // The weight pass of the oldest micro-batch whose input pass ran (zb-h1, one chunk): every unit's
  // weight gradients, in backward order; then its gradients are complete for DP reduction.
  auto weight = [&](std::int64_t c) {
    TRAINSIM_ASSERT(split);
    const bool last_mb = ++weight_passes[static_cast<std::size_t>(c)] == m;
    auto unit = [&](const SplitBackward& sb, std::size_t u) {
      weight_pass(sb);
      unit_done(c, u, last_mb);
    };
    if (has_head(c)) unit(head_split, head_unit(c));
    for (std::int64_t l = chunk_layers(c) - 1; l >= 0; --l) unit(layer_split(c, l), layer_unit(c, l));
    if (has_embedding(c)) unit(emb_split, emb_unit(c));
  };

  // Combined 1F1B (Megatron-Core's --overlap-moe-expert-parallel-comm, schedule_chunk_1f1b): the
  // forward of chunk cf and the backward of chunk cb (other micro-batches) run layer by layer
  // together, forward layer i with backward layer Lb - 1 - i, on a compute and a communication
  // stream. Per layer pair the compute stream runs the previous backward layer's attention part,
  // this backward layer's unpermutation, the previous forward layer's unpermutation, this forward
  // layer's attention part, the backward experts, the forward experts; the all-to-alls run beside
  // it in the order previous forward combine, backward combine, forward dispatch, backward
  // dispatch, each waited for only by the part that needs its tokens. The layers one chunk has more
  // than the other run alone after the pairs (backward first), as do the embedding and output layer.
  // With delay_wgrad_compute (Megatron-Core's --delay-wgrad-compute: "exposes weight-gradient GEMMs
  // as additional work with which to hide communication") the backward experts' weight-gradient
  // GEMMs run after the backward dispatch all-to-all is launched, before the forward dispatch is
  // waited for, so both all-to-alls have them to hide behind.
  std::array<A2aParts, kLayerKinds> kind_fwd_parts, kind_bwd_parts;
  for (std::size_t k = 0; k < kLayerKinds; ++k) {
    kind_fwd_parts[k] = cut_at_all_to_alls(ops.fwd[k]);
    kind_bwd_parts[k] = cut_at_all_to_alls(ops.bwd[k]);
    A2aParts& b = kind_bwd_parts[k];
    if (par.delay_wgrad_compute && b.parts.size() == 3) {
      std::vector<Op> experts;
      for (const Op& op : b.parts[1]) (op.weight_grad ? b.delayed : experts).push_back(op);
      b.parts[1] = std::move(experts);
    }
  }
  auto fwd_parts = [&](std::int64_t c, std::int64_t l) -> const A2aParts& { return kind_fwd_parts[kind_of(c, l)]; };
  auto bwd_parts = [&](std::int64_t c, std::int64_t l) -> const A2aParts& { return kind_bwd_parts[kind_of(c, l)]; };
  auto merged = [&](std::int64_t cf, std::int64_t cb) {
    const bool first_mb = forwards[static_cast<std::size_t>(cf)]++ == 0;
    const bool last_mb = ++backwards[static_cast<std::size_t>(cb)] == m;
    fg_start_forward(cf);
    if (const auto in = upstream(cf))
      w.after(w.add(p2p(TaskKind::recv, kPpRecv, *in, p2p_bytes, "recv_forward"), false));
    if (const auto in = downstream(cb))
      w.after(w.add(p2p(TaskKind::recv, kPpRecv, *in, p2p_bytes, "recv_backward"), false));
    if (has_embedding(cf)) {
      unit_needed(cf, emb_unit(cf), first_mb);
      w.emit(ops.emb_fwd, "forward", Saves::all);
    }
    if (has_head(cb)) {
      emit(ops.head_bwd, "backward", Saves::none);
      w.free_at_last(sum_saved(ops.head_fwd));
      unit_done(cb, head_unit(cb), last_mb);
    }
    const std::int64_t lf_count = chunk_layers(cf), lb_count = chunk_layers(cb);
    const std::int64_t pairs = std::min(lf_count, lb_count);
    // What the previous pair left: its forward layer's combine (then unpermutation) and its backward
    // layer's dispatch (then attention part).
    std::optional<Dep> f_combine, b_dispatch;
    std::int64_t f_prev = -1, b_prev = -1;
    auto finish_backward_layer = [&]() {
      if (b_prev < 0) return;
      if (b_dispatch) w.after(*b_dispatch);
      emit(bwd_parts(cb, b_prev).parts.back(), "backward", Saves::none);
      w.free_at_last(layer_free(cb, b_prev));
      unit_done(cb, layer_unit(cb, b_prev), last_mb);
      b_prev = -1;
      b_dispatch.reset();
    };
    auto finish_forward_layer = [&]() {
      if (f_prev < 0) return;
      if (f_combine) w.after(*f_combine);
      emit(fwd_parts(cf, f_prev).parts.back(), "forward", fwd_saves(f_prev));
      fg_after_forward(cf, f_prev);
      f_prev = -1;
      f_combine.reset();
    };
    for (std::int64_t i = 0; i < pairs; ++i) {
      const std::int64_t lb = lb_count - 1 - i;
      const A2aParts& fp = fwd_parts(cf, i);
      const A2aParts& bp = bwd_parts(cb, lb);
      finish_backward_layer();
      fg_before_backward(cb, lb);
      if (recompute == config::Recompute::selective)
        emit(layer_fwd(cb, lb), "recompute", Saves::all, /*recomputing=*/true);
      std::optional<Dep> b_combine, f_dispatch;
      if (!bp.a2a.empty()) {
        emit(bp.parts[0], "backward", Saves::none);
        b_combine = w.comm_side(bp.a2a[0], "backward");
      }
      finish_forward_layer();
      unit_needed(cf, layer_unit(cf, i), first_mb);
      if (!fp.a2a.empty()) {
        emit(fp.parts[0], "forward", fwd_saves(i));
        f_dispatch = w.comm_side(fp.a2a[0], "forward");
      }
      if (b_combine) {
        w.after(*b_combine);
        emit(bp.parts[1], "backward", Saves::none);
        b_dispatch = w.comm_side(bp.a2a[1], "backward");
        if (!bp.delayed.empty()) emit(bp.delayed, "backward", Saves::none);
      }
      if (f_dispatch) {
        w.after(*f_dispatch);
        emit(fp.parts[1], "forward", fwd_saves(i));
        f_combine = w.comm_side(fp.a2a[1], "forward");
      }
      b_prev = lb;
      f_prev = i;
    }
    finish_backward_layer();
    for (std::int64_t l = lb_count - 1 - pairs; l >= 0; --l) {  // backward layers without a partner
      fg_before_backward(cb, l);
      if (recompute == config::Recompute::selective)
        emit(layer_fwd(cb, l), "recompute", Saves::all, /*recomputing=*/true);
      emit(layer_bwd(cb, l), "backward", Saves::none);
      w.free_at_last(layer_free(cb, l));
      unit_done(cb, layer_unit(cb, l), last_mb);
    }
    if (has_embedding(cb)) {
      emit(ops.emb_bwd, "backward", Saves::none);
      w.free_at_last(sum_saved(ops.emb_fwd));
      unit_done(cb, emb_unit(cb), last_mb);
    }
    fg_end_backward(cb);
    finish_forward_layer();
    for (std::int64_t l = pairs; l < lf_count; ++l) {  // forward layers without a partner
      unit_needed(cf, layer_unit(cf, l), first_mb);
      emit(layer_fwd(cf, l), "forward", fwd_saves(l));
      fg_after_forward(cf, l);
    }
    if (has_head(cf)) {
      unit_needed(cf, head_unit(cf), first_mb);
      w.emit(ops.head_fwd, "forward", Saves::all);
    }
    if (const auto out = downstream(cf))
      w.after(w.add(p2p(TaskKind::send, kPpSend, *out, p2p_bytes, "send_forward"), true));
    if (const auto out = upstream(cb))
      w.after(w.add(p2p(TaskKind::send, kPpSend, *out, p2p_bytes, "send_backward"), true));
  };

  for (step_at = 0; step_at < steps.size(); ++step_at) {
    const ScheduleStep& step = steps[step_at];
    switch (step.pass) {
      case Pass::forward:
        forward(step.chunk);
        break;
      case Pass::backward:
        backward(step.chunk, false);
        break;
      case Pass::backward_input:
        backward(step.chunk, true);
        break;
      case Pass::weight:
        weight(step.chunk);
        break;
      case Pass::merged:
        // DualPipeV's pair runs together as combined 1F1B does; under full recompute (whose forward
        // runs again inside the backward) one after the other.
        if (dualpipev && recompute == config::Recompute::full) {
          forward(step.chunk);
          backward(step.backward_chunk, false);
        } else {
          merged(step.chunk, step.backward_chunk);
        }
        break;
    }
  }

  // defer_embedding_wgrad_compute: the pipeline's flush on the last stage (finish_embedding_wgrad_compute,
  // before the model's gradients are finalised) runs the held micro-batches' output-layer weight
  // gradients, frees what they held, and then the output layer's bucket is reduced.
  if (defer_head_wgrad) {
    for (std::int64_t k = 0; k < deferred_head_wgrads; ++k) weight_pass(head_split);
    head_drained = true;
    const std::int64_t c = v - 1;
    const ChunkBuckets& cb = chunks[static_cast<std::size_t>(c)];
    for (std::size_t u = 0; u < cb.unit_params.size(); ++u)
      if (cb.closes_bucket[u] && cb.bucket_of[u] == cb.bucket_of[head_unit(c)]) unit_done(c, u, true);
  }

  // Gradient reduction over data parallelism (all at once unless overlapped above), the shared
  // embedding's all-reduce between first and last stage, then the optimizer step.
  if (dp > 1 && !overlap_grad && !sharded_grads && !step_gather) {
    w.add(dp_collective(grad_op, kDpGroup, params * grad_bytes, grad_name), true);
    if (instances > 1)
      w.add(dp_collective(network::CollectiveOp::all_reduce, kDpInterGroup, shard(params, intra) * grad_bytes,
                          "grad_all_reduce_across_instances"),
            true);
  }
  if (edp > 1 && !overlap_expert_grad && !sharded_expert_grads && expert_params > 0) {
    w.add(dp_collective(grad_op, kEdpGroup, expert_params * grad_bytes, expert_grad_name), true);
    if (instances > 1)
      w.add(dp_collective(network::CollectiveOp::all_reduce, kEdpInterGroup,
                          shard(expert_params, edp_intra) * grad_bytes, "expert_grad_all_reduce_across_instances"),
            true);
  }
  for (const Dep& d : grad_deps) w.after(d);
  if (!lora && shares_embedding(sc) && pp > 1 && (first || last) && !dualpipev) {  // (dualpipev: both on rank 0)
    const std::int64_t emb = workload::embedding_params_per_rank(sc.model, par.tp);
    w.add(dp_collective(network::CollectiveOp::all_reduce, kEmbeddingGroup, emb * grad_bytes,
                        "embedding_grad_all_reduce"),
          true);
  }
  const StaticMemory held = static_memory(sc, stage);
  const std::int64_t opt_params = held.opt_params, cpu_params = held.cpu_params;
  // optimizer_cpu_offload: the Adam step of the offloaded parameters runs on the CPU, beside the
  // GPU's step of the others (which starts at once: Megatron-Core's HybridDeviceOptimizer issues the
  // GPU step before it waits for the first gradient copy).
  Op step = workload::optimizer_step(opt_params - cpu_params, adam_states(sc), opt_params);
  std::optional<Dep> cpu_step;
  if (cpu_params > 0) {
    Task t;
    t.stream = kHostCopy;
    t.duration = engine::Time::from_seconds(cpu_adam_s(sc, cpu_params));
    t.label = p.label("optimizer_cpu_offload (gradients to host, CPU Adam, weights back)");
    cpu_step = w.side(t);
  }
  if (eager)
    w.emit({workload::eager_adamw_step(sc.model, host)}, "optimizer", Saves::none);
  else if (titan)
    w.emit({workload::torchtitan_optimizer_step(sc.model, dp / instances, par.tp, host,
                                                sc.training.precision == config::Precision::fp8)},
           "optimizer", Saves::none);
  else
    w.compute_task("optimizer adam_step", compute.time_s(step), kOptimizerKernels);
  // The updated weights are back on the GPU before they are gathered or the next step starts.
  if (cpu_step) {
    w.after(*cpu_step);
    w.release(0, kOptimizer, "optimizer_cpu_offload done");
  }
  auto all_gather_bytes = [](const std::vector<ChunkBuckets>& buffers) {
    std::int64_t bytes = 0;
    for (const ChunkBuckets& cb : buffers)
      for (const std::int64_t b : cb.bucket_gather_bytes) bytes += b;
    return bytes;
  };
  if (dp > 1 && par.zero >= 1 && !par.fsdp_units() && !overlap_gather)
    w.add(dp_collective(network::CollectiveOp::all_gather, kDpGroup, all_gather_bytes(chunks), "param_all_gather"),
          true);
  if (edp > 1 && par.zero >= 1 && !par.fsdp_units() && !overlap_expert_gather && expert_params > 0)
    w.add(dp_collective(network::CollectiveOp::all_gather, kEdpGroup, all_gather_bytes(expert_chunks),
                        "expert_param_all_gather"),
          true);

  w.finish();
  stage.kernel_s = w.kernel_s();

  p.initial_mem_bytes[kWeights] = held.weights;
  p.initial_mem_bytes[kGradients] = held.gradients;
  p.initial_mem_bytes[kOptimizer] = held.optimizer;
  stage.host_offload_bytes += held.host_bytes + fg_host_peak;
}

}  // namespace

// Megatron's host overhead: the CPU time to issue each op, on the CPU thread that drives one GPU.
// Reference CPU: the x86 host of a DGX H100 (Xeon Platinum 8480C).
//   [TE] Transformer Engine issue #2053 ("High CPU overhead on Grace systems"): host time of one
//        Linear forward (bf16, hidden 2048, 8192 tokens): torch.nn.Linear 13.48 µs on DGX H100,
//        37.08 µs on GB200; te.Linear 99.66 µs on GB200.
//   [E]  PyTorch eager, per kernel: 8 µs in the forward, 4 µs in the backward's autograd engine
//        (training.host_forward_us / host_backward_us's defaults, configs/README.md).
//   [L]  a kernel launched from C++: 3 µs (the GPU catalog's back-to-back launch rate).
// A Transformer Engine module call (a GEMM's module, the fused attention) costs te.Linear's host
// time, taken to x86 by torch.nn.Linear's GB200 / DGX H100 ratio; its backward (a Python autograd
// function) as much. Grace costs that ratio more throughout.
constexpr double kGraceHostRatio = 37.08 / 13.48;  // [TE]

HostCosts host_costs(const network::ClusterSpec& cluster, double user_scale) {
  const double scale = (cluster.gpu.grace_host ? kGraceHostRatio : 1.0) * user_scale;
  const config::TrainingSpec eager;  // [E]
  return {99.66e-6 / kGraceHostRatio * scale, eager.host_forward_s * scale, eager.host_backward_s * scale,
          cluster.gpu.launch_s * scale};  // [L]
}

// Sets op.host_s of a Megatron op list (`backward`: a backward pass). GEMMs and attention are
// Transformer Engine modules: a GEMM's module call issues its data gradient and its weight gradient
// together, so a weight-gradient GEMM adds only its launches; a grouped GEMM launches one GEMM per
// local expert (and under FP8 one quantisation per expert). An op in a captured CUDA graph scope
// costs nothing but the graph's launch (a module call) at the start of each captured run.
void set_host_costs(std::vector<Op>& ops, const HostCosts& c, bool backward, std::uint8_t graphed) {
  std::uint8_t run = 0;  // the scope of the captured run the previous op belongs to
  for (Op& op : ops) {
    const std::uint8_t scope = op.graph & graphed;
    if (scope != 0) {
      op.host_s = scope != run ? c.module_s : 0;
      run = scope;
      continue;
    }
    run = 0;
    const bool module = op.kind == workload::OpKind::gemm || op.kind == workload::OpKind::attention;
    double calls = op.host_calls;
    if (module && op.weight_grad) calls = 0;
    // A quantised GEMM also launches its operands' quantisation: FP8 one cast kernel, NVFP4 [A] three
    // (the amax, the amax after the Hadamard transform, the quantisation; ops.cc's quantize).
    const double quantize = op.fp4 ? 3.0 : op.fp8 ? 1.0 : 0.0;
    const double launches = std::max(op.host_launches * (1.0 + quantize), module && op.weight_grad ? 1.0 : 0.0);
    const double call_s = module ? c.module_s : backward ? c.backward_call_s : c.forward_call_s;
    op.host_s = calls * call_s + launches * c.launch_s;
  }
}

// How each micro-batch's weight gradients are accumulated (workload::GradAccumulation). Megatron:
// fused into the weight-gradient GEMMs unless training.gradient_accumulation_fusion is false.
// Megatron-DeepSpeed runs no fusion (its linears leave .grad to DeepSpeed's engine): with bf16 and
// the whole gradients all-reduced (zero 1, zero1_grad_reduce all_reduce) its BF16_Optimizer adds them
// into fp32 after every micro-batch; below ZeRO-2 otherwise autograd accumulates them in .grad. ZeRO-2
// and 3's gradient hooks (bucket copies) are not modelled.
workload::GradAccumulation grad_accumulation(const config::Scenario& sc) {
  using workload::GradAccumulation;
  const config::ParallelSpec& p = sc.parallel;
  if (!sc.training.deepspeed)
    return sc.training.gradient_accumulation_fusion ? GradAccumulation::fused : GradAccumulation::main_grad_add;
  if (p.zero >= 2) return GradAccumulation::fused;
  if (p.zero1_grad_all_reduce && sc.training.precision == config::Precision::bf16) return GradAccumulation::fp32_buffer;
  return GradAccumulation::autograd;
}

bool host_stream(const config::Scenario& sc) {
  if (sc.training.framework != config::Framework::megatron) return true;
  return sc.training.host_overhead && !sc.training.cuda_graph_full_iteration;
}

namespace {

// What every stage's program is built from: the layer configuration and the op lists of each layer
// kind, the embedding and the head, with each op's time memoized.
struct StepWorkload {
  workload::LayerConfig lc;
  LayerOps ops;
};

StepWorkload step_workload(const config::Scenario& sc, const hardware::ComputeModel& compute) {
  const auto& par = sc.parallel;
  StepWorkload out;
  workload::LayerConfig& lc = out.lc;
  LayerOps& ops = out.ops;
  lc.micro_batch = sc.training.micro_batch;
  lc.seq_len = sc.training.seq_len;
  lc.tp = par.tp;
  lc.cp = par.cp;
  lc.ep = par.ep;
  lc.etp = par.etp;
  // An expert-parallel group is ep ranks etp apart (Megatron-Core's expert rank order, etp
  // innermost): ep·etp consecutive ranks, on this many nodes (NVLink domains).
  lc.moe_flex_dispatch = par.moe_flex_dispatch();
  lc.moe_allgather_dispatch = par.moe_dispatcher == config::MoeDispatcher::allgather;
  lc.moe_shared_expert_overlap = par.moe_shared_expert_overlap;
  lc.moe_router_fusion = sc.training.moe_router_fusion;
  lc.moe_permute_fusion = sc.training.moe_permute_fusion;
  lc.moe_grouped_gemm = sc.training.moe_grouped_gemm;
  lc.moe_capacity_factor = par.moe_capacity_factor;
  lc.moe_pad_to_capacity = par.moe_pad_to_capacity;
  lc.moe_rank_capacity_factor = par.moe_rank_capacity_factor;
  lc.moe_paged_stash = par.moe_paged_stash;
  lc.moe_load_imbalance = sc.training.moe_load_imbalance;
  lc.ep_nodes = std::max<std::int64_t>(1, (par.ep * par.etp + sc.cluster.gpus_per_node - 1) / sc.cluster.gpus_per_node);
  lc.fp8 = sc.training.precision == config::Precision::fp8 || sc.training.precision == config::Precision::nvfp4;
  lc.fp4 = sc.training.precision == config::Precision::nvfp4;
  lc.bf16_modules = sc.training.bf16_modules;
  lc.fp8_modules = sc.training.fp8_modules;
  // Only delayed scaling casts a grouped GEMM's operands for all the experts in one kernel.
  lc.fp8_split_casts =
      sc.training.precision == config::Precision::fp8 && config::fp8_recipe(sc) != config::Fp8Recipe::delayed;
  lc.document_tokens = sc.training.document_tokens;
  if (sc.training.lora) {
    lc.frozen_weights = true;
    lc.lora_rank = sc.training.lora_rank;
    lc.lora_targets = sc.training.lora_targets;
  }
  lc.sequence_parallel = par.sequence_parallel && par.tp > 1;
  lc.causal = true;
  lc.attention = sc.training.attention;
  lc.fused_cross_entropy = sc.training.fused_cross_entropy;
  lc.grad_bytes = sc.training.grad_reduce_in_fp32 ? 4 : 2;
  lc.grad_accumulation = grad_accumulation(sc);
  if (sc.training.recompute == config::Recompute::selective) lc.recompute_modules = sc.training.recompute_modules;
  ops.fwd[kMainKind] = workload::layer_forward(sc.model, lc);
  ops.bwd[kMainKind] = workload::layer_backward(sc.model, lc);
  ops.emb_fwd = workload::embedding_forward(sc.model, lc);
  ops.emb_bwd = workload::embedding_backward(sc.model, lc);
  ops.head_fwd = workload::head_forward(sc.model, lc);
  ops.head_bwd = workload::head_backward(sc.model, lc);
  ops.input_bytes = workload::layer_input_bytes(sc.model, lc);
  ops.ring_kv_bytes = workload::ring_attention_kv_bytes(sc.model, lc);
  ops.cp_q_bytes = workload::attention_q_bytes(sc.model, lc);
  // The other kinds the model's layers have (a MoE model's dense first layers, a hybrid model's blocks).
  // A BF16 kind (training.bf16_layers_at_start / _at_end) is built without FP8 or NVFP4.
  workload::LayerConfig lc_bf16 = lc;
  lc_bf16.fp8 = lc_bf16.fp4 = false;
  for (std::int64_t l = 0; l < sc.model.layers; ++l) {
    const LayerKind k = layer_kind(sc, l);
    if (!ops.fwd[k].empty()) continue;
    const workload::LayerConfig& klc = bf16_kind(k) ? lc_bf16 : lc;
    ops.fwd[k] = workload::layer_forward(kind_model(sc, k), klc, kind_block(k));
    ops.bwd[k] = workload::layer_backward(kind_model(sc, k), klc, kind_block(k));
  }
  // Multi-token prediction: each module's prologue, layer and output layer run before the main
  // output layer, and their backward after its backward.
  // With training.module_precision's mtp bf16 (Megatron-Core's keep_mtp_spec_in_bf16) the modules run
  // without FP8 or NVFP4, their projection and layer alike.
  if (sc.model.mtp_layers > 0) {
    std::vector<Op> fwd, bwd;
    const workload::LayerConfig& mlc = sc.training.bf16_mtp ? lc_bf16 : lc;
    std::vector<Op> pro_fwd = workload::mtp_forward(sc.model, mlc);
    std::vector<Op> pro_bwd = workload::mtp_backward(sc.model, mlc);
    std::vector<Op> layer_fwd = sc.training.bf16_mtp ? workload::layer_forward(sc.model, mlc) : ops.fwd[kMainKind];
    std::vector<Op> layer_bwd = sc.training.bf16_mtp ? workload::layer_backward(sc.model, mlc) : ops.bwd[kMainKind];
    for (std::int64_t i = 0; i < sc.model.mtp_layers; ++i) {
      for (const std::vector<Op>* part : {&pro_fwd, &layer_fwd, &ops.head_fwd})
        fwd.insert(fwd.end(), part->begin(), part->end());
      for (const std::vector<Op>* part : {&ops.head_bwd, &layer_bwd, &pro_bwd})
        bwd.insert(bwd.end(), part->begin(), part->end());
    }
    fwd.insert(fwd.end(), ops.head_fwd.begin(), ops.head_fwd.end());
    bwd.insert(bwd.begin(), ops.head_bwd.begin(), ops.head_bwd.end());
    ops.head_fwd = std::move(fwd);
    ops.head_bwd = std::move(bwd);
  }
  if (sc.training.framework == config::Framework::megatron && host_stream(sc)) {
    const HostCosts costs = host_costs(sc.cluster, sc.training.host_cost_scale);
    const std::uint8_t graphed = sc.training.cuda_graph_scope;
    for (std::size_t k = 0; k < kLayerKinds; ++k) {
      set_host_costs(ops.fwd[k], costs, false, graphed);
      set_host_costs(ops.bwd[k], costs, true, graphed);
    }
    for (std::vector<Op>* list : {&ops.emb_fwd, &ops.head_fwd}) set_host_costs(*list, costs, false, graphed);
    for (std::vector<Op>* list : {&ops.emb_bwd, &ops.head_bwd}) set_host_costs(*list, costs, true, graphed);
  }
  if (sc.training.framework == config::Framework::pytorch_eager) {
    const workload::EagerHost host{sc.training.host_forward_s, sc.training.host_backward_s};
    ops.fwd[kMainKind] = workload::eager_layer_forward(sc.model, lc, host);
    ops.bwd[kMainKind] = workload::eager_layer_backward(sc.model, lc, host);
    ops.emb_fwd = workload::eager_embedding_forward(sc.model, lc, host);
    ops.emb_bwd = workload::eager_embedding_backward(sc.model, lc, host);
    ops.head_fwd = workload::eager_head_forward(sc.model, lc, host);
    ops.head_bwd = workload::eager_head_backward(sc.model, lc, host);
  }
  if (sc.training.framework == config::Framework::torchtitan) {
    const workload::TorchtitanOptions o{sc.training.torch_compile,
                                        sc.training.recompute == config::Recompute::selective,
                                        {sc.training.host_forward_s, sc.training.host_backward_s},
                                        sc.training.precision == config::Precision::fp8,
                                        sc.training.torch_compile_loss};
    ops.fwd[kMainKind] = workload::torchtitan_layer_forward(sc.model, lc, o);
    ops.bwd[kMainKind] = workload::torchtitan_layer_backward(sc.model, lc, o);
    ops.emb_fwd = workload::torchtitan_embedding_forward(sc.model, lc, o);
    ops.emb_bwd = workload::torchtitan_embedding_backward(sc.model, lc, o);
    ops.head_fwd = workload::torchtitan_head_forward(sc.model, lc, o);
    ops.head_bwd = workload::torchtitan_head_backward(sc.model, lc, o);
    if (par.cp > 1) {
      ops.ring_kv_bytes = workload::torchtitan_cp_kv_bytes(sc.model, lc);
      ops.titan_cp = workload::torchtitan_cp_kernels(sc.model, lc, o.host);
    }
  }
  // Each op's time, once: the stages emit the same lists for every micro-batch and layer.
  auto memoize = [&compute](std::vector<Op>& list) {
    for (Op& op : list)
      if (op.kind != workload::OpKind::tp_comm) op.time_memo_s = compute.time_s(op);
  };
  for (std::size_t k = 0; k < kLayerKinds; ++k) {
    memoize(ops.fwd[k]);
    memoize(ops.bwd[k]);
  }
  for (std::vector<Op>* list : {&ops.emb_fwd, &ops.emb_bwd, &ops.head_fwd, &ops.head_bwd}) memoize(*list);
  if (ops.titan_cp) {
    workload::TorchtitanCpKernels& k = *ops.titan_cp;
    for (Op* op : {&k.kv_cat, &k.first_merge, &k.merge, &k.out_to_bf16, &k.grad_zeros, &k.first_grad_kv_accumulate,
                   &k.grad_kv_accumulate, &k.grad_kv_cat, &k.grad_q_accumulate, &k.grad_to_bf16})
      op->time_memo_s = compute.time_s(*op);
  }
  return out;
}

// compute_floor_s on a step's op lists.
double time_floor_s(const config::Scenario& sc, const StepWorkload& wl) {
  const auto& par = sc.parallel;
  // Kernel time of the ops `keep` selects (not collectives; with context parallelism not the
  // attention, which runs split over the ring).
  auto kernels_s = [&](const std::vector<Op>& list, auto keep) {
    double t = 0;
    for (const Op& op : list)
      if (op.kind != workload::OpKind::tp_comm && (par.cp == 1 || op.kind != workload::OpKind::attention) && keep(op))
        t += op.time_memo_s;
    return t;
  };
  auto all = [](const Op&) { return true; };
  const std::uint8_t modules =
      sc.training.recompute == config::Recompute::selective ? sc.training.recompute_modules : std::uint8_t{0};
  auto rerun = [modules](const Op& op) { return (op.rerun & modules) != 0; };
  auto rerun_fully = [](const Op& op) { return !op.skip_in_recompute; };
  std::array<double, kLayerKinds> fwd{}, bwd{}, selective{}, full{};
  for (std::size_t k = 0; k < kLayerKinds; ++k) {
    fwd[k] = kernels_s(wl.ops.fwd[k], all);
    bwd[k] = kernels_s(wl.ops.bwd[k], all);
    selective[k] = kernels_s(wl.ops.fwd[k], rerun);
    full[k] = kernels_s(wl.ops.fwd[k], rerun_fully);
  }
  // The collectives the compute stream waits for (StageWriter::tp_collective): tensor-parallel ones
  // unless Transformer Engine overlaps them with their GEMMs, the expert-parallel token all-to-alls
  // and expert-TP collectives unless combined 1F1B puts them beside another micro-batch's compute. On
  // the analytical network each takes the time the simulation gives it (links are not shared); the
  // flow network may share links, and then they are left out. Recomputation's collectives are left
  // out too. Per stage (its groups may sit differently on the nodes) and kind of layer.
  const std::int64_t pp = par.pp;
  const bool tp_overlap = par.tp_comm_overlap && par.sequence_parallel && par.tp > 1;
  std::vector<std::array<double, kLayerKinds>> fwd_comm(static_cast<std::size_t>(pp)),
      bwd_comm(static_cast<std::size_t>(pp));
  if (sc.network == config::NetworkModel::analytical) {
    const network::AnalyticalNetwork net(sc.cluster, sc.collectives);
    // The stage's first rank (tp, cp, dp coordinates 0) and its groups: tp consecutive ranks; in the
    // expert layers' folded order (rank_grid.h) etp consecutive ranks, and ep ranks etp apart.
    const std::int64_t stage_ranks = par.tp * par.cp * par.dp;
    std::vector<std::uint32_t> members;
    auto group = [&](std::int64_t first, std::int64_t size, std::int64_t stride) -> std::span<const std::uint32_t> {
      members.clear();
      for (std::int64_t i = 0; i < size; ++i) members.push_back(static_cast<std::uint32_t>(first + i * stride));
      return members;
    };
    auto serial_comm_s = [&](const std::vector<Op>& list, std::int64_t first) {
      double t = 0;
      for (const Op& op : list) {
        if (op.kind != workload::OpKind::tp_comm || op.comm_side) continue;  // a side collective may hide
        std::int64_t size = par.tp, stride = 1;
        // Combined 1F1B and DualPipeV run the all-to-alls beside the other pass's compute.
        const bool a2a_hidden = par.moe_a2a_overlap || par.schedule == config::Schedule::dualpipev;
        if (op.group == workload::CommGroup::ep) {
          if (a2a_hidden) continue;
          size = par.ep;
          stride = par.etp;
        } else if (op.group == workload::CommGroup::etp) {
          if (a2a_hidden) continue;
          size = par.etp;
        } else if (op.group == workload::CommGroup::ep_etp) {
          size = par.ep * par.etp;
        } else if (op.group == workload::CommGroup::cp) {
          size = par.cp;
          stride = par.tp;
        } else if (tp_overlap && op.comm != workload::Comm::all_reduce) {
          continue;
        }
        if (size <= 1 || op.comm_bytes <= 0) continue;
        t += net.chosen(collective_of(op.comm), op.comm_bytes, group(first, size, stride)).time_s;
      }
      return t;
    };
    for (std::int64_t s = 0; s < pp; ++s)
      for (std::size_t k = 0; k < kLayerKinds; ++k) {
        fwd_comm[static_cast<std::size_t>(s)][k] = serial_comm_s(wl.ops.fwd[k], s * stage_ranks);
        bwd_comm[static_cast<std::size_t>(s)][k] = serial_comm_s(wl.ops.bwd[k], s * stage_ranks);
      }
  }
  // Per stage and micro-batch: the forward and the backward kernels of the first model chunk alone
  // (what a micro-batch passes through before it reaches the next stage, and after its gradient has
  // left the next), the forward and backward of every chunk, and what recomputation runs again
  // (full: the first recompute_layers layers of each chunk, or all).
  const std::int64_t chunks = config::chunks_per_stage(par);
  std::vector<double> first_chunk_fwd(static_cast<std::size_t>(pp)), work(static_cast<std::size_t>(pp)),
      drain(static_cast<std::size_t>(pp));
  for (std::int64_t s = 0; s < pp; ++s) {
    const auto& fc = fwd_comm[static_cast<std::size_t>(s)];
    const auto& bc = bwd_comm[static_cast<std::size_t>(s)];
    double f = 0, b = 0, r = 0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      const std::vector<LayerKind> kinds = chunk_kinds(sc, s, c);
      for (std::size_t l = 0; l < kinds.size(); ++l) {
        const LayerKind k = kinds[l];
        f += fwd[k] + fc[k];
        b += bwd[k] + bc[k];
        r += recomputes_fully(sc, static_cast<std::int64_t>(l)) ? full[k] : selective[k];
      }
      if (c == 0) {
        first_chunk_fwd[static_cast<std::size_t>(s)] = f;
        drain[static_cast<std::size_t>(s)] = b;
      }
    }
    if (s == 0) {
      const double e = kernels_s(wl.ops.emb_fwd, all), eb = kernels_s(wl.ops.emb_bwd, all);
      f += e;
      first_chunk_fwd[0] += e;
      b += eb;
      drain[0] += eb;
    }
    if (s == head_stage(par)) {
      f += kernels_s(wl.ops.head_fwd, all);
      b += kernels_s(wl.ops.head_bwd, all);
    }
    work[static_cast<std::size_t>(s)] = f + b + r;
  }
  // Stage s runs its work on one compute stream, after the first micro-batch's forward has passed
  // the stages before it (their first chunks). With 1F1B, GPipe or the interleaved schedule its last
  // task is the backward of the last micro-batch through its first chunk, whose gradient then still
  // goes back through the first chunks of the stages before it; zero-bubble schedules end with
  // weight-gradient passes instead (no such tail).
  const bool tail = par.schedule != config::Schedule::zb_h1 && par.schedule != config::Schedule::dualpipev;
  const double m = static_cast<double>(sc.training.num_micro_batches);
  double floor = 0, before = 0, after = 0;
  for (std::int64_t s = 0; s < pp; ++s) {
    const auto i = static_cast<std::size_t>(s);
    floor = std::max(floor, before + m * work[i] + (tail ? after : 0));
    before += first_chunk_fwd[i];
    after += drain[i];
  }
  return floor;
}

}  // namespace

double compute_floor_s(const config::Scenario& sc, const hardware::ComputeModel& compute) {
  return time_floor_s(sc, step_workload(sc, compute));
}

// Pipeline stage `s`: its layers and chunks, and the parameters one of its ranks holds.
StagePlan plan_stage(const config::Scenario& sc, std::int64_t s, const StepWorkload& wl) {
  const auto& par = sc.parallel;
  const workload::LayerConfig& lc = wl.lc;
  const LayerOps& ops = wl.ops;
  StagePlan st;
  st.layers = config::stage_layers(sc, s);
  st.chunks = config::chunks_per_stage(par);
  st.has_embedding = s == 0;
  st.has_head = s == head_stage(par);
  // Per kind of layer: a MoE model's dense first layers have their dense MLP and no experts; a
  // hybrid model's blocks their own parameters, its 'E' blocks the experts.
  std::array<std::int64_t, kLayerKinds> count{};
  std::int64_t expert_layers = 0, fp8_expert_layers = 0;
  for (std::int64_t c = 0; c < st.chunks; ++c)
    for (LayerKind k : chunk_kinds(sc, s, c)) {
      ++count[k];
      if (kind_has_experts(sc, k)) ++expert_layers;
      if (kind_has_experts(sc, k) && !bf16_kind(k)) ++fp8_expert_layers;
    }
  st.params_per_rank = 0;
  for (std::size_t k = 0; k < kLayerKinds; ++k)
    if (count[k] > 0) st.params_per_rank += count[k] * kind_layer_params(sc, static_cast<LayerKind>(k));
  if (st.has_embedding) st.params_per_rank += workload::embedding_params_per_rank(sc.model, par.tp);
  if (st.has_head) st.params_per_rank += workload::head_params_per_rank(sc.model, par.tp);
  st.expert_params_per_rank = expert_layers * workload::layer_expert_params_per_rank(sc.model, par.ep, par.etp);
  if (st.has_head && sc.model.mtp_layers > 0) {
    st.params_per_rank += sc.model.mtp_layers * (workload::mtp_params_per_rank(sc.model, par.tp) +
                                                 workload::layer_params_per_rank(sc.model, par.tp));
    st.expert_params_per_rank +=
        sc.model.mtp_layers * workload::layer_expert_params_per_rank(sc.model, par.ep, par.etp);
  }
  // The weights of the layers that run FP8 or NVFP4 (not those kept in BF16), their experts and
  // the multi-token prediction layers (unless they run in BF16): what Transformer Engine caches
  // quantised copies of. [A] A module training.module_precision keeps in BF16 inside a quantised
  // layer is counted with its layer: a small share of it (attention and latent projections).
  if (sc.training.precision == config::Precision::fp8 || sc.training.precision == config::Precision::nvfp4) {
    for (std::size_t k = 0; k < kLayerKinds; ++k)
      if (count[k] > 0 && !bf16_kind(static_cast<LayerKind>(k)))
        st.quantised_params_per_rank += count[k] * kind_layer_params(sc, static_cast<LayerKind>(k));
    st.quantised_params_per_rank +=
        fp8_expert_layers * workload::layer_expert_params_per_rank(sc.model, par.ep, par.etp);
    if (st.has_head && !sc.training.bf16_mtp)
      st.quantised_params_per_rank +=
          sc.model.mtp_layers * (workload::layer_params_per_rank(sc.model, par.tp) +
                                 workload::layer_expert_params_per_rank(sc.model, par.ep, par.etp));
  }
  // Tied embeddings or multi-token prediction: with pp > 1 the last stage keeps its own copy of the
  // embedding (the output layer's weight, or the modules' token embedding), kept in sync by the
  // embedding-group all-reduce (Megatron's shared embedding).
  if (st.has_head && !st.has_embedding && shares_embedding(sc))
    st.params_per_rank += workload::embedding_params_per_rank(sc.model, par.tp);
  // LoRA trains the adapters of every layer; the rest is frozen.
  if (sc.training.lora) {
    st.frozen_params_per_rank = st.params_per_rank + st.expert_params_per_rank;
    st.params_per_rank = st.layers * workload::lora_params_per_rank(sc.model, lc);
    st.expert_params_per_rank = 0;
  }
  // Activation offloading (pp 1, one micro-batch in flight): the first N layers' saved bytes.
  const std::vector<LayerKind> first_chunk = chunk_kinds(sc, s, 0);
  for (std::int64_t l = 0; l < sc.training.cpu_offload_layers; ++l)
    st.host_offload_bytes += sum_saved(ops.fwd[first_chunk[static_cast<std::size_t>(l)]]);
  return st;
}

namespace {

// memory_floor_bytes on a step's op lists.
std::int64_t memory_floor(const config::Scenario& sc, const StepWorkload& wl) {
  std::int64_t floor = 0;
  for (std::int64_t s = 0; s < sc.parallel.pp; ++s)
    floor = std::max(floor, static_memory(sc, plan_stage(sc, s, wl)).device_bytes());
  return floor;
}

}  // namespace

std::int64_t memory_floor_bytes(const config::Scenario& sc, const hardware::ComputeModel& compute) {
  return memory_floor(sc, step_workload(sc, compute));
}

Floors search_floors(const config::Scenario& sc, const hardware::ComputeModel& compute) {
  const StepWorkload wl = step_workload(sc, compute);
  return {time_floor_s(sc, wl), memory_floor(sc, wl)};
}

namespace {

const char* kind_part_name(LayerKind k) {
  switch (base_kind(k)) {
    case kDenseKind:
      return "dense layer";
    case kMambaKind:
      return "Mamba block";
    case kAttentionKind:
      return "attention block";
    case kMlpKind:
      return "MLP block";
    case kMoeKind:
      return "MoE block";
    default:
      return "layer";
  }
}

}  // namespace

std::vector<OpList> op_lists(const config::Scenario& sc, const hardware::ComputeModel& compute) {
  const StepWorkload wl = step_workload(sc, compute);
  const LayerOps& ops = wl.ops;
  std::array<std::int64_t, kLayerKinds> count{};
  for (std::int64_t l = 0; l < sc.model.layers; ++l) ++count[layer_kind(sc, l)];
  std::vector<OpList> out;
  auto add = [&out](std::string part, std::int64_t layers, const std::vector<Op>& fwd, const std::vector<Op>& bwd) {
    out.push_back({part, layers, "forward", fwd});
    out.push_back({std::move(part), layers, "backward", bwd});
  };
  add("embedding", 1, ops.emb_fwd, ops.emb_bwd);
  for (std::size_t k = 0; k < kLayerKinds; ++k) {
    if (count[k] == 0) continue;
    const auto kind = static_cast<LayerKind>(k);
    add(fmt::format("{}{}", kind_part_name(kind), bf16_kind(kind) ? " (BF16)" : ""), count[k], ops.fwd[k], ops.bwd[k]);
  }
  add("output layer", 1, ops.head_fwd, ops.head_bwd);
  return out;
}

StepPlan build_step(const config::Scenario& sc, const hardware::ComputeModel& compute, const BuildOptions& options) {
  const auto& par = sc.parallel;
  TRAINSIM_ASSERT(par.tp * par.pp * par.cp * par.dp == sc.gpus);
  StepPlan plan;
  StepWorkload wl = step_workload(sc, compute);
  const LayerOps& ops = wl.ops;

  plan.stages.resize(static_cast<std::size_t>(par.pp));
  plan.programs.resize(static_cast<std::size_t>(par.pp));
  for (std::int64_t s = 0; s < par.pp; ++s) {
    StagePlan& st = plan.stages[static_cast<std::size_t>(s)];
    st = plan_stage(sc, s, wl);
    build_stage_program(sc, st, s, ops, compute, plan.programs[static_cast<std::size_t>(s)]);
  }

  // Groups in Megatron's rank order; each simulated rank's slots point at its groups and peers.
  RankGrid grid(par.tp, par.cp, par.dp, par.pp);
  const auto n = static_cast<std::uint32_t>(sc.gpus);
  const bool all = options.all_ranks;
  // Simulated index of a cluster rank, or kNone when a representative stands for it.
  auto local_of = [&](std::uint32_t r) -> std::uint32_t {
    if (all) return r;
    const Coords c = grid.coords(r);
    return c.tp == 0 && c.dp == 0 ? static_cast<std::uint32_t>(c.pp * par.cp + c.cp) : engine::kNone;
  };
  const std::uint32_t simulated = all ? n : static_cast<std::uint32_t>(par.pp * par.cp);
  plan.bindings.resize(simulated);
  std::vector<std::uint32_t> local;
  auto add_group = [&](std::span<const std::uint32_t> members, std::uint32_t kind_id, GroupSlot slot) {
    local.clear();
    for (std::uint32_t r : members)
      if (const std::uint32_t l = local_of(r); l != engine::kNone) local.push_back(l);
    if (local.empty()) return;
    const std::uint32_t g = plan.groups.add(local, kind_id, members);
    for (std::uint32_t l : local) plan.bindings[l].group[slot] = g;
  };
  auto bind = [&](std::string_view kind, GroupSlot slot) {
    const std::uint32_t kind_id = plan.groups.kind_id(kind);
    const std::string_view grid_kind = kind == "dp" || kind == "dp-gather" ? "dp-cp" : kind;
    for (const auto& members : grid.groups(grid_kind)) add_group(members, kind_id, slot);
  };
  bind("tp", kTpGroup);
  // Megatron's distributed optimizer instances: consecutive ranks of each group form one (its
  // intra-instance group, `intra`; under FSDP also the gathers', `gather`); the ranks at the same place
  // in each instance form an inter-instance group (`inter`), where there is more than one instance.
  auto add_instances = [&](const std::vector<std::vector<std::uint32_t>>& groups, const std::string& kind,
                           GroupSlot intra, GroupSlot gather, GroupSlot inter) {
    const auto instances = static_cast<std::size_t>(par.dist_opt_instances);
    const std::uint32_t intra_id = plan.groups.kind_id(kind);
    std::vector<std::uint32_t> part;
    for (const auto& members : groups) {
      const std::size_t size = members.size() / instances;
      for (std::size_t i = 0; i < instances; ++i) {
        part.assign(members.begin() + static_cast<std::ptrdiff_t>(i * size),
                    members.begin() + static_cast<std::ptrdiff_t>((i + 1) * size));
        add_group(part, intra_id, intra);
        if (par.fsdp_units()) add_group(part, plan.groups.kind_id(kind + "-gather"), gather);
      }
      if (instances == 1) continue;
      for (std::size_t j = 0; j < size; ++j) {
        part.clear();
        for (std::size_t i = 0; i < instances; ++i) part.push_back(members[i * size + j]);
        add_group(part, plan.groups.kind_id(kind + "-inter"), inter);
      }
    }
  };
  if (par.dist_opt_instances > 1) {
    add_instances(grid.groups("dp-cp"), "dp", kDpGroup, kDpGatherGroup, kDpInterGroup);
  } else {
    bind("dp", kDpGroup);
  }
  if (par.cp > 1) bind("cp", kCpGroup);
  if (sc.model.moe()) {
    for (auto [kind, slot] : {std::pair{"ep", kEpGroup}, std::pair{"etp", kEtpGroup}}) {
      const std::uint32_t kind_id = plan.groups.kind_id(kind);
      for (const auto& members : grid.expert_groups(kind, par.etp, par.ep)) add_group(members, kind_id, slot);
    }
    if (par.moe_dispatcher == config::MoeDispatcher::allgather) {
      const std::uint32_t kind_id = plan.groups.kind_id("ep-etp");
      for (const auto& members : grid.expert_groups("ep-etp", par.etp, par.ep))
        add_group(members, kind_id, kEpEtpGroup);
    }
    // Expert data parallelism, in distributed optimizer instances as the dense ranks are.
    add_instances(grid.expert_groups("edp", par.etp, par.ep), "edp", kEdpGroup, kEdpGatherGroup, kEdpInterGroup);
  }
  if (par.fsdp_units() && par.dist_opt_instances == 1) bind("dp-gather", kDpGatherGroup);
  if (shares_embedding(sc) && par.pp > 1 && par.schedule != config::Schedule::dualpipev) {
    const std::uint32_t kind_id = plan.groups.kind_id("embedding");
    for (const auto& pipeline : grid.groups("pp")) {
      const std::uint32_t pair[2] = {pipeline.front(), pipeline.back()};
      add_group(pair, kind_id, kEmbeddingGroup);
    }
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::uint32_t l = local_of(r);
    if (l == engine::kNone) continue;
    Coords c = grid.coords(r);
    engine::Binding& b = plan.bindings[l];
    b.program = static_cast<std::uint32_t>(c.pp);
    b.cluster_rank = r;
    // The interleaved schedule passes activations from the last rank back to the first (into its
    // next chunk), so the pipeline is a ring.
    const bool ring = par.schedule == config::Schedule::interleaved;
    if (c.pp > 0 || ring) {
      Coords prev = c;
      prev.pp = (c.pp + par.pp - 1) % par.pp;
      b.peer[kPrevStage] = local_of(grid.rank(prev));
    }
    if (c.pp + 1 < par.pp || ring) {
      Coords next = c;
      next.pp = (c.pp + 1) % par.pp;
      b.peer[kNextStage] = local_of(grid.rank(next));
    }
    if (par.schedule == config::Schedule::dualpipev) {  // the V's way back
      if (c.pp > 0) b.peer[kVPrev] = b.peer[kPrevStage];
      if (c.pp + 1 < par.pp) b.peer[kVNext] = b.peer[kNextStage];
    }
    if (par.cp > 1) {  // the ring of ring attention
      Coords prev = c, next = c;
      prev.cp = (c.cp + par.cp - 1) % par.cp;
      next.cp = (c.cp + 1) % par.cp;
      b.peer[kCpPrev] = local_of(grid.rank(prev));
      b.peer[kCpNext] = local_of(grid.rank(next));
    }
  }
  return plan;
}

}  // namespace trainsim::parallel
