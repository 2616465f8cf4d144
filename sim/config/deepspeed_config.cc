#include "config/deepspeed_config.h"

#include <algorithm>
#include <limits>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::config {

namespace {

// Keys that leave a step unchanged: logging, monitoring, schedules and optimiser hyperparameters,
// checkpoints, loss scaling, data sampling.
constexpr std::string_view kNoEffect[] = {"steps_per_print",
                                          "wall_clock_breakdown",
                                          "gradient_clipping",
                                          "prescale_gradients",
                                          "gradient_predivide_factor",
                                          "optimizer",
                                          "scheduler",
                                          "tensorboard",
                                          "wandb",
                                          "csv_monitor",
                                          "comet",
                                          "comms_logger",
                                          "flops_profiler",
                                          "memory_breakdown",
                                          "dump_state",
                                          "checkpoint",
                                          "zero_allow_untested_optimizer",
                                          "zero_force_ds_cpu_optimizer",
                                          "data_efficiency",
                                          "curriculum_learning",
                                          "elasticity",
                                          "seed",
                                          "sparse_gradients",
                                          "aio",
                                          "amp"};

// zero_optimization keys that leave a step unchanged as trainsim models it (memory layout and
// checkpoint format) or that apply to ZeRO-3's parameter fetches, which trainsim runs as per-layer
// gathers one layer ahead.
constexpr std::string_view kZeroNoEffect[] = {"contiguous_gradients",
                                              "allgather_partitions",
                                              "allgather_bucket_size",
                                              "round_robin_gradients",
                                              "elastic_checkpoint",
                                              "load_from_fp32_weights",
                                              "ignore_unused_parameters",
                                              "legacy_stage1",
                                              "sub_group_size",
                                              "stage3_prefetch_bucket_size",
                                              "stage3_param_persistence_threshold",
                                              "stage3_max_live_parameters",
                                              "stage3_max_reuse_distance",
                                              "stage3_gather_16bit_weights_on_model_save",
                                              "stage3_gather_fp16_weights_on_model_save",
                                              "memory_efficient_linear",
                                              "cpu_offload_use_pin_memory",
                                              "zero_hpz_partition_size",
                                              "zero_quantized_weights",
                                              "zero_quantized_gradients",
                                              "mics_shard_size"};

bool contains(std::span<const std::string_view> list, std::string_view key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

// DeepSpeed's dtype names ("fp32", "float32", "torch.float32", "bf16", ...) as fp32, bf16 or fp16.
std::string dtype_of(const util::JsonNode& v) {
  const std::string s = v.as_string();
  if (s == "fp32" || s == "float32" || s == "float" || s == "torch.float32") return "fp32";
  if (s == "bf16" || s == "bfloat16" || s == "torch.bfloat16") return "bf16";
  if (s == "fp16" || s == "float16" || s == "half" || s == "torch.float16") return "fp16";
  v.fail(fmt::format("unknown dtype \"{}\" (fp32, bf16 or fp16)", s));
}

void reject_auto(const util::JsonNode& v) {
  if (v.is_string() && v.as_string() == "auto")
    v.fail("\"auto\" is filled in by Hugging Face's Trainer, not by Megatron-DeepSpeed: give the value");
}

bool enabled(const util::JsonNode& section) {
  section.expect_object();
  const auto e = section.find("enabled");
  if (!e) return false;
  reject_auto(*e);
  return e->as_bool();
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const std::string& text, const std::string& source) {
  const nlohmann::json doc = util::parse_json_text(text, source);
  const util::JsonNode root(doc, source);
  root.expect_object();
  DeepSpeedConfig c;
  auto listed = [&](std::vector<std::string>& list, std::string_view key) {
    list.push_back(fmt::format("{}: {}", source, key));
  };
  for (const auto& [key, value] : doc.items()) {
    const util::JsonNode v = root.at(key);
    if (key == "train_batch_size") {
      reject_auto(v);
      c.train_batch = v.as_positive_int();
    } else if (key == "train_micro_batch_size_per_gpu") {
      reject_auto(v);
      c.micro_batch = v.as_positive_int();
    } else if (key == "gradient_accumulation_steps") {
      reject_auto(v);
      c.grad_accum = v.as_positive_int();
    } else if (key == "bf16" || key == "bfloat16") {
      c.bf16 = enabled(v);
      for (const auto& [k, unused] : value.items())
        if (k != "enabled") listed(c.no_effect, fmt::format("{}.{}", key, k));
    } else if (key == "fp16") {
      c.fp16 = enabled(v);
      for (const auto& [k, unused] : value.items())
        if (k != "enabled") listed(c.no_effect, fmt::format("fp16.{}", k));  // loss scaling
    } else if (key == "communication_data_type") {
      c.comm_dtype = dtype_of(v);
    } else if (key == "data_types") {
      v.expect_object();
      for (const auto& [k, unused] : value.items()) {
        if (k == "grad_accum_dtype")
          c.grad_accum_dtype = dtype_of(v.at(k));
        else
          listed(c.unknown, fmt::format("data_types.{}", k));
      }
    } else if (key == "zero_optimization") {
      v.expect_object();
      for (const auto& [k, unused] : value.items()) {
        const util::JsonNode z = v.at(k);
        if (k == "stage") {
          c.zero_stage = z.as_nonnegative_int();
          if (c.zero_stage > 3) z.fail(fmt::format("must be 0, 1, 2 or 3, got {}", c.zero_stage));
        } else if (k == "reduce_bucket_size") {
          reject_auto(z);
          c.reduce_bucket_elements = z.as_positive_number();
        } else if (k == "overlap_comm") {
          c.overlap_comm = z.as_bool();
        } else if (k == "reduce_scatter") {
          c.reduce_scatter = z.as_bool();
        } else if (k == "offload_optimizer" || k == "offload_param") {
          z.expect_object();
          const auto device = z.find("device");
          const std::string d = device ? device->as_string() : "none";
          if (d != "none" && d != "cpu" && d != "nvme") device->fail(fmt::format("unknown device \"{}\"", d));
          (k == "offload_optimizer" ? c.offload_optimizer : c.offload_param) = d == "none" ? "" : d;
        } else if (k == "cpu_offload") {  // the older spelling of offload_optimizer to the CPU
          if (z.as_bool()) c.offload_optimizer = "cpu";
        } else if (contains(kZeroNoEffect, k)) {
          listed(c.no_effect, fmt::format("zero_optimization.{}", k));
        } else {
          listed(c.unknown, fmt::format("zero_optimization.{}", k));
        }
      }
    } else if (key == "pipeline") {
      v.expect_object();
      for (const auto& [k, unused] : value.items()) {
        if (k == "pipe_partitioned")
          c.pipe_partitioned = v.at(k).as_bool();
        else if (k == "grad_partitioned")
          c.grad_partitioned = v.at(k).as_bool();
        else
          listed(c.unknown, fmt::format("pipeline.{}", k));
      }
    } else if (key == "activation_checkpointing") {
      v.expect_object();
      for (const auto& [k, unused] : value.items()) {
        const util::JsonNode a = v.at(k);
        if ((k == "partition_activations" || k == "cpu_checkpointing") && a.as_bool())
          listed(c.not_modelled, fmt::format("activation_checkpointing.{}", k));
        else
          listed(c.no_effect, fmt::format("activation_checkpointing.{}", k));
      }
    } else if (contains(kNoEffect, key)) {
      listed(c.no_effect, key);
    } else {
      listed(c.unknown, key);
    }
  }
  if (c.bf16 && c.fp16) root.at("fp16").fail("fp16 and bf16 are both enabled");
  return c;
}

std::vector<std::size_t> partition_uniform(std::size_t items, std::size_t parts) {
  std::vector<std::size_t> out(parts + 1, 0);
  if (items <= parts) {
    for (std::size_t p = 0; p <= parts; ++p) out[p] = std::min(p, items);
    return out;
  }
  const std::size_t chunk = items / parts, extra = items % parts;
  for (std::size_t p = 0; p <= parts; ++p) out[p] = p * chunk + std::min(p, extra);
  return out;
}

std::vector<std::size_t> partition_balanced(const std::vector<double>& weights, std::size_t parts) {
  const std::size_t n = weights.size();
  if (n <= parts) return partition_uniform(n, parts);
  std::vector<double> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + weights[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const std::size_t cols = parts + 1;
  std::vector<double> best_max((n + 1) * cols, kInf), best_min((n + 1) * cols, kInf), cost((n + 1) * cols, kInf);
  std::vector<std::size_t> position((n + 1) * cols, 0);
  best_max[0] = 0;
  cost[0] = 0;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= std::min(i, parts); ++j) {
      for (std::size_t k = 0; k < i; ++k) {
        const double segment = prefix[i] - prefix[k];
        const double hi = std::max(best_max[k * cols + j - 1], segment);
        const double lo = std::min(best_min[k * cols + j - 1], segment);
        // DeepSpeed's `<=` keeps the last k of equal cost.
        if (cost[i * cols + j] >= hi - lo) {
          cost[i * cols + j] = hi - lo;
          best_max[i * cols + j] = hi;
          best_min[i * cols + j] = lo;
          position[i * cols + j] = k;
        }
      }
    }
  }
  std::vector<std::size_t> out{n};
  for (std::size_t j = parts; j >= 1; --j) out.push_back(position[out.back() * cols + j]);
  std::reverse(out.begin(), out.end());
  return out;
}

std::optional<std::string> deepspeed_pipeline_layout(std::int64_t layers, std::int64_t pp, std::string_view method,
                                                     bool bigscience, bool tied_embeddings, std::string& problem) {
  // GPTModelPipe's specs: (class name, what it is to trainsim: E embedding, t layer, L head, - other).
  std::vector<std::pair<std::string, char>> specs{{"_to_float16", '-'}, {"EmbeddingPipe", 'E'}};
  if (bigscience) specs.emplace_back("<lambda>", '-');
  for (std::int64_t l = 0; l < layers; ++l) specs.emplace_back("ParallelTransformerLayerPipe", 't');
  if (bigscience) specs.emplace_back("undo", '-');
  specs.emplace_back(bigscience ? "MixedFusedLayerNorm" : "LayerNorm", '-');
  specs.emplace_back(tied_embeddings ? "EmbeddingPipe" : "LMHeadPipe", 'L');
  specs.emplace_back("float16_to_fp32", '-');

  std::string lower(method);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  std::vector<std::size_t> bounds;
  const auto stages = static_cast<std::size_t>(pp);
  if (lower == "uniform") {
    bounds = partition_uniform(specs.size(), stages);
  } else if (lower.starts_with("type:")) {
    std::regex pattern;
    try {
      pattern = std::regex(std::string(method.substr(5)), std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error&) {
      problem = fmt::format("\"{}\" is not a regular expression", method.substr(5));
      return std::nullopt;
    }
    std::vector<double> weights;
    for (const auto& [name, kind] : specs) weights.push_back(std::regex_search(name, pattern) ? 1.0 : 0.0);
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w == 0; })) {
      problem = fmt::format("\"{}\" matches none of the model's layers", method);
      return std::nullopt;
    }
    bounds = partition_balanced(weights, stages);
  } else if (lower == "parameters") {
    problem = "the parameters method (layers balanced by parameter count) is not modelled: give type:transformer";
    return std::nullopt;
  } else {
    problem = fmt::format("unknown method \"{}\" (type:REGEX, uniform or parameters)", method);
    return std::nullopt;
  }
  std::string out;
  for (std::size_t s = 0; s < stages; ++s) {
    if (s > 0) out += '|';
    std::int64_t run = 0;
    auto flush = [&] {
      if (run > 0) out += run == 1 ? std::string("t") : fmt::format("t*{}", run);
      run = 0;
    };
    for (std::size_t i = bounds[s]; i < bounds[s + 1]; ++i) {
      const char kind = specs[i].second;
      if (kind == 't') {
        ++run;
        continue;
      }
      if (kind == '-') continue;
      flush();
      if ((kind == 'E' && s != 0) || (kind == 'L' && s + 1 != stages)) {
        problem = fmt::format("the split puts the {} on stage {} of {}", kind == 'E' ? "embedding" : "output layer", s,
                              stages);
        return std::nullopt;
      }
      out += kind;
    }
    flush();
  }
  return out;
}

}  // namespace trainsim::config
