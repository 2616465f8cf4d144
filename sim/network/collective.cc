#include "network/collective.h"

#include <array>

#include "util/error.h"

namespace trainsim::network {

namespace {
struct OpName {
  CollectiveOp op;
  std::string_view name;
};
constexpr std::array<OpName, 5> kOpNames = {{
    {CollectiveOp::all_reduce, "all_reduce"},
    {CollectiveOp::all_gather, "all_gather"},
    {CollectiveOp::reduce_scatter, "reduce_scatter"},
    {CollectiveOp::all_to_all, "all_to_all"},
    {CollectiveOp::broadcast, "broadcast"},
}};
}  // namespace

std::string_view to_string(CollectiveOp op) {
  for (const OpName& entry : kOpNames) {
    if (entry.op == op) return entry.name;
  }
  TRAINSIM_ASSERT(false && "unknown CollectiveOp");
  return {};
}

std::string_view to_string(Algorithm algo) {
  switch (algo) {
    case Algorithm::automatic:
      return "auto";
    case Algorithm::ring:
      return "ring";
    case Algorithm::tree:
      return "tree";
    case Algorithm::nvls:
      return "nvls";
  }
  TRAINSIM_ASSERT(false && "unknown Algorithm");
  return {};
}

std::string_view to_string(Protocol proto) {
  switch (proto) {
    case Protocol::ll:
      return "LL";
    case Protocol::ll128:
      return "LL128";
    case Protocol::simple:
      return "Simple";
  }
  TRAINSIM_ASSERT(false && "unknown Protocol");
  return {};
}

std::optional<Algorithm> algorithm_from_string(std::string_view name) {
  for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::nvls})
    if (to_string(a) == name) return a;
  return std::nullopt;
}

std::optional<CollectiveOp> collective_from_string(std::string_view name) {
  for (const OpName& entry : kOpNames) {
    if (entry.name == name) return entry.op;
  }
  return std::nullopt;
}

// NVIDIA/nccl-tests src/*.cu *GetBw and doc/PERFORMANCE.md (ecosystem.md §3.3).
double busbw_factor(CollectiveOp op, std::int64_t ranks) {
  TRAINSIM_ASSERT(ranks >= 1);
  const double n = static_cast<double>(ranks);
  switch (op) {
    case CollectiveOp::all_reduce:
      return 2.0 * (n - 1.0) / n;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all:
      return (n - 1.0) / n;
    case CollectiveOp::broadcast:
      return 1.0;
  }
  TRAINSIM_ASSERT(false && "unknown CollectiveOp");
  return 0.0;
}

}  // namespace trainsim::network
