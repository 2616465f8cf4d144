#include "validate/validate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "config/scenario.h"
#include "hardware/compute_model.h"
#include "network/analytical_network.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "util/error.h"
#include "util/json_node.h"
#include "workload/ops.h"

namespace trainsim::validate {

namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Time of one layer's ops on one TP rank: compute ops back to back, TP collectives exposed (as
// Megatron runs them without TP overlap). `core_only` keeps the attention-core ops only.
double ops_time_s(const std::vector<workload::Op>& ops, const hardware::ComputeModel& compute,
                  const network::AnalyticalNetwork& net, std::int64_t tp, bool core_only = false) {
  std::vector<std::uint32_t> group(static_cast<std::size_t>(tp));
  for (std::size_t i = 0; i < group.size(); ++i) group[i] = static_cast<std::uint32_t>(i);
  double t = 0;
  for (const workload::Op& op : ops) {
    if (core_only && !op.attention_core) continue;
    if (op.kind == workload::OpKind::tp_comm) {
      if (tp == 1) continue;
      t += net.collective_time_s(parallel::collective_of(op.comm), op.comm_bytes, group);
    } else {
      t += compute.time_s(op);
    }
  }
  return t;
}

double number(const Record& r, const char* key) {
  util::JsonNode measured(r.measured, r.file, "measured");
  return measured.at(key).as_positive_number();
}

void evaluate_layer(const Record& r, const config::Scenario& sc, Outcome& out) {
  hardware::ComputeModel compute(sc.cluster.gpu);
  network::AnalyticalNetwork net(sc.cluster);
  workload::LayerConfig lc;
  lc.micro_batch = sc.training.micro_batch;
  lc.seq_len = sc.training.seq_len;
  lc.tp = sc.parallel.tp;
  lc.sequence_parallel = sc.parallel.sequence_parallel && sc.parallel.tp > 1;
  lc.attention = sc.training.attention;
  const auto fwd = workload::layer_forward(sc.model, lc);
  const auto bwd = workload::layer_backward(sc.model, lc);
  const double fwd_s = ops_time_s(fwd, compute, net, lc.tp);
  double bwd_s = ops_time_s(bwd, compute, net, lc.tp);
  if (sc.training.recompute == config::Recompute::full) bwd_s += fwd_s;
  if (sc.training.recompute == config::Recompute::selective) bwd_s += ops_time_s(fwd, compute, net, lc.tp, true);
  out.comparisons.push_back({"layer_ms", number(r, "layer_forward_ms"), fwd_s * 1e3});
  out.comparisons.push_back({"layer_ms", number(r, "layer_backward_ms"), bwd_s * 1e3});
  out.detail = fmt::format("forward {:.2f} vs {:.2f} ms, backward {:.2f} vs {:.2f} ms", fwd_s * 1e3,
                           number(r, "layer_forward_ms"), bwd_s * 1e3, number(r, "layer_backward_ms"));
}

void evaluate_memory(const Record& r, const config::Scenario& sc, Outcome& out) {
  const parallel::StepResult result = parallel::simulate_step(sc);
  // A source that gives the caching allocator's reserved peak of the busiest GPU (torchtitan's
  // max_reserved_gib, the largest over its GPUs): compared with the allocated peak of the rank that
  // peaks highest, as its own quantity (the reserved peak also holds the allocator's cached blocks).
  if (r.measured.contains("peak_reserved_gib")) {
    const double predicted = static_cast<double>(result.memory[result.peak_rank].peak_bytes) / kGiB;
    out.comparisons.push_back({"memory_reserved_gib", number(r, "peak_reserved_gib"), predicted});
    out.detail = fmt::format("allocated peak {:.1f} vs reserved {:.1f} GiB", predicted, number(r, "peak_reserved_gib"));
    return;
  }
  const auto& peak = result.memory[0].peak_breakdown_bytes;  // rank 0: first pipeline stage
  const double static_gib =
      static_cast<double>(peak[parallel::kWeights] + peak[parallel::kGradients] + peak[parallel::kOptimizer]) / kGiB;
  const double act_gib = static_cast<double>(peak[parallel::kActivations]) / kGiB;
  const double m_static = number(r, "static_gib"), m_act = number(r, "activations_gib");
  out.comparisons.push_back({"memory_gib", m_static + m_act, static_gib + act_gib});
  out.detail = fmt::format("static {:.1f} vs {:.1f} GiB, activations {:.1f} vs {:.1f} GiB", static_gib, m_static,
                           act_gib, m_act);
}

std::string pct(double v) {
  return fmt::format("{:+.1f}%", 100.0 * v);
}

std::string value(const Comparison& c) {
  return c.quantity == "step_time_s" ? fmt::format("{:.3f} s", c.measured) : fmt::format("{:.2f}", c.measured);
}

}  // namespace

const QuantitySummary* Summary::find(const std::string& quantity) const {
  // "step_time_s:<source>" names one source's step times.
  const std::string prefix = "step_time_s:";
  if (quantity.rfind(prefix, 0) == 0) {
    for (const auto& q : step_time_by_source)
      if (q.quantity == quantity.substr(prefix.size())) return &q;
    return nullptr;
  }
  for (const auto& q : quantities)
    if (q.quantity == quantity) return &q;
  return nullptr;
}

std::vector<Record> load_records(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw util::InputError(dir.string(), "", "not a directory of validation records");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<Record> records;
  for (const fs::path& f : files) {
    const nlohmann::json doc = util::read_json_file(f.string());
    util::JsonNode root(doc, f.string());
    root.reject_unknown(
        {"id", "kind", "source", "conversion", "assumptions", "scenario", "measured", "skip", "regression"});
    Record r;
    r.file = f.string();
    r.id = root.at("id").as_string();
    r.kind = root.at("kind").as_string();
    if (r.kind != "step" && r.kind != "layer" && r.kind != "memory")
      root.at("kind").fail(fmt::format("unknown kind \"{}\" (expected step, layer or memory)", r.kind));
    r.source = root.at("source").as_string();
    r.conversion = root.at("conversion").as_string();
    if (auto a = root.find("assumptions")) {
      if (!a->json().is_array()) a->fail("expected an array of strings");
      for (std::size_t i = 0; i < a->json().size(); ++i)
        r.assumptions.push_back(util::JsonNode(a->json()[i], r.file, fmt::format("assumptions[{}]", i)).as_string());
    }
    root.at("scenario").expect_object();
    r.scenario = root.at("scenario").json();
    root.at("measured").expect_object();
    r.measured = root.at("measured").json();
    if (auto s = root.find("skip")) r.skip = s->as_string();
    if (auto s = root.find("regression")) r.regression = s->as_string();
    records.push_back(std::move(r));
  }
  return records;
}

Outcome evaluate(const Record& r, const fs::path& data_dir, const Overrides& overrides) {
  const std::optional<config::NetworkModel>& network = overrides.network;
  Outcome out;
  out.record = &r;
  if (r.skip) {
    out.skipped = *r.skip;
    return out;
  }
  config::Scenario sc;
  // --network replaces the record's network before the scenario is checked, so its rules (the flow
  // network needs whole nodes) apply.
  nlohmann::json doc = r.scenario;
  if (network) doc["network"] = *network == config::NetworkModel::flow ? "flow" : "analytical";
  if (overrides.host_cost_scale) {
    nlohmann::json& training = doc["training"];
    if (training.value("framework", "megatron") == "megatron" && training.value("host_overhead", true))
      training["host_cost_scale"] = *overrides.host_cost_scale;
  }
  try {
    config::apply_overrides(doc, overrides.sets, r.file);
  } catch (const util::InputError& e) {
    out.skipped = e.problem() + " (with --set)";
    return out;
  }
  try {
    sc = config::parse_scenario(util::JsonNode(doc, r.file, "scenario"), data_dir);
  } catch (const util::InputError& e) {
    // Features the format accepts but the simulator does not build yet, records the requested
    // network cannot run, and records --set makes invalid: listed, not dropped.
    const bool network_rule = network && e.path() == "scenario.network";
    if (!overrides.sets.empty()) {
      out.skipped = fmt::format("{}: {} (with --set)", e.path(), e.problem());
      return out;
    }
    if (!network_rule && e.problem().find("not supported yet") == std::string::npos) throw;
    out.skipped = fmt::format("{}: {}", e.path(), e.problem());
    return out;
  }
  out.moe = sc.model.moe();
  out.nvfp4 = sc.training.precision == config::Precision::nvfp4;
  out.hybrid = sc.model.hybrid();
  out.token_drop = sc.parallel.moe_capacity_factor > 0;
  out.kind_groups = config::accuracy_groups(sc);
  out.model_key = config::accuracy_model_key(sc);
  out.model_name = sc.model.name;
  if (r.kind == "layer") {
    evaluate_layer(r, sc, out);
  } else if (r.kind == "memory") {
    evaluate_memory(r, sc, out);
  } else {
    parallel::BuildOptions build;
    build.compute_slowdown = overrides.compute_slowdown;
    const parallel::StepResult result = parallel::simulate_step(sc, build);
    // The source ran this step, so it fit its GPUs: a scenario that does not fit as modelled used
    // something the record does not state (activation recompute, offloading). Listed, not compared.
    // A peak within the memory model's own error of the capacity is no such sign: the model is above
    // every measured peak of the memory records, by 5.9% at worst (Korthikanti et al. Figure 1).
    constexpr double kMemoryModelSlack = 1.06;
    const double peak = static_cast<double>(result.memory[result.peak_rank].peak_bytes);
    if (peak > sc.cluster.gpu.hbm_bytes * kMemoryModelSlack) {
      constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
      out.skipped = fmt::format(
          "does not fit as written: {:.1f} GiB at the peak of {:.1f} GiB (beyond the memory model's 6%); the run "
          "fit, so it used something the "
          "record does not state (recompute, offloading)",
          peak / kGiB, sc.cluster.gpu.hbm_bytes / kGiB);
      return out;
    }
    out.comparisons.push_back({"step_time_s", number(r, "step_time_s"), result.step_time_s});
    out.memory_fill = peak / sc.cluster.gpu.hbm_bytes;
  }
  if (r.regression && !out.comparisons.empty()) out.regression = *r.regression;
  return out;
}

namespace {

// The name of `runs` (each name's runs) with the most runs, of those in `among` if given (sorted by
// name: the first of the most frequent); empty when none is.
std::string most_named(const std::map<std::string, int>& runs, const std::vector<std::string>* among = nullptr) {
  std::string best;
  int most = 0;
  for (const auto& [name, n] : runs)
    if (n > most && (!among || std::find(among->begin(), among->end(), name) != among->end())) {
      most = n;
      best = name;
    }
  return best;
}

}  // namespace

Summary summarize(const std::vector<Outcome>& outcomes) {
  Summary s;
  std::map<std::string, QuantitySummary> by, by_source;
  std::map<std::string, config::PublishedAccuracy> by_kind;
  std::map<std::string, config::PublishedModelAccuracy> by_model;
  auto add = [](QuantitySummary& q, const std::string& name, double error, const std::string& id) {
    q.quantity = name;
    ++q.covered;
    const double e = std::fabs(error);
    q.mape += e;
    if (e > q.worst) {
      q.worst = e;
      q.worst_id = id;
    }
  };
  // Reserved over allocated memory, by kind of run (the groups step time has too).
  std::map<std::string, std::vector<double>> reserved_ratios;
  std::vector<double> fills;
  for (const Outcome& o : outcomes) {
    ++s.records;
    if (!o.skipped.empty()) ++s.skipped;
    if (!o.regression.empty()) {
      for (const Comparison& c : o.comparisons) {
        ++s.regressions.runs;
        s.regressions.mean_error += c.error();
      }
      continue;
    }
    if (o.memory_fill && !o.comparisons.empty()) fills.push_back(*o.memory_fill);
    for (const Comparison& c : o.comparisons) {
      add(by[c.quantity], c.quantity, c.error(), o.record->id);
      if (c.quantity == "memory_reserved_gib" && c.predicted > 0)
        for (const std::string& g : o.kind_groups) reserved_ratios[g].push_back(c.measured / c.predicted);
      if (c.quantity == "step_time_s") {
        // By source (the id's prefix), mixture-of-experts runs apart from dense ones ("mbridge-moe"),
        // hybrid Mamba models apart from both ("mbridge-hybrid"), NVFP4 runs apart from the others
        // ("mbridge-nvfp4"), token-dropping MoE runs apart from dropless ones ("mbridge-moe-tokendrop"),
        // and fine-tuning runs (ids naming the task "sft" or "lora") apart from pretraining
        // ("mbridge-finetune").
        const std::string& id = o.record->id;
        const bool finetune = id.find("_sft_") != std::string::npos || id.find("_lora_") != std::string::npos;
        const char* family = o.hybrid ? "-hybrid" : o.moe ? "-moe" : "";
        const std::string source = id.substr(0, id.find('_')) + family + (o.token_drop ? "-tokendrop" : "") +
                                   (o.nvfp4 ? "-nvfp4" : "") + (finetune ? "-finetune" : "");
        add(by_source[source], source, c.error(), o.record->id);
        for (const std::string& g : o.kind_groups) {
          config::PublishedAccuracy& k = by_kind[g];
          k.group = g;
          ++k.runs;
          k.mape += std::fabs(c.error());
          k.mean_error += c.error();
        }
        if (!o.model_key.empty()) {
          config::PublishedModelAccuracy& k = by_model[o.model_key];
          k.key = o.model_key;
          ++k.runs;
          k.mape += std::fabs(c.error());
          k.mean_error += c.error();
          ++s.model_run_names[o.model_key][o.model_name];
        }
      }
    }
  }
  for (auto& [name, q] : by) {
    q.mape /= q.covered;
    s.quantities.push_back(q);
  }
  for (auto& [name, q] : by_source) {
    q.mape /= q.covered;
    s.step_time_by_source.push_back(q);
  }
  for (auto& [name, k] : by_kind) {
    k.mape /= k.runs;
    k.mean_error /= k.runs;
    if (const auto r = reserved_ratios.find(name); r != reserved_ratios.end()) {
      k.reserved_runs = static_cast<int>(r->second.size());
      k.reserved_min = *std::min_element(r->second.begin(), r->second.end());
      k.reserved_max = *std::max_element(r->second.begin(), r->second.end());
    }
    s.step_time_by_kind.push_back(k);
  }
  for (auto& [key, k] : by_model) {
    if (k.runs < config::kMinAccuracyRuns) {
      s.model_run_names.erase(key);
      continue;
    }
    k.mape /= k.runs;
    k.mean_error /= k.runs;
    k.name = most_named(s.model_run_names[key]);
    s.step_time_by_model.push_back(k);
  }
  if (s.regressions.runs > 0) s.regressions.mean_error /= s.regressions.runs;
  s.memory_fill = config::memory_fill_of(std::move(fills));
  return s;
}

void name_models_from_catalog(Summary& summary, const fs::path& data_dir) {
  const std::map<std::string, std::vector<std::string>> catalog = config::catalog_model_names(data_dir);
  for (config::PublishedModelAccuracy& k : summary.step_time_by_model) {
    const auto it = catalog.find(k.key.substr(k.key.find(':') + 1));
    if (it == catalog.end()) continue;
    if (it->second.size() == 1) {
      k.name = it->second.front();
      continue;
    }
    if (const std::string named = most_named(summary.model_run_names[k.key], &it->second); !named.empty())
      k.name = named;
  }
}

namespace {

// " under torchtitan" for a model key of another framework than Megatron (config::accuracy_model_key).
std::string framework_note(const std::string& key) {
  const std::string framework = key.substr(0, key.find(':'));
  return framework == "megatron" ? "" : " under " + framework;
}

}  // namespace

std::string to_text(const std::vector<Outcome>& outcomes, const Summary& summary) {
  std::string out = fmt::format("{:<52} {:<7} {:>12} {:>12} {:>8}\n", "run", "kind", "measured", "predicted", "error");
  for (const Outcome& o : outcomes) {
    if (!o.skipped.empty()) {
      out += fmt::format("{:<52} {:<7} skipped: {}\n", o.record->id, o.record->kind, o.skipped);
      continue;
    }
    for (const Comparison& c : o.comparisons)
      out += fmt::format("{:<52} {:<7} {:>12} {:>12.3f} {:>8}{}\n", o.record->id, o.record->kind, value(c), c.predicted,
                         pct(c.error()), o.regression.empty() ? "" : "  known regression");
  }
  out += fmt::format("\n{} records: {} run, {} skipped\n", summary.records, summary.records - summary.skipped,
                     summary.skipped);
  if (const RegressionSummary& g = summary.regressions; g.runs > 0)
    out += fmt::format(
        "known regressions: {} runs (mean error {:+.1f}%) measured on software whose maintainers filed the slowdown "
        "as a performance regression; listed, left out of every figure below (validation/README.md)\n",
        g.runs, 100 * g.mean_error);
  for (const auto& q : summary.quantities)
    out += fmt::format("{:<12} MAPE {:.1f}% over {} comparisons; worst {} ({:.1f}%)\n", q.quantity, 100 * q.mape,
                       q.covered, q.worst_id, 100 * q.worst);
  out += "step time by source:";
  for (const auto& q : summary.step_time_by_source)
    out += fmt::format(" {} {:.1f}% ({})", q.quantity, 100 * q.mape, q.covered);
  out += "\nstep time by kind:";
  for (const auto& k : summary.step_time_by_kind)
    out += fmt::format(" {} {:.1f}% ({}, mean {:+.1f}%)", k.group, 100 * k.mape, k.runs, 100 * k.mean_error);
  out += "\n";
  if (!summary.step_time_by_model.empty()) {
    out += fmt::format("step time by model ({} runs or more):", config::kMinAccuracyRuns);
    for (const auto& k : summary.step_time_by_model)
      out += fmt::format(" {}{} {:.1f}% ({}, mean {:+.1f}%)", k.name, framework_note(k.key), 100 * k.mape, k.runs,
                         100 * k.mean_error);
    out += "\n";
  }
  if (const config::PublishedMemoryFill& f = summary.memory_fill; f.runs > 0)
    out +=
        fmt::format("memory fill: {:g}% of the {} compared step runs peak at or below {:.1f}% of their GPU's memory\n",
                    100 * f.quantile, f.runs, 100 * f.fill);
  return out;
}

std::string to_markdown(const std::vector<Outcome>& outcomes, const Summary& summary) {
  std::string out = "| run | kind | measured | predicted | error | note |\n|---|---|---|---|---|---|\n";
  for (const Outcome& o : outcomes) {
    if (!o.skipped.empty()) {
      out += fmt::format("| {} | {} | | | skipped | {} |\n", o.record->id, o.record->kind, o.skipped);
      continue;
    }
    for (const Comparison& c : o.comparisons)
      out += fmt::format("| {} | {} | {} | {:.3f} | {} | {} |\n", o.record->id, o.record->kind, value(c), c.predicted,
                         pct(c.error()), o.regression.empty() ? o.detail : "known regression: " + o.regression);
  }
  out += fmt::format("\n{} records: {} run, {} skipped.\n\n", summary.records, summary.records - summary.skipped,
                     summary.skipped);
  if (const RegressionSummary& g = summary.regressions; g.runs > 0)
    out += fmt::format(
        "{} runs (mean error {:+.1f}%) were measured on software whose maintainers filed the slowdown as a "
        "performance regression: listed, left out of the tables below.\n\n",
        g.runs, 100 * g.mean_error);
  out += "| quantity | comparisons | MAPE | worst run | worst error |\n|---|---|---|---|---|\n";
  for (const auto& q : summary.quantities)
    out += fmt::format("| {} | {} | {:.1f}% | {} | {:.1f}% |\n", q.quantity, q.covered, 100 * q.mape, q.worst_id,
                       100 * q.worst);
  out += "\n| step time, by source | runs | MAPE | worst run | worst error |\n|---|---|---|---|---|\n";
  for (const auto& q : summary.step_time_by_source)
    out += fmt::format("| {} | {} | {:.1f}% | {} | {:.1f}% |\n", q.quantity, q.covered, 100 * q.mape, q.worst_id,
                       100 * q.worst);
  out += "\n| step time, by kind | runs | MAPE | mean error |\n|---|---|---|---|\n";
  for (const auto& k : summary.step_time_by_kind)
    out += fmt::format("| {} | {} | {:.1f}% | {:+.1f}% |\n", k.group, k.runs, 100 * k.mape, 100 * k.mean_error);
  if (!summary.step_time_by_model.empty()) {
    out += fmt::format(
        "\n| step time, by model ({} runs or more) | key | runs | MAPE | mean error |\n|---|---|---|---|---|\n",
        config::kMinAccuracyRuns);
    for (const auto& k : summary.step_time_by_model)
      out += fmt::format("| {}{} | `{}` | {} | {:.1f}% | {:+.1f}% |\n", k.name, framework_note(k.key), k.key, k.runs,
                         100 * k.mape, 100 * k.mean_error);
  }
  return out;
}

nlohmann::json to_json(const std::vector<Outcome>& outcomes, const Summary& summary) {
  nlohmann::json runs = nlohmann::json::array();
  for (const Outcome& o : outcomes) {
    nlohmann::json j{{"id", o.record->id}, {"kind", o.record->kind}};
    if (!o.skipped.empty()) {
      j["skipped"] = o.skipped;
    } else {
      nlohmann::json cs = nlohmann::json::array();
      for (const Comparison& c : o.comparisons)
        cs.push_back(
            {{"quantity", c.quantity}, {"measured", c.measured}, {"predicted", c.predicted}, {"error", c.error()}});
      j["comparisons"] = cs;
      if (o.memory_fill) j["memory_fill"] = *o.memory_fill;
      if (!o.detail.empty()) j["detail"] = o.detail;
      if (!o.regression.empty()) j["regression"] = o.regression;
    }
    runs.push_back(j);
  }
  auto to_obj = [](const std::vector<QuantitySummary>& list) {
    nlohmann::json obj = nlohmann::json::object();
    for (const auto& q : list)
      obj[q.quantity] = {{"covered", q.covered}, {"mape", q.mape}, {"worst", q.worst}, {"worst_id", q.worst_id}};
    return obj;
  };
  return {{"runs", runs},
          {"summary",
           {{"records", summary.records},
            {"skipped", summary.skipped},
            {"regressions", {{"runs", summary.regressions.runs}, {"mean_error", summary.regressions.mean_error}}},
            {"quantities", to_obj(summary.quantities)},
            {"step_time_by_source", to_obj(summary.step_time_by_source)},
            {"step_time_by_kind", config::accuracy_json(summary.step_time_by_kind)["step_time_by_kind"]},
            {"step_time_by_model", config::accuracy_json({}, {}, summary.step_time_by_model)
                                       .value("step_time_by_model", nlohmann::json::object())},
            {"memory_fill",
             {{"runs", summary.memory_fill.runs},
              {"quantile", summary.memory_fill.quantile},
              {"fill", summary.memory_fill.fill}}}}}};
}

std::vector<std::string> check_gate(const Summary& summary, const fs::path& gate_file) {
  const nlohmann::json doc = util::read_json_file(gate_file.string());
  util::JsonNode root(doc, gate_file.string());
  root.expect_object();
  std::vector<std::string> violations;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    util::JsonNode bound(it.value(), gate_file.string(), it.key());
    bound.reject_unknown({"max_mape_pct", "max_worst_pct", "min_covered"});
    const QuantitySummary* q = summary.find(it.key());
    if (!q) {
      violations.push_back(fmt::format("{}: no run of this quantity was covered", it.key()));
      continue;
    }
    if (auto m = bound.find("max_mape_pct"); m && 100 * q->mape > m->as_positive_number())
      violations.push_back(
          fmt::format("{}: MAPE {:.2f}% exceeds the gate's {}%", it.key(), 100 * q->mape, m->as_number()));
    if (auto w = bound.find("max_worst_pct"); w && 100 * q->worst > w->as_positive_number())
      violations.push_back(fmt::format("{}: worst error {:.2f}% ({}) exceeds the gate's {}%", it.key(), 100 * q->worst,
                                       q->worst_id, w->as_number()));
    if (auto c = bound.find("min_covered"); c && q->covered < c->as_positive_int())
      violations.push_back(
          fmt::format("{}: {} comparisons covered, the gate expects at least {}", it.key(), q->covered, c->as_int()));
  }
  return violations;
}

}  // namespace trainsim::validate
