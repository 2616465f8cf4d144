#include "report/timeline.h"

#include <algorithm>

#include "parallel/rank_grid.h"
#include "parallel/step_builder.h"
#include "util/error.h"

namespace trainsim::report {

std::uint32_t representative(const config::Scenario& sc, std::uint32_t cluster_rank) {
  const auto& p = sc.parallel;
  parallel::RankGrid grid(p.tp, p.cp, p.dp, p.pp);
  parallel::Coords c = grid.coords(cluster_rank);
  c.tp = 0;
  c.dp = 0;
  return grid.rank(c);
}

std::vector<std::uint32_t> stage_ranks(const config::Scenario& sc) {
  const auto& p = sc.parallel;
  parallel::RankGrid grid(p.tp, p.cp, p.dp, p.pp);
  std::vector<std::uint32_t> out;
  for (std::int64_t s = 0; s < p.pp; ++s) out.push_back(grid.rank({0, 0, 0, s}));
  return out;
}

TimelineRecorder::TimelineRecorder(const config::Scenario& scenario, std::vector<std::uint32_t> span_ranks,
                                   std::vector<std::uint32_t> mem_ranks)
    : scenario_(scenario), span_ranks_(std::move(span_ranks)), mem_ranks_(std::move(mem_ranks)) {
}

void TimelineRecorder::on_plan(const parallel::StepPlan& plan) {
  const auto gpus = static_cast<std::uint32_t>(scenario_.gpus);
  const auto& bindings = plan.bindings;
  auto cluster_of = [&](std::uint32_t sim) {
    return bindings[sim].cluster_rank == engine::kNone ? sim : bindings[sim].cluster_rank;
  };
  std::vector<std::uint32_t> sim_of_cluster(gpus, engine::kNone);
  for (std::uint32_t s = 0; s < bindings.size(); ++s) sim_of_cluster[cluster_of(s)] = s;
  auto sim_for = [&](std::uint32_t cluster) {
    TRAINSIM_ASSERT(cluster < gpus);
    std::uint32_t s = sim_of_cluster[cluster];
    if (s == engine::kNone) s = sim_of_cluster[representative(scenario_, cluster)];
    TRAINSIM_ASSERT(s != engine::kNone);
    return s;
  };

  std::vector<std::uint32_t> sims;
  for (std::uint32_t r : span_ranks_) sims.push_back(sim_for(r));
  for (std::uint32_t r : mem_ranks_) sims.push_back(sim_for(r));
  std::sort(sims.begin(), sims.end());
  sims.erase(std::unique(sims.begin(), sims.end()), sims.end());

  slot_of_sim_.assign(bindings.size(), engine::kNone);
  timeline_.ranks.resize(sims.size());
  last_host_.assign(sims.size(), kNoSpan);
  group_of_slot_.assign(sims.size() * engine::kMaxSlots, engine::kNone);
  for (std::uint32_t i = 0; i < sims.size(); ++i) {
    const std::uint32_t s = sims[i];
    slot_of_sim_[s] = i;
    const engine::Binding& b = bindings[s];
    RankTimeline& rt = timeline_.ranks[i];
    rt.cluster_rank = cluster_of(s);
    rt.stage = b.program;
    rt.initial_mem = plan.programs[b.program].initial_mem_bytes;
    for (std::size_t k = 0; k < engine::kMaxSlots; ++k) {
      group_of_slot_[i * engine::kMaxSlots + k] = b.group[k];
      if (b.peer[k] == engine::kNone) continue;
      rt.has_peer[k] = true;
      rt.peer_offset[k] = static_cast<std::int64_t>(cluster_of(b.peer[k])) - static_cast<std::int64_t>(rt.cluster_rank);
    }
  }
  for (std::uint32_t r : span_ranks_) {
    const std::uint32_t i = slot_of_sim_[sim_for(r)];
    timeline_.ranks[i].spans_recorded = true;
    timeline_.ranks[i].mem_recorded = true;
    timeline_.source[r] = i;
  }
  for (std::uint32_t r : mem_ranks_) {
    const std::uint32_t i = slot_of_sim_[sim_for(r)];
    timeline_.ranks[i].mem_recorded = true;
    timeline_.source[r] = i;
  }

  timeline_.groups.resize(plan.groups.size());
  for (std::uint32_t g = 0; g < plan.groups.size(); ++g)
    timeline_.groups[g] = {plan.groups.kind_name(g), plan.groups.index_in_kind(g),
                           static_cast<std::uint32_t>(plan.groups.placement(g).size())};
  programs_ = plan.programs.data();
}

std::uint32_t TimelineRecorder::name_id(const engine::Program& program, std::uint32_t label) {
  const auto prog = static_cast<std::uint64_t>(&program - programs_);
  const std::uint64_t key = prog << 32 | label;
  if (auto it = label_ids_.find(key); it != label_ids_.end()) return it->second;
  const std::string& name = program.label_name(label);
  auto [it, inserted] = name_ids_.try_emplace(name, static_cast<std::uint32_t>(timeline_.names.size()));
  if (inserted) timeline_.names.push_back(name);
  label_ids_.emplace(key, it->second);
  return it->second;
}

void TimelineRecorder::on_task(std::uint32_t rank, const engine::Program& program, const engine::Task& task,
                               engine::Time start, engine::Time end) {
  const std::uint32_t i = rank < slot_of_sim_.size() ? slot_of_sim_[rank] : engine::kNone;
  if (i == engine::kNone) return;
  RankTimeline& rt = timeline_.ranks[i];
  if (rt.spans_recorded) {
    // The CPU's issue tasks run back to back while it is ahead of the GPU: one span per busy stretch.
    std::size_t& host = last_host_[i];
    if (task.stream == parallel::kHost && host != kNoSpan && rt.spans[host].end_ps == start.ps()) {
      rt.spans[host].end_ps = end.ps();
      return;
    }
    if (task.stream == parallel::kHost) host = rt.spans.size();
    Span s;
    s.start_ps = start.ps();
    s.end_ps = end.ps();
    s.bytes = task.bytes;
    s.flops = task.flops;
    s.name = name_id(program, task.label);
    s.op = task.op;
    s.stream = task.stream;
    s.slot = task.slot;
    s.kind = task.kind;
    if (task.kind == engine::TaskKind::collective) s.group = group_of_slot_[i * engine::kMaxSlots + task.slot];
    rt.spans.push_back(s);
  }
  if (rt.mem_recorded) {
    if (task.mem_alloc_bytes != 0) rt.mem.push_back({start.ps(), task.mem_alloc_bytes, task.mem_category});
    if (task.mem_free_bytes != 0) rt.mem.push_back({end.ps(), -task.mem_free_bytes, task.mem_category});
  }
}

Timeline TimelineRecorder::take() {
  // Allocations are seen when their task ends; order every change by when it happened.
  for (RankTimeline& rt : timeline_.ranks)
    std::stable_sort(rt.mem.begin(), rt.mem.end(),
                     [](const MemChange& a, const MemChange& b) { return a.t_ps < b.t_ps; });
  return std::move(timeline_);
}

}  // namespace trainsim::report
