#pragma once
// The hand-written kernels of the calibration (kernels.cu): operand fills, the memory-bound
// benchmarks, the empty kernel for launch overhead and the softmax of the unfused attention. Each
// launcher returns cudaGetLastError() after the launch.

#include <cstdint>

#include <cuda_runtime.h>

namespace trainsim::calibrate::cuda {

// Pseudo-random values in [-1, 1) (a hash of the index and seed): zeros would flatter the GEMMs.
cudaError_t fill_bf16(void* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream);
cudaError_t fill_fp8(void* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream);
cudaError_t fill_float(float* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream);

// out = in over `count` floats (a multiple of 4), grid-stride with 16-byte accesses.
cudaError_t copy(const float* in, float* out, std::int64_t count, int blocks, cudaStream_t stream);
// c = a + b.
cudaError_t add(const float* a, const float* b, float* c, std::int64_t count, int blocks, cudaStream_t stream);
// Per row of `cols` floats: mean and variance, then (x - mean) / sqrt(var + 1e-5).
cudaError_t layer_norm(const float* in, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
cudaError_t empty(cudaStream_t stream);
// In place over `rows` rows of `cols` BF16 scores; causal: row r keeps columns <= r % cols.
cudaError_t softmax_bf16(void* scores, std::int64_t rows, std::int64_t cols, bool causal, cudaStream_t stream);

}  // namespace trainsim::calibrate::cuda
