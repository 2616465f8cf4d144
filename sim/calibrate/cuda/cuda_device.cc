// The CUDA device of the calibration: a plugin (libtrainsim_cuda_device.so) that `trainsim
// calibrate` loads with dlopen, so the trainsim binary itself does not load cuBLASLt, cuDNN and NCCL
// (half a second per start) and runs where they are absent. Every CUDA, cuBLASLt, cuDNN and NCCL
// call is checked; a failure throws DeviceError naming the call.

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/device.h"
#include "kernels.h"

namespace trainsim::calibrate::cuda {

namespace {

[[noreturn]] void fail(const char* call, const std::string& what) {
  throw DeviceError(std::string(call) + ": " + what);
}
void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(call, cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail(call, cublasLtGetStatusString(s));
}
void check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) fail(call, ncclGetErrorString(r));
}
#define TRAINSIM_CHECK(call) check((call), #call)

// Each timed sample runs back-to-back launches for about this long, so the events' resolution
// (about 0.5 us, CUDA programming guide) and one launch's jitter stay far below 1%.
constexpr double kSampleTarget_s = 2e-3;
constexpr int kMaxInner = 4096;
// cuBLASLt workspace: 32 MiB, NVIDIA's recommendation for Hopper (cuBLAS docs, cublasSetWorkspace).
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string version3(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div) + "." +
         std::to_string(v % minor_div);
}

struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  int filled_as = -1;  // the Dtype its contents were filled with; -1: not filled
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
  // Grows to at least `need` bytes; returns true when it reallocated (contents undefined).
  bool reserve(std::size_t need) {
    if (need <= bytes) return false;
    if (ptr != nullptr) TRAINSIM_CHECK(cudaFree(ptr));
    ptr = nullptr;
    bytes = 0;
    filled_as = -1;
    TRAINSIM_CHECK(cudaMalloc(&ptr, need));
    bytes = need;
    return true;
  }
};

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    TRAINSIM_CHECK(cudaGetDeviceCount(&count_));
    if (count_ < 1) throw DeviceError("no CUDA GPU found (cudaGetDeviceCount returned 0)");
    TRAINSIM_CHECK(cudaSetDevice(0));
    TRAINSIM_CHECK(cudaGetDeviceProperties(&props_, 0));
    TRAINSIM_CHECK(cudaStreamCreate(&stream_));
    TRAINSIM_CHECK(cudaEventCreate(&start_));
    TRAINSIM_CHECK(cudaEventCreate(&stop_));
    TRAINSIM_CHECK(cublasLtCreate(&lt_));
    TRAINSIM_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  ~CudaDevice() override {
    for (auto& [g, c] : comms_) c.release();
    cudaSetDevice(0);
    if (workspace_ != nullptr) cudaFree(workspace_);
    if (host_ != nullptr) cudaFreeHost(host_);
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaStreamDestroy(stream_);
  }

  hardware::DeviceInfo info() const override {
    hardware::DeviceInfo d;
    d.name = props_.name;
    d.count = count_;
    d.compute_capability = std::to_string(props_.major) + "." + std::to_string(props_.minor);
    d.memory_bytes = static_cast<double>(props_.totalGlobalMem);
    d.multiprocessors = props_.multiProcessorCount;
    int v = 0;
    TRAINSIM_CHECK(cudaDriverGetVersion(&v));
    d.driver = "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    TRAINSIM_CHECK(cudaRuntimeGetVersion(&v));
    d.cuda_runtime = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
    // cublasLtGetVersion: major * 10000 + minor * 100 + patch (cublasLt.h, CUBLAS_VERSION).
    d.cublaslt = version3(static_cast<int>(cublasLtGetVersion()), 10000, 100);
    // cuDNN 9: major * 10000 + minor * 100 + patch (cudnn_version.h, CUDNN_VERSION).
    d.cudnn = version3(static_cast<int>(cudnnGetVersion()), 10000, 100);
    // NCCL >= 2.9: major * 10000 + minor * 100 + patch (nccl.h, NCCL_VERSION_CODE).
    TRAINSIM_CHECK(ncclGetVersion(&v));
    d.nccl = version3(v, 10000, 100);
    return d;
  }

  // FP8 tensor cores: compute capability 8.9 (Ada) and 9.0+ (Hopper, Blackwell); cuBLASLt FP8 docs.
  bool has_fp8() const override { return props_.major > 8 || (props_.major == 8 && props_.minor >= 9); }

  double max_buffer_bytes() const override {
    std::size_t free_bytes = 0, total = 0;
    TRAINSIM_CHECK(cudaMemGetInfo(&free_bytes, &total));
    // A GEMM holds three operands; keep a quarter of what is free for each.
    return static_cast<double>(free_bytes) / 4.0;
  }

  double gemm_s(std::int64_t m, std::int64_t n, std::int64_t k, Dtype dtype, int repeats) override {
    const std::size_t in_elem = dtype == Dtype::fp8 ? 1 : 2;
    const auto mk = static_cast<std::size_t>(m * k), kn = static_cast<std::size_t>(k * n),
               mn = static_cast<std::size_t>(m * n);
    prepare(a_, mk * in_elem, dtype, 1);
    prepare(b_, kn * in_elem, dtype, 2);
    d_.reserve(mn * 2);
    Matmul mm(lt_, m, n, k, 1, dtype);
    return time_median([&] { mm.run(lt_, a_.ptr, b_.ptr, d_.ptr, workspace_, stream_); }, repeats);
  }

  double memory_s(MemoryKernel kernel, std::int64_t bytes, int repeats) override {
    const int blocks = props_.multiProcessorCount * 16;  // 16 resident blocks of 256 threads per SM
    switch (kernel) {
      case MemoryKernel::copy: {
        const std::int64_t count = bytes / 2 / 4;  // read + write
        prepare_float(x_, count, 3);
        y_.reserve(static_cast<std::size_t>(count) * 4);
        return time_median([&] { TRAINSIM_CHECK(copy(fx(), fy(), count, blocks, stream_)); }, repeats);
      }
      case MemoryKernel::elementwise: {
        const std::int64_t count = bytes / 3 / 4 / 4 * 4;  // two reads + one write, whole float4s
        prepare_float(x_, count, 3);
        prepare_float(z_, count, 4);
        y_.reserve(static_cast<std::size_t>(count) * 4);
        return time_median(
            [&] { TRAINSIM_CHECK(add(fx(), static_cast<const float*>(z_.ptr), fy(), count, blocks, stream_)); },
            repeats);
      }
      case MemoryKernel::reduction: {
        const std::int64_t rows = std::max<std::int64_t>(1, bytes / 2 / 4 / kReductionRow);
        const std::int64_t count = rows * kReductionRow;
        prepare_float(x_, count, 3);
        y_.reserve(static_cast<std::size_t>(count) * 4);
        return time_median([&] { TRAINSIM_CHECK(layer_norm(fx(), fy(), rows, kReductionRow, stream_)); }, repeats);
      }
    }
    throw DeviceError("unknown memory kernel");
  }

  double launch_s(int repeats) override {
    return time_median([&] { TRAINSIM_CHECK(empty(stream_)); }, repeats);
  }

  double host_copy_s(HostCopy direction, std::int64_t bytes, int repeats) override {
    const auto size = static_cast<std::size_t>(bytes);
    if (size > host_bytes_) {
      if (host_ != nullptr) TRAINSIM_CHECK(cudaFreeHost(host_));
      host_ = nullptr;
      host_bytes_ = 0;
      TRAINSIM_CHECK(cudaMallocHost(&host_, size));
      host_bytes_ = size;
      std::memset(host_, 1, size);
    }
    x_.reserve(size);
    if (direction == HostCopy::h2d)
      return time_median([&] { TRAINSIM_CHECK(cudaMemcpyAsync(x_.ptr, host_, size, cudaMemcpyHostToDevice, stream_)); },
                         repeats);
    return time_median([&] { TRAINSIM_CHECK(cudaMemcpyAsync(host_, x_.ptr, size, cudaMemcpyDeviceToHost, stream_)); },
                       repeats);
  }

  std::string attention_impl() const override {
    return "unfused forward: cuBLASLt strided-batched BF16 GEMMs Q*K^T and P*V around trainsim's causal softmax "
           "kernel, scores materialised in BF16; flops count both GEMMs in full. cuDNN's fused SDPA is not wired "
           "(the toolkit has no cudnn_frontend), so the models keep the catalog's fused-attention efficiency and "
           "these points are a record";
  }

  double attention_s(std::int64_t bh, std::int64_t seq, std::int64_t hd, bool causal, double& flops,
                     int repeats) override {
    const auto qkv = static_cast<std::size_t>(bh * seq * hd) * 2;
    const auto scores = static_cast<std::size_t>(bh * seq * seq) * 2;
    prepare(a_, qkv, Dtype::bf16, 5);  // Q, then P·V's output
    prepare(b_, qkv, Dtype::bf16, 6);  // K and V (same shape; timing only)
    d_.reserve(scores);
    y_.reserve(qkv);
    Matmul qk(lt_, seq, seq, hd, bh, Dtype::bf16);
    Matmul pv(lt_, seq, hd, seq, bh, Dtype::bf16);
    flops = 2.0 * 2.0 * static_cast<double>(bh) * static_cast<double>(seq) * static_cast<double>(seq) *
            static_cast<double>(hd);
    return time_median(
        [&] {
          qk.run(lt_, a_.ptr, b_.ptr, d_.ptr, workspace_, stream_);
          TRAINSIM_CHECK(softmax_bf16(d_.ptr, bh * seq, seq, causal, stream_));
          pv.run(lt_, d_.ptr, b_.ptr, y_.ptr, workspace_, stream_);
        },
        repeats);
  }

  std::string collective_algo_note() const override {
    const char* algo = std::getenv("NCCL_ALGO");
    if (algo != nullptr && *algo != '\0')
      return std::string("NCCL_ALGO=") + algo + " was set for the run; NCCL does not report its choice through its API";
    return "NCCL does not report the algorithm it picks through its API and NCCL_ALGO was unset, so algo is "
           "\"unknown\"";
  }

  CollectiveTiming collective(std::string_view op, std::int64_t gpus, std::int64_t bytes, int repeats) override {
    Comms& c = comms(gpus);
    const auto size = static_cast<std::size_t>(bytes);
    for (int i = 0; i < gpus; ++i) {
      TRAINSIM_CHECK(cudaSetDevice(i));
      c.send[static_cast<std::size_t>(i)]->reserve(size);
      c.recv[static_cast<std::size_t>(i)]->reserve(size);
    }
    const auto g = static_cast<std::size_t>(gpus);
    const std::size_t floats = size / 4;
    auto launch = [&] {
      TRAINSIM_CHECK(ncclGroupStart());
      for (std::size_t i = 0; i < g; ++i) {
        void* s = c.send[i]->ptr;
        void* r = c.recv[i]->ptr;
        ncclComm_t comm = c.comm[i];
        cudaStream_t st = c.stream[i];
        if (op == "all_reduce") {
          TRAINSIM_CHECK(ncclAllReduce(s, r, floats, ncclFloat, ncclSum, comm, st));
        } else if (op == "all_gather") {
          TRAINSIM_CHECK(ncclAllGather(s, r, floats / g, ncclFloat, comm, st));
        } else if (op == "reduce_scatter") {
          TRAINSIM_CHECK(ncclReduceScatter(s, r, floats / g, ncclFloat, ncclSum, comm, st));
        } else if (op == "all_to_all") {
          const std::size_t chunk = floats / g;
          for (std::size_t p = 0; p < g; ++p) {
            TRAINSIM_CHECK(
                ncclSend(static_cast<float*>(s) + p * chunk, chunk, ncclFloat, static_cast<int>(p), comm, st));
            TRAINSIM_CHECK(
                ncclRecv(static_cast<float*>(r) + p * chunk, chunk, ncclFloat, static_cast<int>(p), comm, st));
          }
        } else if (op == "send_recv") {
          TRAINSIM_CHECK(ncclSend(s, floats, ncclFloat, static_cast<int>((i + 1) % g), comm, st));
          TRAINSIM_CHECK(ncclRecv(r, floats, ncclFloat, static_cast<int>((i + g - 1) % g), comm, st));
        } else {
          throw DeviceError("unknown collective " + std::string(op));
        }
      }
      TRAINSIM_CHECK(ncclGroupEnd());
    };
    // Warm-up, then samples of back-to-back collectives between events on every GPU's stream; a
    // sample is the slowest GPU's mean.
    for (int w = 0; w < kWarmup; ++w) launch();
    c.sync();
    const double one = c.time(launch, 1);
    const int inner = std::clamp(static_cast<int>(kSampleTarget_s / std::max(one, 1e-7)), 1, kMaxInner);
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) samples.push_back(c.time(launch, inner));
    TRAINSIM_CHECK(cudaSetDevice(0));
    const char* algo = std::getenv("NCCL_ALGO");
    return {median(samples), algo != nullptr && *algo != '\0' ? algo : "unknown"};
  }

  double gemm_beside_all_reduce_s(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t gpus, std::int64_t bytes,
                                  int repeats) override {
    Comms& c = comms(gpus);
    const auto size = static_cast<std::size_t>(bytes);
    const auto g = static_cast<std::size_t>(gpus);
    for (std::size_t i = 0; i < g; ++i) {
      TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
      c.send[i]->reserve(size);
      c.recv[i]->reserve(size);
    }
    auto all_reduce = [&] {
      TRAINSIM_CHECK(ncclGroupStart());
      for (std::size_t i = 0; i < g; ++i)
        TRAINSIM_CHECK(
            ncclAllReduce(c.send[i]->ptr, c.recv[i]->ptr, size / 4, ncclFloat, ncclSum, c.comm[i], c.stream[i]));
      TRAINSIM_CHECK(ncclGroupEnd());
    };
    for (int w = 0; w < kWarmup; ++w) all_reduce();
    c.sync();
    const double one_all_reduce = c.time(all_reduce, 1);
    // The GEMM on the first GPU's compute stream, as gemm_s runs it.
    TRAINSIM_CHECK(cudaSetDevice(0));
    prepare(a_, static_cast<std::size_t>(m * k) * 2, Dtype::bf16, 1);
    prepare(b_, static_cast<std::size_t>(k * n) * 2, Dtype::bf16, 2);
    d_.reserve(static_cast<std::size_t>(m * n) * 2);
    Matmul mm(lt_, m, n, k, 1, Dtype::bf16);
    auto gemm = [&] { mm.run(lt_, a_.ptr, b_.ptr, d_.ptr, workspace_, stream_); };
    // Enough all-reduces queued to outlast the timed GEMMs: time_median's warm-up, its first sample
    // and `repeats` samples of about kSampleTarget_s each, twice over.
    const double window_s = 2.0 * (kSampleTarget_s * (repeats + 2) + 0.05);
    const int queued = std::clamp(static_cast<int>(window_s / std::max(one_all_reduce, 1e-6)) + 1, 1, 100000);
    for (int j = 0; j < queued; ++j) all_reduce();
    TRAINSIM_CHECK(cudaSetDevice(0));
    const double beside = time_median(gemm, repeats);
    c.sync();
    TRAINSIM_CHECK(cudaSetDevice(0));
    return beside;
  }

 private:
  static constexpr int kWarmup = 3;   // untimed runs first: clocks, caches, lazy module loading
  static constexpr int kFloat = 100;  // DeviceBuffer::filled_as for FP32 contents

  // One cuBLASLt matmul: D (m x n, column-major) = op(A) · B with A stored k x m (transposed, "TN",
  // the layout cuBLASLt's FP8 kernels require) and B k x n; `batch` strided copies.
  class Matmul {
   public:
    Matmul(cublasLtHandle_t lt, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch, Dtype dtype) {
      const cudaDataType_t in = dtype == Dtype::fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
      TRAINSIM_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
      TRAINSIM_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
      TRAINSIM_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
      layout(&a_, in, k, m, batch);
      layout(&b_, in, k, n, batch);
      layout(&d_, CUDA_R_16BF, m, n, batch);
      TRAINSIM_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
      const std::size_t ws = kWorkspaceBytes;
      TRAINSIM_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
      int found = 0;
      TRAINSIM_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op_, a_, b_, d_, d_, pref_, 1, &heuristic_, &found));
      if (found == 0)
        throw DeviceError("cublasLtMatmulAlgoGetHeuristic: no algorithm for " + std::to_string(m) + "x" +
                          std::to_string(n) + "x" + std::to_string(k));
    }
    Matmul(const Matmul&) = delete;
    Matmul& operator=(const Matmul&) = delete;
    ~Matmul() {
      cublasLtMatmulPreferenceDestroy(pref_);
      cublasLtMatrixLayoutDestroy(a_);
      cublasLtMatrixLayoutDestroy(b_);
      cublasLtMatrixLayoutDestroy(d_);
      cublasLtMatmulDescDestroy(op_);
    }
    void run(cublasLtHandle_t lt, const void* a, const void* b, void* d, void* ws, cudaStream_t stream) const {
      const float alpha = 1.0f, beta = 0.0f;
      TRAINSIM_CHECK(cublasLtMatmul(lt, op_, &alpha, a, a_, b, b_, &beta, d, d_, d, d_, &heuristic_.algo, ws,
                                    kWorkspaceBytes, stream));
    }

   private:
    static void layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                       std::int64_t batch) {
      TRAINSIM_CHECK(cublasLtMatrixLayoutCreate(l, type, static_cast<std::uint64_t>(rows),
                                                static_cast<std::uint64_t>(cols), rows));
      if (batch > 1) {
        const auto count = static_cast<std::int32_t>(batch);
        const std::int64_t stride = rows * cols;
        TRAINSIM_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        TRAINSIM_CHECK(
            cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
      }
    }
    cublasLtMatmulDesc_t op_ = nullptr;
    cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
    cublasLtMatmulPreference_t pref_ = nullptr;
    cublasLtMatmulHeuristicResult_t heuristic_{};
  };

  // NCCL communicators over the first `gpus` devices (ncclCommInitAll, one process), with buffers
  // and a stream and two events per device.
  struct Comms {
    std::vector<ncclComm_t> comm;
    std::vector<cudaStream_t> stream;
    std::vector<cudaEvent_t> start, stop;
    std::vector<std::unique_ptr<DeviceBuffer>> send, recv;
    void sync() {
      for (std::size_t i = 0; i < comm.size(); ++i) {
        TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
        TRAINSIM_CHECK(cudaStreamSynchronize(stream[i]));
      }
    }
    template <typename Launch>
    double time(Launch& launch, int inner) {
      for (std::size_t i = 0; i < comm.size(); ++i) {
        TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
        TRAINSIM_CHECK(cudaEventRecord(start[i], stream[i]));
      }
      for (int j = 0; j < inner; ++j) launch();
      for (std::size_t i = 0; i < comm.size(); ++i) {
        TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
        TRAINSIM_CHECK(cudaEventRecord(stop[i], stream[i]));
      }
      double worst = 0;
      for (std::size_t i = 0; i < comm.size(); ++i) {
        TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
        TRAINSIM_CHECK(cudaEventSynchronize(stop[i]));
        float ms = 0;
        TRAINSIM_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
        worst = std::max(worst, static_cast<double>(ms) * 1e-3 / inner);
      }
      return worst;
    }
    // Frees everything (errors ignored: this runs from destructors).
    void release() {
      for (std::size_t i = 0; i < comm.size(); ++i) {
        cudaSetDevice(static_cast<int>(i));
        ncclCommDestroy(comm[i]);
        cudaStreamDestroy(stream[i]);
        cudaEventDestroy(start[i]);
        cudaEventDestroy(stop[i]);
        send[i].reset();
        recv[i].reset();
      }
      comm.clear();
    }
  };

  Comms& comms(std::int64_t gpus) {
    if (gpus > count_)
      throw DeviceError("asked for " + std::to_string(gpus) + " GPUs, found " + std::to_string(count_));
    auto it = comms_.find(gpus);
    if (it != comms_.end()) return it->second;
    // One set of communicators at a time: each holds NCCL buffers on every GPU.
    for (auto& [g, c] : comms_) c.release();
    comms_.clear();
    Comms& c = comms_[gpus];
    const auto g = static_cast<std::size_t>(gpus);
    std::vector<int> devs(g);
    for (std::size_t i = 0; i < g; ++i) devs[i] = static_cast<int>(i);
    c.comm.resize(g);
    TRAINSIM_CHECK(ncclCommInitAll(c.comm.data(), static_cast<int>(gpus), devs.data()));
    c.stream.resize(g);
    c.start.resize(g);
    c.stop.resize(g);
    for (std::size_t i = 0; i < g; ++i) {
      TRAINSIM_CHECK(cudaSetDevice(static_cast<int>(i)));
      TRAINSIM_CHECK(cudaStreamCreate(&c.stream[i]));
      TRAINSIM_CHECK(cudaEventCreate(&c.start[i]));
      TRAINSIM_CHECK(cudaEventCreate(&c.stop[i]));
      c.send.push_back(std::make_unique<DeviceBuffer>());
      c.recv.push_back(std::make_unique<DeviceBuffer>());
    }
    TRAINSIM_CHECK(cudaSetDevice(0));
    return c;
  }

  // Grows `buf` for GEMM operands of `dtype` and fills it with pseudo-random values of that type
  // when it is new or held another type (BF16 bytes read as FP8 would hold NaN encodings).
  void prepare(DeviceBuffer& buf, std::size_t bytes, Dtype dtype, std::uint32_t seed) {
    buf.reserve(bytes);
    if (buf.filled_as == static_cast<int>(dtype)) return;
    if (dtype == Dtype::fp8)
      TRAINSIM_CHECK(fill_fp8(buf.ptr, static_cast<std::int64_t>(buf.bytes), seed, stream_));
    else
      TRAINSIM_CHECK(fill_bf16(buf.ptr, static_cast<std::int64_t>(buf.bytes / 2), seed, stream_));
    buf.filled_as = static_cast<int>(dtype);
  }
  void prepare_float(DeviceBuffer& buf, std::int64_t count, std::uint32_t seed) {
    buf.reserve(static_cast<std::size_t>(count) * 4);
    if (buf.filled_as == kFloat) return;
    TRAINSIM_CHECK(fill_float(static_cast<float*>(buf.ptr), static_cast<std::int64_t>(buf.bytes / 4), seed, stream_));
    buf.filled_as = kFloat;
  }
  const float* fx() const { return static_cast<const float*>(x_.ptr); }
  float* fy() { return static_cast<float*>(y_.ptr); }

  // Warm-up, one timed launch to size the samples, then `repeats` samples of `inner` back-to-back
  // launches between two events; the median of the per-launch means.
  template <typename Launch>
  double time_median(Launch launch, int repeats) {
    for (int w = 0; w < kWarmup; ++w) launch();
    TRAINSIM_CHECK(cudaStreamSynchronize(stream_));
    auto sample = [&](int inner) {
      TRAINSIM_CHECK(cudaEventRecord(start_, stream_));
      for (int i = 0; i < inner; ++i) launch();
      TRAINSIM_CHECK(cudaEventRecord(stop_, stream_));
      TRAINSIM_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      TRAINSIM_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      return static_cast<double>(ms) * 1e-3 / inner;
    };
    const double one = sample(1);
    const int inner = std::clamp(static_cast<int>(kSampleTarget_s / std::max(one, 1e-7)), 1, kMaxInner);
    std::vector<double> samples;
    for (int r = 0; r < repeats; ++r) samples.push_back(sample(inner));
    return median(samples);
  }

  int count_ = 0;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* host_ = nullptr;
  std::size_t host_bytes_ = 0;
  DeviceBuffer a_, b_, d_, x_, y_, z_;
  std::map<std::int64_t, Comms> comms_;
};

}  // namespace

}  // namespace trainsim::calibrate::cuda

// The plugin's one entry point: a new device, or nullptr with a one-line reason in `error`.
extern "C" __attribute__((visibility("default"))) trainsim::calibrate::Device* trainsim_create_cuda_device(
    char* error, std::size_t error_bytes) {
  try {
    return new trainsim::calibrate::cuda::CudaDevice();
  } catch (const std::exception& e) {
    std::snprintf(error, error_bytes, "no usable CUDA GPU: %s", e.what());
  } catch (...) {
    std::snprintf(error, error_bytes, "no usable CUDA GPU: unknown error");
  }
  return nullptr;
}
