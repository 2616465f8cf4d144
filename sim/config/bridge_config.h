#pragma once
// `trainsim import bridge`: a Megatron-Bridge (NeMo) run's configuration, the ConfigContainer YAML
// that a run prints at start-up and that `ConfigContainer.to_yaml()` writes (sections model, ddp,
// optimizer, train, mixed_precision, comm_overlap, dataset), read into the Megatron-LM flags of the
// same meaning, so that config::import_megatron maps them as it maps a launch script. The model's
// keys are Megatron-Core's TransformerConfig fields, whose flags are their names with dashes; the
// others have their own names (megatron_args.h's table in docs/import-megatron.md). Keys trainsim
// does not read are counted, not listed: a whole dump holds several hundred.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/shell_words.h"

namespace trainsim::config {

struct BridgeFlags {
  util::ShellCommand command;                 // "--num-layers", "36", ... with each key's line
  std::map<std::string, std::string> labels;  // "num-layers" -> "model.num_layers"
  std::vector<std::string> notes;             // how a key was read, where it needed interpreting
  int keys_not_read = 0;                      // scalar keys of the file that map to no flag
  // Scenario training keys with no Megatron-LM flag (peft: LoRA), to merge into the scenario, and
  // the YAML key behind each ("training.lora_rank" -> "line 12: peft.dim 32").
  nlohmann::ordered_json training = nlohmann::ordered_json::object();
  std::map<std::string, std::string> training_origin;
  // Model keys with no Megatron-LM flag (a Gemma layer spec's post_norms and soft-caps), for the model
  // the flags build (not a --model), with the YAML key behind each.
  nlohmann::ordered_json model = nlohmann::ordered_json::object();
  std::map<std::string, std::string> model_origin;
};

// Megatron-LM's own YAML form of a command (its functional tests' model_config.yaml): a MODEL_ARGS
// mapping of "--flag": value, true for a switch, false or null for a flag not given, a list for
// several values. The flags with each one's line, for config::import_megatron. An InputError names
// `source` for malformed YAML or a file without MODEL_ARGS.
util::ShellCommand read_megatron_yaml(const std::string& text, const std::string& source);

// An InputError naming `source` (and the line) for malformed YAML or a value of the wrong kind.
// `gpus` decides Megatron-Bridge's data-parallel overlap defaults (more than one replica).
BridgeFlags read_bridge_config(const std::string& text, const std::string& source, std::int64_t gpus);

}  // namespace trainsim::config
