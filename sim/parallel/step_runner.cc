#include "parallel/step_runner.h"

#include "engine/executor.h"
#include "hardware/compute_model.h"
#include "network/analytical_network.h"

namespace trainsim::parallel {

namespace {

enum Bucket : std::uint8_t { kIdle = 0, kBusyCompute = 1, kBusyTp = 2, kBusyPp = 3, kBusyDp = 4, kBusyCp = 5 };

// Which activity a moment belongs to, by the streams busy in it: compute hides everything, then
// TP communication, then context-parallel K/V transfers, then pipeline sends, then DP
// communication; nothing busy is bubble.
engine::Executor::BucketMap bucket_map() {
  engine::Executor::BucketMap map{};
  for (std::size_t mask = 0; mask < map.size(); ++mask) {
    auto busy = [mask](int s) { return (mask >> s) & 1u; };
    map[mask] = busy(kCompute)                     ? kBusyCompute
                : busy(kTpComm)                    ? kBusyTp
                : busy(kCpSend)                    ? kBusyCp
                : busy(kPpSend)                    ? kBusyPp
                : busy(kDpComm) || busy(kDpGather) ? kBusyDp
                                                   : kIdle;
  }
  return map;
}

}  // namespace

StepResult simulate_step(const config::Scenario& scenario, const BuildOptions& options) {
  hardware::ComputeModel compute(scenario.cluster.gpu);
  StepPlan plan = build_step(scenario, compute, options);
  network::AnalyticalNetwork net(scenario.cluster);
  engine::Simulation sim;
  engine::Executor ex(sim, net, plan.programs, plan.bindings, plan.groups, bucket_map());
  const engine::Time end = ex.run();

  StepResult out;
  out.step_time_s = end.seconds();
  out.events = ex.events();
  for (const auto& p : plan.programs) out.tasks += p.task_count();
  const std::size_t n = ex.rank_count();
  out.all_ranks = options.all_ranks;
  out.ranks.resize(n);
  out.memory.resize(n);
  out.cluster_rank.resize(n);
  out.stage.resize(n);
  for (std::uint32_t r = 0; r < n; ++r) {
    const engine::RankStats& s = ex.stats(r);
    out.cluster_rank[r] = plan.bindings[r].cluster_rank;
    out.stage[r] = plan.bindings[r].program;
    TimeBreakdown& t = out.ranks[r];
    t.compute_s = s.bucket_time[kBusyCompute].seconds();
    t.tp_exposed_s = s.bucket_time[kBusyTp].seconds();
    t.cp_exposed_s = s.bucket_time[kBusyCp].seconds();
    t.pp_exposed_s = s.bucket_time[kBusyPp].seconds();
    t.dp_exposed_s = s.bucket_time[kBusyDp].seconds();
    t.bubble_s = s.bucket_time[kIdle].seconds();
    out.mean.compute_s += t.compute_s;
    out.mean.tp_exposed_s += t.tp_exposed_s;
    out.mean.cp_exposed_s += t.cp_exposed_s;
    out.mean.pp_exposed_s += t.pp_exposed_s;
    out.mean.dp_exposed_s += t.dp_exposed_s;
    out.mean.bubble_s += t.bubble_s;
    RankMemory& m = out.memory[r];
    m.peak_bytes = s.peak_bytes;
    m.peak_time_s = s.peak_time.seconds();
    for (int c = 0; c < kMemCategoryCount; ++c)
      m.peak_breakdown_bytes[static_cast<std::size_t>(c)] = s.peak_breakdown_bytes[static_cast<std::size_t>(c)];
    if (m.peak_bytes > out.memory[out.peak_rank].peak_bytes) out.peak_rank = r;
  }
  const double inv = 1.0 / static_cast<double>(n);
  out.mean.compute_s *= inv;
  out.mean.tp_exposed_s *= inv;
  out.mean.cp_exposed_s *= inv;
  out.mean.pp_exposed_s *= inv;
  out.mean.dp_exposed_s *= inv;
  out.mean.bubble_s *= inv;
  return out;
}

}  // namespace trainsim::parallel
