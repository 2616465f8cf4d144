#include "search/search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <iterator>
#include <map>
#include <optional>
#include <thread>

#ifdef TRAINSIM_WITH_MPI
#include <mpi.h>
#endif

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/accuracy.h"
#include "config/deepspeed_config.h"
#include "hardware/compute_model.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::search {

namespace {

using report::recompute_name;

std::vector<std::int64_t> divisors(std::int64_t n, std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = lo; d <= std::min(n, hi); ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// The scenario keys of one layout: the base file's parallel and training blocks with the searched
// settings replaced, and the settings that only make sense for some layouts adjusted to each.
void fill_keys(Candidate& c, const nlohmann::json& doc, const workload::ModelSpec& model) {
  const std::int64_t layers = model.layers;
  const bool moe = model.moe();
  const Layout& l = c.layout;
  nlohmann::json p = doc.contains("parallel") ? doc["parallel"] : nlohmann::json::object();
  nlohmann::json t = doc.at("training");
  p["tp"] = l.tp;
  p["pp"] = l.pp;
  p["cp"] = l.cp;
  if (moe) {
    p["ep"] = l.ep;
    if (!p.contains("etp")) p["etp"] = 1;  // Megatron-Bridge's MoE recipes; the scenario's etp is kept
  }
  p["zero"] = l.zero;
  // Megatron-DeepSpeed (docs/import-megatron.md): DeepSpeed's engine, whose sequence parallelism
  // follows the scenario, whose pipeline engine reduces the gradients after the last micro-batch, and
  // whose PipelineModule splits the layers.
  const bool deepspeed = t.value("framework", "") == "megatron-deepspeed";
  // Megatron runs sequence parallelism whenever tp > 1 (and TE's overlap needs it). The Megatron-LM
  // before Megatron-Core that a scenario with scatter_gather_tensors_in_pipeline describes had none:
  // there, as with DeepSpeed, it follows the scenario, and the scatter goes with the layouts it
  // applies to (tp > 1 and pp > 1, 1F1B or interleaved, whole hidden states).
  const bool pre_core = p.value("scatter_gather_tensors_in_pipeline", false);
  p["sequence_parallel"] = l.tp > 1 && (!(deepspeed || pre_core) || p.value("sequence_parallel", false));
  if (l.tp == 1) p.erase("tp_comm_overlap");
  if (l.tp == 1 || l.pp == 1 || p["sequence_parallel"].get<bool>() ||
      (l.schedule != config::Schedule::one_f_one_b && l.schedule != config::Schedule::interleaved) ||
      c.layout.moe_a2a_overlap)
    p.erase("scatter_gather_tensors_in_pipeline");
  if (l.cp == 1) p.erase("cp_comm_type");
  // The schedule as the layout says (DualPipeV's two chunks per rank are its own: no virtual_stages).
  const bool dual = l.schedule == config::Schedule::dualpipev;
  if (l.schedule == config::Schedule::one_f_one_b)
    p.erase("schedule");
  else
    p["schedule"] = config::schedule_key(l.schedule);
  if (l.virtual_stages > 1)
    p["virtual_stages"] = l.virtual_stages;
  else
    p.erase("virtual_stages");
  // The pipeline split is the search's: even where the model chunks (pp x virtual stages) divide the
  // layers, else with the embedding and the loss each taking a layer's place (Megatron-Core's
  // account-for-embedding/loss-in-pipeline-split, as Megatron-Bridge splits Llama 3.1 405B's 126
  // layers over 16 stages) where they divide layers + 2. The base layout's split does not carry over.
  p.erase("first_stage_layers");
  p.erase("last_stage_layers");
  p.erase("account_for_embedding_in_pipeline_split");
  p.erase("account_for_loss_in_pipeline_split");
  p.erase("pipeline_layout");
  const std::int64_t chunks = l.pp * (dual ? 2 : l.virtual_stages);
  const std::int64_t mtp = model.mtp_layers;
  // (DualPipeV takes no account_for_* split: a pipeline layout places the embedding and the loss.)
  if (l.pp > 1 && layers % chunks != 0 && mtp == 0 && !dual && (layers + 2) % chunks == 0) {
    p["account_for_embedding_in_pipeline_split"] = true;
    p["account_for_loss_in_pipeline_split"] = true;
  } else if (l.pp > 1 && layers % chunks != 0 && (mtp > 0 || dual) && (layers + 2 + mtp) % chunks == 0) {
    // With multi-token prediction modules: a pipeline layout in which the embedding, each module and
    // the loss take a layer's place, as Megatron-Bridge's DeepSeek-V3 layouts do for 16 and 32
    // virtual stages (Et*4|(t*4|)*14tmL).
    const std::int64_t per = (layers + 2 + mtp) / chunks;
    std::string layout;
    for (std::int64_t k = 0; k < chunks; ++k) {
      const bool first = k == 0, last = k + 1 == chunks;
      const std::int64_t n = per - (first ? 1 : 0) - (last ? 1 + mtp : 0);
      if (n < 0) break;
      if (!first) layout += '|';
      if (first) layout += 'E';
      layout += std::string(static_cast<std::size_t>(n), 't');
      if (last) layout += std::string(static_cast<std::size_t>(mtp), 'm') + 'L';
    }
    p["pipeline_layout"] = layout;
  }
  if (deepspeed && l.pp > 1) {
    std::string problem;
    const auto layout =
        config::deepspeed_pipeline_layout(layers, l.pp, "type:transformer", false, model.tied_embeddings, problem);
    p.erase("account_for_embedding_in_pipeline_split");
    p.erase("account_for_loss_in_pipeline_split");
    if (layout) p["pipeline_layout"] = *layout;
    p["overlap_grad_reduce"] = false;
  }
  const bool fsdp = l.zero >= 3 || (l.zero == 2 && p.value("zero2_param_gather", "") == "per_unit");
  if (l.zero != 2) p.erase("zero2_param_gather");
  if (l.zero != 1) p.erase("zero1_grad_reduce");
  if (l.zero != 1 && l.zero != 3) p.erase("distributed_optimizer_instances");
  // Zero 3's replicas are the search's HSDP axis (zero 1 keeps the scenario's partial distributed
  // optimizer).
  if (l.zero == 3) {
    if (l.replicas > 1)
      p["distributed_optimizer_instances"] = l.replicas;
    else
      p.erase("distributed_optimizer_instances");
  }
  // Sharding the optimizer across the replicas goes with hybrid sharding.
  if (l.zero != 3 || l.replicas < 2) p.erase("outer_dp_sharding_strategy");
  if (!fsdp) p.erase("fsdp_prefetch");
  if (l.zero < 1 || fsdp) {
    p.erase("overlap_param_gather");
    p.erase("align_param_gather");  // it goes with the overlap
  }
  t["micro_batch"] = l.micro_batch;
  // The precision as the layout says (absent stays absent while it is the default, bf16).
  if (t.contains("precision") || l.precision != config::Precision::bf16)
    t["precision"] = report::precision_name(l.precision);
  // The scenario's FP8 recipe goes with the FP8 layouts only, its BF16 layers with FP8 and NVFP4.
  if (l.precision != config::Precision::fp8) t.erase("fp8_recipe");
  // Its FP8 parameters too, which need a distributed optimizer or FSDP.
  if (l.precision != config::Precision::fp8 || l.zero < 1) t.erase("fp8_param_gather");
  if (l.precision != config::Precision::fp8 && l.precision != config::Precision::nvfp4) {
    t.erase("bf16_layers_at_start");
    t.erase("bf16_layers_at_end");
    t.erase("module_precision");
  } else if (l.precision == config::Precision::fp8 && t.contains("module_precision") &&
             t["module_precision"].is_object()) {
    // Modules the scenario keeps in FP8 under NVFP4 run as the rest under FP8.
    auto& modules = t["module_precision"];
    for (auto it = modules.begin(); it != modules.end();) it = *it == "fp8" ? modules.erase(it) : std::next(it);
    if (modules.empty()) t.erase("module_precision");
  }
  t["recompute"] = recompute_name(l.recompute);
  t.erase("recompute_layers");
  // The scenario's recompute modules go with selective recompute only.
  if (l.recompute != config::Recompute::selective) t.erase("recompute_modules");
  // And its activation offloading with the layouts Megatron-Core allows it on: pp 1, no recompute.
  if (l.pp > 1 || l.recompute != config::Recompute::none) t.erase("cpu_offload_layers");
  // Fine-grained offloading with Megatron-Core's schedules only.
  if (l.schedule != config::Schedule::one_f_one_b && l.schedule != config::Schedule::interleaved)
    t.erase("offload_modules");
  // The expert all-to-all overlap as the layout says (enumerate keeps it on only where it applies:
  // ep > 1, pp 1 or interleaved, no full recompute), and not with FSDP.
  if (fsdp) c.layout.moe_a2a_overlap = false;
  if (c.layout.moe_a2a_overlap) {
    p["moe_a2a_overlap"] = true;
  } else {
    p.erase("moe_a2a_overlap");
    p.erase("delay_wgrad_compute");  // it goes with the overlap
  }
  // The output layer's deferred weight gradients need a pipeline flush (pp > 1), no FSDP, a schedule
  // without weight passes of its own and no combined 1F1B (Megatron-Core's, trainsim's refusals).
  if (l.pp == 1 || l.zero >= 2 || l.schedule == config::Schedule::zb_h1 || dual || c.layout.moe_a2a_overlap) {
    p.erase("defer_embedding_wgrad_compute");
    p.erase("wgrad_deferral_limit");
  }
  // The shared expert's overlap with the all-to-alls needs them (ep > 1, not the allgather
  // dispatcher), and not the combined 1F1B.
  if (l.ep == 1 || c.layout.moe_a2a_overlap || l.moe_dispatcher == config::MoeDispatcher::allgather)
    p.erase("moe_shared_expert_overlap");
  // The token dispatcher as the layout says (enumerate sets flex only where it applies: ep > 1, etp 1),
  // and the sync-free experts, which need flex, with it.
  if (l.moe_dispatcher != config::MoeDispatcher::alltoall)
    p["moe_token_dispatcher"] = config::dispatcher_name(l.moe_dispatcher);
  else
    p.erase("moe_token_dispatcher");
  if (l.moe_dispatcher != config::MoeDispatcher::flex) {
    p.erase("moe_expert_rank_capacity_factor");
    p.erase("moe_paged_stash");
  }
  c.parallel = std::move(p);
  c.training = std::move(t);
}

std::vector<Candidate> enumerate(const Axes& a, const config::Scenario& base, const nlohmann::json& doc) {
  std::vector<Candidate> out;
  const std::vector<std::int64_t> no_ep = {1};
  const auto& eps = base.model.moe() && !a.ep.empty() ? a.ep : no_ep;
  const std::vector<bool> overlaps = a.moe_a2a_overlap.empty() ? std::vector<bool>{false} : a.moe_a2a_overlap;
  const std::vector<config::Schedule> schedules =
      a.schedule.empty() ? std::vector<config::Schedule>{config::Schedule::one_f_one_b} : a.schedule;
  const std::vector<config::MoeDispatcher> dispatchers =
      a.moe_dispatcher.empty() ? std::vector<config::MoeDispatcher>{config::MoeDispatcher::alltoall} : a.moe_dispatcher;
  const std::vector<config::Precision> precisions =
      a.precision.empty() ? std::vector<config::Precision>{base.training.precision} : a.precision;
  const std::vector<std::int64_t> no_hsdp = {0};
  const std::int64_t node = base.cluster.gpus_per_node;
  // The replica count of an HSDP span (nodes) for a zero 3 layout; 0 where the span does not apply:
  // it must hold whole tp x cp groups, split the data-parallel ranks into at least two replicas, and
  // leave each replica more than one rank to shard over.
  auto replicas_of = [node](std::int64_t span, std::int64_t tp, std::int64_t cp, std::int64_t dp) -> std::int64_t {
    const std::int64_t gpus = span * node;
    if (gpus % (tp * cp) != 0) return 0;
    const std::int64_t shard = gpus / (tp * cp);  // data-parallel ranks per replica
    if (dp % shard != 0 || dp / shard < 2 || shard * cp < 2) return 0;
    return dp / shard;
  };
  for (const auto tp : a.tp)
    for (const auto pp : a.pp)
      for (const auto cp : a.cp)
        for (const auto ep : eps)
          for (const auto vs : a.virtual_stages)
            for (std::size_t si = 0; si < schedules.size(); ++si) {
              if (vs > 1 && pp == 1) continue;  // interleaving needs a pipeline
              // Virtual stages run interleaved, and a layout without a pipeline 1f1b: once each.
              if ((vs > 1 || pp == 1) && si > 0) continue;
              const config::Schedule schedule = vs > 1    ? config::Schedule::interleaved
                                                : pp == 1 ? config::Schedule::one_f_one_b
                                                          : schedules[si];
              for (const auto mb : a.micro_batch)
                for (const auto rc : a.recompute)
                  for (const auto z : a.zero)
                    for (const auto span : z == 3 && !a.hsdp_nodes.empty() ? a.hsdp_nodes : no_hsdp)
                      for (const bool overlap : overlaps)
                        for (const config::MoeDispatcher dispatcher : dispatchers)
                          for (const config::Precision precision : precisions) {
                            // Where the flex dispatcher cannot apply, the layout runs with alltoall:
                            // once, if alltoall is on the axis too.
                            const bool flex_applies = ep > 1 && base.parallel.etp == 1;
                            const bool flex = dispatcher == config::MoeDispatcher::flex;
                            if (flex && !flex_applies &&
                                std::ranges::count(dispatchers, config::MoeDispatcher::alltoall) > 0)
                              continue;
                            const config::MoeDispatcher used =
                                flex && !flex_applies ? config::MoeDispatcher::alltoall : dispatcher;
                            // Where the overlap cannot apply (Megatron-Core: ep > 1, pp 1 or virtual
                            // stages, no full recompute, alltoall or flex), the layout runs without it:
                            // once, if "off" is on the axis too.
                            const bool applies = ep > 1 && (pp == 1 || vs > 1) && rc != config::Recompute::full &&
                                                 used != config::MoeDispatcher::allgather;
                            if (overlap && !applies && overlaps.size() > 1) continue;
                            Candidate c;
                            c.layout = {tp,   pp,        cp,      ep, 0, vs, mb, z, 0, 1, rc, overlap && applies,
                                        used, precision, schedule};
                            const std::int64_t model_parallel = tp * pp * cp;
                            c.layout.dp = base.gpus % model_parallel == 0 ? base.gpus / model_parallel : 0;
                            if (span > 0) {
                              c.layout.replicas = replicas_of(span, tp, cp, c.layout.dp);
                              if (c.layout.replicas == 0) continue;
                              c.layout.hsdp_nodes = span;
                            }
                            fill_keys(c, doc, base.model);
                            out.push_back(std::move(c));
                          }
            }
  return out;
}

// Parses the candidate's scenario through the layout rules: the reason it is refused, or nothing.
std::optional<config::Scenario> check(Candidate& c, const std::string& file, const nlohmann::json& doc,
                                      const std::filesystem::path& data_dir) {
  nlohmann::json d = doc;
  d["parallel"] = c.parallel;
  d["training"] = c.training;
  try {
    config::Scenario s = config::parse_scenario(util::JsonNode(d, file), data_dir);
    c.valid = true;
    return s;
  } catch (const util::InputError& e) {
    c.rejected = fmt::format("{}: {}", e.path(), e.problem());
    c.rejected_path = e.path();
    return std::nullopt;
  }
}

void simulate(Candidate& c, const config::Scenario& s, double headroom) {
  const parallel::StepResult r = parallel::simulate_step(s);
  c.metrics = report::compute_metrics(s, r);
  c.metrics.fits = c.metrics.peak_gib <= c.metrics.capacity_gib * (1 - headroom) && c.metrics.host_fits;
  const auto& t = r.mean;
  c.exposed_comm_fraction = t.exposed_s() / r.step_time_s;
}

// Runs job(i) for i in [0, n) on up to `threads` threads; an exception of a job is rethrown here
// once all are done (the lowest i's, whatever the thread count).
template <typename Job>
void parallel_for(std::size_t n, int threads, const Job& job) {
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  auto work = [&] {
    for (std::size_t k = next++; k < n; k = next++) {
      try {
        job(k);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t count = std::min<std::size_t>(static_cast<std::size_t>(std::max(threads, 1)), n);
  for (std::size_t i = 1; i < count; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The ep cell of the tables: "f" marks the flex token dispatcher (parallel.moe_token_dispatcher),
// "*" the all-to-all overlap (parallel.moe_a2a_overlap).
std::string ep_cell(const Layout& l) {
  const char* dispatcher = l.moe_dispatcher == config::MoeDispatcher::flex        ? "f"
                           : l.moe_dispatcher == config::MoeDispatcher::allgather ? "g"
                                                                                  : "";
  return fmt::format("{}{}{}", l.ep, dispatcher, l.moe_a2a_overlap ? "*" : "");
}

// The vp cell of the tables: the virtual stages, and the schedule where it is not 1F1B or
// interleaved: "1z" ZB-H1, "1g" GPipe, "2V" DualPipeV (its two chunks per rank in a V).
std::string vp_cell(const Layout& l) {
  switch (l.schedule) {
    case config::Schedule::zb_h1:
      return "1z";
    case config::Schedule::gpipe:
      return "1g";
    case config::Schedule::dualpipev:
      return "2V";
    default:
      return fmt::format("{}", l.virtual_stages);
  }
}

// The zero cell of the tables: "3h1" is zero 3 with hybrid sharding, each replica over 1 node.
std::string zero_cell(const Layout& l) {
  return l.hsdp_nodes > 0 ? fmt::format("{}h{}", l.zero, l.hsdp_nodes) : fmt::format("{}", l.zero);
}

std::string layout_name(const Layout& l, bool moe, bool precision = false) {
  return fmt::format("tp {} · pp {} · cp {}{} · dp {} · vp {} · mbs {} · recompute {} · zero {}{}{}", l.tp, l.pp, l.cp,
                     moe ? fmt::format(" · ep {}", ep_cell(l)) : std::string(), l.dp, vp_cell(l), l.micro_batch,
                     recompute_name(l.recompute), l.zero,
                     l.hsdp_nodes > 0 ? fmt::format(" (hybrid: {} replicas of {} node{})", l.replicas, l.hsdp_nodes,
                                                    l.hsdp_nodes == 1 ? "" : "s")
                                      : std::string(),
                     precision ? fmt::format(" · {}", report::precision_name(l.precision)) : std::string());
}

std::string heading(const config::Scenario& base) {
  return fmt::format("{} on {} x {} ({}), global batch {} x {} tokens", base.model.name, base.gpus,
                     base.cluster.gpu.name, base.cluster.name, base.training.global_batch, base.training.seq_len);
}

// Where search's default headroom comes from: " (what the published runs leave: ...)".
std::string headroom_source(const config::PublishedMemoryFill& f) {
  return fmt::format(" (what the published runs leave: {:g}% of {} peak at or below {:.1f}%, validation/accuracy.json)",
                     100 * f.quantile, f.runs, 100 * f.fill);
}

std::string counts(const Result& r) {
  std::string out = fmt::format("{} layout{}: {} rejected by the layout rules, ", r.enumerated,
                                r.enumerated == 1 ? "" : "s", r.rejected);
  if (r.skipped > 0)
    out += fmt::format("{} not simulated (their kernels and the collectives they wait for outlast the top {}), ",
                       r.skipped, r.top);
  if (r.too_big > 0)
    out += fmt::format("{} not simulated (their weights, gradients and optimizer states alone overflow the GPU), ",
                       r.too_big);
  return out + fmt::format("{} do not fit in memory{}, {} fit", static_cast<std::int64_t>(r.ranked.size()) - r.fitting,
                           r.headroom > 0 ? fmt::format(" with {:.3g}% of it free{}", 100 * r.headroom,
                                                        r.published_fill ? headroom_source(*r.published_fill) : "")
                                          : std::string(),
                           r.fitting);
}

// The fastest layout the headroom left out, in a sentence (without its end): what the headroom costs.
std::string tight_text(const Result& r, const config::Scenario& base) {
  const Candidate& c = r.ranked[*r.tight];
  const report::Metrics& m = c.metrics;
  const std::string faster = r.fitting > 0
                                 ? fmt::format(", {:.1f}% faster than rank 1,",
                                               100 * (1 - m.step_time_s / r.ranked.front().metrics.step_time_s))
                                 : std::string();
  return fmt::format(
      "{} takes {:.3f} s{} but peaks at {:.1f} GiB of {:.1f} GiB, inside the {:.3g}% left free "
      "(--headroom 0 ranks it)",
      layout_name(c.layout, base.model.moe(), r.precision_axis), m.step_time_s, faster, m.peak_gib, m.capacity_gib,
      100 * r.headroom);
}

bool under_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

int g_rank = 0, g_size = 1;

#ifdef TRAINSIM_WITH_MPI
void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(fmt::format("{} failed (MPI error {})", what, code));
}

// This rank's outcomes among `wave` (its every g_size-th member from g_rank), as CBOR:
// [[index, step, tokens/s/GPU, TFLOP/s/GPU, MFU, bubble, peak GiB, capacity GiB, fits, exposed], ...]
// (CBOR keeps every double exactly).
std::vector<std::uint8_t> pack(const std::vector<Candidate>& all, const std::vector<std::size_t>& wave) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t k = static_cast<std::size_t>(g_rank); k < wave.size(); k += static_cast<std::size_t>(g_size)) {
    const std::size_t i = wave[k];
    const Candidate& c = all[i];
    const auto& m = c.metrics;
    rows.push_back({i, m.step_time_s, m.tokens_per_s_per_gpu, m.model_tflops_per_gpu, m.mfu, m.bubble_fraction,
                    m.peak_gib, m.capacity_gib, m.fits, c.exposed_comm_fraction});
  }
  return nlohmann::json::to_cbor(rows);
}

void unpack(const std::uint8_t* data, std::size_t bytes, std::vector<Candidate>& all) {
  const auto rows = nlohmann::json::from_cbor(data, data + bytes);
  for (const auto& row : rows) {
    Candidate& c = all.at(row[0].get<std::size_t>());
    auto& m = c.metrics;
    m.step_time_s = row[1].get<double>();
    m.tokens_per_s_per_gpu = row[2].get<double>();
    m.model_tflops_per_gpu = row[3].get<double>();
    m.mfu = row[4].get<double>();
    m.bubble_fraction = row[5].get<double>();
    m.peak_gib = row[6].get<double>();
    m.capacity_gib = row[7].get<double>();
    m.fits = row[8].get<bool>();
    c.exposed_comm_fraction = row[9].get<double>();
  }
}

// Every rank receives every other rank's outcomes of the wave into `all`.
void share(std::vector<Candidate>& all, const std::vector<std::size_t>& wave) {
  const std::vector<std::uint8_t> mine = pack(all, wave);
  const int mine_bytes = static_cast<int>(mine.size());
  std::vector<int> bytes(static_cast<std::size_t>(g_size));
  check_mpi(MPI_Allgather(&mine_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
  std::vector<int> offsets(bytes.size(), 0);
  for (std::size_t r = 1; r < bytes.size(); ++r) offsets[r] = offsets[r - 1] + bytes[r - 1];
  std::vector<std::uint8_t> buffer(static_cast<std::size_t>(offsets.back() + bytes.back()));
  check_mpi(MPI_Allgatherv(mine.data(), mine_bytes, MPI_BYTE, buffer.data(), bytes.data(), offsets.data(), MPI_BYTE,
                           MPI_COMM_WORLD),
            "MPI_Allgatherv");
  for (std::size_t r = 0; r < bytes.size(); ++r)
    if (static_cast<int>(r) != g_rank) unpack(buffer.data() + offsets[r], static_cast<std::size_t>(bytes[r]), all);
}
#endif

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  if (!under_mpirun()) return;
#ifdef TRAINSIM_WITH_MPI
  check_mpi(MPI_Init(argc, argv), "MPI_Init");
  started_ = true;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  g_rank = rank_;
  g_size = size_;
#else
  (void)argc;
  (void)argv;
  throw util::InputError("search", "",
                         "this trainsim was built without MPI (TRAINSIM_MPI off or OpenMPI not found); run it "
                         "without mpirun, or rebuild after tools/setup");
#endif
}

MpiSession::~MpiSession() {
#ifdef TRAINSIM_WITH_MPI
  if (started_) MPI_Finalize();
#endif
  // g_rank stays: an error met outside a search session is printed by main() on rank 0 only.
}

bool secondary_rank() {
  return g_rank != 0;
}

Axes default_axes(const config::Scenario& base) {
  Axes a;
  for (std::int64_t tp = 1; tp <= std::min<std::int64_t>(8, base.cluster.gpus_per_node); tp *= 2) a.tp.push_back(tp);
  // Pipeline sizes that split the layers evenly, or evenly once the embedding, the loss (and any
  // multi-token prediction modules) take a layer's place each (fill_keys).
  const std::int64_t layers = base.model.layers;
  a.pp = divisors(layers, 1, 64);
  for (const auto d : divisors(layers + 2 + base.model.mtp_layers, 2, 64))
    if (std::find(a.pp.begin(), a.pp.end(), d) == a.pp.end()) a.pp.push_back(d);
  std::sort(a.pp.begin(), a.pp.end());
  for (std::int64_t cp = 1; cp <= 16 && (cp == 1 || base.training.seq_len / cp >= 4096); cp *= 2) a.cp.push_back(cp);
  // Virtual stages: divisors of the layers per stage, for every pp tried; interleaving is skipped
  // where the layers per stage do not divide (the layout rules reject it).
  a.virtual_stages = {1};
  // The scenario's own schedule for the layouts without virtual stages (1f1b if it interleaves); a
  // DualPipeV scenario's layouts keep to it, without virtual stages.
  a.schedule = {base.parallel.schedule == config::Schedule::interleaved ? config::Schedule::one_f_one_b
                                                                        : base.parallel.schedule};
  for (std::int64_t v = 2; v <= 8 && base.parallel.schedule != config::Schedule::dualpipev; ++v)
    for (const auto pp : a.pp)
      if (pp > 1 && (layers % (pp * v) == 0 || (layers + 2 + base.model.mtp_layers) % (pp * v) == 0)) {
        a.virtual_stages.push_back(v);
        break;
      }
  a.micro_batch = {1, 2, 4, 8};
  a.recompute = {config::Recompute::none, config::Recompute::selective, config::Recompute::full};
  a.moe_a2a_overlap = {base.parallel.moe_a2a_overlap};
  a.moe_dispatcher = {base.parallel.moe_dispatcher};
  a.zero = {base.parallel.zero};
  // Hybrid sharding for the zero 3 layouts (those of the scenario's zero, or of --zero 3): plain and
  // within a node, and the scenario's own span where it uses HSDP over whole nodes.
  a.hsdp_nodes = {0, 1};
  const std::int64_t instances = base.parallel.zero == 3 ? base.parallel.dist_opt_instances : 1;
  const std::int64_t span_gpus = instances > 1 ? base.gpus / base.parallel.pp / instances : 0;
  if (span_gpus > 0 && span_gpus % base.cluster.gpus_per_node == 0 && span_gpus / base.cluster.gpus_per_node > 1)
    a.hsdp_nodes.push_back(span_gpus / base.cluster.gpus_per_node);
  if (base.model.moe()) a.ep = divisors(base.model.experts, 1, 64);
  return a;
}

namespace {

// No layout fits: the one with the smallest peak, and on it each memory saver the scenario does not
// use yet, simulated (a saver Megatron refuses on that layout is left out).
void try_memory_levers(Result& r, const config::Scenario& base, const nlohmann::json& doc,
                       const std::filesystem::path& data_dir, double headroom) {
  std::size_t closest = 0;
  for (std::size_t i = 1; i < r.ranked.size(); ++i)
    if (r.ranked[i].metrics.peak_gib < r.ranked[closest].metrics.peak_gib) closest = i;
  r.closest = closest;
  const Candidate& c = r.ranked[closest];
  const config::OptimizerSpec& opt = base.training.optimizer;
  const std::int64_t zero = std::max<std::int64_t>(c.layout.zero, 1);
  std::vector<MemoryLever> levers;
  if (c.layout.zero == 0 && c.layout.dp > 1)
    levers.push_back({"the distributed optimizer", {{"parallel", {{"zero", 1}}}}, {}});
  if (opt.exp_avg_dtype == config::StateDtype::fp32 || opt.exp_avg_sq_dtype == config::StateDtype::fp32)
    levers.push_back(
        {"precision-aware Adam with bf16 moments",
         {{"parallel", {{"zero", zero}}},
          {"training",
           {{"optimizer",
             {{"use_precision_aware_optimizer", true}, {"exp_avg_dtype", "bf16"}, {"exp_avg_sq_dtype", "bf16"}}}}}},
         {}});
  if (!opt.optimizer_cpu_offload)
    levers.push_back({"the optimizer's CPU offload, all of it",
                      {{"parallel", {{"zero", zero}}},
                       {"training",
                        {{"optimizer",
                          {{"use_precision_aware_optimizer", true},
                           {"optimizer_cpu_offload", true},
                           {"overlap_cpu_optimizer_d2h_h2d", true}}}}}},
                      {}});
  for (MemoryLever& lever : levers) {
    nlohmann::json d = doc;
    d["parallel"] = c.parallel;
    d["training"] = c.training;
    d.merge_patch(lever.keys);
    Candidate trial;
    trial.layout = c.layout;
    try {
      const config::Scenario s = config::parse_scenario(util::JsonNode(d, r.scenario_file), data_dir);
      simulate(trial, s, headroom);
    } catch (const util::InputError& e) {
      spdlog::info("memory saver \"{}\" refused on the closest layout: {}", lever.what, e.what());
      continue;
    }
    lever.metrics = trial.metrics;
    r.levers.push_back(std::move(lever));
  }
}

}  // namespace

Result run_search(const config::Scenario& base, const nlohmann::json& doc, const Axes& axes, int threads,
                  const std::filesystem::path& data_dir, double headroom, std::size_t top) {
  TRAINSIM_ASSERT(doc.at("gpus") == base.gpus);
  const std::string& scenario_file = base.file;
  std::vector<Candidate> all = enumerate(axes, base, doc);
  spdlog::info("searching {} layouts on {} threads", all.size(), threads);

  // The layout rules, and each valid layout's floor when only the fastest few are asked for: every
  // rank checks every layout (cheap next to a simulation; nothing to exchange). The valid layouts'
  // scenarios are kept for their simulation.
  std::vector<std::optional<config::Scenario>> scenarios(all.size());
  // A layout whose weights, gradients and optimizer states alone overflow the GPU cannot fit, so it
  // cannot be among the top: it is not simulated either.
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  parallel_for(all.size(), threads, [&](std::size_t i) {
    scenarios[i] = check(all[i], scenario_file, doc, data_dir);
    const auto& s = scenarios[i];
    if (!s || top == 0) return;
    const parallel::Floors floors = parallel::search_floors(*s, hardware::ComputeModel(s->cluster.gpu));
    all[i].floor_s = floors.step_s;
    const auto held = static_cast<double>(floors.memory_bytes);
    all[i].memory_floor_gib = held / kGiB;
    all[i].too_big = held > s->cluster.gpu.hbm_bytes * (1 - headroom);
  });
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].valid && !all[i].too_big) order.push_back(i);
  if (top > 0)
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return all[a].floor_s < all[b].floor_s; });

  // Waves of kSearchWave layouts in that order; a rank simulates its every g_size-th member of each.
  // `fastest`: the step times of the simulated layouts that fit, the top fastest of them.
  std::vector<double> fastest;
  bool rest_skipped = false;
  for (std::size_t w0 = 0; w0 < order.size(); w0 += kSearchWave) {
    std::vector<std::size_t> wave(
        order.begin() + static_cast<std::ptrdiff_t>(w0),
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), w0 + kSearchWave)));
    if (top > 0 && fastest.size() == top) {
      const double bound = fastest.back();
      const auto cut = std::find_if(wave.begin(), wave.end(), [&](std::size_t i) { return all[i].floor_s > bound; });
      if (cut != wave.end()) {
        // The floors ascend: this layout and every later one are skipped.
        rest_skipped = true;
        for (std::size_t k = w0 + static_cast<std::size_t>(cut - wave.begin()); k < order.size(); ++k)
          all[order[k]].skipped = true;
        wave.erase(cut, wave.end());
      }
    }
    std::vector<std::size_t> mine;
    for (std::size_t k = static_cast<std::size_t>(g_rank); k < wave.size(); k += static_cast<std::size_t>(g_size))
      mine.push_back(wave[k]);
    parallel_for(mine.size(), threads, [&](std::size_t k) { simulate(all[mine[k]], *scenarios[mine[k]], headroom); });
#ifdef TRAINSIM_WITH_MPI
    if (g_size > 1) share(all, wave);
#endif
    if (top > 0) {
      for (const std::size_t i : wave)
        if (all[i].metrics.fits) fastest.push_back(all[i].metrics.step_time_s);
      std::sort(fastest.begin(), fastest.end());
      if (fastest.size() > top) fastest.resize(top);
    }
    if (rest_skipped) break;
  }

  Result r;
  if (g_rank != 0) {
    r.root = false;
    return r;
  }
  r.scenario_file = scenario_file;
  r.headroom = headroom;
  r.top = top;
  r.precision_axis = axes.precision.size() > 1;
  r.enumerated = static_cast<std::int64_t>(all.size());
  // The layout whose held memory is least, of those too big to simulate (the closest, if nothing fits).
  std::optional<std::size_t> least_held;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].valid && all[i].too_big && (!least_held || all[i].memory_floor_gib < all[*least_held].memory_floor_gib))
      least_held = i;
  std::map<std::string, std::pair<std::int64_t, const std::string*>> refusals;  // by path: count, first
  for (auto& c : all) {
    if (!c.valid) {
      ++r.rejected;
      spdlog::info("rejected {}: {}", layout_name(c.layout, base.model.moe()), c.rejected);
      auto& [n, first] = refusals[c.rejected_path];
      if (++n == 1) first = &c.rejected;
      if (n > r.top_rejection_count) {  // strictly more: a tie keeps the one that got there first
        r.top_rejection_path = c.rejected_path;
        r.top_rejection = *first;
        r.top_rejection_count = n;
      }
      continue;
    }
    if (c.too_big) {
      ++r.too_big;
      continue;
    }
    if (c.skipped) {
      ++r.skipped;
      continue;
    }
    if (c.metrics.fits) ++r.fitting;
    r.ranked.push_back(std::move(c));
  }
  // Those that fit first, each group by step time; ties keep the enumeration order.
  std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const Candidate& x, const Candidate& y) {
    if (x.metrics.fits != y.metrics.fits) return x.metrics.fits;
    return x.metrics.step_time_s < y.metrics.step_time_s;
  });
  // Nothing fits and nothing was simulated: the layouts that hold the least (those with the same
  // parameters per rank, their micro-batch and recompute apart) are simulated; the one with the
  // smallest peak becomes the closest.
  if (r.fitting == 0 && r.ranked.empty() && least_held) {
    const double least = all[*least_held].memory_floor_gib;
    std::vector<std::size_t> lightest;
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i].valid && all[i].too_big && all[i].memory_floor_gib <= least * (1 + 1e-9)) lightest.push_back(i);
    parallel_for(lightest.size(), threads,
                 [&](std::size_t k) { simulate(all[lightest[k]], *scenarios[lightest[k]], headroom); });
    for (const std::size_t i : lightest) {
      --r.too_big;
      r.ranked.push_back(std::move(all[i]));
    }
    std::stable_sort(r.ranked.begin(), r.ranked.end(), [](const Candidate& x, const Candidate& y) {
      return x.metrics.step_time_s < y.metrics.step_time_s;
    });
  }
  if (r.fitting == 0 && !r.ranked.empty()) try_memory_levers(r, base, doc, data_dir, headroom);
  if (headroom > 0)
    for (std::size_t i = 0; i < r.ranked.size(); ++i) {
      const report::Metrics& m = r.ranked[i].metrics;
      if (m.fits || !m.host_fits || m.peak_gib > m.capacity_gib) continue;
      if ((r.fitting == 0 || m.step_time_s < r.ranked.front().metrics.step_time_s) &&
          (!r.tight || m.step_time_s < r.ranked[*r.tight].metrics.step_time_s))
        r.tight = i;
    }
  return r;
}

namespace {

// One table row: the layout and what it gave, each cell formatted; widths for the text table
// (negative: left-aligned). A mixture-of-experts model's table has an ep column after cp.
constexpr std::array<int, 15> kWidths = {4, 3, 3, 3, 5, 3, 4, -9, 4, 9, 12, 6, 7, 7, 9};
constexpr std::array<const char*, 15> kHeads = {"rank",         "tp",  "pp",        "cp",      "dp",
                                                "vp",           "mbs", "recompute", "zero",    "step (s)",
                                                "tokens/s/GPU", "MFU", "bubble",    "exposed", "peak GiB"};
constexpr std::size_t kEpColumn = 4;
constexpr std::size_t kPrecisionColumn = 9;  // after zero (before the ep column is inserted)

// The optional columns: ep for a mixture of experts, the precision when the search varied it.
struct Columns {
  bool ep = false;
  bool precision = false;
};

Columns columns(const Result& r, const config::Scenario& base) {
  return {base.model.moe(), r.precision_axis};
}

template <typename T>
std::vector<T> with_optional(std::vector<T> row, const Columns& cols, T ep, T precision) {
  if (cols.precision) row.insert(row.begin() + kPrecisionColumn, precision);
  if (cols.ep) row.insert(row.begin() + kEpColumn, ep);
  return row;
}

std::vector<int> widths(const Columns& cols) {
  return with_optional(std::vector<int>(kWidths.begin(), kWidths.end()), cols, 3, 5);
}

std::vector<std::string> heads(const Columns& cols) {
  return with_optional(std::vector<std::string>(kHeads.begin(), kHeads.end()), cols, std::string("ep"),
                       std::string("prec"));
}

std::vector<std::string> cells(const Candidate& c, std::size_t rank, const Columns& cols) {
  const Layout& l = c.layout;
  const auto& m = c.metrics;
  std::vector<std::string> row = {fmt::format("{}", rank),
                                  fmt::format("{}", l.tp),
                                  fmt::format("{}", l.pp),
                                  fmt::format("{}", l.cp),
                                  fmt::format("{}", l.dp),
                                  vp_cell(l),
                                  fmt::format("{}", l.micro_batch),
                                  recompute_name(l.recompute),
                                  zero_cell(l),
                                  fmt::format("{:.3f}", m.step_time_s),
                                  fmt::format("{:.1f}", m.tokens_per_s_per_gpu),
                                  fmt::format("{:.1f}%", 100 * m.mfu),
                                  fmt::format("{:.1f}%", 100 * m.bubble_fraction),
                                  fmt::format("{:.1f}%", 100 * c.exposed_comm_fraction),
                                  fmt::format("{:.1f}", m.peak_gib)};
  return with_optional(std::move(row), cols, ep_cell(l), std::string(report::precision_name(l.precision)));
}

std::string text_row(const std::vector<std::string>& row, const Columns& cols) {
  const std::vector<int> w = widths(cols);
  const std::size_t recompute_column = cols.ep ? 8 : 7;
  std::string out;
  for (std::size_t i = 0; i < row.size(); ++i) {
    out += i == 0 ? "" : (i == recompute_column ? "  " : " ");
    out += w[i] < 0 ? fmt::format("{:<{}}", row[i], -w[i]) : fmt::format("{:>{}}", row[i], w[i]);
  }
  return out + "\n";
}

std::size_t shown_fitting(const Result& r, std::size_t top) {
  return std::min<std::size_t>(top == 0 ? r.ranked.size() : top, static_cast<std::size_t>(r.fitting));
}

// How many of the `shown` fastest layouts that fit lie within the step-time error of the scenario's
// kind of run on its published runs (base.accuracy's MAPE) of the fastest, the fastest counted: a
// model that far off cannot order them. 0 without published runs of the kind.
std::size_t close_to_best(const Result& r, const config::Scenario& base, std::size_t shown) {
  if (!base.accuracy || shown == 0) return 0;
  const double bound = r.ranked.front().metrics.step_time_s * (1 + base.accuracy->mape);
  std::size_t n = 1;
  while (n < shown && r.ranked[n].metrics.step_time_s <= bound) ++n;
  return n;
}

// The `close` line under the table: the ranks close_to_best counts, when there are two or more.
std::string close_text(const Result& r, const config::Scenario& base, std::size_t shown) {
  const std::size_t n = close_to_best(r, base, shown);
  if (n < 2) return {};
  const bool more = n == shown && shown < static_cast<std::size_t>(r.fitting);
  return fmt::format(
      "ranks 1-{} lie within {:.1f}% of rank 1, the step-time error on published {} runs: too close for the "
      "model to order{}",
      n, 100 * base.accuracy->mape, report::accuracy_group_words(base.accuracy->group),
      more ? " (more may, below the rows shown: --top 0 lists every layout)" : "");
}

}  // namespace

// No layout fits: why, in one line (without its end of line). When the layout rules refused every
// layout, their most frequent reason, which is what to change.
std::string none_fits(const Result& r) {
  if (!r.all_rejected()) return "no layout fits in memory";
  return fmt::format("no layout passes the layout rules; {} of the {} are refused at {}, the first: {}",
                     r.top_rejection_count, r.rejected, r.top_rejection_path, r.top_rejection);
}

// No layout fits: the closest, and what each memory saver makes of it.
std::string closest_text(const Result& r, const config::Scenario& base) {
  if (!r.closest) return {};
  const Candidate& c = r.ranked[*r.closest];
  const double capacity = c.metrics.capacity_gib * (1 - r.headroom);
  std::string out = fmt::format("closest       {} peaks at {:.1f} GiB of {:.1f} GiB{}\n",
                                layout_name(c.layout, base.model.moe(), r.precision_axis), c.metrics.peak_gib, capacity,
                                r.headroom > 0 ? " (with the headroom)" : "");
  for (const MemoryLever& l : r.levers) {
    const report::Metrics& m = l.metrics;
    std::string host;
    if (m.host_offload_gib > 0)
      host = fmt::format(", {:.1f} GiB of pinned host memory per GPU{}", m.host_offload_gib,
                         m.host_fits ? "" : " (more than its share)");
    out += fmt::format("  with {}: {:.1f} GiB{}, {:.3f} s per step: {}\n", l.what, m.peak_gib, host, m.step_time_s,
                       m.fits ? "fits" : "does not fit");
    out += fmt::format("    keys: {}\n", l.keys.dump());
  }
  if (!r.levers.empty()) out += "  (search again with those keys set, --set, to rank the layouts under them)\n";
  return out;
}

std::string to_text(const Result& r, const config::Scenario& base, std::size_t top) {
  std::string out = fmt::format("search        {}\n", heading(base));
  out += fmt::format("layouts       {}\n", counts(r));
  // How far the predictions of published runs of the scenario's kind, and of its model, fell: every
  // step time ranked below carries that uncertainty (base.accuracy, base.model_accuracy).
  if (const std::string acc = report::accuracy_line(base); !acc.empty()) out += fmt::format("accuracy      {}\n", acc);
  if (const std::string acc = report::model_accuracy_line(base); !acc.empty())
    out += fmt::format("              {}\n", acc);
  const std::size_t shown = shown_fitting(r, top);
  if (shown == 0)
    return out + none_fits(r) + "\n" + (r.tight ? fmt::format("tight         {}\n", tight_text(r, base)) : "") +
           closest_text(r, base);
  const Columns cols = columns(r, base);
  out += '\n';  // appended apart: GCC 12's -Wrestrict misfires on "\n" + std::string here (-DTRAINSIM_MPI=OFF)
  out += text_row(heads(cols), cols);
  bool overlap = false, flex = false, allgather = false, hsdp = false, zb = false, gpipe = false, dual = false;
  for (std::size_t i = 0; i < shown; ++i) {
    out += text_row(cells(r.ranked[i], i + 1, cols), cols);
    overlap = overlap || r.ranked[i].layout.moe_a2a_overlap;
    flex = flex || r.ranked[i].layout.moe_dispatcher == config::MoeDispatcher::flex;
    allgather = allgather || r.ranked[i].layout.moe_dispatcher == config::MoeDispatcher::allgather;
    hsdp = hsdp || r.ranked[i].layout.hsdp_nodes > 0;
    zb = zb || r.ranked[i].layout.schedule == config::Schedule::zb_h1;
    gpipe = gpipe || r.ranked[i].layout.schedule == config::Schedule::gpipe;
    dual = dual || r.ranked[i].layout.schedule == config::Schedule::dualpipev;
  }
  if (zb) out += "(vp 1z: the zero-bubble ZB-H1 schedule, parallel.schedule zb-h1)\n";
  if (gpipe) out += "(vp 1g: the GPipe schedule, parallel.schedule gpipe)\n";
  if (dual) out += "(vp 2V: DualPipeV, two chunks per rank in a V, parallel.schedule dualpipev)\n";
  if (flex) out += "(ep nf: with the flex token dispatcher, parallel.moe_token_dispatcher)\n";
  if (allgather) out += "(ep ng: with the allgather token dispatcher, parallel.moe_token_dispatcher)\n";
  if (overlap) out += "(ep n*: with the all-to-all overlap, parallel.moe_a2a_overlap)\n";
  if (hsdp) out += "(zero 3hs: hybrid sharding, replicas of s nodes each, parallel.distributed_optimizer_instances)\n";
  if (const std::string close = close_text(r, base, shown); !close.empty())
    out += fmt::format("close         {}\n", close);
  if (r.tight) out += fmt::format("tight         {}\n", tight_text(r, base));
  const Candidate& best = r.ranked.front();
  out += fmt::format("\nbest layout as scenario keys:\n  \"parallel\": {},\n  \"training\": {}\n", best.parallel.dump(),
                     best.training.dump());
  if (base.training.train_tokens > 0) {
    const report::TrainTime t = report::train_time(base, best.metrics.step_time_s);
    out += fmt::format("to train      {} tokens with it: {:.1f} days · {} GPU-hours\n",
                       report::si_count(base.training.train_tokens), t.days, report::si_count(t.gpu_hours));
  }
  if (base.gpu_hour_price_usd > 0)
    out += fmt::format("cost          {} with it\n", report::cost_line(base, best.metrics.step_time_s));
  return out;
}

std::string to_markdown(const Result& r, const config::Scenario& base, std::size_t top) {
  std::string out = fmt::format("### trainsim search: {}\n\n{}.\n\n", heading(base), counts(r));
  for (const std::string& acc : {report::accuracy_line(base), report::model_accuracy_line(base)})
    if (!acc.empty()) out += fmt::format("Accuracy: {}.\n\n", acc);
  const std::size_t shown = shown_fitting(r, top);
  if (shown == 0) {
    std::string why = none_fits(r);
    why[0] = 'N';
    out += why + ".\n";
    if (!r.closest) return out;
    const Candidate& c = r.ranked[*r.closest];
    out += fmt::format("The closest, {}, peaks at {:.1f} GiB of {:.1f} GiB.\n",
                       layout_name(c.layout, base.model.moe(), r.precision_axis), c.metrics.peak_gib,
                       c.metrics.capacity_gib * (1 - r.headroom));
    if (!r.levers.empty()) out += "On it:\n\n";
    for (const MemoryLever& l : r.levers)
      out += fmt::format("- {}: {:.1f} GiB, {:.3f} s per step, {} (`{}`)\n", l.what, l.metrics.peak_gib,
                         l.metrics.step_time_s, l.metrics.fits ? "fits" : "does not fit", l.keys.dump());
    return out;
  }
  const Columns cols = columns(r, base);
  const std::vector<int> w = widths(cols);
  const std::vector<std::string> h = heads(cols);
  std::string rule = "|";
  for (std::size_t i = 0; i < h.size(); ++i) {
    out += fmt::format("| {} ", h[i]);
    rule += w[i] < 0 ? "---|" : "---:|";
  }
  out += "|\n" + rule + "\n";
  for (std::size_t i = 0; i < shown; ++i) {
    for (const auto& cell : cells(r.ranked[i], i + 1, cols)) out += fmt::format("| {} ", cell);
    out += "|\n";
  }
  if (const std::string close = close_text(r, base, shown); !close.empty()) out += fmt::format("\nClose: {}.\n", close);
  if (r.tight) out += fmt::format("\nTight: {}.\n", tight_text(r, base));
  return out;
}

namespace {

nlohmann::json layout_json(const Layout& l) {
  nlohmann::json j = {{"tp", l.tp},
                      {"pp", l.pp},
                      {"cp", l.cp},
                      {"ep", l.ep},
                      {"dp", l.dp},
                      {"virtual_stages", l.virtual_stages},
                      {"micro_batch", l.micro_batch},
                      {"recompute", recompute_name(l.recompute)},
                      {"zero", l.zero},
                      {"precision", report::precision_name(l.precision)},
                      {"schedule", config::schedule_key(l.schedule)}};
  if (l.moe_a2a_overlap) j["moe_a2a_overlap"] = true;
  if (l.moe_dispatcher != config::MoeDispatcher::alltoall)
    j["moe_token_dispatcher"] = config::dispatcher_name(l.moe_dispatcher);
  if (l.hsdp_nodes > 0) {
    j["hsdp_nodes"] = l.hsdp_nodes;
    j["distributed_optimizer_instances"] = l.replicas;
  }
  return j;
}

}  // namespace

nlohmann::json to_json(const Result& r, const config::Scenario& base, std::size_t top) {
  nlohmann::json out;
  nlohmann::json layouts = nlohmann::json::array();
  const std::size_t shown = top == 0 ? r.ranked.size() : std::min(top, r.ranked.size());
  for (std::size_t i = 0; i < shown; ++i) {
    const Candidate& c = r.ranked[i];
    const auto& m = c.metrics;
    nlohmann::json j = layout_json(c.layout);
    j.update({{"rank", i + 1},
              {"fits", m.fits},
              {"step_time_s", m.step_time_s},
              {"tokens_per_s_per_gpu", m.tokens_per_s_per_gpu},
              {"model_tflops_per_gpu", m.model_tflops_per_gpu},
              {"mfu", m.mfu},
              {"bubble_fraction", m.bubble_fraction},
              {"exposed_comm_fraction", c.exposed_comm_fraction},
              {"peak_gib", m.peak_gib},
              {"scenario", {{"parallel", c.parallel}, {"training", c.training}}}});
    if (base.gpu_hour_price_usd > 0) j["cost"] = report::cost_json(base, m.step_time_s);
    layouts.push_back(std::move(j));
  }
  out = {{"search",
          {{"scenario", r.scenario_file},
           {"model", base.model.name},
           {"cluster", base.cluster.name},
           {"gpus", base.gpus},
           {"global_batch", base.training.global_batch},
           {"seq_len", base.training.seq_len},
           {"capacity_gib", base.cluster.gpu.hbm_bytes / (1024.0 * 1024.0 * 1024.0)},
           {"headroom", r.headroom},
           {"headroom_from_published_runs", r.published_fill.has_value()},
           {"enumerated", r.enumerated},
           {"rejected", r.rejected},
           {"not_simulated", r.skipped},
           {"too_big", r.too_big},
           {"not_fitting", static_cast<std::int64_t>(r.ranked.size()) - r.fitting},
           {"fitting", r.fitting}}},
         {"layouts", layouts}};
  if (base.accuracy) out["search"]["accuracy"] = config::published_json(*base.accuracy);
  if (base.model_accuracy) out["search"]["model_accuracy"] = config::published_json(*base.model_accuracy);
  if (const std::size_t close = close_to_best(r, base, shown_fitting(r, top)); close > 0)
    out["search"]["close_to_best"] = close;
  if (r.tight) {
    const Candidate& c = r.ranked[*r.tight];
    nlohmann::json tight = layout_json(c.layout);
    tight.update({{"step_time_s", c.metrics.step_time_s},
                  {"peak_gib", c.metrics.peak_gib},
                  {"scenario", {{"parallel", c.parallel}, {"training", c.training}}}});
    out["search"]["tight"] = std::move(tight);
  }
  if (r.rejected > 0)
    out["search"]["top_rejection"] = {
        {"path", r.top_rejection_path}, {"layouts", r.top_rejection_count}, {"first", r.top_rejection}};
  if (r.closest) {
    const Candidate& c = r.ranked[*r.closest];
    nlohmann::json closest = layout_json(c.layout);
    closest["peak_gib"] = c.metrics.peak_gib;
    closest["scenario"] = {{"parallel", c.parallel}, {"training", c.training}};
    nlohmann::json levers = nlohmann::json::array();
    for (const MemoryLever& l : r.levers)
      levers.push_back({{"what", l.what},
                        {"keys", l.keys},
                        {"peak_gib", l.metrics.peak_gib},
                        {"host_offload_gib", l.metrics.host_offload_gib},
                        {"step_time_s", l.metrics.step_time_s},
                        {"fits", l.metrics.fits}});
    closest["memory_savers"] = std::move(levers);
    out["search"]["closest"] = std::move(closest);
  }
  return out;
}

namespace {

// The best fitting layout of each search, with tokens/s/GPU against the first count's best.
struct BestRow {
  std::int64_t gpus = 0;
  std::string cluster;
  const config::Scenario* base = nullptr;  // the count's base scenario
  const Candidate* best = nullptr;         // null: nothing fits at this count
  bool all_rejected = false;               // nothing passed the layout rules at this count
  double scaling_efficiency = 0;
};

// The cell of a GPU count where no layout fits.
const char* none_cell(const BestRow& row) {
  return row.all_rejected ? "no layout passes the layout rules" : "no layout fits in memory";
}

// Whether the searches carry a price per GPU-hour (`--price`: all of them or none).
bool priced_bases(const std::vector<config::Scenario>& bases) {
  return !bases.empty() && bases.front().gpu_hour_price_usd > 0;
}

// Whether the searches compare clusters (search --clusters) rather than GPU counts.
bool by_cluster(const std::vector<config::Scenario>& bases) {
  return std::any_of(bases.begin(), bases.end(),
                     [&](const config::Scenario& b) { return b.cluster.name != bases.front().cluster.name; });
}

std::vector<BestRow> best_rows(const std::vector<Result>& results, const std::vector<config::Scenario>& bases) {
  TRAINSIM_ASSERT(results.size() == bases.size());
  std::vector<BestRow> rows;
  double first = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    BestRow row;
    row.gpus = bases[i].gpus;
    row.cluster = bases[i].cluster.name;
    row.base = &bases[i];
    row.all_rejected = results[i].all_rejected();
    if (results[i].fitting > 0) {
      row.best = &results[i].ranked.front();
      if (first == 0) first = row.best->metrics.tokens_per_s_per_gpu;
      row.scaling_efficiency = row.best->metrics.tokens_per_s_per_gpu / first;
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::string to_text(const std::vector<Result>& results, const std::vector<config::Scenario>& bases, std::size_t top) {
  std::string out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i > 0) out += '\n';
    out += to_text(results[i], bases[i], top);
  }
  const bool moe = !bases.empty() && bases.front().model.moe();
  const bool precision = !results.empty() && results.front().precision_axis;
  const bool train = !bases.empty() && bases.front().training.train_tokens > 0;
  const bool priced = priced_bases(bases);
  const bool clusters = by_cluster(bases);
  // Per cluster, a first column of the clusters' names.
  std::size_t width = 7;
  if (clusters)
    for (const auto& b : bases) width = std::max(width, b.cluster.name.size());
  auto cluster_cell = [&](const std::string& name) {
    return clusters ? fmt::format("{:<{}} ", name, width) : std::string();
  };
  out += clusters ? "\nbest layout per cluster (speed: tokens/s/GPU against the first cluster's best"
                  : "\nbest layout per GPU count (scaling: tokens/s/GPU against the first count's best";
  out += train ? fmt::format("; days and GPU-hours to train {} tokens",
                             report::si_count(bases.front().training.train_tokens))
               : std::string();
  out += priced ? fmt::format("; US dollars per million tokens{} at the --price per GPU-hour)\n",
                              train ? " and to train" : "")
                : std::string(")\n");
  out += fmt::format(
      "{}{:>6} {:>3} {:>3} {:>3}{} {:>5} {:>3} {:>4}  {:<9} {:>4}{} {:>9} {:>12} {:>6} {:>8}{}{}\n",
      cluster_cell("cluster"), "gpus", "tp", "pp", "cp", moe ? "  ep" : "", "dp", "vp", "mbs", "recompute", "zero",
      precision ? "  prec" : "", "step (s)", "tokens/s/GPU", "MFU", clusters ? "speed" : "scaling",
      train ? fmt::format(" {:>8} {:>10}", "days", "GPU-hours") : std::string(),
      priced ? fmt::format(" {:>8}{}", "$/Mtok", train ? fmt::format(" {:>10}", "$ to train") : "") : std::string());
  for (const auto& row : best_rows(results, bases)) {
    if (row.best == nullptr) {
      out += fmt::format("{}{:>6}  {}\n", cluster_cell(row.cluster), row.gpus, none_cell(row));
      continue;
    }
    const Layout& l = row.best->layout;
    const auto& m = row.best->metrics;
    std::string days;
    if (train) {
      const report::TrainTime t = report::train_time(*row.base, m.step_time_s);
      days = fmt::format(" {:>8.1f} {:>10}", t.days, report::si_count(t.gpu_hours));
    }
    if (priced) {
      const report::Cost c = report::cost(*row.base, m.step_time_s);
      days += fmt::format(" {:>8}{}", report::usd(c.usd_per_million_tokens),
                          train ? fmt::format(" {:>10}", report::usd(c.usd_to_train)) : "");
    }
    out += fmt::format(
        "{}{:>6} {:>3} {:>3} {:>3}{} {:>5} {:>3} {:>4}  {:<9} {:>4}{} {:>9.3f} {:>12.1f} {:>5.1f}% {:>7.1f}%{}\n",
        cluster_cell(row.cluster), row.gpus, l.tp, l.pp, l.cp, moe ? fmt::format(" {:>3}", ep_cell(l)) : std::string(),
        l.dp, vp_cell(l), l.micro_batch, recompute_name(l.recompute), zero_cell(l),
        precision ? fmt::format(" {:>5}", report::precision_name(l.precision)) : std::string(), m.step_time_s,
        m.tokens_per_s_per_gpu, 100 * m.mfu, 100 * row.scaling_efficiency, days);
  }
  return out;
}

std::string to_markdown(const std::vector<Result>& results, const std::vector<config::Scenario>& bases,
                        std::size_t top) {
  std::string out;
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i > 0) out += '\n';
    out += to_markdown(results[i], bases[i], top);
  }
  const bool train = !bases.empty() && bases.front().training.train_tokens > 0;
  const bool priced = priced_bases(bases);
  const bool clusters = by_cluster(bases);
  out += clusters
             ? "\n### Best layout per cluster\n\n| cluster | GPUs | layout | step (s) | tokens/s/GPU | MFU | speed |"
             : "\n### Best layout per GPU count\n\n| GPUs | layout | step (s) | tokens/s/GPU | MFU | scaling |";
  if (train)
    out += fmt::format(" days for {} tokens | GPU-hours |", report::si_count(bases.front().training.train_tokens));
  if (priced) out += train ? " $ per million tokens | $ to train |" : " $ per million tokens |";
  out += clusters ? "\n|---" : "\n";
  out += "|---:|---|---:|---:|---:|---:|";
  for (int i = 0; i < (train ? 2 : 0) + (priced ? (train ? 2 : 1) : 0); ++i) out += "---:|";
  out += "\n";
  auto cluster_cell = [&](const BestRow& row) { return clusters ? fmt::format("| {} ", row.cluster) : std::string(); };
  for (const auto& row : best_rows(results, bases)) {
    if (row.best == nullptr) {
      std::string empty = train ? " | |" : "";
      if (priced) empty += train ? " | |" : " |";
      out += fmt::format("{}| {} | {} | | | | |{}\n", cluster_cell(row), row.gpus, none_cell(row), empty);
      continue;
    }
    const auto& m = row.best->metrics;
    out += fmt::format("{}| {} | {} | {:.3f} | {:.1f} | {:.1f}% | {:.1f}% |", cluster_cell(row), row.gpus,
                       layout_name(row.best->layout, bases.front().model.moe(), results.front().precision_axis),
                       m.step_time_s, m.tokens_per_s_per_gpu, 100 * m.mfu, 100 * row.scaling_efficiency);
    if (train) {
      const report::TrainTime t = report::train_time(*row.base, m.step_time_s);
      out += fmt::format(" {:.1f} | {:.0f} |", t.days, t.gpu_hours);
    }
    if (priced) {
      const report::Cost c = report::cost(*row.base, m.step_time_s);
      out += fmt::format(" {:.3g} |", c.usd_per_million_tokens);
      if (train) out += fmt::format(" {:.0f} |", c.usd_to_train);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json to_json(const std::vector<Result>& results, const std::vector<config::Scenario>& bases,
                       std::size_t top) {
  nlohmann::json searches = nlohmann::json::array();
  for (std::size_t i = 0; i < results.size(); ++i) searches.push_back(to_json(results[i], bases[i], top));
  nlohmann::json best = nlohmann::json::array();
  const bool clusters = by_cluster(bases);
  for (const auto& row : best_rows(results, bases)) {
    if (row.best == nullptr) {
      best.push_back({{"cluster", row.cluster}, {"gpus", row.gpus}, {"fits", false}});
      continue;
    }
    const auto& c = *row.best;
    nlohmann::json j = layout_json(c.layout);
    j.update({{"cluster", row.cluster},
              {"gpus", row.gpus},
              {"fits", true},
              {"step_time_s", c.metrics.step_time_s},
              {"tokens_per_s_per_gpu", c.metrics.tokens_per_s_per_gpu},
              {"mfu", c.metrics.mfu},
              {clusters ? "speed" : "scaling_efficiency", row.scaling_efficiency}});
    if (row.base->training.train_tokens > 0) {
      const report::TrainTime t = report::train_time(*row.base, c.metrics.step_time_s);
      j["time_to_train"] = {{"steps", t.steps}, {"days", t.days}, {"gpu_hours", t.gpu_hours}};
    }
    if (row.base->gpu_hour_price_usd > 0) j["cost"] = report::cost_json(*row.base, c.metrics.step_time_s);
    best.push_back(std::move(j));
  }
  return {{"searches", searches}, {"best", best}};
}

}  // namespace trainsim::search
