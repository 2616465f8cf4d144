#pragma once
// Megatron-LM's rank order: tp varies fastest, then cp, dp, pp (order "tp-cp-dp-pp", ecosystem.md
// §2.2), so rank = tp + TP·(cp + CP·(dp + DP·pp)). A group of a kind ("tp", "cp", "dp", "pp",
// "dp-cp") holds the ranks that differ only in the named coordinates; with 8 GPUs per node a TP
// group of at most 8 stays inside a node. Expert layers regroup the same ranks (expert_groups).

#include <cstdint>
#include <string_view>
#include <vector>

namespace trainsim::parallel {

struct Coords {
  std::int64_t tp = 0, cp = 0, dp = 0, pp = 0;
  bool operator==(const Coords&) const = default;
};

class RankGrid {
 public:
  RankGrid(std::int64_t tp, std::int64_t cp, std::int64_t dp, std::int64_t pp);

  std::int64_t size() const { return tp_ * cp_ * dp_ * pp_; }
  Coords coords(std::uint32_t rank) const;
  std::uint32_t rank(const Coords& c) const;

  // Every group of the kind, each listed in increasing rank order; groups ordered by their
  // smallest rank. Kinds: "tp", "cp", "dp", "pp", "dp-cp" (the gradient-reduction group).
  std::vector<std::vector<std::uint32_t>> groups(std::string_view kind) const;

  // Megatron-Core's expert groups (MoE parallel folding, order "tp-ep-dp-pp" with tp read as etp):
  // the tp*cp*dp ranks of each pipeline stage, in rank order, are indexed etp fastest, then ep, then
  // expert-dp. Kinds: "ep" (token dispatch), "etp" (expert tensor parallelism), "edp" (expert
  // gradient reduction). etp*ep must divide tp*cp*dp.
  std::vector<std::vector<std::uint32_t>> expert_groups(std::string_view kind, std::int64_t etp, std::int64_t ep) const;

 private:
  std::int64_t tp_, cp_, dp_, pp_;
};

}  // namespace trainsim::parallel
