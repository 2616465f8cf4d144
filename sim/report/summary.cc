#include "report/summary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/accuracy.h"
#include "workload/model.h"

namespace trainsim::report {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

nlohmann::json network_json(const config::Scenario& sc, const parallel::StepResult& r) {
  nlohmann::json j = {{"model", sc.network == config::NetworkModel::flow ? "flow" : "analytical"}};
  if (!r.network) return j;
  nlohmann::json tiers = nlohmann::json::array(), hot = nlohmann::json::array();
  for (const auto& t : r.network->tiers)
    tiers.push_back({{"tier", t.name},
                     {"links", t.links},
                     {"bytes", t.bytes},
                     {"busy_s", t.busy_s},
                     {"utilisation", t.links > 0 ? t.busy_s / (static_cast<double>(t.links) * r.step_time_s) : 0.0}});
  for (const auto& l : r.network->hottest)
    hot.push_back({{"link", l.id}, {"tier", l.tier}, {"bytes", l.bytes}, {"busy_s", l.busy_s}});
  j["tiers"] = tiers;
  j["hottest_links"] = hot;
  j["flows"] = r.network->flows;
  return j;
}

// The dense peak MFU is taken against, and its name: NeMo's convention, the FP8 peak for FP8 runs and
// the FP4 one for NVFP4 runs.
struct Peak {
  double flops;
  const char* name;
};

Peak mfu_peak(const config::Scenario& sc) {
  switch (sc.training.precision) {
    case config::Precision::fp8:
      return {sc.cluster.gpu.fp8_flops, "FP8"};
    case config::Precision::nvfp4:
      return {sc.cluster.gpu.fp4_flops, "NVFP4"};
    case config::Precision::bf16:
    case config::Precision::fp16:
      break;
  }
  return {sc.cluster.gpu.bf16_flops, "BF16"};
}

std::string schedule_name(const config::ParallelSpec& p) {
  switch (p.schedule) {
    case config::Schedule::one_f_one_b:
      return "1f1b";
    case config::Schedule::gpipe:
      return "gpipe";
    case config::Schedule::interleaved:
      return fmt::format("interleaved x{}", p.virtual_stages);
    case config::Schedule::zb_h1:
      return "zb-h1";
    case config::Schedule::dualpipev:
      return "dualpipev";
  }
  return "?";
}

std::string thousands(double v) {
  std::string digits = fmt::format("{:.0f}", v);
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[i];
    if (digits[i] != '-' && (n - i - 1) % 3 == 0 && i + 1 < n) out += ',';
  }
  return out;
}

}  // namespace

const char* precision_name(config::Precision p) {
  switch (p) {
    case config::Precision::bf16:
      return "bf16";
    case config::Precision::fp16:
      return "fp16";
    case config::Precision::fp8:
      return "fp8";
    case config::Precision::nvfp4:
      return "nvfp4";
  }
  return "?";
}

const char* recompute_name(config::Recompute r) {
  switch (r) {
    case config::Recompute::none:
      return "none";
    case config::Recompute::selective:
      return "selective";
    case config::Recompute::full:
      return "full";
  }
  return "?";
}

// 15.0T, 405B, 1.34M: three significant figures with an SI suffix (k, M, B, T; none below 1000).
std::string si_count(double v) {
  constexpr std::array<std::pair<double, const char*>, 4> kUnits{{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "k"}}};
  for (const auto& [scale, suffix] : kUnits)
    if (v >= scale) return fmt::format("{:.3g}{}", v / scale, suffix);
  return fmt::format("{:.3g}", v);
}

std::string accuracy_group_words(const std::string& group) {
  std::string words;
  std::size_t at = 0;
  while (at <= group.size()) {
    const std::size_t slash = std::min(group.find('/', at), group.size());
    const std::string part = group.substr(at, slash - at);
    const std::string word = part == "moe"         ? "mixture-of-experts"
                             : part == "ampere"    ? "Ampere"
                             : part == "hopper"    ? "Hopper"
                             : part == "blackwell" ? "Blackwell"
                             : part == "nvfp4"     ? "NVFP4"
                                                   : part;
    words += (words.empty() ? "" : " ") + word;
    at = slash + 1;
  }
  return words;
}

std::string accuracy_line(const config::Scenario& sc) {
  if (!sc.accuracy) return {};
  const config::PublishedAccuracy& a = *sc.accuracy;
  return fmt::format(
      "published {} runs: step time off by {:.1f}% on average (mean error {:+.1f}%, {} runs; "
      "validation/README.md)",
      accuracy_group_words(a.group), 100 * a.mape, 100 * a.mean_error, a.runs);
}

std::string model_accuracy_line(const config::Scenario& sc) {
  if (!sc.model_accuracy) return {};
  const config::PublishedModelAccuracy& a = *sc.model_accuracy;
  return fmt::format(
      "published runs of this model ({}): step time off by {:.1f}% on average (mean error {:+.1f}%, {} runs)", a.name,
      100 * a.mape, 100 * a.mean_error, a.runs);
}

// The experts line's note of Megatron-Core's MoE kernels run unfused (training.moe_router_fusion,
// moe_permute_fusion false) and of experts run one module at a time (moe_grouped_gemm false).
std::string unfused_moe_part(const config::TrainingSpec& t) {
  const std::string sequential = t.moe_grouped_gemm ? "" : " · experts one at a time (SequentialMLP)";
  if (t.moe_router_fusion && t.moe_permute_fusion) return sequential;
  return (!t.moe_router_fusion && !t.moe_permute_fusion ? " · router and permutation unfused"
          : !t.moe_router_fusion                        ? " · router unfused"
                                                        : " · permutation unfused") +
         sequential;
}

std::string optimizer_line(const config::Scenario& sc) {
  const config::OptimizerSpec& o = sc.training.optimizer;
  if (!o.non_default()) return {};
  std::string out = "precision-aware Adam";
  if (o.use_precision_aware_optimizer) {
    const bool remainders = config::keeps_param_remainders(sc.training);
    out += fmt::format(": master weights {}{} · moments {} and {}", config::state_dtype_name(o.main_params_dtype),
                       remainders ? " (16-bit remainders)" : "", config::state_dtype_name(o.exp_avg_dtype),
                       config::state_dtype_name(o.exp_avg_sq_dtype));
  }
  if (o.optimizer_cpu_offload)
    out += fmt::format(" · CPU offload of {:g}%{}", 100 * o.optimizer_offload_fraction,
                       o.overlap_cpu_optimizer_d2h_h2d ? ", copies overlapped" : "");
  return out;
}

namespace {

// " (mla_up_proj, moe_act)": selective recompute's modules when not only core_attn.
std::string modules_part(const config::Scenario& sc) {
  if (sc.training.framework == config::Framework::torchtitan)
    return sc.training.recompute == config::Recompute::selective ? " (op policy)" : "";
  if (sc.training.recompute != config::Recompute::selective ||
      sc.training.recompute_modules == workload::kRecomputeCoreAttn)
    return {};
  return fmt::format(" ({})", fmt::join(config::recompute_module_names(sc.training.recompute_modules), ", "));
}

// Activation offloading or the optimizer's CPU offload: host copies to report.
bool offloads(const config::Scenario& sc) {
  return sc.training.cpu_offload_layers > 0 || sc.training.offload_modules != 0 ||
         sc.training.optimizer.optimizer_cpu_offload;
}

}  // namespace

Metrics compute_metrics(const config::Scenario& sc, const parallel::StepResult& r) {
  Metrics m;
  m.step_time_s = r.step_time_s;
  const double gpus = static_cast<double>(sc.gpus);
  const double tokens = static_cast<double>(sc.training.global_batch * sc.training.seq_len);
  m.tokens_per_s = tokens / r.step_time_s;
  m.tokens_per_s_per_gpu = m.tokens_per_s / gpus;
  // LoRA: two of the three passes (the forward and the data gradients; the frozen weights take
  // none). NeMo's count is close to it: Megatron-Bridge's Llama 3 70B LoRA rows report 2086 TFLOP/s
  // at 7481 tokens/s per GPU, 279 GFLOP per token, against 289 for two thirds of its 3-pass count
  // (433 at 4096 tokens).
  const double passes = sc.training.lora ? 2.0 / 3.0 : 1.0;
  const double flops = passes * workload::model_flops_per_sequence(sc.model, sc.training.seq_len) *
                       static_cast<double>(sc.training.global_batch);
  m.model_tflops_per_gpu = flops / r.step_time_s / gpus / 1e12;
  // NeMo's convention: FP8 runs against the FP8 peak.
  m.mfu = m.model_tflops_per_gpu * 1e12 / mfu_peak(sc).flops;
  m.bubble_fraction = r.mean.bubble_s / r.step_time_s;
  m.peak_gib = static_cast<double>(r.memory[r.peak_rank].peak_bytes) / kGiB;
  m.capacity_gib = sc.cluster.gpu.hbm_bytes / kGiB;
  m.host_offload_gib = static_cast<double>(r.host_offload_bytes) / kGiB;
  m.host_share_gib = sc.cluster.host_memory_per_gpu_bytes / kGiB;
  m.host_fits = m.host_share_gib <= 0 || m.host_offload_gib <= m.host_share_gib;
  m.fits = static_cast<double>(r.memory[r.peak_rank].peak_bytes) <= sc.cluster.gpu.hbm_bytes && m.host_fits;
  m.tight = m.fits && sc.memory_fill &&
            static_cast<double>(r.memory[r.peak_rank].peak_bytes) > sc.memory_fill->fill * sc.cluster.gpu.hbm_bytes;
  m.train = train_time(sc, r.step_time_s);
  return m;
}

BusiestKernels busiest_kernels(const parallel::StepResult& r) {
  BusiestKernels out;
  for (std::size_t s = 0; s < r.stage_kernel_s.size(); ++s) {
    double total = 0;
    for (const double t : r.stage_kernel_s[s]) total += t;
    if (total > out.total_s) {
      out.total_s = total;
      out.stage = s;
    }
  }
  if (out.total_s > 0)
    for (std::size_t k = 0; k < parallel::kKernelKinds; ++k)
      out.percent[k] = 100.0 * r.stage_kernel_s[out.stage][k] / out.total_s;
  return out;
}

TrainTime train_time(const config::Scenario& sc, double step_time_s) {
  TrainTime t;
  if (sc.training.train_tokens <= 0) return t;
  constexpr double kSecondsPerHour = 3600;
  const double tokens = static_cast<double>(sc.training.global_batch * sc.training.seq_len);
  t.steps = static_cast<std::int64_t>(std::ceil(sc.training.train_tokens / tokens));
  const double seconds = static_cast<double>(t.steps) * step_time_s;
  t.days = seconds / (24 * kSecondsPerHour);
  t.gpu_hours = seconds * static_cast<double>(sc.gpus) / kSecondsPerHour;
  return t;
}

Cost cost(const config::Scenario& sc, double step_time_s) {
  Cost c;
  const double price = sc.gpu_hour_price_usd;
  if (price <= 0) return c;
  constexpr double kSecondsPerHour = 3600;
  const double tokens = static_cast<double>(sc.training.global_batch * sc.training.seq_len);
  c.usd_per_million_tokens = price * static_cast<double>(sc.gpus) * step_time_s / kSecondsPerHour / tokens * 1e6;
  if (sc.training.train_tokens > 0) c.usd_to_train = price * train_time(sc, step_time_s).gpu_hours;
  return c;
}

std::string usd(double v) {
  return fmt::format("${}", si_count(v));
}

std::string cost_line(const config::Scenario& sc, double step_time_s) {
  const Cost c = cost(sc, step_time_s);
  return fmt::format("{} per million tokens at {} per GPU-hour{}", usd(c.usd_per_million_tokens),
                     usd(sc.gpu_hour_price_usd),
                     sc.training.train_tokens > 0 ? fmt::format("; {} to train", usd(c.usd_to_train)) : "");
}

nlohmann::json cost_json(const config::Scenario& sc, double step_time_s) {
  const Cost c = cost(sc, step_time_s);
  nlohmann::json j = {{"usd_per_gpu_hour", sc.gpu_hour_price_usd},
                      {"usd_per_million_tokens", c.usd_per_million_tokens}};
  if (sc.training.train_tokens > 0) j["usd_to_train"] = c.usd_to_train;
  return j;
}

// What a rank held at its peak, GiB per memory category.
nlohmann::json breakdown_json(const parallel::RankMemory& m) {
  nlohmann::json held = nlohmann::json::object();
  for (int c = 0; c < parallel::kMemCategoryCount; ++c)
    held[parallel::mem_category_name(c)] =
        static_cast<double>(m.peak_breakdown_bytes[static_cast<std::size_t>(c)]) / kGiB;
  return held;
}

nlohmann::json to_json(const config::Scenario& sc, const parallel::StepResult& r) {
  const Metrics m = compute_metrics(sc, r);
  const parallel::RankMemory& peak = r.memory[r.peak_rank];
  // Every simulated rank's peak, when it happened and what it held then.
  nlohmann::json per_rank = nlohmann::json::array();
  for (std::size_t i = 0; i < r.memory.size(); ++i) {
    per_rank.push_back({{"rank", r.cluster_rank[i]},
                        {"stage", r.stage[i]},
                        {"peak_gib", static_cast<double>(r.memory[i].peak_bytes) / kGiB},
                        {"peak_time_s", r.memory[i].peak_time_s},
                        {"breakdown_gib", breakdown_json(r.memory[i])},
                        {"bubble_s", r.ranks[i].bubble_s}});
  }
  const auto& p = sc.parallel;
  // Per pipeline stage: where its ranks' time went (averaged over them) and their largest peak.
  const auto stages = static_cast<std::size_t>(p.pp);
  std::vector<parallel::TimeBreakdown> stage_time(stages);
  std::vector<int> stage_ranks(stages, 0);
  std::vector<std::int64_t> stage_peak(stages, 0);
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    const std::size_t s = r.stage[i];
    const parallel::TimeBreakdown& t = r.ranks[i];
    stage_time[s].compute_s += t.compute_s;
    stage_time[s].tp_exposed_s += t.tp_exposed_s;
    stage_time[s].cp_exposed_s += t.cp_exposed_s;
    stage_time[s].ep_exposed_s += t.ep_exposed_s;
    stage_time[s].pp_exposed_s += t.pp_exposed_s;
    stage_time[s].dp_exposed_s += t.dp_exposed_s;
    stage_time[s].offload_exposed_s += t.offload_exposed_s;
    stage_time[s].host_bound_s += t.host_bound_s;
    stage_time[s].bubble_s += t.bubble_s;
    ++stage_ranks[s];
    stage_peak[s] = std::max(stage_peak[s], r.memory[i].peak_bytes);
  }
  // Activation offloading adds its exposed host copies to the breakdowns (absent otherwise).
  const bool offloading = offloads(sc);
  nlohmann::json per_stage = nlohmann::json::array();
  for (std::size_t s = 0; s < stages; ++s) {
    const double k = 1.0 / stage_ranks[s];
    const parallel::TimeBreakdown& t = stage_time[s];
    per_stage.push_back({{"stage", s},
                         {"layers", config::stage_layers(sc, static_cast<std::int64_t>(s))},
                         {"bubble_fraction", t.bubble_s * k / r.step_time_s},
                         {"time_breakdown_s",
                          {{"compute", t.compute_s * k},
                           {"tp_exposed", t.tp_exposed_s * k},
                           {"cp_exposed", t.cp_exposed_s * k},
                           {"ep_exposed", t.ep_exposed_s * k},
                           {"pp_exposed", t.pp_exposed_s * k},
                           {"dp_exposed", t.dp_exposed_s * k},
                           {"host_bound", t.host_bound_s * k},
                           {"bubble", t.bubble_s * k}}},
                         {"memory_peak_gib", static_cast<double>(stage_peak[s]) / kGiB}});
    if (offloading) per_stage.back()["time_breakdown_s"]["offload_exposed"] = t.offload_exposed_s * k;
    if (s < r.stage_kernel_s.size()) {
      nlohmann::json kernels;
      for (std::size_t kind = 0; kind < parallel::kKernelKinds; ++kind)
        kernels[parallel::kKernelKindNames[kind]] = r.stage_kernel_s[s][kind];
      per_stage.back()["kernels_s"] = std::move(kernels);
    }
  }
  nlohmann::json out = nlohmann::json{
      {"scenario",
       {{"file", sc.file},
        {"model", sc.model.name},
        {"cluster", sc.cluster.name},
        {"gpu", sc.cluster.gpu.id},
        {"gpus", sc.gpus},
        {"tp", p.tp},
        {"pp", p.pp},
        {"cp", p.cp},
        {"dp", p.dp},
        {"ep", p.ep},
        {"etp", p.etp},
        {"sequence_parallel", p.sequence_parallel && p.tp > 1},
        {"zero", p.zero},
        {"schedule", schedule_name(p)},
        {"micro_batch", sc.training.micro_batch},
        {"global_batch", sc.training.global_batch},
        {"micro_batches", sc.training.num_micro_batches},
        {"seq_len", sc.training.seq_len},
        {"recompute", recompute_name(sc.training.recompute)}}},
      {"step_time_s", m.step_time_s},
      {"tokens_per_s", m.tokens_per_s},
      {"tokens_per_s_per_gpu", m.tokens_per_s_per_gpu},
      {"model_tflops_per_gpu", m.model_tflops_per_gpu},
      {"mfu", m.mfu},
      {"bubble_fraction", m.bubble_fraction},
      {"time_breakdown_s",
       {{"compute", r.mean.compute_s},
        {"tp_exposed", r.mean.tp_exposed_s},
        {"cp_exposed", r.mean.cp_exposed_s},
        {"ep_exposed", r.mean.ep_exposed_s},
        {"pp_exposed", r.mean.pp_exposed_s},
        {"dp_exposed", r.mean.dp_exposed_s},
        {"host_bound", r.mean.host_bound_s},
        {"bubble", r.mean.bubble_s}}},
      {"memory",
       {{"peak_gib", m.peak_gib},
        {"peak_rank", r.cluster_rank[r.peak_rank]},
        {"peak_time_s", peak.peak_time_s},
        {"capacity_gib", m.capacity_gib},
        {"fill", m.peak_gib / m.capacity_gib},
        {"fits", m.fits},
        {"breakdown_gib", breakdown_json(peak)},
        {"ranks", per_rank}}},
      {"stages", per_stage},
      {"warnings", sc.warnings},
      {"network", network_json(sc, r)},
      {"simulation",
       {{"ranks_simulated", r.ranks.size()},
        {"mode", r.all_ranks ? "all-ranks" : "symmetric"},
        {"tasks", r.tasks},
        {"events", r.events}}},
  };
  if (sc.training.framework != config::Framework::megatron || sc.training.deepspeed)
    out["scenario"]["framework"] = config::framework_key(sc.training);
  if (p.scatter_gather_tensors_in_pipeline) out["scenario"]["scatter_gather_tensors_in_pipeline"] = true;
  if (p.zero1_grad_all_reduce) out["scenario"]["zero1_grad_reduce"] = "all_reduce";
  if (!sc.training.gradient_accumulation_fusion) out["scenario"]["gradient_accumulation_fusion"] = false;
  if (!sc.training.moe_router_fusion) out["scenario"]["moe_router_fusion"] = false;
  if (!sc.training.moe_permute_fusion) out["scenario"]["moe_permute_fusion"] = false;
  if (!sc.training.moe_grouped_gemm) out["scenario"]["moe_grouped_gemm"] = false;
  if (config::runs_fp8_recipe(sc.training))
    out["scenario"]["fp8_recipe"] = config::fp8_recipe_name(config::fp8_recipe(sc));
  if (sc.training.fp8_param_gather) out["scenario"]["fp8_param_gather"] = true;
  if (sc.training.framework == config::Framework::torchtitan) {
    out["scenario"]["torch_compile"] = sc.training.torch_compile;
    out["scenario"]["torch_compile_loss"] = sc.training.torch_compile_loss;
  }
  if (!modules_part(sc).empty() && sc.training.framework == config::Framework::megatron)
    out["scenario"]["recompute_modules"] = config::recompute_module_names(sc.training.recompute_modules);
  if (p.moe_a2a_overlap) out["scenario"]["moe_a2a_overlap"] = true;
  if (p.align_param_gather) out["scenario"]["align_param_gather"] = *p.align_param_gather;
  if (p.defer_embedding_wgrad) {
    out["scenario"]["defer_embedding_wgrad_compute"] = true;
    if (p.wgrad_deferral_limit > 0) out["scenario"]["wgrad_deferral_limit"] = p.wgrad_deferral_limit;
  }
  if (p.delay_wgrad_compute) out["scenario"]["delay_wgrad_compute"] = true;
  if (p.moe_dispatcher != config::MoeDispatcher::alltoall)
    out["scenario"]["moe_token_dispatcher"] = config::dispatcher_name(p.moe_dispatcher);
  if (sc.training.moe_load_imbalance != 1) out["scenario"]["moe_load_imbalance"] = sc.training.moe_load_imbalance;
  if (p.moe_capacity_factor > 0) {
    out["scenario"]["moe_expert_capacity_factor"] = p.moe_capacity_factor;
    out["scenario"]["moe_pad_expert_input_to_capacity"] = p.moe_pad_to_capacity;
  }
  if (p.moe_rank_capacity_factor > 0) {
    out["scenario"]["moe_expert_rank_capacity_factor"] = p.moe_rank_capacity_factor;
    out["scenario"]["moe_paged_stash"] = p.moe_paged_stash;
  }
  if (sc.model.hybrid()) out["scenario"]["hybrid_pattern"] = sc.model.hybrid_pattern;
  if (parallel::host_stream(sc)) out["host_busy_fraction"] = r.host_busy_fraction;
  if (sc.training.framework == config::Framework::megatron) {
    out["scenario"]["host_overhead"] = sc.training.host_overhead;
    if (sc.training.host_cost_scale != 1) out["scenario"]["host_cost_scale"] = sc.training.host_cost_scale;
    const std::vector<std::string> scopes = config::graph_scope_names(sc.training);
    if (!scopes.empty()) out["scenario"]["cuda_graph_scope"] = scopes;
  }
  if (sc.training.document_tokens > 0) out["scenario"]["document_tokens"] = sc.training.document_tokens;
  if (p.dist_opt_instances > 1) out["scenario"]["distributed_optimizer_instances"] = p.dist_opt_instances;
  if (p.outer_optim_shard) out["scenario"]["outer_dp_sharding_strategy"] = "optim";
  if (p.moe_shared_expert_overlap) out["scenario"]["moe_shared_expert_overlap"] = true;
  if (p.cp_comm != config::ParallelSpec::CpComm::p2p) out["scenario"]["cp_comm_type"] = config::cp_comm_name(p.cp_comm);
  if (sc.training.bf16_layers_at_start > 0) out["scenario"]["bf16_layers_at_start"] = sc.training.bf16_layers_at_start;
  if (sc.training.bf16_layers_at_end > 0) out["scenario"]["bf16_layers_at_end"] = sc.training.bf16_layers_at_end;
  for (const auto& [module, precision] : config::module_precision_entries(sc.training))
    out["scenario"]["module_precision"][std::string(module)] = precision;
  if (sc.training.train_tokens > 0) {
    out["scenario"]["train_tokens"] = sc.training.train_tokens;
    out["time_to_train"] = {{"steps", m.train.steps}, {"days", m.train.days}, {"gpu_hours", m.train.gpu_hours}};
  }
  if (sc.gpu_hour_price_usd > 0) out["cost"] = cost_json(sc, m.step_time_s);
  if (sc.training.lora) {
    out["scenario"]["peft"] = "lora";
    out["scenario"]["lora_rank"] = sc.training.lora_rank;
    out["scenario"]["lora_targets"] = config::lora_target_names(sc.training);
  }
  if (sc.memory_fill) {
    out["memory"]["published_fill"] = {
        {"runs", sc.memory_fill->runs}, {"quantile", sc.memory_fill->quantile}, {"fill", sc.memory_fill->fill}};
    out["memory"]["tight"] = m.tight;
  }
  if (sc.accuracy) {
    out["accuracy"] = config::published_json(*sc.accuracy);
    if (sc.accuracy->reserved_runs > 0)
      out["memory"]["reserved_gib"] = {{"min", sc.accuracy->reserved_min * m.peak_gib},
                                       {"max", sc.accuracy->reserved_max * m.peak_gib},
                                       {"runs", sc.accuracy->reserved_runs}};
  }
  if (sc.model_accuracy) out["model_accuracy"] = config::published_json(*sc.model_accuracy);
  if (const config::OptimizerSpec& o = sc.training.optimizer; o.non_default()) {
    nlohmann::json opt = {{"use_precision_aware_optimizer", o.use_precision_aware_optimizer}};
    if (o.use_precision_aware_optimizer) {
      opt["main_params_dtype"] = config::state_dtype_name(o.main_params_dtype);
      opt["exp_avg_dtype"] = config::state_dtype_name(o.exp_avg_dtype);
      opt["exp_avg_sq_dtype"] = config::state_dtype_name(o.exp_avg_sq_dtype);
      opt["store_param_remainders"] = o.store_param_remainders;
    }
    opt["optimizer_cpu_offload"] = o.optimizer_cpu_offload;
    if (o.optimizer_cpu_offload) {
      opt["optimizer_offload_fraction"] = o.optimizer_offload_fraction;
      opt["overlap_cpu_optimizer_d2h_h2d"] = o.overlap_cpu_optimizer_d2h_h2d;
    }
    out["scenario"]["optimizer"] = std::move(opt);
  }
  if (offloading) {
    if (sc.training.cpu_offload_layers > 0) out["scenario"]["cpu_offload_layers"] = sc.training.cpu_offload_layers;
    if (sc.training.offload_modules != 0)
      out["scenario"]["offload_modules"] = config::offload_module_names(sc.training.offload_modules);
    out["memory"]["host_offload_gib"] = m.host_offload_gib;
    if (m.host_share_gib > 0) out["memory"]["host_share_gib"] = m.host_share_gib;
    out["time_breakdown_s"]["offload_exposed"] = r.mean.offload_exposed_s;
  }
  return out;
}

std::string to_text(const config::Scenario& sc, const parallel::StepResult& r) {
  const Metrics m = compute_metrics(sc, r);
  const auto& p = sc.parallel;
  const parallel::RankMemory& peak = r.memory[r.peak_rank];
  const double step = r.step_time_s;
  auto pct = [step](double s) { return 100.0 * s / step; };
  auto gib = [&peak](int c) {
    return static_cast<double>(peak.peak_breakdown_bytes[static_cast<std::size_t>(c)]) / kGiB;
  };
  std::string out;
  out += fmt::format("{} on {} x {} ({})\n", sc.model.name, sc.gpus, sc.cluster.gpu.name, sc.cluster.name);
  if (sc.training.framework == config::Framework::torchtitan)
    out += fmt::format(
        "software      torchtitan: FSDP2 (fp32 master weights, bf16 compute, {} gradient reduce-scatter{}), {}{}{}\n",
        sc.training.grad_reduce_in_fp32 ? "fp32" : "bf16",
        sc.parallel.zero == 2 ? ", weights kept from forward to backward" : "",
        sc.training.torch_compile ? "torch.compile'd blocks" : "eager blocks",
        !sc.training.torch_compile_loss ? ""
        : sc.training.torch_compile     ? " and loss"
                                        : ", torch.compile'd loss",
        sc.training.precision == config::Precision::fp8 ? ", Float8 linears" : "");
  if (sc.training.framework == config::Framework::pytorch_eager)
    out += "software      eager PyTorch on one GPU: pure bf16, fused AdamW\n";
  if (sc.training.deepspeed) {
    // What DeepSpeed's engine runs (docs/import-megatron.md, "Megatron-DeepSpeed commands").
    const auto& p0 = sc.parallel;
    const char* wire = sc.training.grad_reduce_in_fp32 ? "fp32" : "16-bit";
    std::string optimizer =
        p0.zero1_grad_all_reduce
            ? fmt::format("BF16_Optimizer (fp32 states sharded over dp, {} gradients all-reduced)", wire)
        : p0.zero == 0 ? fmt::format("no ZeRO ({} gradients all-reduced)", wire)
                       : fmt::format("ZeRO stage {} ({} gradients reduce-scattered)", p0.zero, wire);
    out +=
        fmt::format("software      Megatron-DeepSpeed: {}, {}\n",
                    p0.pp > 1 ? "DeepSpeed's pipeline engine (1F1B, gradients reduced after the last micro-batch)"
                    : p0.overlap_grad_reduce ? "DeepSpeed's engine (gradients reduced in buckets during the backward)"
                                             : "DeepSpeed's engine (gradients reduced after the backward)",
                    optimizer);
  }
  std::string ep_part;
  if (sc.model.moe()) ep_part = fmt::format(" · ep {} · etp {}", p.ep, p.etp);
  if (p.moe_dispatcher != config::MoeDispatcher::alltoall)
    ep_part += fmt::format(" · {} dispatch", config::dispatcher_name(p.moe_dispatcher));
  if (p.moe_a2a_overlap)
    ep_part += p.delay_wgrad_compute ? " · all-to-all overlap, delayed wgrad" : " · all-to-all overlap";
  if (p.moe_capacity_factor > 0)
    ep_part += fmt::format(" · capacity {:g}{}", p.moe_capacity_factor, p.moe_pad_to_capacity ? " padded" : "");
  if (sc.training.moe_load_imbalance != 1)
    ep_part += fmt::format(" · load imbalance {:g}", sc.training.moe_load_imbalance);
  if (p.moe_shared_expert_overlap) ep_part += " · shared expert overlap";
  if (p.moe_rank_capacity_factor > 0)
    ep_part +=
        fmt::format(" · sync-free experts {:g}{}", p.moe_rank_capacity_factor, p.moe_paged_stash ? " paged" : "");
  out += fmt::format(
      "layout        tp {} · pp {} · dp {} · cp {}{}{} · sequence parallel {} · zero {}{} · {}\n", p.tp, p.pp, p.dp,
      p.cp,
      p.cp_comm != config::ParallelSpec::CpComm::p2p ? fmt::format(" ({})", config::cp_comm_name(p.cp_comm))
                                                     : std::string(),
      ep_part,
      p.sequence_parallel && p.tp > 1        ? "on"
      : p.scatter_gather_tensors_in_pipeline ? "off (pipeline messages scattered over tp)"
                                             : "off",
      p.zero,
      p.dist_opt_instances <= 1 ? std::string()
      : p.zero >= 3             ? fmt::format(" (hybrid: {} replicas of {}-way sharding{})", p.dist_opt_instances,
                                              p.dp * p.cp / p.dist_opt_instances,
                                  p.outer_optim_shard ? ", optimizer sharded across them" : "")
                                : fmt::format(" ({} optimizer instances)", p.dist_opt_instances),
      std::string(schedule_name(p)) + (!p.defer_embedding_wgrad ? std::string()
                                       : p.wgrad_deferral_limit == 0
                                           ? " · output-layer wgrad deferred to the flush"
                                           : fmt::format(" · output-layer wgrad of the first {} micro-batches "
                                                         "deferred to the flush",
                                                         p.wgrad_deferral_limit)));
  out += fmt::format("batch         {} sequences of {} tokens = {} micro-batch{} of {} per pipeline · recompute {}{}\n",
                     sc.training.global_batch, sc.training.seq_len, sc.training.num_micro_batches,
                     sc.training.num_micro_batches == 1 ? "" : "es", sc.training.micro_batch,
                     recompute_name(sc.training.recompute), modules_part(sc));
  if (const auto& model = sc.model; model.moe() && !model.hybrid()) {
    // A mixture of experts' routing and where its experts are (a hybrid model's line is below).
    std::string where = "every layer";
    if (model.moe_layer_count() < model.layers)
      where = model.moe_layer_pattern.empty()
                  ? fmt::format("{} of {} layers (the first {} a dense MLP of {})", model.moe_layer_count(),
                                model.layers, model.first_dense_layers, model.ffn_hidden)
                  : fmt::format("{} of {} layers (moe_layer_freq; the others a dense MLP of {})",
                                model.moe_layer_count(), model.layers, model.ffn_hidden);
    out += fmt::format(
        "experts       {} of width {}, top {}{}{} · on {}{}\n", model.experts, model.moe_ffn_hidden,
        model.experts_per_token,
        model.shared_expert_ffn_hidden > 0 ? fmt::format(" · a shared expert of {}", model.shared_expert_ffn_hidden)
                                           : std::string(),
        model.router_groups > 1 && model.router_group_topk < model.router_groups
            ? fmt::format(" · within {} of {} expert groups", model.router_group_topk, model.router_groups)
            : std::string(),
        where, unfused_moe_part(sc.training));
  }
  if (const auto& model = sc.model; model.csa()) {
    // DeepSeek V4's attention: the layers by what they add to the window, and the hyper-connections.
    std::vector<std::string> kinds;
    for (const auto& [ratio, n] : model.compress_ratio_counts()) {
      kinds.push_back(ratio == 0   ? fmt::format("nothing ({} layers)", n)
                      : ratio == 4 ? fmt::format("the top {} of 4:1 entries ({})", model.index_topk, n)
                                   : fmt::format("all {}:1 entries ({})", ratio, n));
    }
    out += fmt::format(
        "attention     DeepSeek V4: a {}-token window, and {}{}\n", model.sliding_window, fmt::join(kinds, " · "),
        model.hc_streams > 1 ? fmt::format(" · {} hyper-connection streams", model.hc_streams) : std::string());
  }
  if (const std::string opt = optimizer_line(sc); !opt.empty()) out += fmt::format("optimizer     {}\n", opt);
  const bool offloading = offloads(sc);
  if (offloading) {
    std::vector<std::string> what;
    if (sc.training.cpu_offload_layers > 0)
      what.push_back(fmt::format("activations of {} of {} layers", sc.training.cpu_offload_layers, sc.model.layers));
    if (sc.training.offload_modules != 0)
      what.push_back(fmt::format("the saved tensors of {} in every layer",
                                 fmt::join(config::offload_module_names(sc.training.offload_modules), ", ")));
    if (sc.training.optimizer.optimizer_cpu_offload)
      what.push_back(fmt::format("the Adam step of {:g}% of the parameters",
                                 100 * sc.training.optimizer.optimizer_offload_fraction));
    out += fmt::format(
        "offload       {} to host memory at {:.0f} GB/s per direction: {:.1f} GiB of pinned host memory per GPU{}\n",
        fmt::join(what, " and "), sc.cluster.host_link_Bps / 1e9, m.host_offload_gib,
        m.host_share_gib > 0 ? fmt::format(" (its share of the node's: {:.1f} GiB)", m.host_share_gib) : std::string());
  }
  if (sc.model.hybrid()) {
    // The hybrid pattern's blocks by kind, in the order Megatron-Core's pattern letters list them.
    const std::string& pat = sc.model.hybrid_pattern;
    std::vector<std::string> kinds;
    for (auto [c, what] :
         {std::pair{'M', "Mamba-2"}, std::pair{'*', "attention"}, std::pair{'-', "MLP"}, std::pair{'E', "MoE"}})
      if (const auto n = std::count(pat.begin(), pat.end(), c); n > 0) kinds.push_back(fmt::format("{} {}", n, what));
    out += fmt::format(
        "hybrid        {} layers: {}{}{}\n", sc.model.layers, fmt::join(kinds, " · "),
        sc.model.moe_latent > 0 ? fmt::format(" · experts in a {}-wide latent", sc.model.moe_latent) : std::string(),
        unfused_moe_part(sc.training));
  }
  if (const std::vector<std::string> scopes = config::graph_scope_names(sc.training); !scopes.empty())
    out += fmt::format("CUDA graphs   {}\n", fmt::join(scopes, ", "));
  if (config::runs_fp8_recipe(sc.training))
    out += fmt::format("FP8 recipe    {}{}, {}\n", config::fp8_recipe_name(config::fp8_recipe(sc)),
                       sc.training.fp8_recipe ? "" : " (the GPU's default)",
                       sc.training.fp8_param_gather ? "FP8 parameters (fp8_param_gather)"
                       : sc.parallel.fsdp_units()   ? "BF16 parameters"
                                                    : "BF16 parameters with cached FP8 copies");
  if (const auto a = sc.training.bf16_layers_at_start, z = sc.training.bf16_layers_at_end; a + z > 0)
    out += fmt::format("BF16 layers   {} of {} layers run their GEMMs in BF16 ({} first, {} last)\n", a + z,
                       sc.model.layers, a, z);
  if (const auto modules = config::module_precision_entries(sc.training); !modules.empty()) {
    std::vector<std::string> parts;
    for (const auto& [module, precision] : modules) parts.push_back(fmt::format("{} {}", module, precision));
    out += fmt::format("modules       {}: their GEMMs above the run's precision\n", fmt::join(parts, ", "));
  }
  if (sc.training.document_tokens > 0)
    out += fmt::format("packing       documents of {} tokens per {}-token sequence; attention within each\n",
                       sc.training.document_tokens, sc.training.seq_len);
  if (sc.training.lora)
    out += fmt::format("LoRA          rank {} on {}; the base model frozen\n", sc.training.lora_rank,
                       fmt::join(config::lora_target_names(sc.training), ", "));
  out += fmt::format("step time     {:.3f} s\n", m.step_time_s);
  if (const std::string acc = accuracy_line(sc); !acc.empty()) out += fmt::format("accuracy      {}\n", acc);
  if (const std::string acc = model_accuracy_line(sc); !acc.empty()) out += fmt::format("              {}\n", acc);
  out += fmt::format("throughput    {} tokens/s · {:.1f} tokens/s/GPU\n", thousands(m.tokens_per_s),
                     m.tokens_per_s_per_gpu);
  out += fmt::format("model FLOPs   {:.1f} TFLOP/s/GPU · MFU {:.1f}% of {:.0f} TFLOP/s dense {} (NeMo count)\n",
                     m.model_tflops_per_gpu, 100.0 * m.mfu, mfu_peak(sc).flops / 1e12, mfu_peak(sc).name);
  if (sc.training.train_tokens > 0)
    out += fmt::format(
        "to train      {} tokens: {} steps · {:.1f} days · {} GPU-hours (every step as this one: no "
        "restarts, evaluation or checkpoints)\n",
        si_count(sc.training.train_tokens), thousands(static_cast<double>(m.train.steps)), m.train.days,
        si_count(m.train.gpu_hours));
  if (sc.gpu_hour_price_usd > 0) out += fmt::format("cost          {}\n", cost_line(sc, m.step_time_s));
  std::string cp_ep_parts;
  if (p.cp > 1) cp_ep_parts = fmt::format(" · CP {:.1f}%", pct(r.mean.cp_exposed_s));
  if (sc.model.moe()) cp_ep_parts += fmt::format(" · EP {:.1f}%", pct(r.mean.ep_exposed_s));
  std::string offload_part;
  if (offloading) offload_part = fmt::format(" · offload {:.1f}%", pct(r.mean.offload_exposed_s));
  if (parallel::host_stream(sc)) offload_part += fmt::format(" · host {:.1f}%", pct(r.mean.host_bound_s));
  out +=
      fmt::format("time          compute {:.1f}% · exposed TP {:.1f}%{} · PP {:.1f}% · DP {:.1f}%{} · bubble {:.1f}%\n",
                  pct(r.mean.compute_s), pct(r.mean.tp_exposed_s), cp_ep_parts, pct(r.mean.pp_exposed_s),
                  pct(r.mean.dp_exposed_s), offload_part, pct(r.mean.bubble_s));
  if (const BusiestKernels k = busiest_kernels(r); k.total_s > 0)
    out += fmt::format(
        "kernels       {:.3f} s{}: GEMM {:.1f}% · attention {:.1f}% · memory-bound {:.1f}% · optimizer {:.1f}%\n",
        k.total_s, p.pp > 1 ? fmt::format(" on stage {}, the busiest", k.stage) : std::string(),
        k.percent[parallel::kGemmKernels], k.percent[parallel::kAttentionKernels], k.percent[parallel::kMemoryKernels],
        k.percent[parallel::kOptimizerKernels]);
  if (parallel::host_stream(sc))
    out += fmt::format(
        "host          the CPU issues kernels {:.1f}% of the step (busiest rank); the GPU waits for it {:.1f}%\n",
        100 * r.host_busy_fraction, pct(r.mean.host_bound_s));
  out += fmt::format(
      "memory peak   {:.1f} GiB of {:.1f} GiB on rank {} at {:.3f} s: weights {:.1f} · gradients {:.1f} · "
      "optimizer {:.1f} · activations {:.1f} GiB\n",
      m.peak_gib, m.capacity_gib, r.cluster_rank[r.peak_rank], peak.peak_time_s, gib(parallel::kWeights),
      gib(parallel::kGradients), gib(parallel::kOptimizer), gib(parallel::kActivations));
  if (r.network) {
    std::string tiers;
    for (const auto& t : r.network->tiers) {
      if (!tiers.empty()) tiers.append(" · ");
      tiers.append(
          fmt::format("{} {:.1f}% busy", t.name, 100.0 * t.busy_s / (static_cast<double>(t.links) * r.step_time_s)));
    }
    out += fmt::format("network       flow model, {} flows: {}\n", r.network->flows, tiers);
  }
  // PyTorch's caching allocator holds more than the allocated peak: where the scenario's kind of run
  // has published reserved peaks, the range of their ratio to trainsim's allocated peak.
  const config::PublishedAccuracy* reserved = sc.accuracy && sc.accuracy->reserved_runs > 0 ? &*sc.accuracy : nullptr;
  if (reserved)
    out += fmt::format(
        "reserved      {:.1f}–{:.1f} GiB: PyTorch's caching allocator reserved {:.2f}–{:.2f}x the allocated peak "
        "trainsim predicts on {} published runs of this kind (torchtitan's max_reserved_gib)\n",
        reserved->reserved_min * m.peak_gib, reserved->reserved_max * m.peak_gib, reserved->reserved_min,
        reserved->reserved_max, reserved->reserved_runs);
  if (m.fits && reserved && reserved->reserved_max * m.peak_gib > m.capacity_gib)
    out += fmt::format(
        "fits          yes by the allocated peak; at the published runs' highest ratio the allocator would want "
        "{:.1f} GiB of {:.1f} GiB\n",
        reserved->reserved_max * m.peak_gib, m.capacity_gib);
  else if (m.tight)
    out += fmt::format(
        "fits          yes, but tight: the peak is {:.1f}% of the GPU's memory, where {:g}% of the {} published runs "
        "peak at or below {:.1f}% (the caching allocator, CUDA and NCCL need memory the allocated peak does not "
        "count)\n",
        100 * m.peak_gib / m.capacity_gib, 100 * sc.memory_fill->quantile, sc.memory_fill->runs,
        100 * sc.memory_fill->fill);
  else if (m.fits)
    out += "fits          yes\n";
  else if (!m.host_fits)
    out += fmt::format(
        "fits          NO: DOES NOT FIT: offloading needs {:.1f} GiB of pinned host memory per GPU, its share of "
        "the node's host memory is {:.1f} GiB\n",
        m.host_offload_gib, m.host_share_gib);
  else
    out += fmt::format("fits          NO: DOES NOT FIT: rank {} needs {:.1f} GiB, the GPU has {:.1f} GiB\n",
                       r.cluster_rank[r.peak_rank], m.peak_gib, m.capacity_gib);
  if (!m.fits)
    out += fmt::format("              `trainsim search {}` ranks the layouts of this model and cluster that fit\n",
                       sc.file.empty() ? "SCENARIO.json" : sc.file);
  return out;
}

}  // namespace trainsim::report
