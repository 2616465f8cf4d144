#include "config/scenario.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "hardware/profile.h"
#include "util/error.h"

#ifndef TRAINSIM_SOURCE_DIR
#error "TRAINSIM_SOURCE_DIR must be defined by the build (sim/config/CMakeLists.txt)"
#endif

namespace trainsim::config {

namespace fs = std::filesystem;

namespace {

// What the layers are split over with the account_for_*_in_pipeline_split keys: the layers plus one
// slot for each accounted embedding / loss.
std::int64_t pipeline_slots(const workload::ModelSpec& m, const ParallelSpec& p) {
  return m.layers + (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
}

// Expands Megatron-Core's pipeline layout syntax: "X*N" repeats the symbol X, "(...)*N" the group.
// Returns the flat string or throws the reason as a string.
struct LayoutExpander {
  std::string_view text;
  std::size_t pos = 0;
  int depth = 0;

  std::int64_t count() {
    if (pos >= text.size() || text[pos] != '*') return 1;
    ++pos;
    std::int64_t n = 0;
    const std::size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && n < 100000) n = n * 10 + (text[pos++] - '0');
    if (pos == start) throw std::string(fmt::format("'*' at offset {} is not followed by a count", start - 1));
    if (n > 10000) throw std::string(fmt::format("repeat count at offset {} is too large", start));
    return n;
  }
  std::string sequence() {
    std::string out;
    while (pos < text.size() && text[pos] != ')') {
      const char c = text[pos];
      std::string item;
      if (c == '(') {
        ++pos;
        if (++depth > 16) throw std::string("groups nested too deeply");
        item = sequence();
        --depth;
        if (pos >= text.size()) throw std::string("unclosed '('");
        ++pos;  // ')'
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
        ++pos;
      } else if (c == ' ') {
        ++pos;
        continue;
      } else {
        throw std::string(fmt::format("unexpected '{}' at offset {} (expected E, t, m, L, |, (, ) or *N)", c, pos));
      }
      const std::int64_t n = count();
      if (out.size() + item.size() * static_cast<std::size_t>(n) > 1000000) throw std::string("layout too long");
      for (std::int64_t i = 0; i < n; ++i) out += item;
    }
    return out;
  }
};

}  // namespace

std::optional<std::string> expand_pipeline_layout(std::string_view layout) {
  try {
    LayoutExpander e{layout};
    std::string flat = e.sequence();
    if (e.pos < e.text.size()) return std::nullopt;
    return flat;
  } catch (const std::string&) {
    return std::nullopt;
  }
}

namespace {

// Values a key accepts: those trainsim simulates, and those it knows but does not simulate yet.
struct Choices {
  std::vector<std::string_view> supported;
  std::vector<std::string_view> not_yet;
};

std::string join(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

// Returns the index of the value in `choices.supported`; fails on anything else.
std::size_t parse_choice(const util::JsonNode& node, const Choices& choices) {
  const std::string value = node.as_string();
  for (std::size_t i = 0; i < choices.supported.size(); ++i) {
    if (choices.supported[i] == value) return i;
  }
  if (std::find(choices.not_yet.begin(), choices.not_yet.end(), value) != choices.not_yet.end()) {
    node.fail(fmt::format("\"{}\" is not supported yet (supported: {})", value, join(choices.supported)));
  }
  std::vector<std::string_view> all = choices.supported;
  all.insert(all.end(), choices.not_yet.begin(), choices.not_yet.end());
  node.fail(fmt::format("unknown value \"{}\" (expected one of: {})", value, join(all)));
}

bool exists_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Names of the *.json files in `dir`, sorted, for "unknown name" messages.
std::string known_names(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".json" && exists_file(it->path())) names.push_back(it->path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out.empty() ? std::string("none") : out;
}

// Finds the file a `model` / `cluster` string names: <data_dir>/<subdir>/NAME.json, else a path
// (absolute, relative to the scenario's directory, relative to the working directory).
fs::path resolve_reference(const util::JsonNode& node, const fs::path& data_dir, std::string_view subdir,
                           const fs::path& scenario_dir) {
  const std::string ref = node.as_string();
  if (ref.empty()) node.fail("expected a name or a path, got an empty string");
  const fs::path named = data_dir / subdir / (ref + ".json");
  if (ref.find('/') == std::string::npos && exists_file(named)) return named;
  const fs::path as_path(ref);
  if (as_path.is_absolute()) {
    if (exists_file(as_path)) return as_path;
  } else {
    if (!scenario_dir.empty() && exists_file(scenario_dir / as_path)) return scenario_dir / as_path;
    if (exists_file(as_path)) return as_path;
  }
  node.fail(fmt::format("\"{}\" is neither a file in {} (known: {}) nor a path to a file", ref,
                        (data_dir / subdir).string(), known_names(data_dir / subdir)));
}

// Calls `parse` on the object `node` holds inline, or on the file it names; errors inside a
// referenced file name that file.
template <typename Parse>
auto parse_reference(const util::JsonNode& node, const fs::path& data_dir, std::string_view subdir,
                     const fs::path& scenario_dir, Parse parse) {
  if (node.is_object()) return parse(node, std::string(node.path()));
  if (!node.is_string()) node.fail("expected a name, a path or an object");
  const fs::path file = resolve_reference(node, data_dir, subdir, scenario_dir);
  const nlohmann::json doc = util::read_json_file(file.string());
  const util::JsonNode root(doc, file.string());
  root.expect_object();
  return parse(root, file.stem().string());
}

// A `gpu_profile` reference: a name in <data_dir>/topologies/profiles/, else a path (relative to the
// data directory, the referring file's directory or the working directory).
std::shared_ptr<const hardware::GpuProfile> load_gpu_profile(const util::JsonNode& node, const fs::path& data_dir) {
  const std::string ref = node.as_string();
  if (ref.empty()) node.fail("expected a profile name or a path, got an empty string");
  const fs::path dir = data_dir / "topologies" / "profiles";
  std::vector<fs::path> candidates;
  if (ref.find('/') == std::string::npos) candidates.push_back(dir / (ref + ".json"));
  const fs::path as_path(ref);
  if (as_path.is_absolute()) {
    candidates.push_back(as_path);
  } else {
    candidates.push_back(data_dir / as_path);
    if (!node.file().empty()) candidates.push_back(fs::path(node.file()).parent_path() / as_path);
    candidates.push_back(as_path);
  }
  for (const fs::path& c : candidates)
    if (exists_file(c)) return std::make_shared<const hardware::GpuProfile>(hardware::load_profile(c.string()));
  node.fail(fmt::format("\"{}\" is neither a profile in {} (known: {}) nor a path to a file", ref, dir.string(),
                        known_names(dir)));
}

// A topology object; its optional `gpu_profile` (a scenario-level concern: it names a file) is read
// here, the rest by network::parse_cluster.
network::ClusterSpec parse_topology(const util::JsonNode& node, const fs::path& data_dir) {
  if (!node.has("gpu_profile")) return network::parse_cluster(node);
  nlohmann::json rest = node.json();
  rest.erase("gpu_profile");
  network::ClusterSpec c = network::parse_cluster(util::JsonNode(rest, node.file(), node.path()));
  c.gpu.profile = load_gpu_profile(node.at("gpu_profile"), data_dir);
  return c;
}

// The most parameters trainsim models (a thousand times the largest published models): beyond it
// its byte counts, int64 products of parameters and sizes, would overflow.
constexpr double kMaxModelParams = 1e15;

workload::ModelSpec parse_model_any(const util::JsonNode& node, const std::string& fallback_name) {
  workload::ModelSpec m =
      workload::is_hf_config(node) ? workload::parse_hf_config(node, fallback_name) : workload::parse_model(node);
  // An upper estimate with every product in doubles (the model's own counts and helpers, e.g.
  // mamba_inner(), multiply in int64 and would overflow first): the attention and MLP matrices of
  // every layer, every expert, the Mamba projections, and the embedding and output layer.
  auto d = [](std::int64_t v) { return static_cast<double>(v); };
  const double h = d(m.hidden), head = d(m.head_dim > 0 ? m.head_dim : m.hidden / std::max<std::int64_t>(m.heads, 1));
  const double heads = d(m.heads), rope = d(m.qk_rope_head_dim), v_head = d(m.v_head_dim);
  const double q_lora = d(m.q_lora_rank), kv_lora = d(m.kv_lora_rank);
  // Multi-head latent attention: down and up projections of the queries and of the keys and values.
  const double mla = m.mla() ? (h + q_lora) * heads * (head + rope) + h * (q_lora + kv_lora + rope) +
                                   kv_lora * heads * (head + v_head) + heads * v_head * h
                             : 0.0;
  // DeepSeek V4: the query latent's up projection, the grouped output projection, the compressors and
  // the indexer (each at most one more hidden x 4·head_dim and latent x index width).
  const double csa = m.csa() ? (q_lora + h) * heads * head + d(m.o_groups) * d(m.o_lora_rank) * (h + heads * head) +
                                   4 * h * head + (q_lora + h) * d(m.index_heads) * d(m.index_head_dim) +
                                   d(m.hc_streams) * d(m.hc_streams + 2) * d(m.hc_streams) * h * 2
                             : 0.0;
  const double attention = h * head * (2 * heads + 2 * d(m.kv_heads)) + mla + csa;
  const double latent = d(m.moe_latent);
  const double mlp = 3 * h * (d(m.ffn_hidden) + d(m.experts) * d(m.moe_ffn_hidden) + d(m.shared_expert_ffn_hidden)) +
                     3 * d(m.experts) * d(m.moe_ffn_hidden) * latent + 2 * h * latent;
  const double mamba_inner = d(m.mamba_heads) * d(m.mamba_head_dim);
  const double mamba = h * (3 * mamba_inner + 2 * d(m.mamba_groups) * d(m.mamba_state) + d(m.mamba_heads)) +
                       d(m.mamba_conv) * (mamba_inner + 2 * d(m.mamba_groups) * d(m.mamba_state));
  const double estimate = d(m.layers + m.mtp_layers) * (attention + mlp + mamba) + 2 * d(m.vocab) * h;
  if (!(estimate <= kMaxModelParams))
    node.fail(fmt::format("about {:.3g} parameters, beyond the {:.0e} trainsim models", estimate, kMaxModelParams));
  return m;
}

// `layout_rules` false (a search's base): the rules that tie a key to a layout the search replaces
// (cp_comm_type to cp > 1, zero1_grad_reduce to zero 1, ...) wait for each searched layout.
ParallelSpec parse_parallel(const util::JsonNode& node, bool layout_rules) {
  node.reject_unknown({"tp",
                       "pp",
                       "cp",
                       "ep",
                       "etp",
                       "sequence_parallel",
                       "schedule",
                       "virtual_stages",
                       "zero",
                       "overlap_grad_reduce",
                       "overlap_param_gather",
                       "align_param_gather",
                       "dp_bucket_mb",
                       "tp_comm_overlap",
                       "moe_a2a_overlap",
                       "delay_wgrad_compute",
                       "defer_embedding_wgrad_compute",
                       "wgrad_deferral_limit",
                       "moe_token_dispatcher",
                       "moe_expert_capacity_factor",
                       "moe_pad_expert_input_to_capacity",
                       "moe_expert_rank_capacity_factor",
                       "moe_paged_stash",
                       "first_stage_layers",
                       "last_stage_layers",
                       "account_for_embedding_in_pipeline_split",
                       "account_for_loss_in_pipeline_split",
                       "fsdp_prefetch",
                       "zero2_param_gather",
                       "zero1_grad_reduce",
                       "pipeline_layout",
                       "distributed_optimizer_instances",
                       "outer_dp_sharding_strategy",
                       "cp_comm_type",
                       "moe_shared_expert_overlap",
                       "scatter_gather_tensors_in_pipeline"});
  ParallelSpec p;
  if (auto v = node.find("tp")) p.tp = v->as_positive_int();
  if (auto v = node.find("pp")) p.pp = v->as_positive_int();
  if (auto v = node.find("cp")) p.cp = v->as_positive_int();
  if (auto v = node.find("ep")) p.ep = v->as_positive_int();
  if (auto v = node.find("etp")) p.etp = v->as_positive_int();
  if (auto v = node.find("sequence_parallel")) p.sequence_parallel = v->as_bool();
  if (auto v = node.find("schedule")) {
    constexpr std::array<Schedule, 5> kSchedule = {Schedule::one_f_one_b, Schedule::gpipe, Schedule::interleaved,
                                                   Schedule::zb_h1, Schedule::dualpipev};
    p.schedule = kSchedule[parse_choice(*v, Choices{{"1f1b", "gpipe", "interleaved", "zb-h1", "dualpipev"}, {}})];
  }
  if (auto v = node.find("virtual_stages")) {
    p.virtual_stages = v->as_positive_int();
    if (p.schedule == Schedule::dualpipev) {
      if (p.virtual_stages != 2)
        v->fail("dualpipev places 2 virtual stages on each rank (in a V): give 2 or leave it out");
    } else if (p.virtual_stages > 1 && p.schedule != Schedule::interleaved) {
      v->fail(fmt::format("{} virtual stages need \"schedule\": \"interleaved\"", p.virtual_stages));
    }
  }
  if (p.schedule == Schedule::dualpipev) p.virtual_stages = 2;
  if (p.schedule == Schedule::interleaved && p.virtual_stages < 2)
    node.at("schedule").fail("the interleaved schedule needs virtual_stages >= 2 (Megatron: VPP 1 disables it)");
  if (auto v = node.find("zero")) {
    p.zero = v->as_nonnegative_int();
    if (p.zero > 3) v->fail(fmt::format("must be 0, 1, 2 or 3, got {}", p.zero));
    if (layout_rules && p.zero == 3 && (p.schedule == Schedule::zb_h1 || p.schedule == Schedule::dualpipev))
      v->fail(
          fmt::format("zero 3 with the {} schedule is not supported yet (its weight-gradient passes would "
                      "re-gather each layer)",
                      p.schedule == Schedule::zb_h1 ? "zb-h1" : "dualpipev"));
  }
  if (auto v = node.find("zero2_param_gather")) {
    constexpr std::array<ParallelSpec::Zero2Gather, 2> kGather = {ParallelSpec::Zero2Gather::after_optimizer,
                                                                  ParallelSpec::Zero2Gather::per_unit};
    p.zero2_param_gather = kGather[parse_choice(*v, Choices{{"after_optimizer", "per_unit"}, {}})];
    if (layout_rules && p.zero != 2) v->fail("applies to zero 2 only");
    if (layout_rules && p.zero2_param_gather == ParallelSpec::Zero2Gather::per_unit) {
      if (p.pp > 1) v->fail("per_unit (PyTorch FSDP SHARD_GRAD_OP) with pipeline parallelism is not supported yet");
      if (p.schedule == Schedule::zb_h1 || p.schedule == Schedule::dualpipev)
        v->fail("per_unit with the zb-h1 or dualpipev schedule is not supported yet");
    }
  }
  if (auto v = node.find("zero1_grad_reduce")) {
    p.zero1_grad_all_reduce = parse_choice(*v, Choices{{"reduce_scatter", "all_reduce"}, {}}) == 1;
    if (layout_rules && p.zero != 1) v->fail("applies to zero 1 only");
  }
  const bool fsdp_units = p.fsdp_units();
  if (auto v = node.find("fsdp_prefetch")) {
    p.fsdp_prefetch = v->as_bool();
    if (layout_rules && !fsdp_units)
      v->fail("applies to zero 3 or zero 2 with zero2_param_gather per_unit (FSDP) only");
  }
  if (auto v = node.find("overlap_grad_reduce")) p.overlap_grad_reduce = v->as_bool();
  if (auto v = node.find("overlap_param_gather")) {
    p.overlap_param_gather = v->as_bool();
    // Megatron: --overlap-param-gather requires the distributed optimizer and --overlap-grad-reduce.
    if (layout_rules && p.overlap_param_gather && p.zero < 1) v->fail("requires the distributed optimizer (zero >= 1)");
    if (p.overlap_param_gather && !p.overlap_grad_reduce) v->fail("requires overlap_grad_reduce");
    if (layout_rules && p.overlap_param_gather && fsdp_units) v->fail("does not apply to FSDP's per-unit all-gathers");
  }
  if (auto v = node.find("align_param_gather")) {
    p.align_param_gather = v->as_bool();
    if (!p.overlap_param_gather) v->fail("applies to overlap_param_gather true only");
  }
  if (auto v = node.find("dp_bucket_mb")) p.dp_bucket_mb = v->as_positive_number();
  if (auto v = node.find("moe_shared_expert_overlap")) p.moe_shared_expert_overlap = v->as_bool();
  if (auto v = node.find("cp_comm_type")) {
    constexpr std::array<ParallelSpec::CpComm, 3> kCpComm = {ParallelSpec::CpComm::p2p, ParallelSpec::CpComm::a2a,
                                                             ParallelSpec::CpComm::allgather};
    p.cp_comm = kCpComm[parse_choice(*v, Choices{{"p2p", "a2a", "allgather"}, {}})];
    if (layout_rules && p.cp_comm != ParallelSpec::CpComm::p2p && p.cp == 1) v->fail("applies with cp > 1 only");
  }
  if (auto v = node.find("distributed_optimizer_instances")) {
    p.dist_opt_instances = v->as_positive_int();
    if (p.dist_opt_instances > 1 && p.zero1_grad_all_reduce)
      v->fail(
          "does not combine with zero1_grad_reduce \"all_reduce\" (each instance would all-reduce whole gradients)");
    if (layout_rules && p.dist_opt_instances > 1 && p.zero != 1 && p.zero != 3)
      v->fail(
          "applies to the distributed optimizer (zero 1, Megatron's --num-distributed-optimizer-instances) and to "
          "fully sharded data parallelism (zero 3: hybrid sharding, HSDP) only");
  }
  if (auto v = node.find("outer_dp_sharding_strategy")) {
    p.outer_optim_shard = parse_choice(*v, Choices{{"no_shard", "optim"}, {}}) == 1;
    if (layout_rules && p.outer_optim_shard && (p.zero != 3 || p.dist_opt_instances < 2))
      v->fail("\"optim\" applies to hybrid sharding only (zero 3 with distributed_optimizer_instances > 1)");
  }
  if (auto v = node.find("first_stage_layers")) p.first_stage_layers = v->as_positive_int();
  if (auto v = node.find("last_stage_layers")) p.last_stage_layers = v->as_positive_int();
  // Megatron-Core: these and --decoder-first/last-pipeline-num-layers are mutually exclusive.
  const bool fixed_stages = p.first_stage_layers > 0 || p.last_stage_layers > 0;
  if (auto v = node.find("account_for_embedding_in_pipeline_split")) {
    p.account_for_embedding = v->as_bool();
    if (p.account_for_embedding && fixed_stages)
      v->fail("cannot be combined with first_stage_layers / last_stage_layers");
  }
  if (auto v = node.find("account_for_loss_in_pipeline_split")) {
    p.account_for_loss = v->as_bool();
    if (p.account_for_loss && fixed_stages) v->fail("cannot be combined with first_stage_layers / last_stage_layers");
  }
  if (auto v = node.find("pipeline_layout")) {
    p.pipeline_layout = v->as_string();
    if (fixed_stages || p.account_for_embedding || p.account_for_loss)
      v->fail("cannot be combined with first_stage_layers / last_stage_layers / account_for_*_in_pipeline_split");
  }
  if (auto v = node.find("moe_a2a_overlap")) p.moe_a2a_overlap = v->as_bool();
  if (auto v = node.find("delay_wgrad_compute")) {
    p.delay_wgrad_compute = v->as_bool();
    if (p.delay_wgrad_compute && !p.moe_a2a_overlap)
      v->fail("needs moe_a2a_overlap (Megatron-Core delays the experts' weight gradients within combined 1F1B)");
  }
  if (auto v = node.find("defer_embedding_wgrad_compute")) p.defer_embedding_wgrad = v->as_bool();
  if (auto v = node.find("wgrad_deferral_limit")) {
    p.wgrad_deferral_limit = v->as_nonnegative_int();
    if (!p.defer_embedding_wgrad) v->fail("applies to defer_embedding_wgrad_compute true only");
  }
  if (auto v = node.find("moe_token_dispatcher"))
    p.moe_dispatcher = static_cast<MoeDispatcher>(parse_choice(*v, Choices{{"alltoall", "allgather", "flex"}, {}}));
  if (auto v = node.find("moe_expert_capacity_factor")) p.moe_capacity_factor = v->as_positive_number();
  if (auto v = node.find("moe_pad_expert_input_to_capacity")) {
    p.moe_pad_to_capacity = v->as_bool();
    // Megatron-Core: padding to the capacity needs a capacity.
    if (p.moe_pad_to_capacity && p.moe_capacity_factor == 0) v->fail("requires moe_expert_capacity_factor");
  }
  if (auto v = node.find("moe_expert_rank_capacity_factor")) {
    p.moe_rank_capacity_factor = v->as_positive_number();
    // Below 1 every balanced step would exceed the buffers (and rerun without them, Megatron-Core's
    // PagedStashRunner).
    if (p.moe_rank_capacity_factor < 1)
      v->fail(fmt::format("{:g} is below 1: a rank receives the mean of the token copies even with balanced routing",
                          p.moe_rank_capacity_factor));
    if (p.moe_capacity_factor > 0)
      v->fail("cannot be combined with moe_expert_capacity_factor (token dropping sizes the experts' inputs itself)");
  }
  if (auto v = node.find("moe_paged_stash")) {
    p.moe_paged_stash = v->as_bool();
    if (p.moe_paged_stash && p.moe_rank_capacity_factor == 0) v->fail("requires moe_expert_rank_capacity_factor");
  }
  if (auto v = node.find("tp_comm_overlap")) {
    p.tp_comm_overlap = v->as_bool();
    // Megatron: --tp-comm-overlap requires --sequence-parallel.
    if (layout_rules && p.tp_comm_overlap && !p.sequence_parallel) v->fail("requires sequence_parallel");
  }
  if (auto v = node.find("scatter_gather_tensors_in_pipeline")) {
    p.scatter_gather_given = true;
    p.scatter_gather_tensors_in_pipeline = v->as_bool();
    if (layout_rules && p.scatter_gather_tensors_in_pipeline) {
      // Megatron-LM scattered the pipeline messages of a tensor-parallel stage only when the hidden
      // states were whole on every rank; its 1F1B and interleaved schedules are the ones it ran them in.
      if (p.tp < 2 || p.pp < 2) v->fail("needs tp > 1 and pp > 1 (a message between tensor-parallel stages)");
      if (p.sequence_parallel)
        v->fail("needs sequence_parallel false (Megatron-LM sends the sequence-parallel shard as it is)");
      if (p.schedule != Schedule::one_f_one_b && p.schedule != Schedule::interleaved)
        v->fail("needs schedule 1f1b or interleaved (the schedules of the Megatron-LM that scattered)");
      if (p.moe_a2a_overlap) v->fail("not with moe_a2a_overlap (Megatron-Core's, whose messages are whole)");
    }
  }
  return p;
}

// training.module_precision's keys for the workload::QuantModule bits (its "mtp" key is apart).
constexpr std::array<std::pair<std::string_view, std::uint8_t>, 3> kQuantModuleKeys = {
    {{"attention_linears", workload::kQuantAttentionLinears},
     {"mamba_out_proj", workload::kQuantMambaOutProj},
     {"moe_latent_proj", workload::kQuantMoeLatentProj}}};

// Megatron-Core's --recompute-modules names, in the order of workload::RecomputeModule's bits.
constexpr std::array<std::string_view, 7> kRecomputeModuleNames = {"core_attn", "layernorm", "mla_up_proj",   "mlp",
                                                                   "moe",       "moe_act",   "shared_experts"};

// A JSON array of names as bits: name i of `names` is bit i; an unknown or repeated name fails at its
// element ("unknown <noun> "x" (expected one of: ...)").
std::uint8_t parse_name_bits(const util::JsonNode& v, std::span<const std::string_view> names, const char* noun) {
  std::uint8_t mask = 0;
  for (std::size_t i = 0; i < v.json().size(); ++i) {
    const util::JsonNode item(v.json()[i], v.file(), fmt::format("{}[{}]", v.path(), i));
    const std::string name = item.as_string();
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      item.fail(fmt::format("unknown {} \"{}\" (expected one of: {})", noun, name, fmt::join(names, ", ")));
    const auto bit = static_cast<std::uint8_t>(1u << (it - names.begin()));
    if (mask & bit) item.fail(fmt::format("\"{}\" is listed twice", name));
    mask = static_cast<std::uint8_t>(mask | bit);
  }
  return mask;
}

// Megatron-Core's --offload-modules names: workload::OffloadModule's bits in order.
constexpr std::array<std::string_view, 7> kOffloadModuleNames = {"attn_norm", "qkv_linear", "core_attn", "attn_proj",
                                                                 "mlp_norm",  "expert_fc1", "moe_act"};

std::uint8_t parse_recompute_modules(const util::JsonNode& v) {
  if (!v.json().is_array()) v.fail("must be an array of module names");
  if (v.json().empty()) v.fail("must name at least one module");
  return parse_name_bits(v, kRecomputeModuleNames, "module");
}

// Megatron-Bridge's LoRA target_modules names: workload::LoraTarget's bits in order.
constexpr std::array<std::string_view, 4> kLoraTargetNames = {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"};

// Megatron-Core's --cuda-graph-scope names: workload::GraphScope's bits in order, then the whole
// iteration (--cuda-graph-impl local).
constexpr std::array<std::string_view, 6> kGraphScopeNames = {"attn",           "mlp",   "moe_router",
                                                              "moe_preprocess", "mamba", "full_iteration"};
constexpr std::size_t kFullIteration = 5;

std::uint8_t parse_graph_scopes(const util::JsonNode& v) {
  if (!v.json().is_array()) v.fail("must be an array of scope names (empty: no CUDA graphs)");
  const std::uint8_t mask = parse_name_bits(v, kGraphScopeNames, "scope");
  constexpr std::uint8_t kFull = 1u << kFullIteration;
  if ((mask & kFull) && mask != kFull) v.fail("\"full_iteration\" captures everything and takes no other scope");
  if ((mask & workload::kGraphMoePreprocess) && !(mask & workload::kGraphMoeRouter))
    v.fail("\"moe_preprocess\" needs \"moe_router\" (Megatron-Core)");
  return mask;
}

}  // namespace

std::vector<std::string> lora_target_names(const TrainingSpec& training) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kLoraTargetNames.size(); ++i)
    if ((training.lora_targets >> i) & 1u) out.emplace_back(kLoraTargetNames[i]);
  return out;
}

std::vector<std::pair<std::string_view, std::string_view>> module_precision_entries(const TrainingSpec& training) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  if (training.bf16_mtp) out.emplace_back("mtp", "bf16");
  for (const auto& [name, bit] : kQuantModuleKeys) {
    if (training.bf16_modules & bit) out.emplace_back(name, "bf16");
    if (training.fp8_modules & bit) out.emplace_back(name, "fp8");
  }
  return out;
}

std::vector<std::string> graph_scope_names(const TrainingSpec& training) {
  std::vector<std::string> out;
  if (training.cuda_graph_full_iteration) out.emplace_back(kGraphScopeNames[kFullIteration]);
  for (std::size_t i = 0; i < kFullIteration; ++i)
    if ((training.cuda_graph_scope >> i) & 1u) out.emplace_back(kGraphScopeNames[i]);
  return out;
}

bool keeps_param_remainders(const TrainingSpec& t) {
  const OptimizerSpec& o = t.optimizer;
  return o.use_precision_aware_optimizer && o.main_params_dtype == StateDtype::fp32 && o.store_param_remainders &&
         t.precision != Precision::fp16;
}

std::string_view cp_comm_name(ParallelSpec::CpComm c) {
  switch (c) {
    case ParallelSpec::CpComm::a2a:
      return "a2a";
    case ParallelSpec::CpComm::allgather:
      return "allgather";
    case ParallelSpec::CpComm::p2p:
      break;
  }
  return "p2p";
}

std::string_view state_dtype_name(StateDtype d) {
  constexpr std::array<std::string_view, 4> kNames = {"fp32", "bf16", "fp16", "fp8"};
  return kNames[static_cast<std::size_t>(d)];
}

namespace {

// training.optimizer, under Megatron-Core's OptimizerConfig names; the checks that need the layout
// are in check_optimizer.
OptimizerSpec parse_optimizer(const util::JsonNode& node) {
  node.reject_unknown({"use_precision_aware_optimizer", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
                       "store_param_remainders", "optimizer_cpu_offload", "optimizer_offload_fraction",
                       "overlap_cpu_optimizer_d2h_h2d"});
  OptimizerSpec o;
  if (auto v = node.find("use_precision_aware_optimizer")) o.use_precision_aware_optimizer = v->as_bool();
  // The state types apply to the precision-aware optimizer only (Megatron's arguments.py).
  auto needs_precision_aware = [&](const util::JsonNode& v) {
    if (!o.use_precision_aware_optimizer)
      v.fail("needs \"use_precision_aware_optimizer\": true (Megatron keeps every Adam state in fp32 without it)");
  };
  if (auto v = node.find("main_params_dtype")) {
    constexpr std::array<StateDtype, 2> kMain = {StateDtype::fp32, StateDtype::fp16};
    o.main_params_dtype = kMain[parse_choice(*v, Choices{{"fp32", "fp16"}, {}})];
    if (o.main_params_dtype != StateDtype::fp32) needs_precision_aware(*v);
  }
  for (const char* key : {"exp_avg_dtype", "exp_avg_sq_dtype"}) {
    auto v = node.find(key);
    if (!v) continue;
    constexpr std::array<StateDtype, 4> kMoment = {StateDtype::fp32, StateDtype::bf16, StateDtype::fp16,
                                                   StateDtype::fp8};
    const StateDtype d = kMoment[parse_choice(*v, Choices{{"fp32", "bf16", "fp16", "fp8"}, {}})];
    if (d != StateDtype::fp32) needs_precision_aware(*v);
    (std::string_view(key) == "exp_avg_dtype" ? o.exp_avg_dtype : o.exp_avg_sq_dtype) = d;
  }
  if (auto v = node.find("store_param_remainders")) {
    o.store_param_remainders = v->as_bool();
    needs_precision_aware(*v);
  }
  if (auto v = node.find("optimizer_cpu_offload")) {
    o.optimizer_cpu_offload = v->as_bool();
    // Megatron's arguments.py: the CPU offload runs with the precision-aware optimizer only.
    if (o.optimizer_cpu_offload) needs_precision_aware(*v);
  }
  for (const char* key : {"optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d"}) {
    auto v = node.find(key);
    if (!v) continue;
    if (!o.optimizer_cpu_offload) v->fail("applies to \"optimizer_cpu_offload\": true only");
    if (std::string_view(key) == "overlap_cpu_optimizer_d2h_h2d") {
      o.overlap_cpu_optimizer_d2h_h2d = v->as_bool();
      continue;
    }
    o.optimizer_offload_fraction = v->as_positive_number();
    if (o.optimizer_offload_fraction > 1)
      v->fail(fmt::format("{:g} exceeds 1 (the fraction of this rank's parameters whose Adam step runs on the CPU)",
                          o.optimizer_offload_fraction));
  }
  return o;
}

TrainingSpec parse_training(const util::JsonNode& node) {
  node.reject_unknown({"micro_batch",
                       "global_batch",
                       "seq_len",
                       "recompute",
                       "recompute_layers",
                       "precision",
                       "fp8_recipe",
                       "fp8_param_gather",
                       "attention",
                       "framework",
                       "host_forward_us",
                       "host_backward_us",
                       "grad_reduce_in_fp32",
                       "gradient_accumulation_fusion",
                       "moe_router_fusion",
                       "moe_permute_fusion",
                       "moe_grouped_gemm",
                       "cross_entropy",
                       "recompute_modules",
                       "cpu_offload_layers",
                       "offload_modules",
                       "host_overhead",
                       "cuda_graph_scope",
                       "host_cost_scale",
                       "peft",
                       "lora_rank",
                       "lora_targets",
                       "document_tokens",
                       "train_tokens",
                       "moe_load_imbalance",
                       "optimizer",
                       "bf16_layers_at_start",
                       "bf16_layers_at_end",
                       "module_precision",
                       "torch_compile",
                       "torch_compile_loss"});
  TrainingSpec t;
  if (auto v = node.find("micro_batch")) t.micro_batch = v->as_positive_int();
  t.global_batch = node.at("global_batch").as_positive_int();
  t.seq_len = node.at("seq_len").as_positive_int();
  // 16M tokens: 16 times the longest published run (NeMo's 1M-token context-parallel runs).
  constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;
  if (t.seq_len > kMaxSeqLen)
    node.at("seq_len").fail(fmt::format("{} exceeds the {} tokens trainsim models", t.seq_len, kMaxSeqLen));
  if (auto v = node.find("recompute")) {
    constexpr std::array<Recompute, 3> kRecompute = {Recompute::none, Recompute::selective, Recompute::full};
    t.recompute = kRecompute[parse_choice(*v, Choices{{"none", "selective", "full"}, {}})];
  }
  if (auto v = node.find("precision")) {
    constexpr std::array<Precision, 4> kPrecision = {Precision::bf16, Precision::fp16, Precision::fp8,
                                                     Precision::nvfp4};
    t.precision = kPrecision[parse_choice(*v, Choices{{"bf16", "fp16", "fp8", "nvfp4"}, {}})];
  }
  if (auto v = node.find("recompute_modules")) {
    if (t.recompute != Recompute::selective) v->fail("applies to \"recompute\": \"selective\" only");
    t.recompute_modules = parse_recompute_modules(*v);
  }
  if (auto v = node.find("recompute_layers")) {
    t.recompute_layers = v->as_positive_int();
    if (t.recompute != Recompute::full) v->fail("applies to \"recompute\": \"full\" only");
  }
  if (auto v = node.find("cpu_offload_layers")) {
    t.cpu_offload_layers = v->as_nonnegative_int();
    if (t.cpu_offload_layers > 0 && t.recompute != Recompute::none)
      v->fail(
          "needs \"recompute\": \"none\" (Megatron-Core: CPU offloading does not work with activation "
          "recomputation)");
  }
  if (auto v = node.find("offload_modules")) {
    if (!v->json().is_array()) v->fail("must be an array of module names (empty: no offloading)");
    for (std::size_t i = 0; i < v->json().size(); ++i)
      if (v->json()[i].is_string() && v->json()[i].get<std::string>() == "fused_group_mlp")
        util::JsonNode(v->json()[i], v->file(), fmt::format("{}[{}]", v->path(), i))
            .fail("\"fused_group_mlp\" (Transformer Engine's op-fuser grouped MLP) is not supported yet");
    t.offload_modules = parse_name_bits(*v, kOffloadModuleNames, "module");
    if ((t.offload_modules & workload::kOffloadAttnProj) && !(t.offload_modules & workload::kOffloadCoreAttn))
      v->fail("\"attn_proj\" needs \"core_attn\" (Megatron-Core: the projection's input is the attention's output)");
    if (t.offload_modules != 0 && t.cpu_offload_layers > 0)
      v->fail("cannot be combined with cpu_offload_layers (Megatron-Core)");
  }
  if (auto v = node.find("attention")) {
    constexpr std::array<workload::AttentionImpl, 4> kAttention = {
        workload::AttentionImpl::flash, workload::AttentionImpl::flash2, workload::AttentionImpl::flash1,
        workload::AttentionImpl::softmax};
    t.attention = kAttention[parse_choice(*v, Choices{{"flash", "flash2", "flash1", "softmax"}, {}})];
  }
  if (auto v = node.find("framework")) {
    constexpr std::array<Framework, 4> kFramework = {Framework::megatron, Framework::pytorch_eager,
                                                     Framework::torchtitan, Framework::megatron};
    const std::size_t choice = parse_choice(
        *v, Choices{{"megatron", "pytorch-eager", "torchtitan", "megatron-deepspeed"}, {"pytorch-compile"}});
    t.framework = kFramework[choice];
    t.deepspeed = choice == 3;
  }
  if (auto v = node.find("fp8_recipe")) {
    if (t.precision != Precision::fp8) v->fail("applies to precision fp8 only (nvfp4 is a recipe of its own)");
    if (t.framework != Framework::megatron || t.deepspeed)
      v->fail("applies to \"framework\": \"megatron\" only (torchtitan's Float8 is torchao's tensorwise scaling)");
    constexpr std::array<Fp8Recipe, 4> kRecipe = {Fp8Recipe::delayed, Fp8Recipe::tensorwise, Fp8Recipe::mxfp8,
                                                  Fp8Recipe::blockwise};
    t.fp8_recipe = kRecipe[parse_choice(*v, Choices{{"delayed", "tensorwise", "mxfp8", "blockwise"}, {}})];
  }
  if (auto v = node.find("fp8_param_gather")) {
    t.fp8_param_gather = v->as_bool();
    if (t.fp8_param_gather && t.precision != Precision::fp8)
      v->fail("applies to precision fp8 only (Megatron-Core keeps NVFP4 weights in BF16)");
    if (t.fp8_param_gather && (t.framework != Framework::megatron || t.deepspeed))
      v->fail("applies to \"framework\": \"megatron\" only (Megatron-Core's FP8 parameters)");
  }
  if (auto v = node.find("torch_compile")) {
    if (t.framework != Framework::torchtitan) v->fail("applies to \"framework\": \"torchtitan\" only");
    t.torch_compile = v->as_bool();
  }
  if (auto v = node.find("torch_compile_loss")) {
    if (t.framework != Framework::torchtitan) v->fail("applies to \"framework\": \"torchtitan\" only");
    t.torch_compile_loss = v->as_bool();
  }
  for (const char* key : {"host_forward_us", "host_backward_us"}) {
    auto v = node.find(key);
    if (!v) continue;
    if (t.framework == Framework::megatron)
      v->fail("applies to \"framework\": \"pytorch-eager\" or \"torchtitan\" only");
    (std::string_view(key) == "host_forward_us" ? t.host_forward_s : t.host_backward_s) =
        v->as_positive_number() * 1e-6;
  }
  if (auto v = node.find("host_overhead")) {
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    t.host_overhead = v->as_bool();
  }
  if (auto v = node.find("host_cost_scale")) {
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    t.host_cost_scale = v->as_positive_number();
    if (t.host_cost_scale > 1000) v->fail(fmt::format("{:g} exceeds 1000", t.host_cost_scale));
    if (!t.host_overhead) v->fail("needs \"host_overhead\": true");
  }
  if (auto v = node.find("cuda_graph_scope")) {
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    const std::uint8_t mask = parse_graph_scopes(*v);
    if (mask != 0 && !t.host_overhead) v->fail("needs \"host_overhead\": true (CUDA graphs save host time)");
    t.cuda_graph_full_iteration = (mask >> kFullIteration) & 1u;
    t.cuda_graph_scope = static_cast<std::uint8_t>(mask & ((1u << kFullIteration) - 1));
  }
  if (auto v = node.find("cross_entropy")) {
    t.fused_cross_entropy = parse_choice(*v, Choices{{"unfused", "fused"}, {}}) == 1;
    if (t.framework != Framework::megatron)
      v->fail(fmt::format("applies to \"framework\": \"megatron\" only ({} runs torch's cross_entropy)",
                          framework_name(t.framework)));
  }
  // Megatron-Core's --first-last-layers-bf16: these layers run their GEMMs in BF16 under FP8 / NVFP4.
  for (const char* key : {"bf16_layers_at_start", "bf16_layers_at_end"}) {
    auto v = node.find(key);
    if (!v) continue;
    const std::int64_t n = v->as_int();
    if (n < 0) v->fail(fmt::format("{} is negative", n));
    if (t.precision != Precision::fp8 && t.precision != Precision::nvfp4)
      v->fail("applies to precision fp8 or nvfp4 only (the other layers' GEMMs are already 16-bit)");
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    (std::string_view(key) == "bf16_layers_at_start" ? t.bf16_layers_at_start : t.bf16_layers_at_end) = n;
  }
  // Transformer Engine's per-module recipes: modules kept above the run's precision.
  if (auto v = node.find("module_precision")) {
    v->expect_object();
    if (t.precision != Precision::fp8 && t.precision != Precision::nvfp4)
      v->fail("applies to precision fp8 or nvfp4 only (the other runs' GEMMs are already 16-bit)");
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    v->reject_unknown({"mtp", "attention_linears", "mamba_out_proj", "moe_latent_proj"});
    for (const auto& [key, bit] : kQuantModuleKeys) {
      const auto m = v->find(key);
      if (!m) continue;
      if (parse_choice(*m, Choices{{"bf16", "fp8"}, {}}) == 0) {
        t.bf16_modules |= bit;
      } else {
        if (t.precision != Precision::nvfp4) m->fail("fp8 is above the run's precision under nvfp4 only: bf16");
        t.fp8_modules |= bit;
      }
    }
    if (const auto m = v->find("mtp")) {
      parse_choice(*m, Choices{{"bf16"}, {}});
      t.bf16_mtp = true;
    }
  }
  if (auto v = node.find("document_tokens")) {
    if (t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
    t.document_tokens = v->as_positive_int();
    if (t.document_tokens > t.seq_len)
      v->fail(fmt::format("{} exceeds seq_len ({}): a document longer than the sequence is not packed",
                          t.document_tokens, t.seq_len));
    if (t.attention == workload::AttentionImpl::softmax)
      v->fail("needs fused attention (Megatron's packed sequences run Transformer Engine's THD kernels)");
  }
  if (auto v = node.find("train_tokens")) {
    t.train_tokens = v->as_positive_number();
    // 10^18 tokens: a hundred thousand times the largest published pretraining run (15T tokens).
    constexpr double kMaxTrainTokens = 1e18;
    if (t.train_tokens > kMaxTrainTokens)
      v->fail(fmt::format("{:g} exceeds {:g} tokens", t.train_tokens, kMaxTrainTokens));
  }
  if (auto v = node.find("moe_load_imbalance")) {
    t.moe_load_imbalance = v->as_positive_number();
    if (t.moe_load_imbalance < 1)
      v->fail(fmt::format("{:g} is below 1: the busiest rank receives at least the mean", t.moe_load_imbalance));
  }
  if (auto v = node.find("peft")) {
    t.lora = parse_choice(*v, Choices{{"none", "lora"}, {}}) == 1;
    if (t.lora && t.framework != Framework::megatron) v->fail("applies to \"framework\": \"megatron\" only");
  }
  if (auto v = node.find("lora_rank")) {
    if (!t.lora) v->fail("applies to \"peft\": \"lora\" only");
    t.lora_rank = v->as_positive_int();
  }
  if (auto v = node.find("lora_targets")) {
    if (!t.lora) v->fail("applies to \"peft\": \"lora\" only");
    if (!v->json().is_array()) v->fail("must be an array of linear names");
    if (v->json().empty()) v->fail("must name at least one linear");
    t.lora_targets = parse_name_bits(*v, kLoraTargetNames, "linear");
  }
  if (auto v = node.find("optimizer")) {
    if (t.framework != Framework::megatron)
      v->fail(fmt::format("applies to \"framework\": \"megatron\" only ({} runs torch's fused AdamW)",
                          framework_name(t.framework)));
    t.optimizer = parse_optimizer(*v);
  }
  t.grad_reduce_in_fp32 = t.precision != Precision::fp16;
  if (auto v = node.find("grad_reduce_in_fp32")) {
    if (t.framework == Framework::pytorch_eager)
      v->fail("applies to \"framework\": \"megatron\" only (pytorch-eager keeps bf16 gradients)");
    t.grad_reduce_in_fp32 = v->as_bool();
  }
  if (auto v = node.find("gradient_accumulation_fusion")) {
    if (t.framework != Framework::megatron)
      v->fail(fmt::format("applies to \"framework\": \"megatron\" only ({} has no main_grad buffer)",
                          framework_name(t.framework)));
    t.gradient_accumulation_fusion = v->as_bool();
  }
  for (auto [key, value] :
       {std::pair{"moe_router_fusion", &t.moe_router_fusion}, std::pair{"moe_permute_fusion", &t.moe_permute_fusion},
        std::pair{"moe_grouped_gemm", &t.moe_grouped_gemm}}) {
    if (auto v = node.find(key)) {
      if (t.framework != Framework::megatron)
        v->fail("applies to \"framework\": \"megatron\" only (Megatron-Core's MoE layers)");
      *value = v->as_bool();
    }
  }
  return t;
}

// framework pytorch-eager: the single-GPU Llama-style model of workload/eager_ops.h.
void check_eager(const util::JsonNode& root, const Scenario& s) {
  const std::string file = root.file();
  const std::string training_path = util::join_path(root.path(), "training");
  const std::string framework_path = util::join_path(training_path, "framework");
  const workload::ModelSpec& m = s.model;
  const TrainingSpec& t = s.training;
  if (s.gpus != 1)
    throw util::InputError(file, util::join_path(root.path(), "gpus"),
                           fmt::format("framework pytorch-eager simulates one GPU, got {}", s.gpus));
  auto refuse = [&](bool bad, const std::string& what) {
    if (bad) throw util::InputError(file, framework_path, "pytorch-eager needs " + what);
  };
  refuse(m.mlp != workload::MlpKind::swiglu || m.hybrid(), "a Llama-style model (mlp swiglu)");
  refuse(m.dropout > 0, "dropout 0");
  refuse(m.tied_embeddings, "untied embeddings (its LM head is a separate weight)");
  refuse(m.head_dim % 2 != 0, "an even head_dim (rotary embedding)");
  refuse(m.linear_bias, "a model without linear biases (its Llama has none)");
  refuse(m.post_norms, "a model without post_norms (its Llama has none)");
  refuse(t.recompute != Recompute::none, "recompute none");
  refuse(t.precision != Precision::bf16, "precision bf16");
  refuse(t.attention != workload::AttentionImpl::flash && t.attention != workload::AttentionImpl::flash2,
         "fused attention (attention flash or flash2)");
}

// torchtitan as trainsim models it (workload/torchtitan_ops.h): a Llama model, data parallelism by
// FSDP2 (zero 3), bf16 compute. Its tensor, pipeline and context parallelism and Float8 training are
// refused until modelled.
// Megatron-DeepSpeed (the microsoft / deepspeedai fork and BigScience's, read in
// docs/import-megatron.md): Megatron's model under DeepSpeed's engine. Its pipeline engine (every
// layout with pp > 1) runs 1F1B only, ZeRO stage 0 or 1, and reduces the gradients after the last
// micro-batch; DeepSpeed gathers the updated parameters after the step; the Megatron-Core and
// Transformer Engine features below are not there.
// A framework's check: the scenario's paths, and a refusal naming the framework.
struct FrameworkCheck {
  FrameworkCheck(const util::JsonNode& root, std::string prefix)
      : file(root.file()),
        training_path(util::join_path(root.path(), "training")),
        parallel_path(util::join_path(root.path(), "parallel")),
        framework_path(util::join_path(training_path, "framework")),
        prefix_(std::move(prefix)) {}
  void refuse(bool bad, const std::string& path, const std::string& what) const {
    if (bad) throw util::InputError(file, path, prefix_ + what);
  }
  std::string parallel_key(const char* key) const { return util::join_path(parallel_path, key); }
  std::string training_key(const char* key) const { return util::join_path(training_path, key); }
  const std::string file, training_path, parallel_path, framework_path;

 private:
  std::string prefix_;
};

void check_deepspeed(const util::JsonNode& root, const Scenario& s) {
  const FrameworkCheck c(root, "megatron-deepspeed: ");
  const std::string& framework_path = c.framework_path;
  const workload::ModelSpec& m = s.model;
  const TrainingSpec& t = s.training;
  const ParallelSpec& p = s.parallel;
  auto refuse = [&c](bool bad, const std::string& path, const std::string& what) { c.refuse(bad, path, what); };
  auto parallel_key = [&c](const char* key) { return c.parallel_key(key); };
  auto training_key = [&c](const char* key) { return c.training_key(key); };
  refuse(m.moe(), framework_path, "DeepSpeed-MoE's experts are not modelled (dense models only)");
  refuse(m.hybrid() || m.mla() || m.mtp_layers > 0, framework_path,
         "runs dense GPT and Llama-style models (no Mamba layers, latent attention or MTP)");
  refuse(t.precision != Precision::bf16 && t.precision != Precision::fp16, training_key("precision"),
         "runs bf16 or fp16 (its Transformer Engine FP8 path refuses the pipeline model)");
  refuse(p.schedule != Schedule::one_f_one_b, parallel_key("schedule"),
         "DeepSpeed's pipeline engine runs 1F1B only (its TrainSchedule)");
  const bool pipeline = p.pp > 1;
  refuse(pipeline && p.zero >= 2, parallel_key("zero"),
         fmt::format("{}: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only", p.zero));
  refuse(pipeline && p.overlap_grad_reduce, parallel_key("overlap_grad_reduce"),
         "DeepSpeed's pipeline engine reduces the gradients after the last micro-batch: needs false");
  refuse(pipeline && p.zero == 0 && t.precision == Precision::bf16, parallel_key("zero"),
         "0 with bf16 under the pipeline engine runs DeepSpeed's BF16_Optimizer: zero 1 with zero1_grad_reduce "
         "\"all_reduce\"");
  refuse(p.overlap_param_gather, parallel_key("overlap_param_gather"),
         "DeepSpeed gathers the updated parameters after the step: needs false");
  refuse(p.tp_comm_overlap, parallel_key("tp_comm_overlap"), "Transformer Engine's overlap is not there");
  refuse(p.first_stage_layers > 0 || p.last_stage_layers > 0 || p.account_for_embedding || p.account_for_loss,
         parallel_key("pipeline_layout"),
         "DeepSpeed's PipelineModule places the layers: give its split as pipeline_layout (import megatron "
         "computes it) instead of first/last_stage_layers or account_for_*");
  refuse(p.dist_opt_instances > 1, parallel_key("distributed_optimizer_instances"), "has no such instances");
  refuse(p.zero == 2 && p.zero2_param_gather == ParallelSpec::Zero2Gather::per_unit, parallel_key("zero2_param_gather"),
         "DeepSpeed's ZeRO-2 gathers after the optimizer (after_optimizer)");
  // Megatron-DeepSpeed's context parallelism is DeepSpeed-Ulysses, which asserts tp 1 and pp 1.
  refuse(p.cp > 1 && p.cp_comm != ParallelSpec::CpComm::a2a, parallel_key("cp_comm_type"),
         "its sequence parallelism is DeepSpeed-Ulysses: cp_comm_type a2a");
  refuse(p.cp > 1 && (p.tp > 1 || p.pp > 1), parallel_key("cp"),
         "DeepSpeed-Ulysses runs with tp 1 and pp 1 (Megatron-DeepSpeed's assertion)");
  refuse(t.fused_cross_entropy, training_key("cross_entropy"), "has no fused cross-entropy (Transformer Engine's)");
  refuse(!t.gradient_accumulation_fusion, training_key("gradient_accumulation_fusion"),
         "DeepSpeed's engine accumulates the gradients (Megatron's DDP hook and its main_grad are not there)");
  refuse(t.lora, training_key("peft"), "LoRA is Megatron-Bridge's");
  refuse(t.cuda_graph_scope != 0 || t.cuda_graph_full_iteration, training_key("cuda_graph_scope"),
         "runs no CUDA graphs");
  refuse(t.cpu_offload_layers > 0, training_key("cpu_offload_layers"),
         "Transformer Engine's activation offloading is not there");
  refuse(t.optimizer.non_default() || t.optimizer.optimizer_cpu_offload, training_key("optimizer"),
         "runs DeepSpeed's Adam (Megatron's precision-aware and offloaded optimizers are not there)");
}

void check_torchtitan(const util::JsonNode& root, Scenario& s) {
  const FrameworkCheck c(root, "torchtitan ");
  const std::string &training_path = c.training_path, &parallel_path = c.parallel_path,
                    &framework_path = c.framework_path;
  const workload::ModelSpec& m = s.model;
  const TrainingSpec& t = s.training;
  const ParallelSpec& p = s.parallel;
  auto refuse = [&c](bool bad, const std::string& path, const std::string& what) { c.refuse(bad, path, what); };
  refuse(m.mlp != workload::MlpKind::swiglu || m.hybrid(), framework_path, "needs a Llama-style model (mlp swiglu)");
  refuse(m.dropout > 0, framework_path, "needs dropout 0");
  refuse(m.tied_embeddings, framework_path, "needs untied embeddings (its output layer is a separate weight)");
  refuse(m.head_dim % 2 != 0, framework_path, "needs an even head_dim (rotary embedding)");
  refuse(m.qk_norm, framework_path, "with qk_norm is not supported yet");
  refuse(m.linear_bias, framework_path, "needs a model without linear biases (torchtitan's Llama has none)");
  refuse(m.post_norms, framework_path, "needs a model without post_norms (torchtitan's Llama has none)");
  refuse(m.heads % m.kv_heads != 0, framework_path, "needs heads a multiple of kv_heads (repeat_kv)");
  refuse(t.precision != Precision::bf16 && t.precision != Precision::fp8, util::join_path(training_path, "precision"),
         "runs bf16, or fp8 as torchao's Float8");
  refuse(t.precision == Precision::fp8 && !t.torch_compile, util::join_path(training_path, "precision"),
         "Float8 without torch_compile is not supported yet");
  refuse(t.attention != workload::AttentionImpl::flash && t.attention != workload::AttentionImpl::flash2,
         util::join_path(training_path, "attention"),
         "needs fused attention (scaled_dot_product_attention: attention flash or flash2)");
  // Tensor parallelism as torchtitan's Llama plan applies it: sequence-parallel norms, column- and
  // row-parallel linears, a vocabulary-parallel embedding and output layer; async TP (PyTorch's
  // micro-pipelined collective matmuls) needs torch.compile.
  refuse(p.tp > 1 && !p.sequence_parallel, util::join_path(parallel_path, "sequence_parallel"),
         "tensor parallelism is sequence-parallel: needs sequence_parallel true");
  refuse(p.tp_comm_overlap && !t.torch_compile, util::join_path(parallel_path, "tp_comm_overlap"),
         "async tensor parallelism needs torch_compile");
  // Pipeline parallelism: PyTorch's pipelining schedules GPipe, 1F1B and Interleaved1F1B (zb-h1 with
  // FSDP is refused above).
  // PyTorch's context_parallel rotates K and V by all-gather (torchtitan's default rotate method,
  // cp_comm_type allgather) or around a ring (its "alltoall", cp_comm_type p2p).
  refuse(p.cp > 1 && p.cp_comm == ParallelSpec::CpComm::a2a, util::join_path(parallel_path, "cp_comm_type"),
         "context parallelism rotates by allgather or around the ring (p2p), not a2a");
  // FSDP2: zero 3 reshards each block after its forward (reshard_after_forward True); zero 2 with
  // per-unit gathers keeps it from the forward to its backward (False).
  refuse(p.zero != 3 && !(p.zero == 2 && p.zero2_param_gather == ParallelSpec::Zero2Gather::per_unit),
         util::join_path(parallel_path, "zero"),
         fmt::format("shards with FSDP2: needs zero 3, or zero 2 with zero2_param_gather per_unit, got {}", p.zero));
  refuse(t.recompute == Recompute::selective && t.recompute_modules != workload::kRecomputeCoreAttn,
         util::join_path(training_path, "recompute_modules"),
         "has no recompute modules (recompute selective is its op-level policy)");
  if (t.recompute == Recompute::selective) s.training.recompute_modules = workload::kRecomputeTorchtitanOp;
}

double product(std::int64_t a, std::int64_t b, std::int64_t c = 1) {
  return static_cast<double>(a) * static_cast<double>(b) * static_cast<double>(c);
}

// parallel.pipeline_layout: one virtual stage per pp x virtual_stages chunk, the embedding alone at
// the start of the first, the loss at the end of the last with the multi-token prediction modules
// before it, and every transformer layer once.
void check_pipeline_layout(const util::JsonNode& root, Scenario& s) {
  ParallelSpec& p = s.parallel;
  const workload::ModelSpec& m = s.model;
  const std::string path = util::join_path(util::join_path(root.path(), "parallel"), "pipeline_layout");
  auto fail = [&](const std::string& why) { throw util::InputError(root.file(), path, why); };
  std::string flat;
  try {
    LayoutExpander e{p.pipeline_layout};
    flat = e.sequence();
    if (e.pos < e.text.size()) fail(fmt::format("unmatched ')' at offset {}", e.pos));
  } catch (const std::string& why) {
    fail(why);
  }
  std::vector<std::string> stages(1);
  for (char c : flat) {
    if (c == '|')
      stages.emplace_back();
    else
      stages.back() += c;
  }
  const std::int64_t chunks = p.pp * chunks_per_stage(p);
  if (static_cast<std::int64_t>(stages.size()) != chunks)
    fail(fmt::format("has {} virtual stages; pp x virtual_stages = {}", stages.size(), chunks));
  std::int64_t layers = 0, mtp = 0;
  p.layout_layers.clear();
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const std::string& st = stages[k];
    const bool first = k == 0, last = k + 1 == stages.size();
    std::int64_t n = 0;
    for (std::size_t i = 0; i < st.size(); ++i) {
      const char c = st[i];
      if (c == 't') {
        ++n;
      } else if (c == 'E' && !(first && i == 0)) {
        fail(fmt::format("'E' (the embedding) must open the first virtual stage, found in stage {}", k));
      } else if (c == 'L' && !(last && i + 1 == st.size())) {
        fail(fmt::format("'L' (the loss) must close the last virtual stage, found in stage {}", k));
      } else if (c == 'm') {
        if (!last)
          fail(fmt::format("'m' (multi-token prediction) belongs to the last virtual stage, found in stage {}", k));
        if (st.find('t', i) != std::string::npos) fail("'m' must follow the last stage's transformer layers");
        ++mtp;
      }
    }
    p.layout_layers.push_back(n);
    layers += n;
  }
  if (stages.front().empty() || stages.front()[0] != 'E') fail("the first virtual stage must start with 'E'");
  if (stages.back().empty() || stages.back().back() != 'L') fail("the last virtual stage must end with 'L'");
  if (layers != m.layers) fail(fmt::format("places {} transformer layers ('t'); the model has {}", layers, m.layers));
  if (mtp != m.mtp_layers)
    fail(fmt::format("places {} multi-token prediction modules ('m'); the model has mtp_layers {}", mtp, m.mtp_layers));
}

// Expert parallelism (Megatron-Core's MoE parallel folding): the expert layers regroup the tp*cp*dp
// ranks of a pipeline stage as etp x ep x expert-dp, so etp*ep must divide them; ep divides the
// experts, etp their width. Megatron-Core needs sequence parallelism for MoE with tp > 1.
void check_experts(const util::JsonNode& root, Scenario& s) {
  ParallelSpec& p = s.parallel;
  const workload::ModelSpec& m = s.model;
  const std::string file = root.file();
  const std::string parallel_path = util::join_path(root.path(), "parallel");
  const std::string ep_path = util::join_path(parallel_path, "ep");
  const std::string etp_path = util::join_path(parallel_path, "etp");
  if (!m.moe()) {
    if (p.ep > 1) throw util::InputError(file, ep_path, fmt::format("{} needs a mixture-of-experts model", p.ep));
    if (p.etp > 0) throw util::InputError(file, etp_path, "needs a mixture-of-experts model");
    p.etp = 1;
    return;
  }
  if (p.etp == 0) p.etp = p.tp;
  if (m.experts % p.ep != 0)
    throw util::InputError(file, ep_path, fmt::format("{} does not divide experts ({})", p.ep, m.experts));
  if (m.moe_ffn_hidden % p.etp != 0)
    throw util::InputError(file, etp_path,
                           fmt::format("{} does not divide moe_ffn_hidden ({})", p.etp, m.moe_ffn_hidden));
  if (m.shared_expert_ffn_hidden % p.tp != 0)
    throw util::InputError(
        file, util::join_path(parallel_path, "tp"),
        fmt::format("{} does not divide shared_expert_ffn_hidden ({})", p.tp, m.shared_expert_ffn_hidden));
  const std::int64_t ranks = p.tp * p.cp * p.dp;  // of one pipeline stage
  if (ranks % p.etp != 0 || (ranks / p.etp) % p.ep != 0)
    throw util::InputError(file, ep_path,
                           fmt::format("etp*ep = {}*{} = {} does not divide the {} ranks of a pipeline stage "
                                       "(tp*cp*dp = {}*{}*{})",
                                       p.etp, p.ep, product(p.etp, p.ep), ranks, p.tp, p.cp, p.dp));
  if (p.tp > 1 && !p.sequence_parallel)
    throw util::InputError(file, util::join_path(parallel_path, "sequence_parallel"),
                           "mixture-of-experts layers with tp > 1 need sequence_parallel (Megatron-Core requires it)");
  // Megatron FSDP (zero 3) and its optim_grads (zero 2) shard the routed experts over the expert
  // data-parallel ranks; PyTorch FSDP's per-unit zero 2 is not Megatron's.
  if (p.zero == 2 && p.zero2_param_gather == ParallelSpec::Zero2Gather::per_unit)
    throw util::InputError(file, util::join_path(parallel_path, "zero2_param_gather"),
                           "per_unit (PyTorch FSDP's SHARD_GRAD_OP) with a mixture-of-experts model is not supported "
                           "(Megatron FSDP's optim_grads is after_optimizer)");
  if (s.training.framework != Framework::megatron)
    throw util::InputError(
        file, util::join_path(util::join_path(root.path(), "training"), "framework"),
        fmt::format("{} with a mixture-of-experts model is not supported yet", framework_name(s.training.framework)));
}

// Megatron's layout constraints (ecosystem.md §2.1), checked once everything is parsed.
void check_layout(const util::JsonNode& root, Scenario& s, ParseOptions options) {
  ParallelSpec& p = s.parallel;
  const workload::ModelSpec& m = s.model;
  const std::string file = root.file();
  const std::string parallel_path = util::join_path(root.path(), "parallel");
  const std::string training_path = util::join_path(root.path(), "training");
  // A model feature trainsim runs under Megatron only: one line naming the other framework.
  auto megatron_only = [&](bool uses, std::string_view what) {
    if (uses && s.training.framework != Framework::megatron)
      throw util::InputError(
          file, util::join_path(training_path, "framework"),
          fmt::format("{} with {} is not supported yet", framework_name(s.training.framework), what));
  };

  // Divisibility step by step, so absurd sizes cannot overflow a product; products in messages are
  // printed from doubles for the same reason.
  if (s.gpus % p.tp != 0 || (s.gpus / p.tp) % p.pp != 0 || (s.gpus / p.tp / p.pp) % p.cp != 0) {
    throw util::InputError(file, util::join_path(root.path(), "gpus"),
                           fmt::format("{} is not a multiple of tp*pp*cp = {}*{}*{} = {}", s.gpus, p.tp, p.pp, p.cp,
                                       product(p.tp, p.pp, p.cp)));
  }
  const std::string tp_path = util::join_path(parallel_path, "tp");
  if (m.heads % p.tp != 0) {
    throw util::InputError(file, tp_path, fmt::format("{} does not divide heads ({})", p.tp, m.heads));
  }
  if (m.kv_heads % p.tp != 0) {
    throw util::InputError(file, tp_path, fmt::format("{} does not divide kv_heads ({})", p.tp, m.kv_heads));
  }
  if (m.ffn_hidden % p.tp != 0) {
    throw util::InputError(file, tp_path, fmt::format("{} does not divide ffn_hidden ({})", p.tp, m.ffn_hidden));
  }
  // A Mamba mixer splits its heads and its groups of B and C over TP (Megatron-Core's MambaMixer).
  if (m.mamba_heads % p.tp != 0 || m.mamba_groups % p.tp != 0) {
    throw util::InputError(
        file, tp_path,
        fmt::format("{} does not divide mamba_heads ({}) and mamba_groups ({})", p.tp, m.mamba_heads, m.mamba_groups));
  }
  // Megatron-Core's Mamba context parallelism shards each TP rank's heads over the CP ranks, and its
  // groups of B and C too, or each group over cp / groups of them (MambaContextParallel's checks).
  if (p.moe_shared_expert_overlap) {
    const std::string path = util::join_path(parallel_path, "moe_shared_expert_overlap");
    if (m.shared_expert_ffn_hidden == 0)
      throw util::InputError(file, path, "needs a mixture-of-experts model with a shared expert");
    if (p.ep == 1) throw util::InputError(file, path, "needs ep > 1 (it overlaps the token all-to-alls)");
    if (p.moe_a2a_overlap)
      throw util::InputError(file, path, "not with moe_a2a_overlap, which overlaps the all-to-alls already");
    if (p.moe_dispatcher == MoeDispatcher::allgather)
      throw util::InputError(file, path,
                             "needs the alltoall or flex token dispatcher (Megatron-Core; allgather has no all-to-alls "
                             "to overlap)");
  }
  // Transformer Engine's all-to-all context parallelism splits every rank's query and key/value heads
  // over the CP ranks.
  if (p.cp > 1 && p.cp_comm == ParallelSpec::CpComm::a2a &&
      ((m.heads / p.tp) % p.cp != 0 || (m.kv_heads / p.tp) % p.cp != 0))
    throw util::InputError(file, util::join_path(parallel_path, "cp_comm_type"),
                           fmt::format("a2a needs cp ({}) to divide the query heads ({}) and the key/value heads ({}) "
                                       "per tensor-parallel rank",
                                       p.cp, m.heads / p.tp, m.kv_heads / p.tp));
  if (m.hybrid_has('M') && p.cp > 1) {
    const std::int64_t heads = m.mamba_heads / p.tp, groups = m.mamba_groups / p.tp;
    if (heads % p.cp != 0)
      throw util::InputError(
          file, util::join_path(parallel_path, "cp"),
          fmt::format("{} does not divide the Mamba heads per tensor-parallel rank ({})", p.cp, heads));
    if (groups < p.cp ? p.cp % groups != 0 : groups % p.cp != 0)
      throw util::InputError(
          file, util::join_path(parallel_path, "cp"),
          fmt::format("{} and the Mamba groups per tensor-parallel rank ({}) must divide one another", p.cp, groups));
  }
  const bool accounted = p.account_for_embedding || p.account_for_loss;
  const bool laid_out = !p.pipeline_layout.empty();
  const bool uneven = p.first_stage_layers > 0 || p.last_stage_layers > 0 || accounted || laid_out;
  if (laid_out) {
    check_pipeline_layout(root, s);
  } else if (accounted) {
    // Megatron-Core: layers + 1 for each accounted embedding / loss, split evenly over the chunks.
    const std::string key =
        p.account_for_embedding ? "account_for_embedding_in_pipeline_split" : "account_for_loss_in_pipeline_split";
    const std::string path = util::join_path(parallel_path, key);
    if (p.pp < 2) throw util::InputError(file, path, "needs pp >= 2");
    const std::int64_t chunks = p.pp * chunks_per_stage(p);
    const std::int64_t slots = pipeline_slots(m, p);
    if (slots % chunks != 0)
      throw util::InputError(file, path,
                             fmt::format("layers + accounted embedding/loss = {} is not divisible by the {} model "
                                         "chunks (pp x virtual_stages)",
                                         slots, chunks));
  } else if (uneven) {
    // Megatron: the stages between the first and the last split the remaining layers evenly.
    const std::string key = p.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers";
    const std::string path = util::join_path(parallel_path, key);
    if (p.pp < 2) throw util::InputError(file, path, "uneven stages need pp >= 2");
    const std::int64_t fixed = p.first_stage_layers + p.last_stage_layers;
    const std::int64_t rest_stages = p.pp - (p.first_stage_layers > 0) - (p.last_stage_layers > 0);
    if (rest_stages == 0 && fixed != m.layers)
      throw util::InputError(file, path,
                             fmt::format("with pp = 2, first_stage_layers + last_stage_layers ({}) must equal "
                                         "layers ({})",
                                         fixed, m.layers));
    if (rest_stages > 0 && fixed >= m.layers)
      throw util::InputError(file, path,
                             fmt::format("first + last stage layers ({}) leave no layers for the other {} stages "
                                         "(the model has {})",
                                         fixed, rest_stages, m.layers));
    if (rest_stages > 0 && (m.layers - fixed) % rest_stages != 0)
      throw util::InputError(file, path,
                             fmt::format("the other {} stages cannot split the remaining {} layers evenly", rest_stages,
                                         m.layers - fixed));
  } else if (p.schedule != Schedule::dualpipev && m.layers % p.pp != 0) {  // (dualpipev: checked below)
    throw util::InputError(file, util::join_path(parallel_path, "pp"),
                           fmt::format("{} does not divide layers ({})", p.pp, m.layers));
  }
  if (p.schedule == Schedule::dualpipev) {
    const std::string path = util::join_path(parallel_path, "schedule");
    if (p.pp < 2) throw util::InputError(file, path, "dualpipev needs pp >= 2");
    if (p.first_stage_layers > 0 || p.last_stage_layers > 0 || accounted)
      throw util::InputError(file, path,
                             "dualpipev splits the layers evenly over its 2 x pp virtual stages, or as "
                             "pipeline_layout says (not first/last_stage_layers or account_for_*)");
    if (!laid_out && m.layers % (2 * p.pp) != 0)
      throw util::InputError(file, util::join_path(parallel_path, "pp"),
                             fmt::format("2 x pp = {} virtual stages do not divide layers ({}); give a pipeline_layout",
                                         2 * p.pp, m.layers));
  }
  if (p.schedule == Schedule::interleaved) {
    if (p.pp < 2)
      throw util::InputError(file, util::join_path(parallel_path, "schedule"),
                             "the interleaved schedule needs pp >= 2");
    if (!uneven && m.layers % (p.pp * p.virtual_stages) != 0)
      throw util::InputError(
          file, util::join_path(parallel_path, "virtual_stages"),
          fmt::format("pp*virtual_stages = {}*{} does not divide layers ({})", p.pp, p.virtual_stages, m.layers));
    // Uneven stages (Megatron-Core: --decoder-first/last-pipeline-num-layers with a virtual pipeline):
    // every stage's layers split evenly over its virtual_stages model chunks.
    for (std::int64_t st = 0; uneven && !accounted && !laid_out && st < p.pp; ++st) {
      const std::int64_t n = stage_layers(s, st);
      if (n % p.virtual_stages != 0)
        throw util::InputError(
            file, util::join_path(parallel_path, "virtual_stages"),
            fmt::format("{} virtual stages do not divide the {} layers of pipeline stage {}", p.virtual_stages, n, st));
    }
  }
  p.dp = s.gpus / p.tp / p.pp / p.cp;
  if (p.dist_opt_instances > 1) {
    const std::string path = util::join_path(parallel_path, "distributed_optimizer_instances");
    if ((p.dp * p.cp) % p.dist_opt_instances != 0)
      throw util::InputError(
          file, path,
          fmt::format("{} does not divide the dp*cp = {}*{} = {} ranks the optimizer is sharded over",
                      p.dist_opt_instances, p.dp, p.cp, p.dp * p.cp));
    // A mixture of experts' routed experts: their expert data-parallel ranks form as many instances
    // (Megatron-Core's intra- and inter-partial expert data-parallel groups).
    const std::int64_t stage_ranks = p.tp * p.cp * p.dp, expert_ranks = p.ep * (p.etp > 0 ? p.etp : p.tp);
    if (m.moe() && stage_ranks % expert_ranks == 0 && (stage_ranks / expert_ranks) % p.dist_opt_instances != 0)
      throw util::InputError(
          file, path,
          fmt::format("{} does not divide the {} expert data-parallel ranks (tp*cp*dp/(ep*etp) = "
                      "{}*{}*{}/({}*{})) the experts' optimizer is sharded over",
                      p.dist_opt_instances, stage_ranks / expert_ranks, p.tp, p.cp, p.dp, p.ep, expert_ranks / p.ep));
    if (p.zero == 3 && p.dp * p.cp == p.dist_opt_instances)
      throw util::InputError(file, path,
                             fmt::format("{} instances of one rank each shard nothing: that is plain data parallelism "
                                         "(zero 0)",
                                         p.dist_opt_instances));
  }
  // ZeRO shards over the DP x CP ranks; with one of them it changes nothing (Megatron accepts it),
  // but the precision-aware optimizer needs it on.
  if (p.zero >= 1 && p.dp * p.cp == 1 && !s.training.optimizer.use_precision_aware_optimizer)
    s.warnings.push_back(fmt::format("{}: {}: zero {} has no effect with dp*cp = 1 (nothing to shard over)", file,
                                     util::join_path(parallel_path, "zero"), p.zero));

  if (s.network == NetworkModel::flow && s.gpus > s.cluster.gpus_per_node && s.gpus % s.cluster.gpus_per_node != 0)
    throw util::InputError(file, util::join_path(root.path(), "network"),
                           fmt::format("the flow network needs whole nodes: {} GPUs are not a multiple of {} per node",
                                       s.gpus, s.cluster.gpus_per_node));
  if (s.training.precision == Precision::fp8 && s.cluster.gpu.fp8_flops <= 0)
    throw util::InputError(file, util::join_path(training_path, "precision"),
                           fmt::format("{} has no FP8 tensor cores", s.cluster.gpu.name));
  if (const auto recipe = s.training.fp8_recipe) {
    const std::string key = util::join_path(training_path, "fp8_recipe");
    if (*recipe == Fp8Recipe::mxfp8 && s.cluster.gpu.arch != hardware::Arch::blackwell)
      throw util::InputError(file, key,
                             fmt::format("mxfp8 needs Blackwell's tensor cores, which scale each 32 elements ({} has "
                                         "none): delayed, tensorwise or blockwise",
                                         s.cluster.gpu.name));
    if (*recipe == Fp8Recipe::delayed && s.training.bf16_layers_at_start + s.training.bf16_layers_at_end > 0)
      throw util::InputError(file, key,
                             "delayed scaling cannot keep layers in BF16 (Megatron-Core refuses "
                             "--first-last-layers-bf16 with it): tensorwise, mxfp8 or blockwise");
    if (*recipe == Fp8Recipe::delayed && s.training.module_precision())
      throw util::InputError(file, key,
                             "delayed scaling cannot keep modules in BF16 (Megatron-Core's per-module recipes "
                             "refuse it): tensorwise, mxfp8 or blockwise");
  }
  if (p.defer_embedding_wgrad) {
    const std::string key = util::join_path(parallel_path, "defer_embedding_wgrad_compute");
    auto refuse_defer = [&](bool bad, const std::string& why) {
      if (bad) throw util::InputError(file, key, why);
    };
    refuse_defer(s.training.framework != Framework::megatron || s.training.deepspeed,
                 "applies to \"framework\": \"megatron\" only (Megatron-Core's output layer)");
    refuse_defer(p.pp == 1, "needs pipeline parallelism (pp > 1): the weight gradients wait for the pipeline's flush");
    refuse_defer(!s.training.gradient_accumulation_fusion,
                 "needs gradient_accumulation_fusion (Megatron-Core's drain accumulates into main_grad)");
    refuse_defer(s.training.lora, "LoRA trains no output-layer weight");
    refuse_defer(p.zero >= 2, "not with Megatron FSDP (zero 2 or 3; NeMo turns it off there)");
    refuse_defer(p.schedule == Schedule::zb_h1 || p.schedule == Schedule::dualpipev,
                 "not with zb-h1 or dualpipev, whose weight passes are their own");
    refuse_defer(p.moe_a2a_overlap, "not supported yet with moe_a2a_overlap");
  }
  if (s.training.fp8_param_gather && p.zero == 0)
    throw util::InputError(file, util::join_path(training_path, "fp8_param_gather"),
                           "needs a distributed optimizer or FSDP (parallel.zero 1 or more): Megatron-Core gathers "
                           "FP8 parameters only there");
  if (s.training.precision == Precision::nvfp4 && s.cluster.gpu.fp4_flops <= 0)
    throw util::InputError(file, util::join_path(training_path, "precision"),
                           fmt::format("{} has no FP4 tensor cores (NVFP4 needs Blackwell)", s.cluster.gpu.name));
  // Context parallelism: Megatron splits the sequence into 2·cp chunks, rank i taking chunks i and
  // 2·cp - 1 - i so that causal attention costs every rank the same; ring attention needs fused
  // (flash) attention kernels.
  if (p.cp > 1) {
    const std::string cp_path = util::join_path(parallel_path, "cp");
    if (s.training.seq_len % (2 * p.cp) != 0)
      throw util::InputError(file, cp_path,
                             fmt::format("cp = {} cannot split seq_len {} into 2*cp = {} equal chunks", p.cp,
                                         s.training.seq_len, 2 * p.cp));
    if (s.training.attention == workload::AttentionImpl::softmax)
      throw util::InputError(file, cp_path,
                             "context parallelism needs fused attention (training.attention flash, flash2 or "
                             "flash1), not softmax");
  }
  // Megatron switches sequence parallelism off when TP = 1 (arguments.py); so do we, silently.
  if (p.tp == 1) p.sequence_parallel = false;
  if (p.sequence_parallel && (s.training.seq_len / p.cp) % p.tp != 0) {
    throw util::InputError(file, util::join_path(training_path, "seq_len"),
                           fmt::format("{} tokens per context-parallel rank are not divisible by tp ({}), which "
                                       "sequence_parallel requires",
                                       s.training.seq_len / p.cp, p.tp));
  }

  check_experts(root, s);
  if (m.attention_chunk > 0 && s.training.seq_len > m.attention_chunk)
    throw util::InputError(file, util::join_path(training_path, "seq_len"),
                           fmt::format("{} tokens exceed the model's attention chunk ({}): chunked attention over "
                                       "several chunks is not supported yet (within one chunk it is causal attention)",
                                       s.training.seq_len, m.attention_chunk));
  if (m.attention_softcap > 0 || m.logit_softcap > 0) {
    megatron_only(true, "soft-capped logits (attention_softcap, logit_softcap)");
    if (m.attention_softcap > 0 && s.training.attention != workload::AttentionImpl::softmax)
      throw util::InputError(file, util::join_path(training_path, "attention"),
                             "the model soft-caps its attention scores (attention_softcap), which Transformer "
                             "Engine's fused kernels cannot: Megatron-Bridge runs it unfused (Gemma 2's "
                             "Gemma2DotProductAttention), attention \"softmax\"");
  }
  if (m.sliding_window > 0 && !m.csa()) {  // DeepSeek V4's window: its own checks below
    if (s.training.attention == workload::AttentionImpl::softmax && m.attention_softcap == 0)
      throw util::InputError(file, util::join_path(training_path, "attention"),
                             "sliding-window attention runs fused (flash, flash2 or flash1), not softmax (Megatron-"
                             "Core's unfused attention takes no window; Gemma 2's, a model with attention_softcap, "
                             "masks the whole score matrix)");
    megatron_only(true, "sliding-window attention");
  }

  if (m.csa()) {
    // Megatron-Core's DeepSeek V4 attention as trainsim models it: one rank holds the whole sequence
    // and every head (its key/value head is one, so tp divides kv_heads only at 1).
    if (p.cp > 1)
      throw util::InputError(
          file, util::join_path(parallel_path, "cp"),
          fmt::format("{}: context parallelism with DeepSeek V4's attention is not supported yet", p.cp));
    if (s.training.attention == workload::AttentionImpl::softmax)
      throw util::InputError(file, util::join_path(training_path, "attention"),
                             "DeepSeek V4's sparse attention runs fused (flash), not softmax");
    if (s.training.document_tokens > 0 && s.training.document_tokens < s.training.seq_len)
      throw util::InputError(file, util::join_path(training_path, "document_tokens"),
                             "packed documents with DeepSeek V4's attention are not supported yet (its windows and "
                             "compressed entries are timed over whole sequences)");
    megatron_only(true, "DeepSeek V4's attention");
  }
  if (m.mla()) {
    // Transformer Engine's context parallelism takes Q/K and V head dims that differ on its ring
    // only (its tests: "MLA CP currently only support KV P2P").
    if (p.cp > 1 && p.cp_comm != ParallelSpec::CpComm::p2p)
      throw util::InputError(file, util::join_path(parallel_path, "cp_comm_type"),
                             fmt::format("context parallelism with multi-head latent attention runs on Transformer "
                                         "Engine's p2p ring only, not {}",
                                         cp_comm_name(p.cp_comm)));
    if (s.training.attention == workload::AttentionImpl::softmax)
      throw util::InputError(file, util::join_path(training_path, "attention"),
                             "multi-head latent attention runs fused (flash, flash2 or flash1), not softmax");
    megatron_only(true, "multi-head latent attention");
  }
  // Recompute modules the model has no part for (Megatron-Core would ignore or reject them).
  if (s.training.recompute == Recompute::selective) {
    const std::uint8_t mods = s.training.recompute_modules;
    const std::string path = util::join_path(training_path, "recompute_modules");
    auto refuse_module = [&](std::uint8_t bit, bool has, const char* what) {
      if ((mods & bit) && !has)
        throw util::InputError(
            file, path,
            fmt::format("\"{}\" needs {}",
                        kRecomputeModuleNames[static_cast<std::size_t>(std::countr_zero(static_cast<unsigned>(bit)))],
                        what));
    };
    refuse_module(workload::kRecomputeMlaUpProj, m.mla() || m.csa(),
                  "multi-head latent attention (kv_lora_rank) or DeepSeek V4's attention (compress_ratios)");
    refuse_module(workload::kRecomputeMoe, m.moe(), "a mixture-of-experts model");
    refuse_module(workload::kRecomputeMoeAct, m.moe(), "a mixture-of-experts model");
    refuse_module(workload::kRecomputeSharedExperts, m.shared_expert_ffn_hidden > 0, "a shared expert");
    refuse_module(workload::kRecomputeMlp, m.has_dense_mlp(), "dense MLP layers");
    refuse_module(workload::kRecomputeLayernorm, m.mla() || m.csa() || m.moe(),
                  "a norm Megatron-Core runs on its own (multi-head latent attention's, or a mixture of experts' "
                  "pre-MLP norm; Transformer Engine fuses the others into the next GEMM)");
  }
  // CUDA graph scopes the model has no part for.
  if (const std::uint8_t g = s.training.cuda_graph_scope; g != 0 || s.training.cuda_graph_full_iteration) {
    const std::string path = util::join_path(training_path, "cuda_graph_scope");
    if (s.training.cuda_graph_full_iteration && m.moe() && !p.moe_pad_to_capacity && p.moe_rank_capacity_factor == 0)
      throw util::InputError(file, path,
                             "\"full_iteration\" with a dropless mixture of experts needs static buffers: "
                             "parallel.moe_expert_rank_capacity_factor (sync-free experts) or token dropping with "
                             "moe_pad_expert_input_to_capacity");
    if (s.training.cuda_graph_full_iteration && m.moe() && !p.moe_pad_to_capacity && !s.training.moe_permute_fusion)
      throw util::InputError(file, path,
                             "\"full_iteration\" with training.moe_permute_fusion false: the unfused permutation's "
                             "masked_select copies its size to the CPU, which a captured graph cannot wait for");
    if ((g & (workload::kGraphMoeRouter | workload::kGraphMoePreprocess)) && !m.moe())
      throw util::InputError(file, path, "\"moe_router\" and \"moe_preprocess\" need a mixture-of-experts model");
    if ((g & workload::kGraphMlp) && !m.has_dense_mlp())
      throw util::InputError(file, path, "\"mlp\" needs dense MLP layers");
    if ((g & workload::kGraphMamba) && !m.hybrid_has('M'))
      throw util::InputError(file, path, "\"mamba\" needs Mamba layers (a hybrid_pattern with 'M')");
  }
  {
    const std::string path = util::join_path(training_path, "module_precision");
    const std::uint8_t modules = s.training.bf16_modules | s.training.fp8_modules;
    if (s.training.bf16_mtp && m.mtp_layers == 0)
      throw util::InputError(file, util::join_path(path, "mtp"), "the model has no multi-token prediction layers");
    if ((modules & workload::kQuantMambaOutProj) && !m.hybrid_has('M'))
      throw util::InputError(file, util::join_path(path, "mamba_out_proj"),
                             "needs Mamba layers (a hybrid_pattern with 'M')");
    if ((modules & workload::kQuantMoeLatentProj) && m.moe_latent == 0)
      throw util::InputError(file, util::join_path(path, "moe_latent_proj"),
                             "needs a latent mixture of experts (moe_latent)");
  }
  if (s.training.bf16_layers_at_start + s.training.bf16_layers_at_end > m.layers)
    throw util::InputError(file, util::join_path(training_path, "bf16_layers_at_end"),
                           fmt::format("{} + {} BF16 layers exceed the model's {} layers",
                                       s.training.bf16_layers_at_start, s.training.bf16_layers_at_end, m.layers));
  // A hybrid model's Mamba layers scan packed documents as one sequence whose state resets at each
  // boundary (Megatron-Core passes cu_seqlens down as the scan's seq_idx): the same work. Under
  // context parallelism their all-to-alls would have to keep documents whole.
  if (s.training.document_tokens > 0 && m.hybrid() && p.cp > 1)
    throw util::InputError(file, util::join_path(training_path, "document_tokens"),
                           "packed sequences in a hybrid model with context parallelism are not supported yet");
  if (s.training.document_tokens > 0 && p.cp > 1 && s.training.document_tokens % (2 * p.cp) != 0)
    throw util::InputError(file, util::join_path(training_path, "document_tokens"),
                           fmt::format("{} tokens per document do not split into 2·cp = {} chunks (Transformer "
                                       "Engine's packed context parallelism splits each document so)",
                                       s.training.document_tokens, 2 * p.cp));
  // LoRA: dense models under Megatron's distributed optimizer (Megatron-Bridge's PEFT runs).
  if (s.training.lora) {
    const std::string path = util::join_path(training_path, "peft");
    if (m.moe()) throw util::InputError(file, path, "LoRA on a mixture-of-experts model is not supported yet");
    if (m.hybrid()) throw util::InputError(file, path, "LoRA on a hybrid model is not supported yet");
    if (m.mla()) throw util::InputError(file, path, "LoRA with multi-head latent attention is not supported yet");
    if (p.zero >= 2 || p.fsdp_units())
      throw util::InputError(file, path,
                             fmt::format("LoRA with zero {} is not supported yet (use zero 0 or 1)", p.zero));
  }
  megatron_only(m.mtp_layers > 0, "multi-token prediction");
  if (p.moe_dispatcher == MoeDispatcher::allgather && !m.moe())
    throw util::InputError(file, util::join_path(parallel_path, "moe_token_dispatcher"),
                           "\"allgather\" needs a mixture-of-experts model");
  if (p.moe_flex_dispatch()) {
    const std::string path = util::join_path(parallel_path, "moe_token_dispatcher");
    if (!m.moe() || p.ep < 2)
      throw util::InputError(file, path, "\"flex\" needs a mixture-of-experts model with ep > 1");
    if (p.etp > 1) throw util::InputError(file, path, "\"flex\" with etp > 1 is not supported yet");
  }
  // Token dropping: Megatron-Core's alltoall dispatcher (Megatron-Bridge's apply_moe_token_drop
  // asserts it; the flex dispatcher drops no tokens).
  if (p.moe_capacity_factor > 0) {
    const std::string path = util::join_path(parallel_path, "moe_expert_capacity_factor");
    if (!m.moe()) throw util::InputError(file, path, "needs a mixture-of-experts model");
    // At experts / experts_per_token every expert can take every token of a rank: a larger factor
    // only pads further, beyond anything the routing could send.
    const double most = static_cast<double>(m.experts) / static_cast<double>(m.experts_per_token);
    if (p.moe_capacity_factor > most)
      throw util::InputError(file, path,
                             fmt::format("{:g} exceeds experts / experts_per_token = {}/{} = {:g}, where each expert's "
                                         "capacity already holds every token of a rank",
                                         p.moe_capacity_factor, m.experts, m.experts_per_token, most));
    if (p.moe_flex_dispatch())
      throw util::InputError(file, path,
                             "works with the alltoall token dispatcher only (Megatron-Core: the flex dispatcher "
                             "drops no tokens)");
    if (p.moe_dispatcher == MoeDispatcher::allgather)
      throw util::InputError(file, path, "works with the alltoall token dispatcher only (Megatron-Core)");
  }
  if (!m.moe()) {
    if (!s.training.moe_router_fusion)
      throw util::InputError(file, util::join_path(training_path, "moe_router_fusion"),
                             "needs a mixture-of-experts model");
    if (!s.training.moe_permute_fusion)
      throw util::InputError(file, util::join_path(training_path, "moe_permute_fusion"),
                             "needs a mixture-of-experts model");
    if (!s.training.moe_grouped_gemm)
      throw util::InputError(file, util::join_path(training_path, "moe_grouped_gemm"),
                             "needs a mixture-of-experts model");
  }
  // Routing imbalance: the busiest rank of an expert-parallel group receives at most, for each token,
  // min(k, its local experts) copies, against a mean of k x local / experts.
  if (s.training.moe_load_imbalance != 1) {
    const std::string path = util::join_path(training_path, "moe_load_imbalance");
    if (!m.moe()) throw util::InputError(file, path, "needs a mixture-of-experts model");
    if (p.moe_pad_to_capacity)
      throw util::InputError(
          file, path, "has no effect with moe_pad_expert_input_to_capacity: every expert's load is its capacity");
    const std::int64_t local = m.experts / p.ep;
    const double most = static_cast<double>(m.experts) * static_cast<double>(std::min(m.experts_per_token, local)) /
                        static_cast<double>(m.experts_per_token * local);
    if (s.training.moe_load_imbalance > most)
      throw util::InputError(
          file, path,
          fmt::format("{:g} exceeds {:g}: with {} experts, {} per token and {} on each of ep {} "
                      "ranks, a rank receives at most that many times the mean",
                      s.training.moe_load_imbalance, most, m.experts, m.experts_per_token, local, p.ep));
  }
  // Sync-free experts, with Megatron-Core's checks (docs: "MoE Paged Stash").
  if (p.moe_rank_capacity_factor > 0) {
    const std::string path = util::join_path(parallel_path, "moe_expert_rank_capacity_factor");
    if (!m.moe()) throw util::InputError(file, path, "needs a mixture-of-experts model");
    if (!p.moe_flex_dispatch())
      throw util::InputError(file, path,
                             "needs the flex token dispatcher (moe_token_dispatcher \"flex\": Megatron-Core sizes "
                             "HybridEP's buffers with it)");
    if (s.training.moe_load_imbalance > p.moe_rank_capacity_factor)
      throw util::InputError(
          file, path,
          fmt::format("{:g} is below training.moe_load_imbalance {:g}: the busiest rank would exceed its buffers "
                      "every step, which Megatron-Core then reruns without them",
                      p.moe_rank_capacity_factor, s.training.moe_load_imbalance));
    if (p.moe_paged_stash && s.training.cpu_offload_layers > 0)
      throw util::InputError(file, util::join_path(parallel_path, "moe_paged_stash"),
                             "cannot be combined with cpu_offload_layers (Megatron-Core)");
    if (!s.training.moe_grouped_gemm)
      throw util::InputError(file, util::join_path(training_path, "moe_grouped_gemm"),
                             "false cannot run sync-free experts (parallel.moe_expert_rank_capacity_factor): "
                             "SequentialMLP splits the tokens by counts the CPU must read");
  }
  // Expert-parallel all-to-all overlap, with Megatron-Core's TransformerConfig checks.
  if (p.moe_a2a_overlap) {
    const std::string path = util::join_path(parallel_path, "moe_a2a_overlap");
    auto refuse = [&](bool bad, const std::string& why) {
      if (bad) throw util::InputError(file, path, why);
    };
    refuse(!m.moe() || p.ep < 2, "needs a mixture-of-experts model with ep > 1");
    refuse(p.moe_dispatcher == MoeDispatcher::allgather, "needs the alltoall or flex token dispatcher (Megatron-Core)");
    refuse(p.pp > 1 && p.schedule != Schedule::interleaved,
           "needs the interleaved schedule when pp > 1 (Megatron-Core: virtual pipeline stages)");
    refuse(p.pp == 1 && p.schedule != Schedule::one_f_one_b, "needs schedule 1f1b when pp is 1");
    refuse(s.training.recompute == Recompute::full, "does not work with full recompute (Megatron-Core)");
    refuse(s.training.recompute == Recompute::selective && (s.training.recompute_modules & workload::kRecomputeMoe),
           "does not work with the \"moe\" recompute module (Megatron-Core)");
    refuse(p.fsdp_units(), "with FSDP (zero 3, or zero 2 per_unit) is not supported yet");
    refuse(s.training.cpu_offload_layers > 0, "with cpu_offload_layers is not supported yet");
    refuse(s.training.framework != Framework::megatron, "needs framework megatron");
  }
  // Activation offloading, with Megatron-Core's TransformerConfig checks.
  if (const std::int64_t n = s.training.cpu_offload_layers; n > 0) {
    const std::string path = util::join_path(training_path, "cpu_offload_layers");
    auto refuse = [&](bool bad, const std::string& why) {
      if (bad) throw util::InputError(file, path, why);
    };
    refuse(n >= m.layers, fmt::format("{} must be less than the model's {} layers", n, m.layers));
    refuse(p.pp > 1,
           fmt::format("needs pp 1, got {} (Megatron-Core has no pipeline parallelism with CPU offloading)", p.pp));
    refuse(p.schedule != Schedule::one_f_one_b,
           "needs schedule 1f1b (each micro-batch's forward followed by its backward)");
    refuse(s.training.framework != Framework::megatron, "needs framework megatron");
    refuse(s.cluster.host_link_Bps <= 0,
           fmt::format("the topology \"{}\" states no host_link_GBps (GPU-host copy bandwidth)", s.cluster.name));
  }
  // Fine-grained activation offloading, with Megatron-Core's TransformerConfig checks.
  if (const std::uint8_t mods = s.training.offload_modules; mods != 0) {
    const std::string path = util::join_path(training_path, "offload_modules");
    auto refuse = [&](bool bad, const std::string& why) {
      if (bad) throw util::InputError(file, path, why);
    };
    constexpr std::uint8_t kMoeModules = workload::kOffloadExpertFc1 | workload::kOffloadMoeAct;
    refuse(s.training.framework != Framework::megatron || s.training.deepspeed,
           "needs framework megatron (Megatron-Core's fine-grained activation offloading)");
    refuse((mods & kMoeModules) && !m.moe(), "\"expert_fc1\" and \"moe_act\" need a mixture-of-experts model");
    refuse((mods & workload::kOffloadMlpNorm) && !m.moe(),
           "\"mlp_norm\" needs a mixture-of-experts model (a dense layer's pre-MLP norm is fused into fc1)");
    refuse(
        (mods & workload::kOffloadAttnNorm) && !m.mla(),
        "\"attn_norm\" needs multi-head latent attention (elsewhere the input norm is fused into the QKV projection)");
    refuse((mods & kMoeModules) && s.training.recompute == Recompute::selective &&
               (s.training.recompute_modules & workload::kRecomputeMoe),
           "\"expert_fc1\" and \"moe_act\" do not work with the \"moe\" recompute module (Megatron-Core)");
    refuse((mods & kMoeModules) && p.moe_paged_stash,
           "\"expert_fc1\" and \"moe_act\" cannot be combined with "
           "moe_paged_stash (Megatron-Core)");
    refuse(p.schedule != Schedule::one_f_one_b && p.schedule != Schedule::interleaved,
           "needs schedule 1f1b or interleaved (Megatron-Core's pipeline schedules)");
    refuse(s.cluster.host_link_Bps <= 0,
           fmt::format("the topology \"{}\" states no host_link_GBps (GPU-host copy bandwidth)", s.cluster.name));
  }
  // The precision-aware optimizer and its CPU offload, with Megatron's arguments.py checks.
  if (const OptimizerSpec& o = s.training.optimizer; o.use_precision_aware_optimizer) {
    const std::string path = util::join_path(training_path, "optimizer");
    if (p.zero < 1)
      throw util::InputError(file, util::join_path(path, "use_precision_aware_optimizer"),
                             "needs the distributed optimizer or FSDP (parallel.zero 1 or more)");
    if (o.optimizer_cpu_offload) {
      const std::string offload = util::join_path(path, "optimizer_cpu_offload");
      auto refuse = [&](bool bad, const std::string& why) {
        if (bad) throw util::InputError(file, offload, why);
      };
      refuse(p.fsdp_units(), "with FSDP (zero 3, or zero 2 per_unit) is not supported yet");
      refuse(s.cluster.host_link_Bps <= 0,
             fmt::format("the topology \"{}\" states no host_link_GBps (GPU-host copy bandwidth)", s.cluster.name));
      refuse(s.cluster.host_memory_Bps <= 0,
             fmt::format("the topology \"{}\" states no host_memory_GBps (the CPU's memory bandwidth, which the "
                         "CPU's Adam step is bound by)",
                         s.cluster.name));
    }
  }

  TrainingSpec& t = s.training;
  if (!options.check_batch_split) {
    t.num_micro_batches = std::max<std::int64_t>(1, t.global_batch / t.micro_batch / p.dp);
    return;
  }
  if (t.global_batch % t.micro_batch != 0 || (t.global_batch / t.micro_batch) % p.dp != 0) {
    throw util::InputError(file, util::join_path(training_path, "global_batch"),
                           fmt::format("{} is not a multiple of micro_batch*dp = {}*{} = {}", t.global_batch,
                                       t.micro_batch, p.dp, product(t.micro_batch, p.dp)));
  }
  t.num_micro_batches = t.global_batch / t.micro_batch / p.dp;
  // Each micro-batch is its own tasks in every stage's program: beyond this many the programs outgrow
  // memory (real runs have at most a few thousand).
  constexpr std::int64_t kMaxMicroBatches = 16384;
  if (t.num_micro_batches > kMaxMicroBatches)
    throw util::InputError(file, util::join_path(training_path, "global_batch"),
                           fmt::format("gives {} micro-batches per pipeline; trainsim simulates at most {} (raise "
                                       "micro_batch or the data parallelism)",
                                       t.num_micro_batches, kMaxMicroBatches));
  // DualPipeV needs at least two micro-batches per virtual stage pair (deepseek-ai/DualPipe's assert:
  // num_chunks >= num_ranks * 2).
  if (p.schedule == Schedule::dualpipev && t.num_micro_batches < 2 * p.pp)
    throw util::InputError(file, util::join_path(training_path, "global_batch"),
                           fmt::format("gives {} micro-batches per pipeline; dualpipev needs at least 2 x pp = {}",
                                       t.num_micro_batches, 2 * p.pp));
  // Megatron's interleaved schedule needs the micro-batches per pipeline to be a multiple of pp.
  if (p.schedule == Schedule::interleaved && t.num_micro_batches % p.pp != 0) {
    throw util::InputError(
        file, util::join_path(training_path, "global_batch"),
        fmt::format("gives {} micro-batches per pipeline, which the interleaved schedule needs to be "
                    "a multiple of pp ({})",
                    t.num_micro_batches, p.pp));
  }
}

Scenario parse_scenario_in(const util::JsonNode& root, const fs::path& data_dir, const fs::path& scenario_dir,
                           ParseOptions options) {
  root.reject_unknown(
      {"model", "cluster", "gpus", "parallel", "training", "network", "collectives", "gpu_profile", "segment_gpus"});
  Scenario s;
  s.file = root.file();
  s.model = parse_reference(root.at("model"), data_dir, "models", scenario_dir, parse_model_any);
  s.cluster =
      parse_reference(root.at("cluster"), data_dir, "topologies", scenario_dir,
                      [&data_dir](const util::JsonNode& n, const std::string&) { return parse_topology(n, data_dir); });
  if (auto v = root.find("gpu_profile")) s.cluster.gpu.profile = load_gpu_profile(*v, data_dir);
  if (const auto& prof = s.cluster.gpu.profile;
      prof && !prof->device.gpu.empty() && prof->device.gpu != s.cluster.gpu.id)
    s.warnings.push_back(fmt::format("{}: gpu_profile: {} was measured on {} ({}), the cluster has {}", s.file,
                                     prof->file, prof->device.name, prof->device.gpu, s.cluster.gpu.id));
  s.gpus = root.at("gpus").as_positive_int();
  // Slurm's --segment on NVLink-domain clusters (topology/block): the job's ranks come in blocks of
  // segment_gpus, each inside one NVLink domain, so a block is what the network sees as a node (its
  // share of the domain's NICs with it). NVIDIA's GB200 NVL72 guidance: segments of 16 trays = 64
  // GPUs for jobs of 128 GPUs and more.
  if (auto v = root.find("segment_gpus")) {
    const std::int64_t seg = v->as_positive_int();
    network::ClusterSpec& c = s.cluster;
    if (seg > c.gpus_per_node)
      v->fail(fmt::format("{} exceeds the {} GPUs of one NVLink domain of {}", seg, c.gpus_per_node, c.name));
    if (s.gpus % seg != 0) v->fail(fmt::format("{} does not divide gpus ({})", seg, s.gpus));
    if (c.nic.per_node * seg % c.gpus_per_node != 0)
      v->fail(fmt::format("{} GPUs do not hold a whole share of the {} NICs per {}-GPU node", seg, c.nic.per_node,
                          c.gpus_per_node));
    c.nic.per_node = c.nic.per_node * seg / c.gpus_per_node;
    c.gpus_per_node = seg;
  }
  if (auto v = root.find("collectives")) {
    v->reject_unknown({"all_reduce", "all_gather", "reduce_scatter", "all_to_all"});
    for (const char* name : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}) {
      auto a = v->find(name);
      if (!a) continue;
      constexpr std::array<network::Algorithm, 4> kAlgo = {network::Algorithm::automatic, network::Algorithm::ring,
                                                           network::Algorithm::tree, network::Algorithm::nvls};
      s.collectives[static_cast<std::size_t>(*network::collective_from_string(name))] =
          kAlgo[parse_choice(*a, Choices{{"auto", "ring", "tree", "nvls"}, {}})];
    }
  }
  if (auto v = root.find("network"))
    s.network =
        parse_choice(*v, Choices{{"analytical", "flow"}, {}}) == 0 ? NetworkModel::analytical : NetworkModel::flow;
  if (auto v = root.find("parallel")) s.parallel = parse_parallel(*v, options.check_layout_rules);
  s.training = parse_training(root.at("training"));
  check_layout(root, s, options);
  if (s.training.framework == Framework::pytorch_eager) check_eager(root, s);
  if (s.training.framework == Framework::torchtitan) check_torchtitan(root, s);
  if (s.training.deepspeed) {
    check_deepspeed(root, s);
    // DeepSpeed's PipelineEngine partitions each message of a tensor-parallel stage over its ranks
    // and gathers it on arrival (PartitionedTensor; pipeline.pipe_partitioned and grad_partitioned,
    // true by default), where the hidden states are whole on every rank.
    ParallelSpec& p = s.parallel;
    if (!p.scatter_gather_given && p.pipeline_message_whole_per_tp_rank()) p.scatter_gather_tensors_in_pipeline = true;
  }
  return s;
}

}  // namespace

fs::path default_data_dir() {
  if (const char* env = std::getenv("TRAINSIM_DATA_DIR"); env != nullptr && *env != '\0') return fs::path(env);
  return fs::path(TRAINSIM_SOURCE_DIR);
}

std::string_view dispatcher_name(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::alltoall:
      return "alltoall";
    case MoeDispatcher::allgather:
      return "allgather";
    case MoeDispatcher::flex:
      return "flex";
  }
  return "alltoall";
}

std::string_view schedule_key(Schedule s) {
  switch (s) {
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::interleaved:
      return "interleaved";
    case Schedule::zb_h1:
      return "zb-h1";
    case Schedule::dualpipev:
      return "dualpipev";
  }
  return "1f1b";
}

Fp8Recipe fp8_recipe(const Scenario& s) {
  if (s.training.fp8_recipe) return *s.training.fp8_recipe;
  if (s.cluster.gpu.arch == hardware::Arch::blackwell) return Fp8Recipe::mxfp8;
  return s.training.bf16_layers_at_start + s.training.bf16_layers_at_end > 0 || s.training.module_precision()
             ? Fp8Recipe::tensorwise
             : Fp8Recipe::delayed;
}

bool runs_fp8_recipe(const TrainingSpec& t) {
  return t.precision == Precision::fp8 && t.framework == Framework::megatron && !t.deepspeed;
}

std::optional<Fp8Recipe> fp8_recipe_named(std::string_view name) {
  for (Fp8Recipe r : {Fp8Recipe::delayed, Fp8Recipe::tensorwise, Fp8Recipe::mxfp8, Fp8Recipe::blockwise})
    if (fp8_recipe_name(r) == name) return r;
  return std::nullopt;
}

std::string_view fp8_recipe_name(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::delayed:
      return "delayed";
    case Fp8Recipe::tensorwise:
      return "tensorwise";
    case Fp8Recipe::mxfp8:
      return "mxfp8";
    case Fp8Recipe::blockwise:
      return "blockwise";
  }
  return "delayed";
}

std::string_view framework_name(Framework f) {
  switch (f) {
    case Framework::megatron:
      return "megatron";
    case Framework::pytorch_eager:
      return "pytorch-eager";
    case Framework::torchtitan:
      return "torchtitan";
  }
  return "megatron";
}

std::string_view framework_key(const TrainingSpec& t) {
  return t.deepspeed ? std::string_view("megatron-deepspeed") : framework_name(t.framework);
}

std::vector<std::string> offload_module_names(std::uint8_t mask) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kOffloadModuleNames.size(); ++i)
    if (mask & (1u << i)) out.emplace_back(kOffloadModuleNames[i]);
  return out;
}

std::vector<std::string> recompute_module_names(std::uint8_t mask) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kRecomputeModuleNames.size(); ++i)
    if (mask & (1u << i)) out.emplace_back(kRecomputeModuleNames[i]);
  return out;
}

std::int64_t chunks_per_stage(const ParallelSpec& p) {
  return p.schedule == Schedule::interleaved ? p.virtual_stages : p.schedule == Schedule::dualpipev ? 2 : 1;
}

std::int64_t virtual_stage(const ParallelSpec& p, std::int64_t stage, std::int64_t chunk) {
  if (p.schedule == Schedule::dualpipev) return chunk == 0 ? stage : 2 * p.pp - 1 - stage;
  return chunk * p.pp + stage;
}

std::int64_t chunk_layers(const Scenario& sc, std::int64_t stage, std::int64_t chunk) {
  const ParallelSpec& p = sc.parallel;
  const std::int64_t v = chunks_per_stage(p);
  const std::int64_t k = virtual_stage(p, stage, chunk);
  if (!p.layout_layers.empty()) return p.layout_layers[static_cast<std::size_t>(k)];
  if (p.account_for_embedding || p.account_for_loss) {
    const std::int64_t slots = pipeline_slots(sc.model, p) / (p.pp * v);
    const bool first = k == 0, last = k == p.pp * v - 1;
    return slots - (first && p.account_for_embedding ? 1 : 0) - (last && p.account_for_loss ? 1 : 0);
  }
  return stage_layers(sc, stage) / v;
}

std::int64_t chunk_first_layer(const Scenario& sc, std::int64_t stage, std::int64_t chunk) {
  const ParallelSpec& p = sc.parallel;
  const std::int64_t v = chunks_per_stage(p);
  const std::int64_t target = virtual_stage(p, stage, chunk);
  std::int64_t n = 0;
  for (std::int64_t st = 0; st < p.pp; ++st)
    for (std::int64_t c = 0; c < v; ++c)
      if (virtual_stage(p, st, c) < target) n += chunk_layers(sc, st, c);
  return n;
}

std::int64_t stage_layers(const Scenario& sc, std::int64_t stage) {
  const ParallelSpec& p = sc.parallel;
  if (p.account_for_embedding || p.account_for_loss || !p.layout_layers.empty()) {
    std::int64_t n = 0;
    for (std::int64_t c = 0; c < chunks_per_stage(p); ++c) n += chunk_layers(sc, stage, c);
    return n;
  }
  if (stage == 0 && p.first_stage_layers > 0) return p.first_stage_layers;
  if (stage == p.pp - 1 && p.last_stage_layers > 0) return p.last_stage_layers;
  const std::int64_t fixed = p.first_stage_layers + p.last_stage_layers;
  const std::int64_t rest = p.pp - (p.first_stage_layers > 0) - (p.last_stage_layers > 0);
  return (sc.model.layers - fixed) / rest;
}

network::ClusterSpec load_cluster(const std::string& name_or_path, const fs::path& data_dir, const std::string& what) {
  const nlohmann::json ref = name_or_path;
  const util::JsonNode node(ref, what);
  return parse_reference(
      node, data_dir, "topologies", fs::current_path(),
      [&data_dir](const util::JsonNode& n, const std::string&) { return parse_topology(n, data_dir); });
}

std::pair<std::int64_t, std::int64_t> launch_hosts(const Scenario& s) {
  const std::int64_t per_host = s.cluster.gpu.grace_host ? 4 : s.cluster.gpus_per_node;
  if (s.gpus <= per_host) return {s.gpus, 1};
  std::int64_t n = per_host;
  while (s.gpus % n != 0) --n;
  return {n, s.gpus / n};
}

workload::ModelSpec load_model(const std::string& name_or_path, const fs::path& data_dir, const std::string& what) {
  const nlohmann::json ref = name_or_path;
  const util::JsonNode node(ref, what);
  return parse_reference(node, data_dir, "models", fs::current_path(), parse_model_any);
}

void apply_overrides(nlohmann::json& doc, const std::vector<std::string>& sets, std::string_view where) {
  for (const std::string& set : sets) {
    const std::size_t eq = set.find('=');
    if (eq == std::string::npos || eq == 0)
      throw util::InputError("--set", "", fmt::format("expected PATH=VALUE (e.g. parallel.tp=8), got \"{}\"", set));
    const std::string path = set.substr(0, eq);
    const std::string text = set.substr(eq + 1);
    nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;  // not JSON: a string (fp8, dgx-h100)
    nlohmann::json* node = &doc;
    std::string_view rest = path;
    std::string walked;
    while (true) {
      if (!node->is_object())
        throw util::InputError("--set", "",
                               fmt::format("{}: {} is not an object in {} (set the whole of it instead)", path,
                                           walked.empty() ? "the scenario" : walked, where));
      const std::size_t dot = rest.find('.');
      const std::string key(rest.substr(0, dot));
      if (key.empty()) throw util::InputError("--set", "", fmt::format("{}: an empty key", path));
      if (dot == std::string_view::npos) {
        // null takes the key out: the scenario then has its default, as if the file did not say it.
        if (value.is_null())
          node->erase(key);
        else
          (*node)[key] = value;
        break;
      }
      walked = walked.empty() ? key : walked + "." + key;
      // Taking out a key below one the scenario does not have leaves it as it is.
      if (value.is_null() && (!node->contains(key) || (*node)[key].is_null())) break;
      node = &(*node)[key];
      if (node->is_null()) *node = nlohmann::json::object();
      rest.remove_prefix(dot + 1);
    }
  }
}

Scenario load_scenario(const std::string& file, const fs::path& data_dir) {
  const nlohmann::json doc = util::read_json_file(file);
  const util::JsonNode root(doc, file);
  root.expect_object();
  return parse_scenario_in(root, data_dir, fs::path(file).parent_path(), {});
}

Scenario parse_scenario(const util::JsonNode& root, const fs::path& data_dir, ParseOptions options) {
  root.expect_object();
  return parse_scenario_in(root, data_dir, root.file().empty() ? fs::path() : fs::path(root.file()).parent_path(),
                           options);
}

}  // namespace trainsim::config
