#include "network/topology_graph.h"

#include <algorithm>
#include <queue>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/reverse_graph.hpp>

#include "util/error.h"

namespace trainsim::network {

std::string_view to_string(LinkTier tier) {
  switch (tier) {
    case LinkTier::nvlink:
      return "nvlink";
    case LinkTier::pcie:
      return "pcie";
    case LinkTier::nic:
      return "nic";
    case LinkTier::leaf_spine:
      return "leaf-spine";
    case LinkTier::spine_core:
      return "spine-core";
  }
  return "?";
}

namespace {

struct EdgeProps {
  std::uint32_t link = 0;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property, EdgeProps>;
using Vertex = Graph::vertex_descriptor;

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finalizer: a fixed, platform-independent hash
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

struct TopologyGraph::Impl {
  Graph g;
  std::int64_t gpus_per_node = 8, nics = 8, nodes = 0;
  std::vector<Vertex> gpu, nvswitch, nic, leaf_of_nic;  // nic: node * nics + k
  std::vector<std::vector<std::uint32_t>> out_link;     // per vertex: link ids, for lookups
  std::vector<Vertex> link_target;
  std::int64_t switch_count = 0;
  std::vector<char> fabric;  // per vertex: a leaf, spine or core switch (routes between leaves use only these)
  // Hop distances to a destination leaf over the switch fabric, computed on demand (BFS on the
  // reversed graph) and kept.
  mutable std::unordered_map<Vertex, std::vector<std::int32_t>> dist_to;

  const std::vector<std::int32_t>& distances(Vertex leaf) const {
    auto it = dist_to.find(leaf);
    if (it != dist_to.end()) return it->second;
    std::vector<std::int32_t> d(boost::num_vertices(g), -1);
    d[leaf] = 0;
    const auto rg = boost::make_reverse_graph(g);
    std::queue<Vertex> q;
    q.push(leaf);
    while (!q.empty()) {  // BFS over reversed edges: d[v] = hops from v to the leaf
      const Vertex v = q.front();
      q.pop();
      for (auto [e, end] = boost::out_edges(v, rg); e != end; ++e) {
        const Vertex u = boost::target(*e, rg);
        if (d[u] >= 0 || !fabric[u]) continue;
        d[u] = d[v] + 1;
        q.push(u);
      }
    }
    return dist_to.emplace(leaf, std::move(d)).first->second;
  }
};

TopologyGraph::TopologyGraph(const ClusterSpec& c, std::int64_t gpus) : impl_(new Impl), gpus_(gpus) {
  TRAINSIM_ASSERT(gpus >= 1);
  Impl& m = *impl_;
  const auto& f = c.fabric;
  m.gpus_per_node = c.gpus_per_node;
  m.nics = c.nic.per_node;
  m.nodes = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  auto add_vertex = [&](bool fabric_switch = false) {
    m.out_link.emplace_back();
    m.fabric.push_back(fabric_switch ? 1 : 0);
    return boost::add_vertex(m.g);
  };
  auto link = [&](Vertex a, Vertex b, double cap, LinkTier tier) {
    const auto id = static_cast<std::uint32_t>(capacity_.size());
    boost::add_edge(a, b, EdgeProps{id}, m.g);
    capacity_.push_back(cap);
    tier_.push_back(tier);
    m.out_link[a].push_back(id);
    m.link_target.push_back(b);
  };
  auto both = [&](Vertex a, Vertex b, double cap, LinkTier tier) {
    link(a, b, cap, tier);
    link(b, a, cap, tier);
  };

  for (std::int64_t n = 0; n < m.nodes; ++n) {
    m.nvswitch.push_back(add_vertex());
    for (std::int64_t k = 0; k < m.nics; ++k) m.nic.push_back(add_vertex());
  }
  for (std::int64_t r = 0; r < gpus; ++r) {
    m.gpu.push_back(add_vertex());
    const std::int64_t node = r / c.gpus_per_node;
    both(m.gpu.back(), m.nvswitch[static_cast<std::size_t>(node)], std::max(c.nvlink.busbw_Bps, c.nvlink.p2p_Bps),
         LinkTier::nvlink);
    const std::int64_t k = (r % c.gpus_per_node) % m.nics;
    both(m.gpu.back(), m.nic[static_cast<std::size_t>(node * m.nics + k)], 2 * c.nic.busbw_Bps, LinkTier::pcie);
  }

  // Leaves: one per group and rail (rail-optimized) or one per group (fat tree).
  const bool rails = f.kind == ClusterSpec::Fabric::Kind::rail_optimized;
  const std::int64_t groups = (m.nodes + f.nodes_per_leaf - 1) / f.nodes_per_leaf;
  const std::int64_t leaves_per_group = rails ? m.nics : 1;
  const double leaf_down =
      static_cast<double>(f.nodes_per_leaf) * (rails ? 1.0 : static_cast<double>(m.nics)) * c.nic.busbw_Bps;
  std::vector<Vertex> leaves;
  for (std::int64_t i = 0; i < groups * leaves_per_group; ++i) leaves.push_back(add_vertex(true));
  m.leaf_of_nic.resize(m.nic.size());
  for (std::int64_t n = 0; n < m.nodes; ++n)
    for (std::int64_t k = 0; k < m.nics; ++k) {
      const std::size_t i = static_cast<std::size_t>(n * m.nics + k);
      const Vertex leaf = leaves[static_cast<std::size_t>((n / f.nodes_per_leaf) * leaves_per_group + (rails ? k : 0))];
      m.leaf_of_nic[i] = leaf;
      both(m.nic[i], leaf, c.nic.busbw_Bps, LinkTier::nic);
    }
  m.switch_count = static_cast<std::int64_t>(leaves.size());

  // Spines per pod, each leaf up to every spine of its pod; cores above the pods when there are
  // several.
  if (groups > 1) {
    const std::int64_t groups_per_pod = f.pod_nodes > 0 ? f.pod_nodes / f.nodes_per_leaf : groups;
    const std::int64_t pods = (groups + groups_per_pod - 1) / groups_per_pod;
    const double leaf_to_spine = leaf_down / f.oversubscription / static_cast<double>(f.spines);
    std::vector<std::vector<Vertex>> spines(static_cast<std::size_t>(pods));
    for (auto& pod : spines)
      for (std::int64_t s = 0; s < f.spines; ++s) pod.push_back(add_vertex(true));
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(leaves.size()); ++i) {
      const std::int64_t pod = (i / leaves_per_group) / groups_per_pod;
      for (Vertex s : spines[static_cast<std::size_t>(pod)])
        both(leaves[static_cast<std::size_t>(i)], s, leaf_to_spine, LinkTier::leaf_spine);
    }
    m.switch_count += pods * f.spines;
    if (pods > 1) {
      const double spine_down = static_cast<double>(groups_per_pod * leaves_per_group) * leaf_to_spine;
      const std::int64_t cores = f.spines;
      const double spine_to_core = spine_down / f.pod_oversubscription / static_cast<double>(cores);
      std::vector<Vertex> core;
      for (std::int64_t k = 0; k < cores; ++k) core.push_back(add_vertex(true));
      for (const auto& pod : spines)
        for (Vertex s : pod)
          for (Vertex k : core) both(s, k, spine_to_core, LinkTier::spine_core);
      m.switch_count += cores;
    }
  }
}

TopologyGraph::~TopologyGraph() {
  delete impl_;
}

std::int64_t TopologyGraph::switches() const {
  return impl_->switch_count;
}

void TopologyGraph::route(std::uint32_t src, std::uint32_t dst, std::vector<LinkId>& out) const {
  const Impl& m = *impl_;
  TRAINSIM_ASSERT(src < m.gpu.size() && dst < m.gpu.size());
  if (src == dst) return;
  auto link_between = [&](Vertex a, Vertex b) {
    for (std::uint32_t l : m.out_link[a])
      if (m.link_target[l] == b) return l;
    TRAINSIM_ASSERT(false && "no link");
    return std::uint32_t{0};
  };
  const std::int64_t sn = src / m.gpus_per_node, dn = dst / m.gpus_per_node;
  if (sn == dn) {
    const Vertex sw = m.nvswitch[static_cast<std::size_t>(sn)];
    out.push_back(link_between(m.gpu[src], sw));
    out.push_back(link_between(sw, m.gpu[dst]));
    return;
  }
  const std::int64_t rail = (src % m.gpus_per_node) % m.nics;
  const Vertex snic = m.nic[static_cast<std::size_t>(sn * m.nics + rail)];
  const Vertex dnic = m.nic[static_cast<std::size_t>(dn * m.nics + rail)];
  out.push_back(link_between(m.gpu[src], snic));
  Vertex at = m.leaf_of_nic[static_cast<std::size_t>(sn * m.nics + rail)];
  out.push_back(link_between(snic, at));
  const Vertex target = m.leaf_of_nic[static_cast<std::size_t>(dn * m.nics + rail)];
  const auto& dist = m.distances(target);
  TRAINSIM_ASSERT(dist[at] >= 0);
  std::uint64_t h = mix((static_cast<std::uint64_t>(src) << 32) | dst);
  std::vector<std::uint32_t> next;
  while (at != target) {
    next.clear();
    for (std::uint32_t l : m.out_link[at]) {
      const Vertex v = m.link_target[l];
      if (dist[v] == dist[at] - 1) next.push_back(l);
    }
    TRAINSIM_ASSERT(!next.empty());
    const std::uint32_t l = next[h % next.size()];
    h = mix(h);
    out.push_back(l);
    at = m.link_target[l];
  }
  out.push_back(link_between(target, dnic));
  // The rail's NIC hands the data to its own GPU; if that is not the destination, one NVLink hop
  // through the node's switch finishes the trip (NCCL's PXN does the same hop on the other side).
  const std::size_t rail_gpu = static_cast<std::size_t>(dn * m.gpus_per_node + rail);
  if (rail_gpu == dst) {
    out.push_back(link_between(dnic, m.gpu[dst]));
    return;
  }
  TRAINSIM_ASSERT(rail_gpu < m.gpu.size());
  const Vertex sw = m.nvswitch[static_cast<std::size_t>(dn)];
  out.push_back(link_between(dnic, m.gpu[rail_gpu]));
  out.push_back(link_between(m.gpu[rail_gpu], sw));
  out.push_back(link_between(sw, m.gpu[dst]));
}

}  // namespace trainsim::network
