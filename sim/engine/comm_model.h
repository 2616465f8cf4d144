#pragma once
// The engine's view of a network: something that is told a communication started and calls back
// when it ends. The analytical model schedules the callback after a closed-form duration; the flow
// model will share links between concurrent messages before it answers.

#include <cstdint>
#include <span>

#include "engine/callback.h"

namespace trainsim::engine {

class Simulation;

struct CommRequest {
  enum class Kind : std::uint8_t { collective, p2p };
  Kind kind = Kind::collective;
  std::uint16_t op = 0;  // collective op code (the network defines the codes)
  std::int64_t bytes = 0;
  std::uint32_t group = 0;               // collective: group id
  std::span<const std::uint32_t> ranks;  // collective: members, in group order
  std::uint32_t src = 0, dst = 0;        // p2p
};

class CommModel {
 public:
  virtual ~CommModel() = default;
  // Starts `req` at sim.now(); `done` must be called (through `sim`) when it completes.
  virtual void start(const CommRequest& req, Simulation& sim, Callback done) = 0;
};

}  // namespace trainsim::engine
