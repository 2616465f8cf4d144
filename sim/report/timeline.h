#pragma once
// Records what chosen ranks did during a simulated step, for the Chrome trace and the HTML report:
// every task a rank ran (start, end, stream, name, FLOPs, bytes, group) and its memory changes.
// A symmetric run simulates one representative per class of identical ranks; a requested rank
// that is not simulated is recorded through its representative (same pipeline stage and CP rank),
// whose timeline is the same.

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/scenario.h"
#include "engine/program.h"
#include "parallel/step_runner.h"

namespace trainsim::report {

// One task of a recorded rank as it ran. Times in picoseconds.
struct Span {
  std::int64_t start_ps = 0;
  std::int64_t end_ps = 0;
  std::int64_t bytes = 0;               // collective or send payload
  double flops = 0;                     // compute
  std::uint32_t name = 0;               // into Timeline::names
  std::uint32_t group = engine::kNone;  // collective: into Timeline::groups
  std::uint16_t op = 0;                 // collective: network::CollectiveOp
  std::uint8_t stream = 0;
  std::uint8_t slot = 0;  // send/recv: peer slot
  engine::TaskKind kind = engine::TaskKind::compute;
};

// A memory allocation (delta > 0) or release on one rank.
struct MemChange {
  std::int64_t t_ps = 0;
  std::int64_t delta = 0;
  std::uint8_t category = 0;
};

struct RankTimeline {
  std::uint32_t cluster_rank = 0;  // of the simulated rank
  std::uint32_t stage = 0;
  bool spans_recorded = false;
  bool mem_recorded = false;
  // Send/recv peers as cluster-rank offsets (peer - this rank); equal for every rank of a class.
  std::array<std::int64_t, engine::kMaxSlots> peer_offset{};
  std::array<bool, engine::kMaxSlots> has_peer{};
  std::array<std::int64_t, engine::kMaxMemCategories> initial_mem{};
  std::vector<Span> spans;     // in the order the tasks ended
  std::vector<MemChange> mem;  // in the order they happened
};

struct GroupInfo {
  std::string kind;
  std::uint32_t index = 0;  // among groups of its kind
  std::uint32_t size = 0;   // GPUs in the group
};

struct Timeline {
  std::vector<std::string> names;
  std::vector<GroupInfo> groups;
  std::vector<RankTimeline> ranks;  // recorded simulated ranks
  // Requested cluster rank -> index into `ranks` of the rank recorded for it.
  std::unordered_map<std::uint32_t, std::uint32_t> source;

  const RankTimeline* find(std::uint32_t cluster_rank) const {
    auto it = source.find(cluster_rank);
    return it == source.end() ? nullptr : &ranks[it->second];
  }
};

class TimelineRecorder : public parallel::StepObserver {
 public:
  // Records every task of `span_ranks` and the memory of `span_ranks` and `mem_ranks` (cluster ranks).
  TimelineRecorder(const config::Scenario& scenario, std::vector<std::uint32_t> span_ranks,
                   std::vector<std::uint32_t> mem_ranks);

  void on_plan(const parallel::StepPlan& plan) override;
  void on_task(std::uint32_t rank, const engine::Program& program, const engine::Task& task, engine::Time start,
               engine::Time end) override;

  // What was recorded, memory changes in time order; call once, after the run.
  Timeline take();

 private:
  std::uint32_t name_id(const engine::Program& program, std::uint32_t label);

  const config::Scenario& scenario_;
  std::vector<std::uint32_t> span_ranks_, mem_ranks_;
  Timeline timeline_;
  std::vector<std::uint32_t> slot_of_sim_;  // simulated rank -> index into timeline_.ranks, or kNone
  const engine::Program* programs_ = nullptr;
  static constexpr std::size_t kNoSpan = SIZE_MAX;
  std::vector<std::size_t> last_host_;        // per recorded rank: its latest host-stream span, or kNoSpan
  std::vector<std::uint32_t> group_of_slot_;  // simulated rank * kMaxSlots + slot -> group
  std::unordered_map<std::uint64_t, std::uint32_t> label_ids_;
  std::unordered_map<std::string, std::uint32_t> name_ids_;
};

// The simulated rank that stands for a cluster rank: itself in an all-ranks run, else the rank of
// the same pipeline stage and CP rank with tp = dp = 0.
std::uint32_t representative(const config::Scenario& scenario, std::uint32_t cluster_rank);
// One rank per pipeline stage: tp = cp = dp = 0.
std::vector<std::uint32_t> stage_ranks(const config::Scenario& scenario);

}  // namespace trainsim::report
