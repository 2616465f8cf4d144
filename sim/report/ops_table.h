#pragma once
// `trainsim run --ops`: the kernels one micro-batch runs through each part of the model, with the
// compute model's time for each and what bounds it, as a table for people and a JSON list for
// scripts.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware/compute_model.h"
#include "parallel/step_builder.h"

namespace trainsim::report {

// Per list: a heading (part, layers, pass), one row per op (name; kind; GFLOP; MB read and written
// or, for communication, sent; kernels; time ms; host ms, the CPU's time to issue it, starred where
// the CPU then waits for the GPU; TFLOP/s; GB/s; bound) and the list's compute and host totals.
std::string ops_text(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute);
// [{part, layers, pass, compute_s, host_s, ops: [{name, kind, flops, bytes, kernels, time_s, host_s,
// bound} or, for communication, {name, kind "communication", collective, group, bytes, host_s}; with
// host_sync true where the CPU waits for the GPU after the op]}].
nlohmann::json ops_json(const std::vector<parallel::OpList>& lists, const hardware::ComputeModel& compute);

}  // namespace trainsim::report
