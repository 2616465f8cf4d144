#include "calibrate/fit.h"

#include <cmath>
#include <limits>
#include <vector>

#include "network/collective.h"
#include "util/error.h"

namespace trainsim::calibrate {

namespace {

// t ≈ slope · u + intercept, minimising Σ((slope·u + intercept − t) / t)², intercept >= 0.
struct Linear {
  double slope = 0, intercept = 0, rms = 0;
};

Linear fit_linear(std::span<const double> u, std::span<const double> t) {
  TRAINSIM_ASSERT(u.size() == t.size() && !u.empty());
  double spp = 0, spq = 0, sqq = 0, sp = 0, sq = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const double p = u[i] / t[i], q = 1.0 / t[i];
    spp += p * p;
    spq += p * q;
    sqq += q * q;
    sp += p;
    sq += q;
  }
  Linear f;
  const double det = spp * sqq - spq * spq;
  if (u.size() >= 2 && std::fabs(det) > 1e-12 * spp * sqq) {
    f.slope = (sp * sqq - sq * spq) / det;
    f.intercept = (spp * sq - spq * sp) / det;
  }
  if (u.size() < 2 || !(f.intercept >= 0) || !(f.slope > 0)) {
    f.intercept = 0;
    f.slope = sp / spp;
  }
  double ss = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const double r = (f.slope * u[i] + f.intercept - t[i]) / t[i];
    ss += r * r;
  }
  f.rms = std::sqrt(ss / static_cast<double>(u.size()));
  return f;
}

struct GemmTry {
  double half_dim = 0;
  Linear line;
};

GemmTry try_half_dim(const hardware::GemmTable& t, double x0) {
  std::vector<double> u, time;
  auto g = [x0](double x) { return x / (x + x0); };
  for (std::size_t i = 0; i < t.m.size(); ++i)
    for (std::size_t j = 0; j < t.n.size(); ++j)
      for (std::size_t l = 0; l < t.k.size(); ++l) {
        u.push_back(2.0 * t.m[i] * t.n[j] * t.k[l] / (g(t.m[i]) * g(t.n[j]) * g(t.k[l])));
        time.push_back(t.time_s[(i * t.n.size() + j) * t.k.size() + l]);
      }
  return {x0, fit_linear(u, time)};
}

}  // namespace

hardware::BandwidthFit fit_bandwidth(std::span<const double> x, std::span<const double> time_s) {
  const Linear f = fit_linear(x, time_s);
  return {1.0 / f.slope, f.intercept, f.rms};
}

hardware::GemmFit fit_gemm(const hardware::GemmTable& table) {
  // Coarse scan: x0 = 0 and 64 log-spaced values from 1 to kMaxHalfDim.
  constexpr int kSteps = 64;
  GemmTry best = try_half_dim(table, 0);
  double lo = 0, hi = 1;
  double prev = 0;
  for (int s = 0; s <= kSteps; ++s) {
    const double x0 = std::pow(kMaxHalfDim, static_cast<double>(s) / kSteps);
    const GemmTry tr = try_half_dim(table, x0);
    if (tr.line.rms < best.line.rms) {
      best = tr;
      lo = prev;
      hi = std::pow(kMaxHalfDim, static_cast<double>(s + 1) / kSteps);
    }
    prev = x0;
  }
  // Golden-section refinement between the best point's neighbours.
  if (best.half_dim > 0) {
    const double phi = (std::sqrt(5.0) - 1.0) / 2.0;
    double a = lo, b = hi;
    for (int it = 0; it < 60; ++it) {
      const double c = b - phi * (b - a), d = a + phi * (b - a);
      if (try_half_dim(table, c).line.rms < try_half_dim(table, d).line.rms)
        b = d;
      else
        a = c;
    }
    const GemmTry refined = try_half_dim(table, (a + b) / 2.0);
    if (refined.line.rms <= best.line.rms) best = refined;
  }
  return {1.0 / best.line.slope, best.half_dim, best.line.intercept, best.line.rms};
}

void fit_profile(hardware::GpuProfile& p) {
  if (p.gemm_bf16) p.gemm_bf16->fit = fit_gemm(*p.gemm_bf16);
  if (p.gemm_fp8) p.gemm_fp8->fit = fit_gemm(*p.gemm_fp8);
  for (auto& [name, s] : p.memory) s.fit = fit_bandwidth(s.bytes, s.time_s);
  for (auto& [name, s] : p.host_copies) s.fit = fit_bandwidth(s.bytes, s.time_s);
  // The streaming bandwidth of memory-bound ops: the copy kernel's, as the catalog's HBM efficiency
  // (sim/hardware/README.md: copy is the conservative choice).
  if (auto it = p.memory.find("copy"); it != p.memory.end()) p.hbm_Bps = it->second.fit.Bps;
  for (hardware::CollectiveSeries& s : p.collectives) {
    double factor = 1.0;  // send_recv: the message crosses once
    if (auto op = network::collective_from_string(s.op)) factor = network::busbw_factor(*op, s.gpus);
    std::vector<double> x, t;
    for (const auto& pt : s.points) {
      x.push_back(pt.bytes * factor);
      t.push_back(pt.time_s);
    }
    s.fit = fit_bandwidth(x, t);
  }
}

}  // namespace trainsim::calibrate
