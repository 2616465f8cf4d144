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

}  // namespace

std::string ops_text(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute) {
  std::string out =
      "ops           one micro-batch through one layer of each kind on one GPU, as the compute model times each op\n"
      "              (before recomputation, overlap and pipelining; the simulation times the communication)\n";
  for (const parallel::OpList& list : lists) {
    out += fmt::format("  {}\n", heading(list));
    out += fmt::format("    {:<40} {:<18} {:>10} {:>10} {:>7} {:>9} {:>8} {:>8}  {}\n", "op", "kind", "GFLOP", "MB",
                       "kernels", "time ms", "TFLOP/s", "GB/s", "bound");
    double total_s = 0, total_flops = 0, total_bytes = 0;
    std::int64_t total_kernels = 0;
    for (const Op& op : list.ops) {
      if (op.kind == OpKind::tp_comm) {
        out += fmt::format("    {:<40} {:<18} {:>10} {:>10.1f} {:>7} {:>9} {:>8} {:>8}  {}\n", op.name,
                           fmt::format("{} {}", collective_name(op.comm), group_name(op.group)), "-",
                           static_cast<double>(op.comm_bytes) / 1e6, op.kernels, "-", "-", "-", "network");
        continue;
      }
      const hardware::OpTime t = compute.breakdown(op);
      total_s += t.total_s;
      total_flops += op.flops;
      total_bytes += op.bytes;
      total_kernels += op.kernels;
      const std::string tflops = op.flops > 0 ? fmt::format("{:.1f}", op.flops / t.total_s / 1e12) : "-";
      out += fmt::format("    {:<40} {:<18} {:>10.2f} {:>10.1f} {:>7} {:>9.4f} {:>8} {:>8.0f}  {}\n", op.name,
                         kind_name(op.kind), op.flops / 1e9, op.bytes / 1e6, op.kernels, t.total_s * 1e3, tflops,
                         op.bytes / t.total_s / 1e9, t.bound());
    }
    out += fmt::format("    {:<40} {:<18} {:>10.2f} {:>10.1f} {:>7} {:>9.4f}\n", "total (compute)", "",
                       total_flops / 1e9, total_bytes / 1e6, total_kernels, total_s * 1e3);
  }
  return out;
}

nlohmann::json ops_json(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute) {
  nlohmann::json out = nlohmann::json::array();
  for (const parallel::OpList& list : lists) {
    nlohmann::json ops = nlohmann::json::array();
    double total_s = 0;
    for (const Op& op : list.ops) {
      if (op.kind == OpKind::tp_comm) {
        ops.push_back({{"name", op.name},
                       {"kind", "communication"},
                       {"collective", collective_name(op.comm)},
                       {"group", group_name(op.group)},
                       {"bytes", op.comm_bytes}});
        continue;
      }
      const hardware::OpTime t = compute.breakdown(op);
      total_s += t.total_s;
      ops.push_back({{"name", op.name},
                     {"kind", kind_name(op.kind)},
                     {"flops", op.flops},
                     {"bytes", op.bytes},
                     {"kernels", op.kernels},
                     {"time_s", t.total_s},
                     {"bound", t.bound()}});
    }
    out.push_back({{"part", list.part},
                   {"layers", list.layers},
                   {"pass", list.pass},
                   {"compute_s", total_s},
                   {"ops", std::move(ops)}});
  }
  return out;
}

}  // namespace trainsim::report
