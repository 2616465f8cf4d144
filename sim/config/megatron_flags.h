#pragma once
// The flags Megatron-LM's training scripts accept, and torchrun's, for `trainsim import megatron`:
// whether each takes a value and whether it leaves a training step unchanged. Read from
// NVIDIA/Megatron-LM megatron/training/arguments.py at 9ff6508 (with its dataclass-generated groups,
// megatron/training/training_config.py) and at 000c4ac (the union of the two), torch's
// torch/distributed/run.py, plus newer Megatron-Core flags seen in its launch scripts and functional
// tests (add-bias-linear, cpu-offloading, cuda-graph-modules, moe-expert-rank-capacity-factor,
// moe-paged-stash, no-store-param-remainders, use-custom-fsdp, the dsa-indexer-* and
// experimental-attention-variant flags, fine-grained-activation-offloading, offload-modules,
// optimizer-cuda-graph, export-kd-teacher-load, megatron-fsdp-version, outer-dp-sharding-strategy,
// no-moe-router-aux-loss-fusion, tokenizer-library, and the Nemotron 3 launch scripts'
// keep-mtp-spec-in-bf16 and keep-mamba-stack-attention-linear-in-bf16). Names without the leading dashes, '_' written
// '-'. `no_effect`: learning-rate schedule, optimiser hyperparameters, data, tokenizer and checkpoint paths, logging,
// profiling, evaluation, initialisation, fault tolerance and launcher settings, and the rotary and router options that
// change numbers, not work (trainsim's judgement, per flag group and name).

#include <array>
#include <string_view>

namespace trainsim::config {

struct MegatronFlag {
  std::string_view name;
  bool is_switch;  // takes no value (argparse store_true / store_false)
  bool no_effect;
};

extern const std::array<MegatronFlag, 681> kMegatronFlags;

}  // namespace trainsim::config
