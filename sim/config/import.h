#pragma once
// What every `trainsim import` reader takes and gives: the options common to all of them (the input's
// name, the cluster and GPU count the other tool's configuration does not hold, a model to use
// instead of its own) and the scenario it wrote, with the notes, the key lists and each scenario
// key's origin in the input, which cli/import_command.cc prints and checks.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainsim::config {

struct ImportOptions {
  std::string source = "arguments";  // names the input in messages (a file name, or "arguments")
  std::string cluster;               // a topology name or file: required
  std::int64_t gpus = 0;             // 0: what the input says (torchrun's --nproc-per-node x --nnodes)
  std::string model;                 // a model name or file instead of the input's architecture
  std::int64_t vocab = 0;            // the vocabulary, when the command only names a tokenizer
  // How the input spells a flag, when it is not a command line ("num-layers" -> "model.num_layers"
  // for a Megatron-Bridge config): messages then name the input's own key.
  std::map<std::string, std::string> labels;
  // Megatron-DeepSpeed's --deepspeed_config: the files the launch script writes itself (a here-document's
  // text by the path the script gives it), the script's folder (where a relative path is looked up),
  // and a file given instead of the one the command names.
  std::map<std::string, std::string> written_files;
  std::string script_dir;
  std::string deepspeed_config;
};

struct ImportedScenario {
  nlohmann::ordered_json scenario;        // model, cluster, gpus, parallel, training
  std::vector<std::string> notes;         // the tool's defaults taken and approximations, one line each
  std::vector<std::string> no_effect;     // flags or keys that leave a step unchanged (--lr, --save, ...)
  std::vector<std::string> not_modelled;  // flags or keys the prediction does not take into account
  std::vector<std::string> unknown;       // flags or keys the tool's known versions do not have
  // For each scenario key set from a flag or key ("parallel.tp"), the flag as written with its line
  // ("line 12: --tensor-model-parallel-size 3"), so an impossible layout can be blamed on its flag.
  std::map<std::string, std::string> origin;
};

}  // namespace trainsim::config
