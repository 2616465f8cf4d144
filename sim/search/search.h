#pragma once
// Layout search: every parallel layout of one model, cluster, GPU count and global batch within
// the axes asked for (TP, PP, CP, virtual pipeline stages, micro-batch, recompute, ZeRO stage).
// Each candidate becomes a scenario through the same checks as a scenario file (a layout Megatron
// would refuse is counted as rejected, with the reason), is simulated, and the ones that fit in
// memory are ranked by step time. Results do not depend on the thread count.
//
// Asked for the fastest few (`top` > 0), the search simulates the layouts in order of a floor
// under their step time (parallel::compute_floor_s: the busiest stage's kernels and the collectives
// they wait for, without a program or a simulation), in waves of kSearchWave, and skips every layout whose floor
// exceeds the top-th fastest step that fits among those simulated before its wave: such a layout cannot be among the
// fastest. The top layouts are those an exhaustive search finds, to the bit; the counts of those that fit or not cover
// the simulated layouts, and the skipped ones are counted apart. The waves do not depend on the thread or MPI rank
// count, so neither does the answer.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "report/summary.h"

namespace trainsim::search {

// The values tried per setting; the search runs their cross product.
struct Axes {
  std::vector<std::int64_t> tp, pp, cp, ep, virtual_stages, micro_batch, zero;
  std::vector<config::Recompute> recompute;
  // parallel.moe_a2a_overlap off and/or on (a mixture-of-experts model's layouts where it applies;
  // empty: off).
  std::vector<bool> moe_a2a_overlap;
  // parallel.moe_token_dispatcher: alltoall, allgather and/or flex (flex on layouts with ep > 1 and
  // etp 1; empty: alltoall).
  std::vector<config::MoeDispatcher> moe_dispatcher;
  // parallel.schedule of the layouts without virtual stages (those with run interleaved): 1f1b,
  // gpipe, zb-h1 and/or dualpipev (its two chunks per rank in a V; layouts with pp >= 2); a layout
  // with pp 1 runs once whatever the schedule. Empty: 1f1b.
  std::vector<config::Schedule> schedule;
  // training.precision (empty: the scenario's). A GPU without FP8 or FP4 rejects those layouts.
  std::vector<config::Precision> precision;
  // Hybrid sharding (HSDP) of the zero 3 layouts: the nodes each replica spans (its parameters,
  // gradients and optimizer states sharded over that replica's data-parallel ranks, the replicas
  // all-reducing the sharded gradients; parallel.distributed_optimizer_instances = the replica
  // count). 0: one replica over every data-parallel rank (plain FSDP). A span that leaves fewer than
  // two replicas, or one rank per replica, is skipped for that layout. Empty: {0}.
  std::vector<std::int64_t> hsdp_nodes;
};

// The defaults for a scenario (README.md, "trainsim search"): tp 1, 2, 4, 8 within a node; pp every
// divisor of the layer count, or of the layer count + 2 (the embedding and the loss placed as
// layers), up to 64; cp 1, and 2, 4, 8, 16 while each rank keeps at least 4096
// tokens of the sequence; virtual stages 1 and each of 2 ... 8 that splits some pp's stages the same way;
// micro-batch 1, 2, 4, 8; recompute none, selective, full; zero as the scenario sets it; ep 1 for a
// dense model, every divisor of the experts up to 64 for a mixture of experts (with etp as the
// scenario sets it, else 1, as Megatron-Bridge's MoE recipes run); the all-to-all overlap and the
// token dispatcher and the precision as the scenario sets them; for zero 3 layouts, HSDP spans of 0
// (plain FSDP) and 1 node (each replica sharded within a node), and the scenario's own span.
Axes default_axes(const config::Scenario& base);

struct Layout {
  std::int64_t tp = 1, pp = 1, cp = 1, ep = 1, dp = 1, virtual_stages = 1, micro_batch = 1, zero = 0;
  // Zero 3 with hybrid sharding: the nodes each replica spans and the replica count (0 and 1: off).
  std::int64_t hsdp_nodes = 0, replicas = 1;
  config::Recompute recompute = config::Recompute::none;
  bool moe_a2a_overlap = false;
  config::MoeDispatcher moe_dispatcher = config::MoeDispatcher::alltoall;
  config::Precision precision = config::Precision::bf16;
  // interleaved with virtual_stages > 1, else as the schedule axis says (1f1b at pp 1).
  config::Schedule schedule = config::Schedule::one_f_one_b;
};

struct Candidate {
  Layout layout;
  nlohmann::json parallel, training;  // the scenario keys that give this layout
  bool valid = false;
  std::string rejected;       // why the layout rules refused it (valid false): "path: problem"
  std::string rejected_path;  // the JSON path of that refusal
  report::Metrics metrics;
  double exposed_comm_fraction = 0;
  double floor_s = 0;    // parallel::compute_floor_s (searches for the top few only)
  bool skipped = false;  // not simulated: its floor exceeds the top-th fastest step that fits
  // Searches for the top few: parallel::memory_floor_bytes, and whether it alone exceeds the GPU's
  // memory (less the headroom), so the layout cannot fit and is not simulated.
  double memory_floor_gib = 0;
  bool too_big = false;
};

// Layouts simulated between two updates of the skipping bound (see above).
inline constexpr std::size_t kSearchWave = 64;

// MPI for one search: started when the process was launched by mpirun (OpenMPI's or a PMI
// launcher's environment), finalized when this goes out of scope; otherwise nothing. Under it,
// run_search gives each rank every size-th layout of each wave and shares the outcomes among the
// ranks after the wave; rank 0 alone prints; the answer is the same as in one process. Builds without MPI (TRAINSIM_MPI
// off, or no OpenMPI) refuse to run under mpirun rather than search N times over.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  bool started_ = false;
  int rank_ = 0, size_ = 1;
};
// True in an MPI rank other than 0 (errors and output are rank 0's to print).
bool secondary_rank();

// When no layout fits: a memory saver the scenario does not use yet, applied to the layout with the
// smallest peak, and what that layout then needs.
struct MemoryLever {
  std::string what;     // e.g. "precision-aware Adam with bf16 moments"
  nlohmann::json keys;  // the scenario keys that turn it on (a JSON merge patch)
  report::Metrics metrics;
};

struct Result {
  bool root = true;  // false on MPI ranks other than 0, which hold no outcomes
  std::string scenario_file;
  double headroom = 0;  // share of GPU memory a layout must leave free to count as fitting
  // Set by the caller when `headroom` is what the published runs leave free (1 - their fill,
  // validation/accuracy.json): `search`'s default. The outputs say so.
  std::optional<config::PublishedMemoryFill> published_fill;
  std::vector<Candidate> ranked;  // simulated candidates: those that fit by step time, then the rest by step time
  std::int64_t enumerated = 0, rejected = 0, fitting = 0;
  std::int64_t skipped = 0;     // valid but not simulated: they cannot be among the `top` fastest
  std::int64_t too_big = 0;     // valid but not simulated: their weights, gradients and states alone overflow
  std::size_t top = 0;          // the fastest asked for (0: all, every valid layout simulated)
  bool precision_axis = false;  // more than one precision tried: the tables show it
  // No layout fits: the index in `ranked` of the one with the smallest memory peak, and the memory
  // savers tried on it (the distributed optimizer, bf16 Adam moments, the optimizer's CPU offload,
  // those the scenario does not use yet).
  std::optional<std::size_t> closest;
  std::vector<MemoryLever> levers;
  // With a headroom: the index in `ranked` of the fastest simulated layout that fits the GPU but not
  // the headroom, when it is faster than the first that fits (or nothing fits): what the headroom
  // costs.
  std::optional<std::size_t> tight;
  // The JSON path the layout rules refused most layouts at (ties: the first enumerated), how many,
  // and the first of those refusals ("path: problem"): what to change when every layout is refused.
  std::string top_rejection_path, top_rejection;
  std::int64_t top_rejection_count = 0;
  bool all_rejected() const { return enumerated > 0 && rejected == enumerated; }
};

// Enumerates, checks, simulates (on `threads` threads) and ranks the layouts of `base` (a scenario
// as load_scenario gives it; only its model, cluster, GPU count and training settings matter).
// `doc` is its JSON with "gpus" equal to base.gpus; its parallel and training blocks give every
// setting the search does not vary. A layout fits when its simulated memory peak leaves `headroom`
// (a share of the GPU's memory) free. With `top` > 0 only the top fastest that fit are sure to be
// simulated (see above); 0 simulates every valid layout.
Result run_search(const config::Scenario& base, const nlohmann::json& doc, const Axes& axes, int threads,
                  const std::filesystem::path& data_dir, double headroom = 0, std::size_t top = 0);

// One search: its counts, the top layouts that fit, and the winner's scenario keys. Results of one
// scenario at several GPU counts (same order as given): each, then the best layout per count.
std::string to_text(const Result& result, const config::Scenario& base, std::size_t top);
std::string to_text(const std::vector<Result>& results, const std::vector<config::Scenario>& bases, std::size_t top);
std::string to_markdown(const std::vector<Result>& results, const std::vector<config::Scenario>& bases,
                        std::size_t top);
nlohmann::json to_json(const std::vector<Result>& results, const std::vector<config::Scenario>& bases, std::size_t top);
std::string to_markdown(const Result& result, const config::Scenario& base, std::size_t top);
nlohmann::json to_json(const Result& result, const config::Scenario& base, std::size_t top);

}  // namespace trainsim::search
