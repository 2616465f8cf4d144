#pragma once
// Fits of the calibration's model parameters to measured times. Every fit minimises the squared
// relative residuals (so microsecond and second timings weigh alike) and reports their root mean
// square as rms_error.

#include <span>

#include "hardware/profile.h"

namespace trainsim::calibrate {

// t = latency_s + x / Bps over points (x, t). For a bandwidth, x is bytes; for a collective's bus
// bandwidth, bytes · busbw_factor. Latency is kept >= 0. With one point: latency 0.
hardware::BandwidthFit fit_bandwidth(std::span<const double> x, std::span<const double> time_s);

// t = 2mnk / (F · g(m) g(n) g(k)) + t0, g(x) = x / (x + x0), over the table's grid: for each x0 the
// best (1/F, t0) is a linear least-squares solve; x0 is scanned on a log grid in [1, kMaxHalfDim]
// (and 0), then refined by golden-section search around the best.
hardware::GemmFit fit_gemm(const hardware::GemmTable& table);
inline constexpr double kMaxHalfDim = 8192;  // far above any published x0 (A100 90, Hopper 120-140)

// Fills every fit of a profile from its raw measurements, and hbm_Bps from the copy kernel's fit.
void fit_profile(hardware::GpuProfile& profile);

}  // namespace trainsim::calibrate
