#include "config/torchtitan_export.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "config/torchtitan_config.h"
#include "util/error.h"

namespace trainsim::config {

namespace {

bool same_architecture(const workload::ModelSpec& a, const workload::ModelSpec& b) {
  return a.layers == b.layers && a.hidden == b.hidden && a.heads == b.heads && a.kv_heads == b.kv_heads &&
         a.head_dim == b.head_dim && a.ffn_hidden == b.ffn_hidden && a.vocab == b.vocab && a.mlp == b.mlp &&
         a.tied_embeddings == b.tied_embeddings && !b.moe() && !b.hybrid() && !b.qk_norm && b.sliding_window == 0;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += fmt::format("{}\"{}\"", i == 0 ? "" : ", ", items[i]);
  return out + "]";
}

class Exporter {
 public:
  explicit Exporter(const Scenario& s) : s_(s) {}

  TorchtitanExport run() {
    if (s_.training.framework != Framework::torchtitan)
      fail("training.framework", fmt::format("{} is not a torchtitan step (training.framework \"torchtitan\"; --set "
                                             "training.framework=torchtitan predicts torchtitan's)",
                                             framework_name(s_.training.framework)));
    const TorchtitanFlavor& flavor = find_flavor();
    const ParallelSpec& p = s_.parallel;
    const TrainingSpec& t = s_.training;
    const std::int64_t replicas = p.dist_opt_instances;
    if (p.dp % replicas != 0)
      fail("parallel.distributed_optimizer_instances",
           fmt::format("{} replicas do not divide the {} data-parallel ranks (torchtitan's replicas split the batch; "
                       "context-parallel ranks shard within one)",
                       replicas, p.dp));

    std::string out;
    const auto [per_host, hosts] = launch_hosts(s_);
    out += fmt::format("# torchtitan job: {} on {} GPUs of {} (written by trainsim export torchtitan)\n", flavor.model,
                       s_.gpus, s_.cluster.name);
    if (hosts == 1)
      out += fmt::format("# run: NGPU={} CONFIG_FILE=job.toml ./run_train.sh\n", per_host);
    else
      out += fmt::format(
          "# run on each of the {} hosts: torchrun --nnodes {} --nproc_per_node {} --rdzv_backend c10d "
          "--rdzv_endpoint HOST:29500 -m torchtitan.train --job.config_file job.toml\n",
          hosts, hosts, per_host);

    out += fmt::format("\n[model]\nname = \"{}\"\nflavor = \"{}\"\n", flavor.name, flavor.flavor);
    if (t.precision == Precision::fp8) out += "converters = [\"float8\"]\n";

    // The batch: one pipeline schedule runs every micro-batch of the step (trainsim's), so the local
    // batch is the step's share of a data-parallel rank; without pipelining a local batch is one
    // micro-batch and the rest gradient accumulation.
    const std::int64_t local = p.pp > 1 ? t.global_batch / p.dp : t.micro_batch;
    out += fmt::format("\n[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\n", local,
                       t.global_batch, t.seq_len);
    if (t.train_tokens > 0) {
      const double steps =
          std::ceil(t.train_tokens / (static_cast<double>(t.global_batch) * static_cast<double>(t.seq_len)));
      out += fmt::format("steps = {:.0f}\n", steps);
    } else {
      notes_.push_back(
          "steps: the scenario has no token budget (training.train_tokens); torchtitan's default is "
          "10000");
    }
    out += "mixed_precision_param = \"bfloat16\"\n";
    out += fmt::format("mixed_precision_reduce = \"{}\"\n", t.grad_reduce_in_fp32 ? "float32" : "bfloat16");

    out += "\n[parallelism]\n";
    out += fmt::format("data_parallel_replicate_degree = {}\n", replicas);
    out += fmt::format("data_parallel_shard_degree = {}\n", p.dp / replicas);
    out += fmt::format("tensor_parallel_degree = {}\n", p.tp);
    if (p.tp_comm_overlap) out += "enable_async_tensor_parallel = true\n";
    out += fmt::format("context_parallel_degree = {}\n", p.cp);
    if (p.cp > 1)
      out += fmt::format("context_parallel_rotate_method = \"{}\"\n",
                         p.cp_comm == ParallelSpec::CpComm::allgather ? "allgather" : "alltoall");
    if (p.zero == 2)
      out += "fsdp_reshard_after_forward = \"never\"  # each block kept from its forward to its backward\n";
    out += fmt::format("pipeline_parallel_degree = {}\n", p.pp);
    if (p.pp > 1) out += pipeline();

    if (t.torch_compile || t.torch_compile_loss) {
      std::string components;
      if (t.torch_compile) components = "\"model\"";
      if (t.torch_compile_loss) components += std::string(components.empty() ? "" : ", ") + "\"loss\"";
      out += fmt::format("\n[compile]\nenable = true\ncomponents = [{}]\n", components);
    }

    out += "\n[activation_checkpoint]\n" + checkpointing();

    if (t.precision == Precision::fp8)
      out +=
          "\n[float8]\nenable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true\n"
          "filter_fqns = [\"output\"]\n";

    out += "\n[optimizer]\nname = \"AdamW\"\nimplementation = \"fused\"\n";
    outside();
    return {std::move(out), std::move(notes_)};
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw util::InputError(s_.file, path, fmt::format("{} (trainsim export torchtitan)", problem));
  }

  const TorchtitanFlavor& find_flavor() const {
    std::string names;
    for (const TorchtitanFlavor& f : torchtitan_flavors()) {
      if (same_architecture(load_model(std::string(f.model), default_data_dir(), "torchtitan flavor"), s_.model))
        return f;
      names += fmt::format("{}{} {}", names.empty() ? "" : ", ", f.name, f.flavor);
    }
    fail("model", fmt::format("{} has the widths of none of torchtitan's Llama flavors ({}): torchtitan needs a flavor "
                              "registered with them",
                              s_.model.name, names));
  }

  // The schedule and the split, module by module: the layers of each virtual stage in order, the
  // embedding in the first and the final norm and output in the last.
  std::string pipeline() const {
    const ParallelSpec& p = s_.parallel;
    std::string out;
    switch (p.schedule) {
      case Schedule::gpipe:
        out += "pipeline_parallel_schedule = \"GPipe\"\n";
        break;
      case Schedule::one_f_one_b:
        out += "pipeline_parallel_schedule = \"1F1B\"\n";
        break;
      case Schedule::interleaved:
        out += "pipeline_parallel_schedule = \"Interleaved1F1B\"\n";
        break;
      default:
        fail("parallel.schedule",
             "trainsim writes torchtitan's GPipe, 1F1B and Interleaved1F1B (not ZB-H1 or DualPipeV)");
    }
    out += fmt::format("pipeline_parallel_microbatch_size = {}\n", s_.training.micro_batch);
    out += "module_fqns_per_model_part = [\n";
    const std::int64_t v = chunks_per_stage(p), stages = p.pp * v;
    std::int64_t layer = 0;
    for (std::int64_t k = 0; k < stages; ++k) {
      std::vector<std::string> modules;
      if (k == 0) modules.emplace_back("tok_embeddings");
      for (std::int64_t n = chunk_layers(s_, k % p.pp, k / p.pp); n > 0; --n)
        modules.push_back(fmt::format("layers.{}", layer++));
      if (k + 1 == stages) {
        modules.emplace_back("norm");
        modules.emplace_back("output");
      }
      out += fmt::format("  {},\n", quoted_list(modules));
    }
    return out + "]\n";
  }

  // none, full, the op policy; full of the first N blocks of each chunk as torchtitan's block
  // interval k, when the rank's blocks / k / chunks gives N back.
  std::string checkpointing() const {
    const TrainingSpec& t = s_.training;
    switch (t.recompute) {
      case Recompute::none:
        return "mode = \"none\"\n";
      case Recompute::selective:
        return "mode = \"selective\"\nselective_ac_option = \"op\"\n";
      case Recompute::full:
        break;
    }
    if (t.recompute_layers == 0) return "mode = \"full\"\n";
    const ParallelSpec& p = s_.parallel;
    const std::int64_t v = chunks_per_stage(p);
    std::int64_t rank_layers = 0;
    for (std::int64_t c = 0; c < v; ++c) rank_layers += chunk_layers(s_, 0, c);
    const std::int64_t per_chunk = std::min(t.recompute_layers, rank_layers / v);
    if (per_chunk * v > 0 && rank_layers % (per_chunk * v) == 0) {
      const std::int64_t every = rank_layers / (per_chunk * v);
      if (every == 1) return "mode = \"full\"\n";
      if (rank_layers / every / v == per_chunk)
        return fmt::format("mode = \"selective\"\nselective_ac_option = \"{}\"  # one block in {} checkpointed whole\n",
                           every, every);
    }
    fail("training.recompute_layers",
         fmt::format("{} checkpointed blocks per chunk of the first stage's {} has no torchtitan block interval "
                     "(selective_ac_option checkpoints one block in k)",
                     t.recompute_layers, rank_layers / v));
  }

  void outside() {
    const TrainingSpec& t = s_.training;
    notes_.push_back(fmt::format("the cluster ({}, {} GPUs) is where torchrun starts the job, not in the configuration",
                                 s_.cluster.name, s_.gpus));
    if (t.attention == workload::AttentionImpl::flash)
      notes_.push_back(
          "attention flash (SDPA's cuDNN backend): torchtitan's scaled_dot_product_attention picks "
          "FlashAttention-2 unless the cuDNN backend is enabled in PyTorch; import reads flash2");
  }

  const Scenario& s_;
  std::vector<std::string> notes_;
};

}  // namespace

TorchtitanExport export_torchtitan(const Scenario& scenario) {
  return Exporter(scenario).run();
}

}  // namespace trainsim::config
