#include "hardware/profile.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/error.h"

namespace trainsim::hardware {

namespace {

using util::JsonNode;

constexpr double kPerGiga = 1e9;   // GB/s and TFLOP/s in profile files are decimal, as nccl-tests prints them
constexpr double kPerTera = 1e12;  // TFLOP/s
constexpr double kPerMicro = 1e-6;
constexpr std::string_view kFormat = "trainsim-gpu-profile";
constexpr std::int64_t kVersion = 1;

JsonNode element(const JsonNode& array, std::size_t i) {
  return JsonNode(array.json()[i], array.file(), fmt::format("{}[{}]", array.path(), i));
}

void expect_array(const JsonNode& node) {
  if (!node.json().is_array()) node.fail("expected an array");
}

// A non-empty array of positive numbers, strictly ascending when `ascending`.
std::vector<double> positive_array(const JsonNode& node, bool ascending) {
  expect_array(node);
  if (node.json().empty()) node.fail("expected a non-empty array");
  std::vector<double> out;
  for (std::size_t i = 0; i < node.json().size(); ++i) {
    const JsonNode e = element(node, i);
    out.push_back(e.as_positive_number());
    if (ascending && i > 0 && out[i] <= out[i - 1])
      e.fail(fmt::format("must be larger than the value before ({})", out[i - 1]));
  }
  return out;
}

BandwidthFit parse_bandwidth_fit(const JsonNode& node, std::string_view bw_key) {
  node.reject_unknown({bw_key, "latency_us", "rms_error"});
  BandwidthFit f;
  f.Bps = node.at(bw_key).as_positive_number() * kPerGiga;
  f.latency_s = node.at("latency_us").as_nonnegative_number() * kPerMicro;
  f.rms_error = node.at("rms_error").as_nonnegative_number();
  return f;
}

nlohmann::json bandwidth_fit_json(const BandwidthFit& f, std::string_view bw_key) {
  return {{std::string(bw_key), f.Bps / kPerGiga}, {"latency_us", f.latency_s / kPerMicro}, {"rms_error", f.rms_error}};
}

SizeSeries parse_series(const JsonNode& node) {
  node.reject_unknown({"bytes", "time_s", "fit"});
  SizeSeries s;
  s.bytes = positive_array(node.at("bytes"), true);
  s.time_s = positive_array(node.at("time_s"), false);
  if (s.time_s.size() != s.bytes.size())
    node.at("time_s").fail(fmt::format("has {} values for {} sizes", s.time_s.size(), s.bytes.size()));
  s.fit = parse_bandwidth_fit(node.at("fit"), "GBps");
  return s;
}

nlohmann::json series_json(const SizeSeries& s) {
  return {{"bytes", s.bytes}, {"time_s", s.time_s}, {"fit", bandwidth_fit_json(s.fit, "GBps")}};
}

GemmTable parse_gemm(const JsonNode& node) {
  node.reject_unknown({"m", "n", "k", "time_s", "fit"});
  GemmTable t;
  t.m = positive_array(node.at("m"), true);
  t.n = positive_array(node.at("n"), true);
  t.k = positive_array(node.at("k"), true);
  t.time_s = positive_array(node.at("time_s"), false);
  const std::size_t cells = t.m.size() * t.n.size() * t.k.size();
  if (t.time_s.size() != cells)
    node.at("time_s").fail(fmt::format("has {} values for a {} x {} x {} grid ({} expected)", t.time_s.size(),
                                       t.m.size(), t.n.size(), t.k.size(), cells));
  const JsonNode fit = node.at("fit");
  fit.reject_unknown({"max_tflops", "half_dim", "overhead_us", "rms_error"});
  t.fit.max_flops_per_s = fit.at("max_tflops").as_positive_number() * kPerTera;
  t.fit.half_dim = fit.at("half_dim").as_nonnegative_number();
  t.fit.overhead_s = fit.at("overhead_us").as_nonnegative_number() * kPerMicro;
  t.fit.rms_error = fit.at("rms_error").as_nonnegative_number();
  return t;
}

nlohmann::json gemm_json(const GemmTable& t) {
  return {{"m", t.m},
          {"n", t.n},
          {"k", t.k},
          {"time_s", t.time_s},
          {"fit",
           {{"max_tflops", t.fit.max_flops_per_s / kPerTera},
            {"half_dim", t.fit.half_dim},
            {"overhead_us", t.fit.overhead_s / kPerMicro},
            {"rms_error", t.fit.rms_error}}}};
}

std::string optional_string(const JsonNode& node, std::string_view key) {
  if (auto v = node.find(key)) return v->as_string();
  return {};
}

DeviceInfo parse_device(const JsonNode& node) {
  node.reject_unknown({"name", "gpu", "count", "compute_capability", "memory_bytes", "multiprocessors", "driver",
                       "cuda_runtime", "cublaslt", "cudnn", "nccl"});
  DeviceInfo d;
  d.name = node.at("name").as_string();
  d.gpu = optional_string(node, "gpu");
  d.count = node.at("count").as_positive_int();
  d.compute_capability = optional_string(node, "compute_capability");
  if (auto v = node.find("memory_bytes")) d.memory_bytes = v->as_nonnegative_number();
  if (auto v = node.find("multiprocessors")) d.multiprocessors = v->as_nonnegative_int();
  d.driver = optional_string(node, "driver");
  d.cuda_runtime = optional_string(node, "cuda_runtime");
  d.cublaslt = optional_string(node, "cublaslt");
  d.cudnn = optional_string(node, "cudnn");
  d.nccl = optional_string(node, "nccl");
  return d;
}

AttentionPoint parse_attention_point(const JsonNode& node) {
  node.reject_unknown({"batch_heads", "seq", "head_dim", "causal", "pass", "flops", "time_s"});
  AttentionPoint p;
  p.batch_heads = node.at("batch_heads").as_positive_int();
  p.seq = node.at("seq").as_positive_int();
  p.head_dim = node.at("head_dim").as_positive_int();
  p.causal = node.at("causal").as_bool();
  const JsonNode pass = node.at("pass");
  const std::string pass_name = pass.as_string();
  if (pass_name != "forward" && pass_name != "backward")
    pass.fail(fmt::format("unknown value \"{}\" (expected one of: forward, backward)", pass_name));
  p.backward = pass_name == "backward";
  p.flops = node.at("flops").as_positive_number();
  p.time_s = node.at("time_s").as_positive_number();
  return p;
}

constexpr std::array<std::string_view, 5> kCollectiveOps = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                            "send_recv"};

CollectiveSeries parse_collective(const JsonNode& node) {
  node.reject_unknown({"op", "gpus", "points", "fit"});
  CollectiveSeries s;
  const JsonNode op = node.at("op");
  s.op = op.as_string();
  if (std::find(kCollectiveOps.begin(), kCollectiveOps.end(), s.op) == kCollectiveOps.end())
    op.fail(
        fmt::format("unknown value \"{}\" (expected one of: all_reduce, all_gather, reduce_scatter, all_to_all, "
                    "send_recv)",
                    s.op));
  const JsonNode gpus = node.at("gpus");
  s.gpus = gpus.as_positive_int();
  if (s.gpus < 2) gpus.fail("a collective needs at least 2 GPUs");
  const JsonNode points = node.at("points");
  expect_array(points);
  if (points.json().empty()) points.fail("expected a non-empty array");
  for (std::size_t i = 0; i < points.json().size(); ++i) {
    const JsonNode e = element(points, i);
    e.reject_unknown({"bytes", "time_s", "algo"});
    CollectivePoint p;
    p.bytes = e.at("bytes").as_positive_number();
    p.time_s = e.at("time_s").as_positive_number();
    p.algo = e.at("algo").as_string();
    if (!s.points.empty() && p.bytes <= s.points.back().bytes)
      e.at("bytes").fail(fmt::format("must be larger than the size before ({})", s.points.back().bytes));
    s.points.push_back(p);
  }
  s.fit = parse_bandwidth_fit(node.at("fit"), "busbw_GBps");
  return s;
}

// Position of x on an ascending axis, in log space: the lower index and the fraction towards the
// next point; clamped to the ends.
struct AxisPos {
  std::size_t i = 0;
  double frac = 0;
};

AxisPos locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0};
  if (x >= axis.back()) return {axis.size() - 2, 1};
  const auto hi = static_cast<std::size_t>(std::upper_bound(axis.begin(), axis.end(), x) - axis.begin());
  const std::size_t i = hi - 1;
  return {i, (std::log(x) - std::log(axis[i])) / (std::log(axis[hi]) - std::log(axis[i]))};
}

// g(x) / g(x_min) for x below the grid (the saturation form's drop), 1 elsewhere.
double below_grid_factor(const std::vector<double>& axis, double x, double half_dim) {
  if (x >= axis.front() || half_dim <= 0) return 1.0;
  auto g = [half_dim](double v) { return v / (v + half_dim); };
  return g(x) / g(axis.front());
}

std::string_view far_side(const std::vector<double>& axis, double x) {
  if (x < axis.front() / kFarFactor) return "below";
  if (x > axis.back() * kFarFactor) return "above";
  return {};
}

}  // namespace

void ProfileWarnings::warn(const std::string& message) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!seen_.insert(message).second) return;
  ordered_.push_back(message);
  spdlog::warn("warning: {}", message);
}

std::vector<std::string> ProfileWarnings::list() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return ordered_;
}

double GemmTable::flops_per_s(std::size_t i, std::size_t j, std::size_t l) const {
  const double t = time_s[(i * n.size() + j) * k.size() + l];
  return 2.0 * m[i] * n[j] * k[l] / t;
}

std::optional<double> GpuProfile::gemm_flops_per_s(std::int64_t m, std::int64_t n, std::int64_t k, bool fp8) const {
  const std::optional<GemmTable>& table = fp8 ? gemm_fp8 : gemm_bf16;
  if (!table) {
    warnings->warn(fmt::format("{}: gemm.{}: not measured; using the datasheet model for {} GEMMs", file,
                               fp8 ? "fp8" : "bf16", fp8 ? "FP8" : "BF16"));
    return std::nullopt;
  }
  const GemmTable& t = *table;
  const std::array<double, 3> x = {static_cast<double>(std::max<std::int64_t>(m, 1)),
                                   static_cast<double>(std::max<std::int64_t>(n, 1)),
                                   static_cast<double>(std::max<std::int64_t>(k, 1))};
  const std::array<const std::vector<double>*, 3> axes = {&t.m, &t.n, &t.k};
  constexpr std::array<std::string_view, 3> kNames = {"m", "n", "k"};
  std::array<AxisPos, 3> pos{};
  double factor = 1.0;
  for (std::size_t a = 0; a < 3; ++a) {
    pos[a] = locate(*axes[a], x[a]);
    factor *= below_grid_factor(*axes[a], x[a], t.fit.half_dim);
    const std::string_view side = far_side(*axes[a], x[a]);
    if (!side.empty())
      warnings->warn(fmt::format("{}: gemm.{}.{}: a {} GEMM with {} = {} is far {} the measured {}-{}; extrapolated",
                                 file, fp8 ? "fp8" : "bf16", kNames[a], fp8 ? "FP8" : "BF16", kNames[a], x[a], side,
                                 axes[a]->front(), axes[a]->back()));
  }
  // Trilinear interpolation of the achieved FLOP/s over the eight surrounding grid points.
  double value = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double w = 1.0;
    std::array<std::size_t, 3> idx{};
    for (std::size_t a = 0; a < 3; ++a) {
      const bool upper = ((corner >> a) & 1) != 0;
      const std::size_t size = axes[a]->size();
      if (size == 1 && upper) {
        w = 0;
        break;
      }
      idx[a] = pos[a].i + (upper ? 1 : 0);
      w *= size == 1 ? 1.0 : (upper ? pos[a].frac : 1.0 - pos[a].frac);
    }
    if (w > 0) value += w * t.flops_per_s(idx[0], idx[1], idx[2]);
  }
  return value * factor;
}

const CollectiveSeries* GpuProfile::find_collective(std::string_view op, std::int64_t gpus) const {
  for (const CollectiveSeries& s : collectives)
    if (s.op == op && s.gpus == gpus) return &s;
  return nullptr;
}

std::optional<double> GpuProfile::collective_time_s(std::string_view op, std::int64_t gpus, double bytes) const {
  const CollectiveSeries* s = find_collective(op, gpus);
  if (s == nullptr) {
    if (!collectives.empty())
      warnings->warn(
          fmt::format("{}: collectives: {} over {} GPUs was not measured; using the topology's model", file, op, gpus));
    return std::nullopt;
  }
  const auto& pts = s->points;
  if (bytes <= pts.front().bytes) return pts.front().time_s;
  if (bytes >= pts.back().bytes) {
    if (bytes > pts.back().bytes * kFarFactor)
      warnings->warn(
          fmt::format("{}: collectives: {} over {} GPUs of {} bytes is far above the largest measured ({}); "
                      "extrapolated at its bandwidth",
                      file, op, gpus, bytes, pts.back().bytes));
    return pts.back().time_s * bytes / pts.back().bytes;
  }
  std::size_t hi = 1;
  while (pts[hi].bytes < bytes) ++hi;
  const CollectivePoint& a = pts[hi - 1];
  const CollectivePoint& b = pts[hi];
  const double f = (std::log(bytes) - std::log(a.bytes)) / (std::log(b.bytes) - std::log(a.bytes));
  return std::exp(std::log(a.time_s) + f * (std::log(b.time_s) - std::log(a.time_s)));
}

GpuProfile parse_profile(const JsonNode& root) {
  root.reject_unknown({"format", "version", "device", "date", "settings", "gemm", "memory", "host_copies", "attention",
                       "collectives", "overlap"});
  const JsonNode format = root.at("format");
  if (format.as_string() != kFormat) format.fail(fmt::format("expected \"{}\"", kFormat));
  const JsonNode version = root.at("version");
  if (version.as_int() != kVersion) version.fail(fmt::format("unsupported version (this trainsim reads {})", kVersion));
  GpuProfile p;
  p.file = root.file();
  p.device = parse_device(root.at("device"));
  p.date = root.at("date").as_string();
  if (auto v = root.find("settings")) {
    v->expect_object();
    p.settings = v->json();
  }
  const JsonNode gemm = root.at("gemm");
  gemm.reject_unknown({"bf16", "fp8"});
  p.gemm_bf16 = parse_gemm(gemm.at("bf16"));
  if (auto v = gemm.find("fp8")) p.gemm_fp8 = parse_gemm(*v);

  const JsonNode memory = root.at("memory");
  memory.reject_unknown({"hbm_GBps", "launch_us", "kernels"});
  p.hbm_Bps = memory.at("hbm_GBps").as_positive_number() * kPerGiga;
  p.launch_s = memory.at("launch_us").as_nonnegative_number() * kPerMicro;
  if (auto kernels = memory.find("kernels")) {
    kernels->reject_unknown({"copy", "elementwise", "reduction"});
    for (const char* name : {"copy", "elementwise", "reduction"})
      if (auto v = kernels->find(name)) p.memory[name] = parse_series(*v);
  }
  if (auto copies = root.find("host_copies")) {
    copies->reject_unknown({"h2d", "d2h"});
    for (const char* name : {"h2d", "d2h"})
      if (auto v = copies->find(name)) p.host_copies[name] = parse_series(*v);
  }
  if (auto attention = root.find("attention")) {
    attention->reject_unknown({"impl", "points"});
    p.attention_impl = attention->at("impl").as_string();
    const JsonNode points = attention->at("points");
    expect_array(points);
    for (std::size_t i = 0; i < points.json().size(); ++i)
      p.attention.push_back(parse_attention_point(element(points, i)));
  }
  if (auto coll = root.find("collectives")) {
    coll->reject_unknown({"algo_note", "series"});
    p.collective_algo_note = coll->at("algo_note").as_string();
    const JsonNode series = coll->at("series");
    expect_array(series);
    for (std::size_t i = 0; i < series.json().size(); ++i) {
      const JsonNode e = element(series, i);
      CollectiveSeries s = parse_collective(e);
      if (p.find_collective(s.op, s.gpus) != nullptr)
        e.fail(fmt::format("{} over {} GPUs is listed twice", s.op, s.gpus));
      p.collectives.push_back(std::move(s));
    }
  }
  if (auto ov = root.find("overlap")) {
    ov->reject_unknown({"gemm", "all_reduce_bytes", "gpus", "gemm_alone_s", "gemm_beside_s", "compute_slowdown"});
    OverlapMeasurement o;
    const JsonNode gemm_dims = ov->at("gemm");
    expect_array(gemm_dims);
    if (gemm_dims.json().size() != 3) gemm_dims.fail("expected [m, n, k]");
    o.m = element(gemm_dims, 0).as_positive_int();
    o.n = element(gemm_dims, 1).as_positive_int();
    o.k = element(gemm_dims, 2).as_positive_int();
    o.all_reduce_bytes = ov->at("all_reduce_bytes").as_positive_number();
    o.gpus = ov->at("gpus").as_positive_int();
    if (o.gpus < 2) ov->at("gpus").fail("an all-reduce needs 2 GPUs or more");
    o.gemm_alone_s = ov->at("gemm_alone_s").as_positive_number();
    o.gemm_beside_s = ov->at("gemm_beside_s").as_positive_number();
    // The fraction is derived; a file that states it must agree (it is written for people to read).
    if (auto f = ov->find("compute_slowdown"); f && std::abs(f->as_number() - o.fraction()) > 1e-6)
      f->fail(fmt::format("{} disagrees with 1 - gemm_alone_s / gemm_beside_s = {:.6f}", f->as_number(), o.fraction()));
    p.overlap = o;
  }
  return p;
}

GpuProfile load_profile(const std::string& file) {
  const nlohmann::json doc = util::read_json_file(file);
  const JsonNode root(doc, file);
  root.expect_object();
  return parse_profile(root);
}

nlohmann::json profile_to_json(const GpuProfile& p) {
  nlohmann::json out;
  out["format"] = kFormat;
  out["version"] = kVersion;
  const DeviceInfo& d = p.device;
  out["device"] = {{"name", d.name},
                   {"gpu", d.gpu},
                   {"count", d.count},
                   {"compute_capability", d.compute_capability},
                   {"memory_bytes", d.memory_bytes},
                   {"multiprocessors", d.multiprocessors},
                   {"driver", d.driver},
                   {"cuda_runtime", d.cuda_runtime},
                   {"cublaslt", d.cublaslt},
                   {"cudnn", d.cudnn},
                   {"nccl", d.nccl}};
  out["date"] = p.date;
  out["settings"] = p.settings;
  TRAINSIM_ASSERT(p.gemm_bf16.has_value());
  out["gemm"]["bf16"] = gemm_json(*p.gemm_bf16);
  if (p.gemm_fp8) out["gemm"]["fp8"] = gemm_json(*p.gemm_fp8);
  out["memory"] = {{"hbm_GBps", p.hbm_Bps / kPerGiga}, {"launch_us", p.launch_s / kPerMicro}};
  for (const auto& [name, s] : p.memory) out["memory"]["kernels"][name] = series_json(s);
  for (const auto& [name, s] : p.host_copies) out["host_copies"][name] = series_json(s);
  if (!p.attention_impl.empty()) {
    nlohmann::json points = nlohmann::json::array();
    for (const AttentionPoint& a : p.attention)
      points.push_back({{"batch_heads", a.batch_heads},
                        {"seq", a.seq},
                        {"head_dim", a.head_dim},
                        {"causal", a.causal},
                        {"pass", a.backward ? "backward" : "forward"},
                        {"flops", a.flops},
                        {"time_s", a.time_s}});
    out["attention"] = {{"impl", p.attention_impl}, {"points", points}};
  }
  nlohmann::json series = nlohmann::json::array();
  for (const CollectiveSeries& s : p.collectives) {
    nlohmann::json points = nlohmann::json::array();
    for (const CollectivePoint& c : s.points)
      points.push_back({{"bytes", c.bytes}, {"time_s", c.time_s}, {"algo", c.algo}});
    series.push_back(
        {{"op", s.op}, {"gpus", s.gpus}, {"points", points}, {"fit", bandwidth_fit_json(s.fit, "busbw_GBps")}});
  }
  out["collectives"] = {{"algo_note", p.collective_algo_note}, {"series", series}};
  if (p.overlap) {
    const OverlapMeasurement& o = *p.overlap;
    out["overlap"] = {
        {"gemm", {o.m, o.n, o.k}},        {"all_reduce_bytes", o.all_reduce_bytes}, {"gpus", o.gpus},
        {"gemm_alone_s", o.gemm_alone_s}, {"gemm_beside_s", o.gemm_beside_s},       {"compute_slowdown", o.fraction()}};
  }
  return out;
}

}  // namespace trainsim::hardware
