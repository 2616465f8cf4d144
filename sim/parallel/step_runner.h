#pragma once
// Simulates one training step of a scenario and reduces the per-rank timelines to the numbers a
// user asks for: step time, where each rank's time went (compute, exposed TP/PP/DP communication,
// bubble), and the memory peak of every rank with its breakdown.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/scenario.h"
#include "engine/executor.h"
#include "parallel/step_builder.h"

namespace trainsim::parallel {

// How one rank spent the step. The parts add up to the step time.
struct TimeBreakdown {
  double compute_s = 0;
  double tp_exposed_s = 0;       // TP communication while no compute ran
  double cp_exposed_s = 0;       // ring-attention K/V transfers and Mamba CP all-to-alls while no compute or TP ran
  double ep_exposed_s = 0;       // expert-parallel token dispatch / combine while no compute or TP ran
  double pp_exposed_s = 0;       // pipeline sends while none of the above ran
  double dp_exposed_s = 0;       // data-parallel communication while nothing else ran
  double offload_exposed_s = 0;  // activation copies to or from host memory while nothing else ran
  double host_bound_s = 0;       // the GPU waited for the CPU to issue kernels, nothing else ran
  double bubble_s = 0;           // nothing ran: pipeline bubbles and waiting on peers

  // All exposed data movement: TP, CP, EP, PP and DP communication and host copies.
  double exposed_s() const {
    return tp_exposed_s + cp_exposed_s + ep_exposed_s + pp_exposed_s + dp_exposed_s + offload_exposed_s;
  }
};

struct RankMemory {
  std::int64_t peak_bytes = 0;
  double peak_time_s = 0;
  std::array<std::int64_t, kMemCategoryCount> peak_breakdown_bytes{};
};

// Per link tier of the flow network: bytes carried and busy time summed over its links, and the
// link count; plus the busiest links.
struct NetworkStats {
  struct Tier {
    std::string name;
    std::int64_t links = 0;
    double bytes = 0;
    double busy_s = 0;  // summed over the tier's links
  };
  std::vector<Tier> tiers;
  struct Link {
    std::uint32_t id = 0;
    std::string tier;
    double bytes = 0;
    double busy_s = 0;
  };
  std::vector<Link> hottest;  // by busy time, then bytes, then id
  std::uint64_t flows = 0;
};

struct StepResult {
  double step_time_s = 0;
  TimeBreakdown mean;  // averaged over ranks
  // Per simulated rank (all ranks, or one per class of identical ranks; see BuildOptions).
  std::vector<std::uint32_t> cluster_rank;
  std::vector<std::uint32_t> stage;  // pipeline stage of each simulated rank
  std::vector<TimeBreakdown> ranks;
  std::vector<RankMemory> memory;
  std::uint32_t peak_rank = 0;  // simulated rank with the largest memory peak (lowest on ties)
  bool all_ranks = false;
  std::uint64_t events = 0;
  std::size_t tasks = 0;                // tasks in all programs (shared by ranks of a stage)
  std::int64_t host_offload_bytes = 0;  // activation offloading: pinned host memory per GPU (largest stage)
  // Per pipeline stage: one rank's kernel time in the step by KernelKind (StagePlan::kernel_s).
  std::vector<std::array<double, kKernelKinds>> stage_kernel_s;
  // With a host stream: the share of the step the CPU spent issuing kernels, largest over ranks (how
  // close the step is to host-bound: near 1, any more host work adds to the step).
  double host_busy_fraction = 0;
  std::optional<NetworkStats> network;  // flow network only
};

// Optional hook for traces, reports and progress: sees the plan before the run, then every task as
// it ends (engine::Observer). The plan lives only while simulate_step runs.
class StepObserver : public engine::Observer {
 public:
  virtual void on_plan(const StepPlan& plan) = 0;
};

StepResult simulate_step(const config::Scenario& scenario, const BuildOptions& options = {},
                         StepObserver* observer = nullptr);

}  // namespace trainsim::parallel
