#pragma once
// Megatron-DeepSpeed for `trainsim import megatron`: the DeepSpeed JSON configuration a launch script
// names with --deepspeed_config, read into the settings that change a step (batch sizes, ZeRO stage
// and its buckets, precision, the gradients' dtypes, offloading), and the pipeline split DeepSpeed's
// PipelineModule makes of Megatron-DeepSpeed's GPTModelPipe. Read off deepspeedai/DeepSpeed
// (deepspeed/runtime/config.py, zero/config.py, engine.py, bf16_optimizer.py, pipe/module.py,
// utils.py) and the microsoft and bigscience Megatron-DeepSpeed forks (megatron/model/gpt_model.py,
// megatron/arguments.py).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainsim::config {

struct DeepSpeedConfig {
  std::optional<std::int64_t> train_batch;       // train_batch_size
  std::optional<std::int64_t> micro_batch;       // train_micro_batch_size_per_gpu
  std::optional<std::int64_t> grad_accum;        // gradient_accumulation_steps
  std::int64_t zero_stage = 0;                   // zero_optimization.stage
  bool bf16 = false;                             // bf16.enabled (or bfloat16.enabled)
  bool fp16 = false;                             // fp16.enabled
  std::string grad_accum_dtype;                  // data_types.grad_accum_dtype: "", fp32, bf16, fp16
  std::string comm_dtype;                        // communication_data_type: "", fp32, bf16, fp16
  std::optional<double> reduce_bucket_elements;  // zero_optimization.reduce_bucket_size
  std::optional<bool> overlap_comm;              // zero_optimization.overlap_comm
  bool reduce_scatter = true;                    // zero_optimization.reduce_scatter
  std::string offload_optimizer;                 // zero_optimization.offload_optimizer.device: "", cpu, nvme
  std::string offload_param;                     // zero_optimization.offload_param.device
  std::optional<bool> pipe_partitioned;          // pipeline.pipe_partitioned (DeepSpeed's default true)
  std::optional<bool> grad_partitioned;          // pipeline.grad_partitioned (DeepSpeed's default true)
  // Each key read, as "ds_config.json: zero_optimization.stage", by what it does to a step.
  std::vector<std::string> no_effect, not_modelled, unknown;
};

// The configuration in `text` (JSON); `source` names it in messages. Malformed JSON, a value of the
// wrong type, "auto" (which only Hugging Face's Trainer fills in) or an unknown stage is an InputError
// naming the source and the key.
DeepSpeedConfig read_deepspeed_config(const std::string& text, const std::string& source);

// DeepSpeed's partition_balanced (its dynamic-programming version, DeepSpeed 0.11 and later): the
// boundaries of `parts` consecutive non-empty parts of `weights` that minimise the heaviest part
// minus the lightest (ties to the later boundary); partition_uniform (the first n mod parts parts one
// item longer) when there are no more items than parts.
std::vector<std::size_t> partition_balanced(const std::vector<double>& weights, std::size_t parts);
std::vector<std::size_t> partition_uniform(std::size_t items, std::size_t parts);

// The pipeline layout (configs/README.md, parallel.pipeline_layout) in which DeepSpeed's PipelineModule
// places GPTModelPipe's layers over `pp` stages by `method` ("type:REGEX", matched case-insensitively
// against each layer's class name; "uniform"; "parameters" is refused): the microsoft fork's layer
// list (`bigscience` false) or the bigscience fork's (with its transpose functions). nullopt with
// `problem` set when the method is unknown or the split puts the embedding or the head off the end
// stages.
std::optional<std::string> deepspeed_pipeline_layout(std::int64_t layers, std::int64_t pp, std::string_view method,
                                                     bool bigscience, bool tied_embeddings, std::string& problem);

}  // namespace trainsim::config
