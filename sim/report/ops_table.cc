#include "report/ops_table.h"

#include <fmt/format.h>

#include "network/collective.h"

namespace trainsim::report {

namespace {

using workload::Op;
using workload::OpKind;

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::gemm:
      return "gemm";
    case OpKind::attention:
      return "attention";
    case OpKind::memory:
      return "memory";
    case OpKind::tp_comm:
      break;
  }
  return "communication";
}

std::string collective_name(workload::Comm c) {
  return std::string(network::to_string(parallel::collective_of(c)));
}

const char* group_name(workload::CommGroup g) {
  switch (g) {
    case workload::CommGroup::tp:
      return "tp";
    case workload::CommGroup::ep:
      return "ep";
    case workload::CommGroup::etp:
      return "etp";
    case workload::CommGroup::cp:
      return "cp";
    case workload::CommGroup::ep_etp:
      return "ep_etp";
  }
  return "tp";
}

std::string heading(const parallel::OpList& list) {
  if (list.part == "embedding" || list.part == "output layer") return fmt::format("{} · {}", list.part, list.pass);
  return fmt::format("{} · {} {} · {}", list.part, list.layers, list.layers == 1 ? "layer" : "layers", list.pass);
}

// One op as both outputs show it: a compute op with the compute model's time and bound, or a
// communication op (which the simulation times on the network).
struct Row {
  const Op* op;
  bool comm;
  hardware::OpTime time;
};

// The list's rows and its compute ops' total time.
std::vector<Row> rows(const parallel::OpList& list, const hardware::ComputeModel& compute, double& compute_s) {
  std::vector<Row> out;
  compute_s = 0;
  for (const Op& op : list.ops) {
    const bool comm = op.kind == OpKind::tp_comm;
    out.push_back({&op, comm, comm ? hardware::OpTime{} : compute.breakdown(op)});
    compute_s += out.back().time.total_s;
  }
  return out;
}

}  // namespace

std::string ops_text(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute) {
  std::string out =
      "ops           one micro-batch through one layer of each kind on one GPU, as the compute model times each op\n"
      "              (before recomputation, overlap and pipelining; the simulation times the communication);\n"
      "              host ms: the CPU's time to issue the op (0 inside a CUDA graph), * where the CPU then waits\n"
      "              for the GPU\n";
  for (const parallel::OpList& list : lists) {
    out += fmt::format("  {}\n", heading(list));
    out += fmt::format("    {:<40} {:<18} {:>10} {:>10} {:>7} {:>9} {:>8} {:>8} {:>8}  {}\n", "op", "kind", "GFLOP",
                       "MB", "kernels", "time ms", "host ms", "TFLOP/s", "GB/s", "bound");
    double total_s = 0, total_flops = 0, total_bytes = 0, total_host_s = 0;
    std::int64_t total_kernels = 0;
    for (const Row& r : rows(list, compute, total_s)) {
      const Op& op = *r.op;
      total_host_s += op.host_s;
      const std::string host = fmt::format("{:.4f}{}", op.host_s * 1e3, op.host_sync ? "*" : "");
      if (r.comm) {
        out += fmt::format("    {:<40} {:<18} {:>10} {:>10.1f} {:>7} {:>9} {:>8} {:>8} {:>8}  {}\n", op.name,
                           fmt::format("{} {}", collective_name(op.comm), group_name(op.group)), "-",
                           static_cast<double>(op.comm_bytes) / 1e6, op.kernels, "-", host, "-", "-", "network");
        continue;
      }
      total_flops += op.flops;
      total_bytes += op.bytes;
      total_kernels += op.kernels;
      const double t = r.time.total_s;
      const std::string tflops = op.flops > 0 ? fmt::format("{:.1f}", op.flops / t / 1e12) : "-";
      out += fmt::format("    {:<40} {:<18} {:>10.2f} {:>10.1f} {:>7} {:>9.4f} {:>8} {:>8} {:>8.0f}  {}\n", op.name,
                         kind_name(op.kind), op.flops / 1e9, op.bytes / 1e6, op.kernels, t * 1e3, host, tflops,
                         op.bytes / t / 1e9, r.time.bound());
    }
    out += fmt::format("    {:<40} {:<18} {:>10.2f} {:>10.1f} {:>7} {:>9.4f} {:>8.4f}\n", "total (compute; host)", "",
                       total_flops / 1e9, total_bytes / 1e6, total_kernels, total_s * 1e3, total_host_s * 1e3);
  }
  return out;
}

nlohmann::json ops_json(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute) {
  nlohmann::json out = nlohmann::json::array();
  for (const parallel::OpList& list : lists) {
    nlohmann::json ops = nlohmann::json::array();
    double total_s = 0, total_host_s = 0;
    for (const Row& r : rows(list, compute, total_s)) {
      const Op& op = *r.op;
      total_host_s += op.host_s;
      if (r.comm)
        ops.push_back({{"name", op.name},
                       {"kind", "communication"},
                       {"collective", collective_name(op.comm)},
                       {"group", group_name(op.group)},
                       {"bytes", op.comm_bytes},
                       {"host_s", op.host_s}});
      else
        ops.push_back({{"name", op.name},
                       {"kind", kind_name(op.kind)},
                       {"flops", op.flops},
                       {"bytes", op.bytes},
                       {"kernels", op.kernels},
                       {"time_s", r.time.total_s},
                       {"host_s", op.host_s},
                       {"bound", r.time.bound()}});
      if (op.host_sync) ops.back()["host_sync"] = true;
    }
    out.push_back({{"part", list.part},
                   {"layers", list.layers},
                   {"pass", list.pass},
                   {"compute_s", total_s},
                   {"host_s", total_host_s},
                   {"ops", std::move(ops)}});
  }
  return out;
}

}  // namespace trainsim::report
