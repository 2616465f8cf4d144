#include "parallel/rank_grid.h"

#include <algorithm>

#include "util/error.h"

namespace trainsim::parallel {

RankGrid::RankGrid(std::int64_t tp, std::int64_t cp, std::int64_t dp, std::int64_t pp)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp) {
  TRAINSIM_ASSERT(tp >= 1 && cp >= 1 && dp >= 1 && pp >= 1);
}

Coords RankGrid::coords(std::uint32_t rank) const {
  std::int64_t r = rank;
  Coords c;
  c.tp = r % tp_;
  r /= tp_;
  c.cp = r % cp_;
  r /= cp_;
  c.dp = r % dp_;
  c.pp = r / dp_;
  return c;
}

std::uint32_t RankGrid::rank(const Coords& c) const {
  return static_cast<std::uint32_t>(c.tp + tp_ * (c.cp + cp_ * (c.dp + dp_ * c.pp)));
}

std::vector<std::vector<std::uint32_t>> RankGrid::groups(std::string_view kind) const {
  const bool vary_tp = kind == "tp";
  const bool vary_cp = kind == "cp" || kind == "dp-cp";
  const bool vary_dp = kind == "dp" || kind == "dp-cp";
  const bool vary_pp = kind == "pp";
  TRAINSIM_ASSERT(vary_tp || vary_cp || vary_dp || vary_pp);
  // A rank leads its group when every varied coordinate is zero; members enumerate the varied ones.
  std::vector<std::vector<std::uint32_t>> out;
  const auto n = static_cast<std::uint32_t>(size());
  for (std::uint32_t r = 0; r < n; ++r) {
    Coords c = coords(r);
    if ((vary_tp && c.tp) || (vary_cp && c.cp) || (vary_dp && c.dp) || (vary_pp && c.pp)) continue;
    std::vector<std::uint32_t> members;
    for (std::int64_t p = 0; p < (vary_pp ? pp_ : 1); ++p)
      for (std::int64_t d = 0; d < (vary_dp ? dp_ : 1); ++d)
        for (std::int64_t q = 0; q < (vary_cp ? cp_ : 1); ++q)
          for (std::int64_t t = 0; t < (vary_tp ? tp_ : 1); ++t) {
            Coords m = c;
            if (vary_tp) m.tp = t;
            if (vary_cp) m.cp = q;
            if (vary_dp) m.dp = d;
            if (vary_pp) m.pp = p;
            members.push_back(rank(m));
          }
    std::sort(members.begin(), members.end());
    out.push_back(std::move(members));
  }
  return out;
}

std::vector<std::vector<std::uint32_t>> RankGrid::expert_groups(std::string_view kind, std::int64_t etp,
                                                                std::int64_t ep) const {
  const std::int64_t stage = tp_ * cp_ * dp_;
  TRAINSIM_ASSERT(etp >= 1 && ep >= 1 && stage % (etp * ep) == 0);
  const std::int64_t edp = stage / (etp * ep);
  // The varied coordinate's size and stride in the stage-local index etp + ETP·(ep + EP·edp).
  std::int64_t size = 0, stride = 0;
  if (kind == "etp") {
    size = etp, stride = 1;
  } else if (kind == "ep") {
    size = ep, stride = etp;
  } else if (kind == "ep-etp") {
    size = ep * etp, stride = 1;
  } else {
    TRAINSIM_ASSERT(kind == "edp");
    size = edp, stride = etp * ep;
  }
  std::vector<std::vector<std::uint32_t>> out;
  for (std::int64_t p = 0; p < pp_; ++p)
    for (std::int64_t i = 0; i < stage; ++i) {
      if ((i / stride) % size != 0) continue;  // leads its group: the varied coordinate is 0
      std::vector<std::uint32_t> members;
      for (std::int64_t j = 0; j < size; ++j) members.push_back(static_cast<std::uint32_t>(p * stage + i + j * stride));
      out.push_back(std::move(members));
    }
  return out;
}

}  // namespace trainsim::parallel
