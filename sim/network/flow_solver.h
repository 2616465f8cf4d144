#pragma once
// Max-min fair sharing of link bandwidth among concurrent flows, by progressive filling.
//
// Every flow crosses a fixed list of directed links, each with a capacity in bytes/s, and may have
// a rate cap of its own. The allocation is max-min fair: no flow can get more without taking from a
// flow that has no more than it. Progressive filling finds it: raise every unfrozen flow's rate
// together; when a link fills (its capacity divided among its unfrozen flows is the smallest such
// share) or a flow reaches its own cap, freeze those flows at that rate, take their rates off the
// other links they cross, and go on with the rest.
//
// Worked example. Links A (100 GB/s) and B (30 GB/s); flow 1 crosses A only, flows 2 and 3 cross A
// and B. Shares: A 100/3 = 33.3, B 30/2 = 15. B is the bottleneck: flows 2 and 3 freeze at 15 each,
// leaving A 100 - 30 = 70 for flow 1 alone, which freezes at 70. Flow 1 gets the share flows 2 and 3
// cannot use (they are limited elsewhere); two flows alone on A would get 50 each.
//
// The allocation of one connected component (flows linked through shared links) does not depend on
// the others, so when a flow starts or ends only its component is solved again (`solve` after
// `add` / `remove`).

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace trainsim::network {

class FlowSolver {
 public:
  using LinkId = std::uint32_t;
  using FlowId = std::uint32_t;
  static constexpr double kUncapped = std::numeric_limits<double>::infinity();

  explicit FlowSolver(std::vector<double> link_capacity_Bps);

  // A new flow over `path` (links in any order). A link listed k times carries k times the flow's
  // rate (a ring whose hops share it). Its rate is 0 until `solve`.
  FlowId add(std::span<const LinkId> path, double cap_Bps = kUncapped);
  // The same with a count per link: the flow stands for `count[i]` flows of its rate on path[i]. It
  // loads that link with count x its rate and takes count shares of it, as that many flows would; a
  // group of flows that move at one rate (an all-to-all's pairs from one GPU to one node) is one
  // flow. Counts are at least 1.
  FlowId add(std::span<const LinkId> path, std::span<const std::uint32_t> count, double cap_Bps = kUncapped);
  // The flow stops at once (rate 0, inactive); its id is reused after the next `solve`.
  void remove(FlowId flow);
  // Re-solves the components of every flow added or removed since the last call. Returns the flows
  // whose rate may have changed (each once, in increasing id order).
  const std::vector<FlowId>& solve();

  double rate(FlowId flow) const { return flows_[flow].rate; }
  // The links of an active flow, as given to `add`.
  std::span<const LinkId> path(FlowId flow) const { return flows_[flow].path; }
  bool active(FlowId flow) const { return flow < flows_.size() && flows_[flow].active; }
  std::size_t link_count() const { return capacity_.size(); }
  double capacity(LinkId link) const { return capacity_[link]; }
  // Sum of the rates of the flows on a link.
  double load(LinkId link) const;
  // The active flows on a link, as of the last `solve` (a flow removed since is still listed).
  std::span<const FlowId> flows_on(LinkId link) const { return on_link_[link]; }

 private:
  struct Flow {
    std::vector<LinkId> path;
    std::vector<std::uint32_t> count;  // per path entry
    double cap = kUncapped;
    double rate = 0;
    bool active = false;
  };
  void collect_component(FlowId seed, std::vector<FlowId>& flows, std::vector<LinkId>& links);
  void fill(const std::vector<FlowId>& flows, const std::vector<LinkId>& links);
  // Takes the flows removed since the last solve off their links' lists and frees their ids.
  void drop_removed();

  std::vector<double> capacity_;
  std::vector<std::vector<FlowId>> on_link_;  // active flows per link (once per path entry)
  std::vector<std::uint32_t> link_count_;     // per link: the counts of its active flows' entries, summed
  std::vector<Flow> flows_;
  std::vector<FlowId> free_;
  std::vector<FlowId> dirty_;          // flows added, or survivors of a removal, to re-solve from
  std::vector<LinkId> removed_links_;  // links of removed flows: their other flows must be re-solved
  std::vector<FlowId> removed_;        // removed since the last solve, still on their links' lists
  std::vector<std::uint32_t> ones_;    // counts of 1 for `add` without counts
  std::vector<FlowId> changed_;
  // Scratch, kept to avoid allocation per solve.
  std::vector<std::uint32_t> flow_mark_, link_mark_;
  std::uint32_t epoch_ = 0;
  std::vector<double> residual_;
  std::vector<std::uint32_t> unfrozen_;
  std::vector<FlowId> open_, next_;
  std::vector<char> frozen_;
};

}  // namespace trainsim::network
