#pragma once
// Collective operations as the network models know them. `bytes` always follows nccl-tests: the
// total buffer size S (for all-gather / reduce-scatter / all-to-all, per-rank size times ranks).

#include <cstdint>
#include <optional>
#include <string_view>

namespace trainsim::network {

enum class CollectiveOp : std::uint16_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };

std::string_view to_string(CollectiveOp op);
std::optional<CollectiveOp> collective_from_string(std::string_view name);
// nccl-tests bus-bandwidth factor: busbw = algbw * factor (2(n-1)/n for all-reduce, ...).
double busbw_factor(CollectiveOp op, std::int64_t ranks);

}  // namespace trainsim::network
