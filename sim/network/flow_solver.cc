#include "network/flow_solver.h"

#include <algorithm>

#include "util/error.h"

namespace trainsim::network {

FlowSolver::FlowSolver(std::vector<double> link_capacity_Bps)
    : capacity_(std::move(link_capacity_Bps)),
      on_link_(capacity_.size()),
      link_count_(capacity_.size(), 0),
      link_mark_(capacity_.size(), 0),
      residual_(capacity_.size(), 0),
      unfrozen_(capacity_.size(), 0) {
  for (double c : capacity_) TRAINSIM_ASSERT(c > 0);
}

FlowSolver::FlowId FlowSolver::add(std::span<const LinkId> path, double cap_Bps) {
  ones_.assign(path.size(), 1);
  return add(path, ones_, cap_Bps);
}

FlowSolver::FlowId FlowSolver::add(std::span<const LinkId> path, std::span<const std::uint32_t> count, double cap_Bps) {
  TRAINSIM_ASSERT(cap_Bps > 0);
  TRAINSIM_ASSERT(count.size() == path.size());
  FlowId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
    flow_mark_.push_back(0);
  }
  Flow& f = flows_[id];
  f.path.assign(path.begin(), path.end());
  f.count.assign(count.begin(), count.end());
  f.cap = cap_Bps;
  f.rate = 0;
  f.active = true;
  for (std::size_t i = 0; i < f.path.size(); ++i) {
    const LinkId l = f.path[i];
    TRAINSIM_ASSERT(l < capacity_.size() && f.count[i] >= 1);
    on_link_[l].push_back(id);
    link_count_[l] += f.count[i];
  }
  dirty_.push_back(id);
  return id;
}

void FlowSolver::remove(FlowId id) {
  TRAINSIM_ASSERT(active(id));
  Flow& f = flows_[id];
  // Taken off its links' lists at the next solve, together with every other flow removed before it
  // (many flows end at one instant: one pass over each list instead of one search per flow).
  removed_links_.insert(removed_links_.end(), f.path.begin(), f.path.end());
  for (std::size_t i = 0; i < f.path.size(); ++i) link_count_[f.path[i]] -= f.count[i];
  removed_.push_back(id);
  f.active = false;
  f.rate = 0;
  f.path.clear();
  f.count.clear();
}

void FlowSolver::drop_removed() {
  if (removed_.empty()) return;
  ++epoch_;
  std::size_t kept = 0;
  for (LinkId l : removed_links_) {
    if (link_mark_[l] == epoch_) continue;  // each link once
    link_mark_[l] = epoch_;
    std::erase_if(on_link_[l], [this](FlowId f) { return !flows_[f].active; });
    removed_links_[kept++] = l;
  }
  removed_links_.resize(kept);
  // Only now may the ids be reused: no list holds them any more.
  free_.insert(free_.end(), removed_.begin(), removed_.end());
  removed_.clear();
}

double FlowSolver::load(LinkId link) const {
  // Each flow once (a flow listed k times on the link is in its list k times), with the counts of
  // all its entries there; a removed flow's rate is 0.
  std::vector<FlowId> distinct(on_link_[link].begin(), on_link_[link].end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  double sum = 0;
  for (FlowId f : distinct) {
    const Flow& fl = flows_[f];
    for (std::size_t i = 0; i < fl.path.size(); ++i)
      if (fl.path[i] == link) sum += fl.rate * fl.count[i];
  }
  return sum;
}

// Breadth-first over flows and links from `seed`, marking with the current epoch.
void FlowSolver::collect_component(FlowId seed, std::vector<FlowId>& flows, std::vector<LinkId>& links) {
  if (flow_mark_[seed] == epoch_) return;
  const std::size_t first = flows.size();
  flow_mark_[seed] = epoch_;
  flows.push_back(seed);
  for (std::size_t i = first; i < flows.size(); ++i) {
    for (LinkId l : flows_[flows[i]].path) {
      if (link_mark_[l] == epoch_) continue;
      link_mark_[l] = epoch_;
      links.push_back(l);
      for (FlowId g : on_link_[l]) {
        if (flow_mark_[g] == epoch_) continue;
        flow_mark_[g] = epoch_;
        flows.push_back(g);
      }
    }
  }
}

void FlowSolver::fill(const std::vector<FlowId>& flows, const std::vector<LinkId>& links) {
  for (LinkId l : links) {
    residual_[l] = capacity_[l];
    unfrozen_[l] = link_count_[l];
  }
  std::vector<FlowId>& open = open_;  // unfrozen flows
  std::vector<FlowId>& next = next_;
  open.assign(flows.begin(), flows.end());
  if (frozen_.size() < flows_.size()) frozen_.resize(flows_.size(), 0);
  for (FlowId f : flows) frozen_[f] = 0;
  std::vector<char>& frozen = frozen_;
  while (!open.empty()) {
    // The smallest fair share over the component's links, and the smallest own cap.
    double share = FlowSolver::kUncapped;
    for (LinkId l : links)
      if (unfrozen_[l] > 0) share = std::min(share, residual_[l] / unfrozen_[l]);
    for (FlowId f : open) share = std::min(share, flows_[f].cap);
    TRAINSIM_ASSERT(share < FlowSolver::kUncapped);
    share = std::max(share, 0.0);
    // Freeze the flows on bottleneck links and those at their cap, at `share`. A tolerance keeps
    // links that fill at the same level (up to rounding) in the same round.
    const double tol = share * 1e-12;
    next.clear();
    for (FlowId f : open) {
      const Flow& fl = flows_[f];
      bool freeze = fl.cap <= share + tol;
      for (LinkId l : fl.path) freeze = freeze || residual_[l] / unfrozen_[l] <= share + tol;
      if (freeze) {
        frozen[f] = 1;
      } else {
        next.push_back(f);
      }
    }
    TRAINSIM_ASSERT(next.size() < open.size());
    for (FlowId f : open) {
      if (!frozen[f]) continue;
      Flow& fl = flows_[f];
      fl.rate = share;
      for (std::size_t i = 0; i < fl.path.size(); ++i) {
        const LinkId l = fl.path[i];
        residual_[l] = std::max(0.0, residual_[l] - share * fl.count[i]);
        unfrozen_[l] -= fl.count[i];
      }
    }
    open.swap(next);
  }
}

const std::vector<FlowSolver::FlowId>& FlowSolver::solve() {
  drop_removed();
  changed_.clear();
  ++epoch_;
  std::vector<FlowId> flows;
  std::vector<LinkId> links;
  auto solve_from = [&](FlowId seed) {
    flows.clear();
    links.clear();
    collect_component(seed, flows, links);
    if (flows.empty()) return;
    fill(flows, links);
    changed_.insert(changed_.end(), flows.begin(), flows.end());
  };
  for (FlowId f : dirty_)
    if (flows_[f].active) solve_from(f);
  for (LinkId l : removed_links_)
    for (FlowId f : on_link_[l]) solve_from(f);  // marked flows are skipped inside
  dirty_.clear();
  removed_links_.clear();
  std::sort(changed_.begin(), changed_.end());
  changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
  return changed_;
}

}  // namespace trainsim::network
