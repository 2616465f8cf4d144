#pragma once
// An nccl-tests-like sweep of one collective over the first N GPUs of a cluster: for each message
// size the time, algorithm bandwidth S/t and bus bandwidth (algbw x the nccl-tests factor), with the
// algorithm that ran. Backs `trainsim collective`.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "network/cluster.h"
#include "network/collective.h"

namespace trainsim::network {

struct SweepRow {
  std::int64_t bytes = 0;  // nccl-tests' S: the total buffer size
  double time_s = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::string algo;
  std::string proto;  // NCCL protocol: LL, LL128 or Simple ("" for send_recv)
};

struct SweepRequest {
  std::string op;  // all_reduce, all_gather, reduce_scatter, all_to_all or send_recv
  std::int64_t gpus = 8;
  Algorithm algo = Algorithm::automatic;
  std::int64_t min_bytes = std::int64_t{1} << 20;  // 1 MiB
  std::int64_t max_bytes = std::int64_t{1} << 34;  // 16 GiB
  bool flow = false;  // time on the flow-level network (idle) instead of the analytical one
};

// Sizes double from min_bytes to max_bytes. Bad requests (unknown op, too few or too many GPUs, an
// algorithm that cannot run the collective there) throw util::InputError naming the option.
std::vector<SweepRow> collective_sweep(const ClusterSpec& cluster, std::int64_t cluster_gpus, const SweepRequest& req);

}  // namespace trainsim::network
