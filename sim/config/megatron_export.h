#pragma once
// `trainsim export megatron`: the Megatron-LM launch script that runs a scenario, the inverse of
// `trainsim import megatron` (config/megatron_args.h). The scenario's model becomes pretrain_gpt.py's
// (or, for a hybrid model, pretrain_mamba.py's) architecture flags, its layout and training settings
// the flags of the same meaning (docs/import-megatron.md's table read backwards), launched by
// torchrun over the cluster's hosts, with synthetic data (--mock-data) and a NullTokenizer of the
// model's vocabulary, as Megatron-LM's own benchmarks run. Importing the script gives the scenario
// back (tests/config/megatron_export_test.cc checks it on every shipped config and record).
//
// A `megatron-deepspeed` scenario becomes a Megatron-DeepSpeed script instead: the fork's flags,
// --deepspeed, and the DeepSpeed configuration the script writes with a here-document.
//
// A setting Megatron-LM has no flag for is either an InputError (the command would train something
// else: a pytorch-eager scenario, LoRA, GPipe or ZB-H1, FlashAttention v1, PyTorch FSDP's per-unit
// ZeRO-2) or a note (it is outside a command: the network model, forced NCCL algorithms, the host
// cost scale, a what-if routing imbalance).

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/scenario.h"

namespace trainsim::config {

// One flag of the command, "--num-layers" with its values.
struct MegatronFlag {
  std::string flag;
  std::vector<std::string> values;
};

struct MegatronExport {
  std::string script;              // the bash launch script
  std::vector<std::string> notes;  // what the script cannot say, one line each
  // The flags of pretrain_gpt.py (pretrain_mamba.py) in the script's order, for another tool's
  // form of the same run (config/bridge_export.h); empty for a Megatron-DeepSpeed script.
  std::vector<MegatronFlag> flags;
};

// `doc` is the scenario's JSON as read (after --set), `scenario` the same parsed; messages name
// `scenario.file` and end with `(tool)`, the command that asked (export bridge builds on these flags).
MegatronExport export_megatron(const nlohmann::json& doc, const Scenario& scenario,
                               std::string_view tool = "trainsim export megatron");

}  // namespace trainsim::config
