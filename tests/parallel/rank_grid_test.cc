// Megatron's rank order (tp fastest, then cp, dp, pp) decides group membership. Expected groups are
// the worked examples of ecosystem.md §2.2, computed by hand from
// rank = tp + TP·(cp + CP·(dp + DP·pp)).

#include <catch2/catch.hpp>

#include "parallel/rank_grid.h"

using trainsim::parallel::Coords;
using trainsim::parallel::RankGrid;
using Groups = std::vector<std::vector<std::uint32_t>>;

TEST_CASE("TP2 PP4 DP2 on 16 GPUs: TP pairs are adjacent, DP pairs stride 2, pipelines stride 4") {
  RankGrid g(2, 1, 2, 4);
  CHECK(g.groups("tp") == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(g.groups("dp") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(g.groups("pp") == Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
}

TEST_CASE("TP2 CP2 DP2 PP2: CP between TP and DP, and the DP×CP gradient group spans both") {
  RankGrid g(2, 2, 2, 2);
  CHECK(g.groups("cp") == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(g.groups("dp") == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  CHECK(g.groups("dp-cp") == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
  CHECK(g.groups("pp") == Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
}

TEST_CASE("coordinates and ranks are inverse, and a TP8 group is one 8-GPU node") {
  RankGrid g(8, 1, 8, 16);  // GPT-3 175B on 1024 GPUs
  for (std::uint32_t r = 0; r < 1024; ++r) CHECK(g.rank(g.coords(r)) == r);
  CHECK(g.coords(1023) == Coords{7, 0, 7, 15});
  for (const auto& tp : g.groups("tp")) CHECK(tp.front() / 8 == tp.back() / 8);
  // DP replicas of a TP rank sit on 8 different nodes, one GPU each.
  CHECK(g.groups("dp").front() == std::vector<std::uint32_t>{0, 8, 16, 24, 32, 40, 48, 56});
  CHECK(g.groups("pp").front().back() == 64u * 15u);
}

// Megatron-Core's MoE parallel folding: the 8 ranks of each pipeline stage (tp 2 x dp 4) are
// re-indexed for the expert layers as etp + ETP·(ep + EP·edp). With etp 1, ep 4: ep groups are runs
// of 4 consecutive ranks, expert-dp pairs stride 4. With etp 2, ep 2: etp pairs are the TP pairs, ep
// pairs stride 2, expert-dp pairs stride 4.
TEST_CASE("expert groups fold ep and etp into each stage's tp x cp x dp ranks") {
  RankGrid g(2, 1, 4, 2);
  CHECK(g.expert_groups("ep", 1, 4) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(g.expert_groups("edp", 1, 4) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  CHECK(g.expert_groups("etp", 1, 4).size() == 16);  // singletons
  CHECK(g.expert_groups("etp", 2, 2) == g.groups("tp"));
  CHECK(g.expert_groups("ep", 2, 2) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(g.expert_groups("edp", 2, 2) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  // ep 8 with etp 1 spans the whole stage; no expert data parallelism is left.
  CHECK(g.expert_groups("ep", 1, 8) == Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}});
  CHECK(g.expert_groups("edp", 1, 8).size() == 16);
}
