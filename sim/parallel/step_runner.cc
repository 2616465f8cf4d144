#include "parallel/step_runner.h"

#include "hardware/profile.h"

#include "engine/executor.h"
#include "hardware/compute_model.h"
#include "network/analytical_network.h"
#include "network/flow_network.h"
#include "parallel/rank_grid.h"

#include <algorithm>
#include <memory>

namespace trainsim::parallel {

namespace {

enum Bucket : std::uint8_t {
  kIdle = 0,
  kBusyCompute = 1,
  kBusyTp = 2,
  kBusyPp = 3,
  kBusyDp = 4,
  kBusyCp = 5,
  kBusyEp = 6,
  kBusyOffload = 7,
  kHostBound = 8
};

// Which activity a moment belongs to, by the streams busy in it: compute hides everything, then
// TP communication, then expert-parallel dispatch, then context-parallel K/V transfers, then
// pipeline sends, then DP communication, then activation copies to or from host memory, then the
// CPU issuing kernels the GPU waits for (host-bound); nothing busy is bubble.
engine::Executor::BucketMap bucket_map() {
  engine::Executor::BucketMap map{};
  for (std::size_t mask = 0; mask < map.size(); ++mask) {
    auto busy = [mask](int s) { return (mask >> s) & 1u; };
    map[mask] = busy(kCompute)                         ? kBusyCompute
                : busy(kTpComm)                        ? kBusyTp
                : busy(kEpComm)                        ? kBusyEp
                : busy(kCpSend)                        ? kBusyCp
                : busy(kPpSend)                        ? kBusyPp
                : busy(kDpComm) || busy(kDpGather)     ? kBusyDp
                : busy(kHostCopy) || busy(kHostReload) ? kBusyOffload
                : busy(kHost)                          ? kHostBound
                                                       : kIdle;
  }
  return map;
}

NetworkStats network_stats(const network::FlowNetwork& net) {
  NetworkStats st;
  st.flows = net.flows_started();
  const auto links = net.link_stats();
  const auto& g = net.graph();
  st.tiers.resize(network::kLinkTiers);
  for (int t = 0; t < network::kLinkTiers; ++t)
    st.tiers[static_cast<std::size_t>(t)].name = std::string(network::to_string(static_cast<network::LinkTier>(t)));
  std::vector<NetworkStats::Link> all;
  for (std::uint32_t l = 0; l < links.size(); ++l) {
    auto& tier = st.tiers[static_cast<std::size_t>(g.tier(l))];
    ++tier.links;
    tier.bytes += links[l].bytes;
    tier.busy_s += links[l].busy_s;
    if (links[l].bytes > 0) all.push_back({l, tier.name, links[l].bytes, links[l].busy_s});
  }
  std::erase_if(st.tiers, [](const NetworkStats::Tier& t) { return t.links == 0; });
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (a.busy_s != b.busy_s) return a.busy_s > b.busy_s;
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return a.id < b.id;
  });
  all.resize(std::min<std::size_t>(all.size(), 5));
  st.hottest = std::move(all);
  return st;
}

}  // namespace

StepResult simulate_step(const config::Scenario& scenario, const BuildOptions& options, StepObserver* observer) {
  hardware::ComputeModel compute(scenario.cluster.gpu);
  const bool flow = scenario.network == config::NetworkModel::flow;
  const BuildOptions& build = options;
  StepPlan plan = build_step(scenario, compute, build);
  std::unique_ptr<engine::CommModel> net;
  network::FlowNetwork* flow_net = nullptr;
  if (flow) {
    auto f = std::make_unique<network::FlowNetwork>(scenario.cluster, scenario.gpus, scenario.collectives);
    flow_net = f.get();
    if (!build.all_ranks) {
      // A symmetric run simulates the tp = 0, dp = 0 rank of each (pipeline, context) position; each
      // stands for its tp x dp class, so every message also moves for the class's other members (the
      // rank shifted by a in TP and b in DP), loading the links as the whole cluster does.
      const auto& par = scenario.parallel;
      const RankGrid grid(par.tp, par.cp, par.dp, par.pp);
      f->set_images(static_cast<std::uint32_t>(par.tp * par.dp),
                    [grid, tp = par.tp, dp = par.dp](std::uint32_t r, std::uint32_t k) {
                      Coords c = grid.coords(r);
                      c.tp = (c.tp + static_cast<std::int64_t>(k) % tp) % tp;
                      c.dp = (c.dp + static_cast<std::int64_t>(k) / tp) % dp;
                      return grid.rank(c);
                    });
    }
    net = std::move(f);
  } else {
    net = std::make_unique<network::AnalyticalNetwork>(scenario.cluster, scenario.collectives);
  }
  engine::Simulation sim;
  engine::Executor ex(sim, *net, plan.programs, plan.bindings, plan.groups, bucket_map());
  // A calibrated profile's overlap measurement: compute slowed while the rank's NCCL kernels run
  // (every communication stream; host copies use the copy engines, the host stream no GPU).
  // validate --compute-slowdown overrides it (BuildOptions::compute_slowdown).
  const auto& profile = scenario.cluster.gpu.profile;
  const double slowdown = build.compute_slowdown        ? *build.compute_slowdown
                          : profile && profile->overlap ? profile->overlap->fraction()
                                                        : 0.0;
  if (slowdown > 0) {
    const auto bit = [](Stream s) { return static_cast<engine::StreamMask>(1u << s); };
    ex.set_compute_slowdown(
        {slowdown, bit(kCompute),
         static_cast<engine::StreamMask>(bit(kTpComm) | bit(kDpComm) | bit(kPpSend) | bit(kPpRecv) | bit(kDpGather) |
                                         bit(kCpSend) | bit(kCpRecv) | bit(kEpComm))});
  }
  if (observer) {
    observer->on_plan(plan);
    ex.set_observer(observer);
  }
  const engine::Time end = ex.run();

  StepResult out;
  if (flow_net) out.network = network_stats(*flow_net);
  out.step_time_s = end.seconds();
  out.events = ex.events();
  for (const auto& p : plan.programs) out.tasks += p.task_count();
  for (const auto& st : plan.stages) {
    out.host_offload_bytes = std::max(out.host_offload_bytes, st.host_offload_bytes);
    out.stage_kernel_s.push_back(st.kernel_s);
  }
  const std::size_t n = ex.rank_count();
  out.all_ranks = build.all_ranks;
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
    t.ep_exposed_s = s.bucket_time[kBusyEp].seconds();
    t.pp_exposed_s = s.bucket_time[kBusyPp].seconds();
    t.dp_exposed_s = s.bucket_time[kBusyDp].seconds();
    t.offload_exposed_s = s.bucket_time[kBusyOffload].seconds();
    t.host_bound_s = s.bucket_time[kHostBound].seconds();
    out.host_busy_fraction = std::max(out.host_busy_fraction, s.stream_busy[kHost].seconds() / out.step_time_s);
    t.bubble_s = s.bucket_time[kIdle].seconds();
    out.mean.compute_s += t.compute_s;
    out.mean.tp_exposed_s += t.tp_exposed_s;
    out.mean.cp_exposed_s += t.cp_exposed_s;
    out.mean.ep_exposed_s += t.ep_exposed_s;
    out.mean.pp_exposed_s += t.pp_exposed_s;
    out.mean.dp_exposed_s += t.dp_exposed_s;
    out.mean.offload_exposed_s += t.offload_exposed_s;
    out.mean.host_bound_s += t.host_bound_s;
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
  out.mean.ep_exposed_s *= inv;
  out.mean.pp_exposed_s *= inv;
  out.mean.dp_exposed_s *= inv;
  out.mean.offload_exposed_s *= inv;
  out.mean.host_bound_s *= inv;
  out.mean.bubble_s *= inv;
  return out;
}

}  // namespace trainsim::parallel
