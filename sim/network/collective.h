#pragma once
// Collective operations as the network models know them. `bytes` always follows nccl-tests: the
// total buffer size S (for all-gather / reduce-scatter / all-to-all, per-rank size times ranks).

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace trainsim::network {

enum class CollectiveOp : std::uint16_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };

// NCCL's collective algorithms as the models know them (ecosystem.md §3.1). `automatic` is the
// model's default: what NCCL picks on the measured systems (NVLS all-reduce inside a Hopper node,
// rings otherwise).
enum class Algorithm : std::uint8_t { automatic, ring, tree, nvls };

// Per collective op (indexed by CollectiveOp), the algorithm a scenario forces; `automatic` keeps
// the model's choice. An algorithm that cannot run a collective where it is asked falls back to the
// model's choice, as NCCL does with NCCL_ALGO.
using AlgorithmChoice = std::array<Algorithm, 5>;

// NCCL's wire protocols (ecosystem.md §3.1): LL (8-byte stores of 4 bytes of data and a flag;
// lowest latency, half the bandwidth), LL128 (128-byte lines carrying 120 bytes), Simple (large
// chunks and fences; full bandwidth, highest latency). NCCL picks the one with the smallest
// predicted time per size; the models do the same.
enum class Protocol : std::uint8_t { ll, ll128, simple };

std::string_view to_string(CollectiveOp op);
std::string_view to_string(Algorithm algo);
std::string_view to_string(Protocol proto);  // "LL", "LL128", "Simple" (NCCL_PROTO tokens)
std::optional<Algorithm> algorithm_from_string(std::string_view name);
std::optional<CollectiveOp> collective_from_string(std::string_view name);
// nccl-tests bus-bandwidth factor: busbw = algbw * factor (2(n-1)/n for all-reduce, ...).
double busbw_factor(CollectiveOp op, std::int64_t ranks);

}  // namespace trainsim::network
