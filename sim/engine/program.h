#pragma once
// What ranks execute: a Program is, per stream, an in-order list of tasks with dependencies on
// other streams of the same rank. Ranks that run the same code share one Program and differ only
// in their Binding (which process groups and peers their slots mean), so memory grows with the
// number of distinct programs, not with the number of ranks.

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/time.h"

namespace trainsim::engine {

inline constexpr int kMaxStreams = 12;  // busy masks are StreamMask bits
using StreamMask = std::uint16_t;
inline constexpr int kMaxSlots = 12;  // group slots and peer slots per rank
inline constexpr int kMaxMemCategories = 8;
inline constexpr int kMaxBuckets = 9;  // time accounting classes (see Executor)
inline constexpr std::uint32_t kNone = UINT32_MAX;

enum class TaskKind : std::uint8_t {
  compute,     // occupies its stream for `duration`
  collective,  // starts when every member of the slot's group has reached it; the CommModel times it
  send,        // eager point-to-point message to the slot's peer; the CommModel times it
  recv,        // completes once the next message from the slot's peer has arrived
};

// Satisfied once stream `stream` of the same rank has completed the task at `position`.
struct Dep {
  std::uint8_t stream = 0;
  std::uint32_t position = 0;
};

struct Task {
  Time duration;                     // compute only
  double flops = 0;                  // compute: FLOPs of the ops it stands for (reports only; not timed here)
  std::int64_t bytes = 0;            // collective/send payload (nccl-tests size convention)
  std::int64_t mem_alloc_bytes = 0;  // allocated when the task starts
  std::int64_t mem_free_bytes = 0;   // freed when the task ends
  std::uint32_t label = 0;           // index into Program::labels()
  std::uint32_t dep_begin = 0;
  std::uint16_t dep_count = 0;
  std::uint16_t op = 0;  // collective: op code, opaque to the engine
  std::uint8_t stream = 0;
  TaskKind kind = TaskKind::compute;
  std::uint8_t slot = 0;  // collective: group slot; send/recv: peer slot (a send on s lands on the peer's s ^ 1)
  std::uint8_t mem_category = 0;
};

class Program {
 public:
  // Appends `task` to the end of its stream with the given dependencies (of each stream only the
  // latest is kept: the others are implied); returns where it landed.
  Dep add(Task task, std::span<const Dep> deps = {});
  Dep add(Task task, std::initializer_list<Dep> deps) {
    return add(task, std::span<const Dep>(deps.begin(), deps.size()));
  }
  // Interns an op name; tasks refer to it by index.
  std::uint32_t label(std::string_view name);

  std::span<const Task> stream(int s) const { return streams_[static_cast<std::size_t>(s)]; }
  // For builders that amend a task after adding it (e.g. attach a memory release).
  Task& task(Dep at) { return streams_[at.stream][at.position]; }
  std::span<const Dep> deps(const Task& t) const { return {deps_.data() + t.dep_begin, t.dep_count}; }
  const std::string& label_name(std::uint32_t id) const { return labels_[id]; }
  std::size_t task_count() const;

  // Memory held from time zero (weights, gradients, optimizer states), by category.
  std::array<std::int64_t, kMaxMemCategories> initial_mem_bytes{};

 private:
  std::array<std::vector<Task>, kMaxStreams> streams_;
  std::vector<Dep> deps_;
  std::vector<std::string> labels_;
  // Looked up by string_view without a temporary string (transparent hash and equality).
  struct LabelHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::uint32_t, LabelHash, std::equal_to<>> label_ids_;
};

// Process groups as compressed member lists: nothing is quadratic in the number of ranks.
// `members` are the simulated ranks that rendezvous in the group's collectives; `placement` is the
// whole group in cluster rank numbers, what the CommModel times. They differ in a symmetric run,
// where one simulated rank stands for a class of identical ranks (its group of 8 is timed as 8).
class GroupTable {
 public:
  // `kind` names the group family ("tp", "dp", ...), used in messages. An empty `placement` means
  // the members themselves, numbered as in the cluster.
  std::uint32_t add(std::span<const std::uint32_t> members, std::uint32_t kind,
                    std::span<const std::uint32_t> placement = {});
  std::uint32_t kind_id(std::string_view name);

  std::size_t size() const { return offsets_.size() - 1; }
  std::span<const std::uint32_t> members(std::uint32_t g) const {
    return {members_.data() + offsets_[g], offsets_[g + 1] - offsets_[g]};
  }
  std::span<const std::uint32_t> placement(std::uint32_t g) const {
    return {placement_.data() + placement_offsets_[g], placement_offsets_[g + 1] - placement_offsets_[g]};
  }
  const std::string& kind_name(std::uint32_t g) const { return kind_names_[kinds_[g]]; }
  // Index of the group among groups of the same kind (for names like dp#3).
  std::uint32_t index_in_kind(std::uint32_t g) const { return index_in_kind_[g]; }

 private:
  std::vector<std::uint32_t> offsets_{0};
  std::vector<std::uint32_t> members_;
  std::vector<std::uint32_t> placement_offsets_{0};
  std::vector<std::uint32_t> placement_;
  std::vector<std::uint32_t> kinds_;
  std::vector<std::uint32_t> index_in_kind_;
  std::vector<std::uint32_t> kind_counts_;
  std::vector<std::string> kind_names_;
};

constexpr std::array<std::uint32_t, kMaxSlots> unbound_slots() {
  std::array<std::uint32_t, kMaxSlots> a{};
  a.fill(kNone);
  return a;
}

// What one rank runs and what its slots refer to.
struct Binding {
  std::uint32_t program = 0;
  std::uint32_t cluster_rank = kNone;  // the rank's number in the cluster; kNone: its index
  std::array<std::uint32_t, kMaxSlots> group = unbound_slots();
  std::array<std::uint32_t, kMaxSlots> peer = unbound_slots();
};

}  // namespace trainsim::engine
