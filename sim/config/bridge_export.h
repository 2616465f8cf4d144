#pragma once
// `trainsim export bridge`: the Megatron-Bridge (NeMo) configuration that runs a scenario, the
// inverse of `trainsim import bridge` (config/bridge_config.h). It is written as the sections of a
// ConfigContainer (model, train, ddp, comm_overlap, optimizer, mixed_precision, dataset, peft) holding
// every key that decides a training step, to lay over a recipe of the same model; the rest (data,
// tokenizer, learning rate, checkpoints, logging) stays the recipe's. The keys are derived from the
// Megatron-LM flags `export megatron` writes for the scenario (config/megatron_export.h), each
// turned into the ConfigContainer field import reads it from, with the recipe's settings that would
// change the step written out (false, null) where the scenario has them off. Importing the YAML
// gives the scenario back (tests/config/bridge_export_test.cc checks it on every shipped config and
// record that Megatron-Core runs).
//
// The same keys as Hydra-style overrides (`model.tensor_model_parallel_size=8`, one per line) are
// what Megatron-Bridge's scripts/training/run_recipe.py takes on its command line; the keys whose
// value is an object (the activation function, the attention backend, the optimizer's state dtypes)
// cannot be written that way and are left to the recipe, with a note.
//
// An InputError names the key for what Megatron-Bridge cannot run: what `export megatron` refuses
// (a PyTorch scenario, GPipe, FlashAttention v1, ...), except LoRA, which Megatron-Bridge runs (its
// peft section), and a Megatron-DeepSpeed scenario.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/scenario.h"

namespace trainsim::config {

struct BridgeExport {
  std::string yaml;                         // the ConfigContainer sections, with a header comment
  std::vector<std::string> overrides;       // the same keys as Hydra overrides, "section.key=value"
  std::vector<std::string> notes;           // what the configuration cannot say, one line each
  std::vector<std::string> override_notes;  // and what the overrides cannot say besides
};

// `doc` is the scenario's JSON as read (after --set), `scenario` the same parsed; messages name
// `scenario.file`.
BridgeExport export_bridge(const nlohmann::json& doc, const Scenario& scenario);

}  // namespace trainsim::config
