#pragma once
// `trainsim import megatron`: a Megatron-LM training command (pretrain_gpt.py's or pretrain_mamba.py's
// arguments, from a launch script or pasted words) read into a trainsim scenario. The model comes
// from the architecture flags (--num-layers, --hidden-size, --swiglu, --num-experts, ...) unless a
// model is named, the layout and the training settings from the flags of the same meaning
// (ecosystem.md §1.3 and §2.1; configs/README.md names each key's flag); Megatron's own defaults fill
// what the command leaves out (dropout 0.1, tied embeddings, the 4h or SwiGLU MLP width, the global
// batch of one micro-batch per replica), each said in a note. The cluster is not in a Megatron
// command: it is given, and so is the GPU count unless torchrun's --nproc-per-node and --nnodes say
// it. Every flag read is either mapped to a key, known to leave the step unchanged (learning rate,
// data and checkpoint paths, logging), or listed as not modelled.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/import.h"
#include "util/shell_words.h"

namespace trainsim::config {

// Reads the flags of `commands` in order, a later occurrence overriding an earlier one as argparse
// does. A value the command cannot give (a shell variable the script never sets), a malformed
// number, a missing required flag or a setting trainsim cannot represent is an InputError naming
// the source, the line and the flag.
ImportedScenario import_megatron(const std::vector<util::ShellCommand>& commands, const ImportOptions& options);

// A hybrid model's layer pattern from Megatron's --hybrid-attention-ratio and --hybrid-mlp-ratio
// (Megatron-Core's allocate_layers): 'M' Mamba, '*' attention, '-' MLP.
std::string allocate_hybrid_layers(std::int64_t layers, double attention_ratio, double mlp_ratio);

}  // namespace trainsim::config
