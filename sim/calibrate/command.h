#pragma once
// `trainsim calibrate`: measure the local GPUs (through the CUDA plugin, when this build has one)
// or refit a profile offline (--fit), and write the profile JSON. main.cc only registers it.

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "calibrate/calibration.h"
#include "calibrate/device.h"

namespace trainsim::calibrate {

struct CommandOptions {
  std::string out;       // --out: the profile to write
  std::string fit_file;  // --fit: refit this profile's raw measurements instead of measuring
  Options options;
};

CLI::App* add_command(CLI::App& app, CommandOptions& options);
// Exit code 0; throws util::InputError (exit 2) for bad options, a build without CUDA or a machine
// without a usable GPU.
int run_command(const CommandOptions& options);

// The CUDA device of this build's plugin (libtrainsim_cuda_device.so next to the binary, or
// $TRAINSIM_CUDA_PLUGIN); an InputError with one line when there is none or no GPU answers.
std::unique_ptr<Device> open_cuda_device();

}  // namespace trainsim::calibrate
