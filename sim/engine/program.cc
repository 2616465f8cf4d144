#include "engine/program.h"

#include <array>

#include "util/error.h"

namespace trainsim::engine {

Dep Program::add(Task task, std::span<const Dep> deps) {
  TRAINSIM_ASSERT(task.stream < kMaxStreams);
  TRAINSIM_ASSERT(task.slot < kMaxSlots);
  TRAINSIM_ASSERT(task.mem_category < kMaxMemCategories);
  // A stream completes its tasks in order, so depending on one of its tasks implies every earlier
  // one: only the latest per stream is kept (at most kMaxStreams; a step's last task may wait for
  // one gradient reduction per micro-batch, tens of thousands of them).
  StreamMask seen = 0;
  bool repeated = false;
  for (const Dep& d : deps) {
    TRAINSIM_ASSERT(d.stream < kMaxStreams);
    TRAINSIM_ASSERT(d.position < streams_[d.stream].size() || d.stream == task.stream);
    const auto bit = static_cast<StreamMask>(1u << d.stream);
    repeated = repeated || (seen & bit) != 0;
    seen = static_cast<StreamMask>(seen | bit);
  }
  task.dep_begin = static_cast<std::uint32_t>(deps_.size());
  if (!repeated) {  // the common case: kept as given
    deps_.insert(deps_.end(), deps.begin(), deps.end());
  } else {
    std::array<std::uint32_t, kMaxStreams> latest;
    latest.fill(kNone);
    for (const Dep& d : deps) {
      std::uint32_t& l = latest[d.stream];
      if (l == kNone || d.position > l) l = d.position;
    }
    for (std::size_t s = 0; s < latest.size(); ++s)
      if (latest[s] != kNone) deps_.push_back(Dep{static_cast<std::uint8_t>(s), latest[s]});
  }
  task.dep_count = static_cast<std::uint16_t>(deps_.size() - task.dep_begin);
  auto& stream = streams_[task.stream];
  stream.push_back(task);
  return Dep{task.stream, static_cast<std::uint32_t>(stream.size() - 1)};
}

std::uint32_t Program::label(std::string_view name) {
  auto it = label_ids_.find(name);
  if (it != label_ids_.end()) return it->second;
  auto id = static_cast<std::uint32_t>(labels_.size());
  labels_.emplace_back(name);
  label_ids_.emplace(std::string(name), id);
  return id;
}

std::size_t Program::task_count() const {
  std::size_t n = 0;
  for (const auto& s : streams_) n += s.size();
  return n;
}

std::uint32_t GroupTable::kind_id(std::string_view name) {
  for (std::size_t i = 0; i < kind_names_.size(); ++i)
    if (kind_names_[i] == name) return static_cast<std::uint32_t>(i);
  kind_names_.emplace_back(name);
  kind_counts_.push_back(0);
  return static_cast<std::uint32_t>(kind_names_.size() - 1);
}

std::uint32_t GroupTable::add(std::span<const std::uint32_t> members, std::uint32_t kind,
                              std::span<const std::uint32_t> placement) {
  TRAINSIM_ASSERT(kind < kind_names_.size());
  TRAINSIM_ASSERT(!members.empty());
  members_.insert(members_.end(), members.begin(), members.end());
  offsets_.push_back(static_cast<std::uint32_t>(members_.size()));
  if (placement.empty()) placement = members;
  placement_.insert(placement_.end(), placement.begin(), placement.end());
  placement_offsets_.push_back(static_cast<std::uint32_t>(placement_.size()));
  kinds_.push_back(kind);
  index_in_kind_.push_back(kind_counts_[kind]++);
  return static_cast<std::uint32_t>(kinds_.size() - 1);
}

}  // namespace trainsim::engine
