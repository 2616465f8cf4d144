#include "calibrate/command.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "calibrate/fit.h"
#include "hardware/gpu.h"
#include "util/error.h"

namespace trainsim::calibrate {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWhat = "trainsim calibrate";

// Used by the plugin loader only (absent from builds without CUDA).
[[maybe_unused]] std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void check_options(const CommandOptions& c) {
  const Options& o = c.options;
  // 2 points are the fewest that interpolate; 10 reach 65536, whose BF16 operands take 8 GiB each.
  if (o.gemm_points < 2 || o.gemm_points > 10)
    throw util::InputError("--grid", "",
                           fmt::format("must be 2 to 10 points per GEMM dimension, got {}", o.gemm_points));
  if (o.repeats < 1) throw util::InputError("--repeats", "", fmt::format("must be at least 1, got {}", o.repeats));
  if (o.collective_max_bytes < kCollectiveMinBytes)
    throw util::InputError("--collective-max-bytes", "", fmt::format("must be at least {}", kCollectiveMinBytes));
  if (!o.gpu.empty() && hardware::find_gpu(o.gpu) == nullptr)
    throw util::InputError("--gpu", "", fmt::format("unknown GPU \"{}\"", o.gpu));
}

void write_profile(const hardware::GpuProfile& p, const std::string& out) {
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!f) throw util::InputError(out, "", "cannot write file");
  f << hardware::profile_to_json(p).dump(2) << '\n';
  if (!f) throw util::InputError(out, "", "cannot write file");
}

void print_summary(const hardware::GpuProfile& p, const std::string& out) {
  fmt::print("profile    {}\n", out);
  fmt::print("device     {} x {} ({}), driver {}, CUDA {}, cuBLASLt {}, cuDNN {}, NCCL {}\n", p.device.count,
             p.device.name, p.device.gpu.empty() ? "not in the catalog" : p.device.gpu, p.device.driver,
             p.device.cuda_runtime, p.device.cublaslt, p.device.cudnn, p.device.nccl);
  for (const auto* t : {&p.gemm_bf16, &p.gemm_fp8}) {
    if (!*t) continue;
    const hardware::GemmFit& f = (*t)->fit;
    fmt::print("gemm {}   max {:.1f} TFLOP/s · x0 {:.1f} · overhead {:.2f} us · fit rms {:.1f}%\n",
               t == &p.gemm_bf16 ? "bf16" : "fp8 ", f.max_flops_per_s / 1e12, f.half_dim, f.overhead_s * 1e6,
               f.rms_error * 100);
  }
  fmt::print("memory     {:.0f} GB/s (copy) · launch {:.2f} us\n", p.hbm_Bps / 1e9, p.launch_s * 1e6);
  fmt::print("attention  {} point(s): {}\n", p.attention.size(), p.attention_impl);
  fmt::print("collectives {} series ({} GPU(s) found)\n", p.collectives.size(), p.device.count);
}

}  // namespace

std::unique_ptr<Device> open_cuda_device() {
#ifdef TRAINSIM_CUDA_PLUGIN
  fs::path plugin;
  if (const char* env = std::getenv("TRAINSIM_CUDA_PLUGIN"); env != nullptr && *env != '\0') {
    plugin = env;
  } else {
    std::error_code ec;
    plugin = fs::read_symlink("/proc/self/exe", ec).parent_path() / TRAINSIM_CUDA_PLUGIN;
  }
  void* handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    throw util::InputError(kWhat, "", one_line(fmt::format("cannot load the CUDA plugin: {}", dlerror())));
  // The plugin stays loaded for the life of the process: the device's code lives in it.
  void* symbol = dlsym(handle, "trainsim_create_cuda_device");
  if (symbol == nullptr)
    throw util::InputError(kWhat, "", fmt::format("{} is not a trainsim CUDA plugin", plugin.string()));
  using Create = Device* (*)(char*, std::size_t);
  Create create = nullptr;
  std::memcpy(&create, &symbol, sizeof create);
  char error[1024] = {};
  Device* device = create(error, sizeof error);
  if (device == nullptr) throw util::InputError(kWhat, "", one_line(error));
  return std::unique_ptr<Device>(device);
#else
  throw util::InputError(
      kWhat, "",
      "this trainsim has no CUDA plugin (CMake found no CUDA toolkit with cuBLASLt, cuDNN and NCCL, or this "
      "is the sanitizer build), so it cannot measure GPUs; --fit refits a profile");
#endif
}

CLI::App* add_command(CLI::App& app, CommandOptions& c) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Measure the local GPUs (cuBLASLt GEMMs, HBM kernels, launch overhead, host copies, attention, NCCL "
      "collectives) and write a profile that scenarios and topologies name with \"gpu_profile\"");
  cmd->add_option("--out", c.out, "Profile JSON to write (e.g. topologies/profiles/h200.json)")->required();
  cmd->add_option("--grid", c.options.gemm_points,
                  "GEMM grid: powers of two from 128 per dimension (default 9: 128 ... 32768; 2-10)");
  cmd->add_option("--repeats", c.options.repeats, "Timed samples per measurement; the median is kept (default 10)");
  cmd->add_option("--collective-max-bytes", c.options.collective_max_bytes,
                  "Largest NCCL message, bytes (default 1 GiB; from 1 KiB, doubling)");
  cmd->add_option("--gpu", c.options.gpu, "Catalog id of the GPU (default: matched from the device name)");
  cmd->add_option("--fit", c.fit_file,
                  "Refit the raw measurements of this profile (no GPU needed) instead of measuring");
  return cmd;
}

int run_command(const CommandOptions& c) {
  check_options(c);
  hardware::GpuProfile profile;
  if (!c.fit_file.empty()) {
    profile = hardware::load_profile(c.fit_file);
    fit_profile(profile);
    if (!c.options.gpu.empty()) profile.device.gpu = c.options.gpu;
  } else {
    const std::unique_ptr<Device> device = open_cuda_device();
    Options o = c.options;
    o.progress = [](const std::string& line) { spdlog::info("calibrate: {}", line); };
    profile = run_calibration(*device, o, utc_now());
  }
  write_profile(profile, c.out);
  print_summary(profile, c.out);
  return 0;
}

}  // namespace trainsim::calibrate
