#include <catch2/catch.hpp>

#include "hardware/gpu.h"

using namespace trainsim::hardware;

// Datasheet figures (ecosystem.md §4.1), dense, GB = 1e9 bytes, NVLink per direction; HBM capacity in
// GiB as CUDA exposes it: the datasheet's binary GB x 0.987, deviceQuery's 42,405,855,232 bytes for
// the A100 40GB's 40 GiB.
TEST_CASE("catalog holds the datasheet GPUs") {
  CHECK(gpu_catalog().size() == 10);
  const GpuSpec* h100 = find_gpu("h100-sxm");
  REQUIRE(h100 != nullptr);
  CHECK(h100->bf16_flops == 989e12);
  CHECK(h100->fp8_flops == 1979e12);
  const double usable = 42405855232.0 / (40.0 * (1 << 30));
  CHECK(find_gpu("a100-sxm-40gb")->hbm_bytes == Approx(42405855232.0));
  CHECK(h100->hbm_bytes == Approx(80.0 * (1 << 30) * usable));
  CHECK(h100->hbm_Bps == 3.35e12);
  CHECK(h100->nvlink_Bps == 450e9);
  CHECK(find_gpu("a100-sxm-40gb")->hbm_Bps == 1.555e12);
  CHECK(find_gpu("a100-sxm-80gb")->fp8_flops == 0);
  CHECK(find_gpu("h200-sxm")->hbm_bytes == Approx(141.0 * (1 << 30) * usable));
  CHECK(find_gpu("b200")->hbm_bytes == Approx(180.0 * (1 << 30) * usable));
  CHECK(find_gpu("gb200")->hbm_bytes == Approx(186.0 * (1 << 30) * usable));
  CHECK(find_gpu("gb200")->bf16_flops == 2500e12);
  // GB300 (published-runs.md "Hardware of the runs": 279 GB; the same dense peaks as GB200).
  CHECK(find_gpu("gb300")->hbm_bytes == Approx(279.0 * (1 << 30) * usable));
  CHECK(find_gpu("gb300")->fp8_flops == find_gpu("gb200")->fp8_flops);
  // DGX B300 datasheet: 72 PFLOP/s FP8 with sparsity per 8 GPUs -> 4.5 dense per GPU, B200's rate.
  CHECK(find_gpu("b300")->fp8_flops == 72e15 / 8 / 2);
  CHECK(find_gpu("b300")->hbm_bytes == Approx(270.0 * (1 << 30) * usable));
  CHECK(find_gpu("b200")->nvlink_Bps == 900e9);
  // A800 and H800: A100 80GB and H100 SXM with 8 NVLinks of 25 GB/s per direction.
  CHECK(find_gpu("a800-sxm-80gb")->bf16_flops == 312e12);
  CHECK(find_gpu("a800-sxm-80gb")->nvlink_Bps == 200e9);
  CHECK(find_gpu("h800-sxm")->fp8_flops == 1979e12);
  CHECK(find_gpu("h800-sxm")->hbm_Bps == 3.35e12);
  CHECK(find_gpu("h800-sxm")->nvlink_Bps == 200e9);
  CHECK(usable_hbm_bytes(80) == Approx(h100->hbm_bytes));
  CHECK(find_gpu("tpu-v5") == nullptr);
}

TEST_CASE("every GPU has its compute-model parameters in range") {
  for (const GpuSpec& g : gpu_catalog()) {
    INFO(g.id);
    CHECK(g.gemm_efficiency > 0.45);
    CHECK(g.gemm_efficiency < 0.9);
    CHECK(g.gemm_half_dim > 0);
    CHECK(g.gemm_overhead_s >= 0);
    CHECK(g.attention_efficiency > 0.4);
    CHECK(g.attention_efficiency < 0.7);
    CHECK(g.hbm_efficiency > 0.7);
    CHECK(g.hbm_efficiency < 0.95);
    CHECK(g.launch_s > 0);
    CHECK(g.launch_s < 10e-6);
  }
}
