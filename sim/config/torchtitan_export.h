#pragma once
// `trainsim export torchtitan`: the torchtitan job configuration (a TOML in its 2025 layout, with
// the command that launches it) that runs a scenario of `training.framework` `torchtitan`, the
// inverse of `trainsim import torchtitan` (config/torchtitan_config.h): the model as one of
// torchtitan's Llama flavors, the layout as its parallel degrees (replicas for hybrid sharding), the
// pipeline split spelled out module by module (module_fqns_per_model_part), the micro-batches as
// local batch and pipeline microbatch size, compile, Float8 with FSDP's float8 all-gather and
// precomputed scales, and activation checkpointing. Importing the TOML gives the scenario back
// (tests/config/torchtitan_export_test.cc checks it on every torchtitan record and config).
//
// A scenario torchtitan cannot run as it is simulated is an InputError naming the key: a Megatron or
// eager one, a model none of torchtitan's flavors has, replicas that do not divide the batch's
// data-parallel ranks, checkpointing of the first blocks that no block interval reproduces. What the
// TOML cannot say (the cluster, the CPU's issue cost, SDPA's cuDNN backend) is a note.

#include <string>
#include <vector>

#include "config/scenario.h"

namespace trainsim::config {

struct TorchtitanExport {
  std::string toml;                // the job configuration, its launch command in the header comment
  std::vector<std::string> notes;  // what the configuration cannot say, one line each
};

TorchtitanExport export_torchtitan(const Scenario& scenario);

}  // namespace trainsim::config
