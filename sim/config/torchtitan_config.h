#pragma once
// `trainsim import torchtitan`: a torchtitan job's TOML configuration (its train_configs/*.toml, the
// file run_train.sh passes as --job.config_file) with the command-line overrides that follow it
// (`--training.steps 50`, `--parallelism.tensor_parallel_degree=8`, `--training.compile`), read into
// a scenario of `training.framework` `torchtitan`. Both layouts of its keys are read: the December
// 2024 one (parallel degrees and compile under [training], pipeline and context parallelism under
// [experimental], [float8] enable_float8_linear) and the 2025 one ([parallelism], [compile],
// model.converters, local_batch_size / global_batch_size, pipeline_parallel_microbatch_size). The
// model comes from model.name and model.flavor (torchtitan's Llama 2 and Llama 3 flavors have
// trainsim model files) unless one is given; the GPU count from --gpus, or from the degrees when
// none of them is -1. Keys that leave a step unchanged (logging, checkpoints, learning rate, data)
// are listed, so are the ones the prediction does not take into account; a setting trainsim cannot
// represent (DDP replicas, float32 parameters, MXFP8, a schedule other than GPipe, 1F1B and
// Interleaved1F1B) is an InputError naming the file, the line and the key. docs/import-torchtitan.md
// lists every key read.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/import.h"

namespace trainsim::config {

// torchtitan's Llama flavors (torchtitan/models/llama3/__init__.py and llama2's: dim, n_layers,
// n_heads, n_kv_heads, ffn_dim_multiplier and multiple_of give the widths; the tokenizers' 128,256
// and 32,000 words the vocabularies) and the trainsim model files of the same architectures.
struct TorchtitanFlavor {
  std::string_view name, flavor, model;
};
std::span<const TorchtitanFlavor> torchtitan_flavors();

// `overrides`: the words after the configuration, as torchtitan's command line takes them.
ImportedScenario import_torchtitan(const std::string& toml_text, const std::vector<std::string>& overrides,
                                   const ImportOptions& options);

}  // namespace trainsim::config
