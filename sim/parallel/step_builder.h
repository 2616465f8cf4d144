#pragma once
// Turns a scenario into what the engine runs: the rank grid's process groups, one Program per
// pipeline stage (shared by every rank of that stage) following Megatron's 1F1B schedule, and each
// rank's Binding. Compute ops between two communication points are merged into one task, so the
// engine's work grows with communication points, not with kernels.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "engine/program.h"
#include "hardware/compute_model.h"
#include "network/collective.h"
#include "workload/ops.h"

namespace trainsim::parallel {

// Streams of every rank.
enum Stream : std::uint8_t {
  kCompute = 0,
  kTpComm = 1,
  kDpComm = 2,  // gradient reductions, ZeRO-1/2 parameter all-gathers
  kPpSend = 3,
  kPpRecv = 4,
  kDpGather = 5,     // ZeRO-3 parameter all-gathers (FSDP runs them on their own stream)
  kCpSend = 6,       // context parallelism: ring-attention K/V blocks to the next CP rank
  kCpRecv = 7,       // ... and from the previous one
  kEpComm = 8,       // mixture of experts: token dispatch / combine over the expert groups
  kHostCopy = 9,     // activation offloading: copies to and from host memory
  kHost = 10,        // the CPU thread that issues the kernels (Megatron's host overhead; not a GPU stream)
  kHostReload = 11,  // fine-grained activation offloading's copies back from host memory (its H2D stream)
  kStreamCount = 12
};
// Group slots and peer slots of every rank's Binding.
// kDpGatherGroup is the DP group again, as a second communicator for the gather stream (a group
// runs one collective at a time).
// Mixture of experts: kEpGroup dispatches tokens, kEtpGroup splits each expert, kEdpGroup reduces
// the experts' gradients (RankGrid::expert_groups).
enum GroupSlot : std::uint8_t {
  kTpGroup = 0,
  kDpGroup = 1,
  kEmbeddingGroup = 2,
  kDpGatherGroup = 3,
  kEpGroup = 4,
  kEtpGroup = 5,
  kEdpGroup = 6,
  kCpGroup = 7,         // context parallelism's collectives (a Mamba mixer's all-to-alls)
  kDpInterGroup = 8,    // distributed optimizer instances: the same shard's ranks across the instances
  kEdpGatherGroup = 9,  // the expert dp group again, for FSDP's expert all-gathers on the gather stream
  kEdpInterGroup = 10,  // distributed optimizer instances: the same expert shard's ranks across the instances
  kEpEtpGroup = 11      // the allgather token dispatcher's ep x etp ranks (Megatron-Core's tp_ep_group)
};
// kVPrev / kVNext: dualpipev's second chunk (the V's way back), whose messages travel the other way
// on the same rank pairs, on their own slots so that each slot's messages keep their order.
enum PeerSlot : std::uint8_t { kPrevStage = 0, kNextStage = 1, kCpPrev = 2, kCpNext = 3, kVPrev = 4, kVNext = 5 };
// Memory categories.
enum MemCategory : std::uint8_t {
  kWeights = 0,
  kGradients = 1,
  kOptimizer = 2,
  kActivations = 3,
  kMemCategoryCount = 4
};

const char* stream_name(int stream);
const char* mem_category_name(int category);
// The collective a tensor-parallel op of the workload runs.
network::CollectiveOp collective_of(workload::Comm comm);

// Kernel time of one step of a stage's rank, by kind of kernel (reports: where the compute goes).
enum KernelKind : std::uint8_t { kGemmKernels, kAttentionKernels, kMemoryKernels, kOptimizerKernels, kKernelKinds };
inline constexpr std::array<const char*, kKernelKinds> kKernelKindNames = {"gemm", "attention", "memory_bound",
                                                                           "optimizer"};

struct StagePlan {
  std::int64_t layers = 0;  // on this pipeline rank, over all its model chunks
  std::int64_t chunks = 1;  // model chunks (virtual stages) on the rank
  bool has_embedding = false;
  bool has_head = false;
  std::int64_t params_per_rank = 0;         // parameters one rank of this stage holds, reduced over dp x cp
  std::int64_t expert_params_per_rank = 0;  // and its routed experts' parameters, reduced over expert dp
  // LoRA: the frozen base model's parameters on the rank (weights only, no gradient or optimizer
  // state); params_per_rank then counts the trained adapters.
  std::int64_t frozen_params_per_rank = 0;
  // With precision fp8 or nvfp4: the weights on the rank that run quantised (the FP8 or NVFP4 layers,
  // their experts, the multi-token prediction layers; not the embedding, the output layer or the
  // layers kept in BF16), whose quantised copies Transformer Engine caches.
  std::int64_t quantised_params_per_rank = 0;
  std::int64_t host_offload_bytes = 0;  // activation offloading: pinned host memory one rank fills
  // The rank's kernels in one step, seconds by KernelKind: GEMMs (linear layers, grouped experts,
  // the softmax path's batched ones), fused attention, memory-bound kernels (norms, activations,
  // permutations, casts, the loss) and the optimizer step with the gradient buffer's zeroing.
  std::array<double, kKernelKinds> kernel_s{};
};

struct StepPlan {
  std::vector<engine::Program> programs;  // index = pipeline stage
  std::vector<engine::Binding> bindings;  // index = simulated rank; cluster_rank says which GPU
  engine::GroupTable groups;
  std::vector<StagePlan> stages;
};

struct BuildOptions {
  // Simulate every rank. Otherwise one representative per class of identical ranks is simulated:
  // the ranks with tp = dp = 0, one per pipeline stage and CP rank (CP ranks pass K/V blocks to
  // each other, so the ring is simulated whole). Ranks of a TP or DP group run the same program
  // with the same timing, so with the analytical network (no link sharing) the step time and every
  // rank's memory are exactly those of the full run; tests check it.
  bool all_ranks = false;
  // The share of compute speed overlapped communication takes (engine::ComputeSlowdown) instead of
  // the calibrated profile's (none without one): `validate --compute-slowdown`, a sensitivity study.
  std::optional<double> compute_slowdown;
};

// Megatron's host overhead: CPU seconds per Transformer Engine module call, per PyTorch call in the
// forward and in the backward, and per kernel launched from C++ inside a call (step_builder.cc
// gives the sources), on the cluster's host CPU.
struct HostCosts {
  double module_s = 0;
  double forward_call_s = 0;
  double backward_call_s = 0;
  double launch_s = 0;
};
HostCosts host_costs(const network::ClusterSpec& cluster, double scale = 1);
// Sets op.host_s of a Megatron op list (`backward`: a backward pass); ops in the CUDA graph scopes
// `graphed` (workload::GraphScope bits) cost only their captured run's graph launch.
void set_host_costs(std::vector<workload::Op>& ops, const HostCosts& costs, bool backward, std::uint8_t graphed);

// Whether the step is simulated with a host stream (the CPU issuing the kernels): eager PyTorch,
// and Megatron with host_overhead unless a CUDA graph captures the whole iteration.
bool host_stream(const config::Scenario& scenario);

// How the scenario's framework accumulates each micro-batch's weight gradients (the
// workload::GradAccumulation its layers' backward ops are built with).
workload::GradAccumulation grad_accumulation(const config::Scenario& scenario);

StepPlan build_step(const config::Scenario& scenario, const hardware::ComputeModel& compute,
                    const BuildOptions& options = {});

// A floor under the step time from the op lists alone (no program built, nothing simulated). Each
// pipeline stage runs on its one compute stream the kernels of its layers' forward, backward and
// recomputation (with the embedding on the first stage, the head on the last) for every micro-batch,
// after the first micro-batch's forward has passed the stages before it; except with zero-bubble
// schedules its last backward then still runs back through them (through their first model chunks
// when interleaved). On the analytical network each layer also waits for the collectives the stage
// writer puts in its compute's path (tensor-parallel ones without Transformer Engine's overlap, the
// expert-parallel token all-to-alls without combined 1F1B), at the times the simulation gives them.
// Other communication, waiting and the optimizer only add to that (with context parallelism the
// attention kernels, split over the ring, are left out).
double compute_floor_s(const config::Scenario& scenario, const hardware::ComputeModel& compute);
// A floor under the simulated memory peak: the most any rank holds from the step's start, its
// weights, gradient buffer and optimizer states (the same bytes the simulation starts from), from
// the parameter counts alone.
std::int64_t memory_floor_bytes(const config::Scenario& scenario, const hardware::ComputeModel& compute);
// Both floors from one build of the op lists (the search takes them for every layout).
struct Floors {
  double step_s = 0;
  std::int64_t memory_bytes = 0;
};
Floors search_floors(const config::Scenario& scenario, const hardware::ComputeModel& compute);

// One pass of one part of the model as a micro-batch runs it through the simulation (`trainsim run
// --ops`): `part` is a kind of layer ("layer"; a MoE model's "dense layer"; a hybrid model's "Mamba
// block", "attention block", "MLP block", "MoE block"; "(BF16)" after the kinds
// training.bf16_layers_at_start / _at_end keep out of FP8), "embedding" or "output layer" (the loss
// and any multi-token prediction modules with it); `layers` how many of the model's layers are of
// the kind (1 for the embedding and the output layer); `pass` "forward" or "backward". Each compute
// op's time_memo_s is the compute model's time for it; communication ops (OpKind::tp_comm) keep 0:
// the simulation times them on the network, beside or between the compute. The lists the stage
// programs are built from, before recomputation, overlap and pipelining arrange them.
struct OpList {
  std::string part;
  std::int64_t layers = 0;
  std::string pass;
  std::vector<workload::Op> ops;
};
std::vector<OpList> op_lists(const config::Scenario& scenario, const hardware::ComputeModel& compute);

}  // namespace trainsim::parallel
