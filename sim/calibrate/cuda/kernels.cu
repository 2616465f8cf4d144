#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace trainsim::calibrate::cuda {

namespace {

constexpr int kThreads = 256;

__device__ float hash_unit(std::uint64_t i, std::uint32_t seed) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>(x & 0xFFFFFF) / static_cast<float>(0x800000) - 1.0f;
}

__global__ void fill_bf16_kernel(__nv_bfloat16* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_unit(static_cast<std::uint64_t>(i), seed));
}

__global__ void fill_fp8_kernel(__nv_fp8_e4m3* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] = __nv_fp8_e4m3(hash_unit(static_cast<std::uint64_t>(i), seed));
}

__global__ void fill_float_kernel(float* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] = hash_unit(static_cast<std::uint64_t>(i), seed);
}

__global__ void copy_kernel(const float4* __restrict__ in, float4* __restrict__ out, std::int64_t n4) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

__global__ void add_kernel(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c,
                           std::int64_t n4) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

__device__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, shared[w]);
  return m;
}

__global__ void layer_norm_kernel(const float* __restrict__ in, float* __restrict__ out, std::int64_t cols) {
  __shared__ float shared[kThreads / 32];
  const float* row = in + blockIdx.x * cols;
  float* dst = out + blockIdx.x * cols;
  float s = 0, ss = 0;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float x = row[j];
    s += x;
    ss += x * x;
  }
  const float n = static_cast<float>(cols);
  const float mean = block_sum(s, shared) / n;
  const float var = block_sum(ss, shared) / n - mean * mean;
  const float rstd = rsqrtf(var + 1e-5f);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) dst[j] = (row[j] - mean) * rstd;
}

__global__ void empty_kernel() {
}

__global__ void softmax_kernel(__nv_bfloat16* scores, std::int64_t cols, bool causal) {
  __shared__ float shared[kThreads / 32];
  __nv_bfloat16* row = scores + blockIdx.x * cols;
  const std::int64_t last = causal ? static_cast<std::int64_t>(blockIdx.x % cols) : cols - 1;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, __bfloat162float(row[j]));
  m = block_max(m, shared);
  float s = 0;
  for (std::int64_t j = threadIdx.x; j <= last; j += blockDim.x) s += __expf(__bfloat162float(row[j]) - m);
  const float inv = 1.0f / block_sum(s, shared);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    row[j] = __float2bfloat16(j <= last ? __expf(__bfloat162float(row[j]) - m) * inv : 0.0f);
}

int fill_blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65536 ? b : 65536);
}

}  // namespace

cudaError_t fill_bf16(void* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream) {
  fill_bf16_kernel<<<fill_blocks(count), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed);
  return cudaGetLastError();
}

cudaError_t fill_fp8(void* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream) {
  fill_fp8_kernel<<<fill_blocks(count), kThreads, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(data), count, seed);
  return cudaGetLastError();
}

cudaError_t fill_float(float* data, std::int64_t count, std::uint32_t seed, cudaStream_t stream) {
  fill_float_kernel<<<fill_blocks(count), kThreads, 0, stream>>>(data, count, seed);
  return cudaGetLastError();
}

cudaError_t copy(const float* in, float* out, std::int64_t count, int blocks, cudaStream_t stream) {
  copy_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(in), reinterpret_cast<float4*>(out),
                                                count / 4);
  return cudaGetLastError();
}

cudaError_t add(const float* a, const float* b, float* c, std::int64_t count, int blocks, cudaStream_t stream) {
  add_kernel<<<blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(a), reinterpret_cast<const float4*>(b),
                                               reinterpret_cast<float4*>(c), count / 4);
  return cudaGetLastError();
}

cudaError_t layer_norm(const float* in, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(in, out, cols);
  return cudaGetLastError();
}

cudaError_t empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t softmax_bf16(void* scores, std::int64_t rows, std::int64_t cols, bool causal, cudaStream_t stream) {
  softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(scores), cols,
                                                                       causal);
  return cudaGetLastError();
}

}  // namespace trainsim::calibrate::cuda
