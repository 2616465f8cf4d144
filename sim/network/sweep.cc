#include "network/sweep.h"

#include <memory>
#include <numeric>

#include <fmt/format.h>

#include "engine/simulation.h"
#include "network/analytical_network.h"
#include "network/flow_network.h"
#include "util/error.h"

namespace trainsim::network {

std::vector<SweepRow> collective_sweep(const ClusterSpec& cluster, std::int64_t cluster_gpus, const SweepRequest& req) {
  const bool send_recv = req.op == "send_recv";
  const auto op = collective_from_string(req.op);
  if (!send_recv && (!op || *op == CollectiveOp::broadcast))
    throw util::InputError("--op", "",
                           fmt::format("unknown collective \"{}\" (expected one of: all_reduce, all_gather, "
                                       "reduce_scatter, all_to_all, send_recv)",
                                       req.op));
  if (req.gpus < 2 || req.gpus > cluster_gpus)
    throw util::InputError("--gpus", "", fmt::format("{} GPUs: needs 2 to {}", req.gpus, cluster_gpus));
  if (req.min_bytes < 1 || req.max_bytes < req.min_bytes)
    throw util::InputError("--min-bytes", "", "needs 1 <= min-bytes <= max-bytes");
  if (send_recv && req.algo != Algorithm::automatic)
    throw util::InputError("--algo", "", "send_recv is point to point: only auto applies");
  if (req.flow && req.gpus > cluster.gpus_per_node && req.gpus % cluster.gpus_per_node != 0)
    throw util::InputError("--gpus", "",
                           fmt::format("the flow network needs whole nodes ({} GPUs each)", cluster.gpus_per_node));

  AnalyticalNetwork net(cluster);
  std::vector<std::uint32_t> ranks(static_cast<std::size_t>(req.gpus));
  std::iota(ranks.begin(), ranks.end(), 0u);
  // nccl-tests' sendrecv: every rank sends to the next one at once; the slowest pair (one that
  // crosses a node boundary, if any) sets the time.
  const std::uint32_t last = static_cast<std::uint32_t>(req.gpus - 1);
  const bool crosses = cluster.node_of(0) != cluster.node_of(last);
  const std::uint32_t src = crosses ? static_cast<std::uint32_t>(cluster.gpus_per_node - 1) : 0u;

  std::unique_ptr<FlowNetwork> flow;
  if (req.flow && !send_recv) {
    AlgorithmChoice forced{};
    forced[static_cast<std::size_t>(*op)] = req.algo;
    flow = std::make_unique<FlowNetwork>(cluster, req.gpus, forced);
  } else if (req.flow) {
    flow = std::make_unique<FlowNetwork>(cluster, req.gpus);
  }
  // One transfer alone on the flow network.
  auto on_flow = [&](const engine::CommRequest& cr) {
    engine::Simulation sim;
    double end = 0;
    flow->start(cr, sim, [&sim, &end] { end = sim.now().seconds(); });
    sim.run();
    return end;
  };
  std::vector<SweepRow> rows;
  for (std::int64_t bytes = req.min_bytes; bytes <= req.max_bytes; bytes *= 2) {
    SweepRow row;
    row.bytes = bytes;
    double factor = 1.0;
    if (send_recv) {
      if (!flow) {
        row.time_s = net.p2p_time_s(src, src + 1, bytes);
      } else {
        engine::CommRequest cr;
        cr.kind = engine::CommRequest::Kind::p2p;
        cr.bytes = bytes;
        cr.src = src;
        cr.dst = src + 1;
        row.time_s = on_flow(cr);
      }
      row.algo = "p2p";
    } else {
      const auto timed = net.collective(*op, bytes, ranks, req.algo);
      if (!timed)
        throw util::InputError(
            "--algo", "",
            fmt::format("{} cannot run {} over {} GPUs of {}{}", to_string(req.algo), req.op, req.gpus, cluster.name,
                        req.algo == Algorithm::nvls   ? " (NVLS: one node of a GPU with NVLink "
                                                        "SHARP; all_reduce, all_gather, "
                                                        "reduce_scatter)"
                        : req.algo == Algorithm::tree ? " (tree: all_reduce only)"
                                                      : ""));
      row.time_s = timed->time_s;
      if (flow) {
        engine::CommRequest cr;
        cr.op = static_cast<std::uint16_t>(*op);
        cr.bytes = bytes;
        cr.ranks = ranks;
        row.time_s = on_flow(cr);
      }
      row.algo = std::string(to_string(timed->algo));
      row.proto = std::string(to_string(timed->proto));
      factor = busbw_factor(*op, req.gpus);
    }
    row.algbw_GBps = static_cast<double>(bytes) / row.time_s / 1e9;
    row.busbw_GBps = row.algbw_GBps * factor;
    rows.push_back(row);
    if (bytes > req.max_bytes / 2) break;
  }
  return rows;
}

}  // namespace trainsim::network
