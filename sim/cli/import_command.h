#pragma once
// `trainsim import megatron`: a Megatron-LM training command (a launch script, or the arguments after
// `--`) written out as a trainsim scenario (config/megatron_args.h); `trainsim import bridge`: the
// same from a Megatron-Bridge configuration YAML (config/bridge_config.h); `trainsim import
// torchtitan`: from a torchtitan job's TOML and its overrides (config/torchtitan_config.h). main.cc registers them and
// maps exceptions to exit codes.

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace trainsim::cli {

struct ImportArgs {
  std::string script;  // a launch script (or "-" for stdin), or the first Megatron argument after --
  std::string cluster;
  std::int64_t gpus = 0;
  std::string model;
  std::int64_t vocab = 0;
  std::string out;                       // -o: the scenario file (default: stdout)
  std::string bridge_file;               // import bridge: the configuration YAML
  CLI::App* bridge_app = nullptr;        // set by add_import_command
  std::string torchtitan_file;           // import torchtitan: the job's TOML
  CLI::App* torchtitan_app = nullptr;    // set by add_import_command
  std::vector<std::string> passthrough;  // the words after `--` (split_passthrough_args)
  std::vector<std::string> env;          // --env NAME=VALUE: the script's variables set beforehand
  std::string deepspeed_config;          // --deepspeed-config: Megatron-DeepSpeed's JSON, instead of the command's
};

CLI::App* add_import_command(CLI::App& app, ImportArgs& args);
// For `import megatron` and `import torchtitan`: moves the words after `--` into args.passthrough
// before CLI11 parses the rest (the other tool's options are not trainsim's); returns the argc to
// parse.
int split_passthrough_args(int argc, char** argv, ImportArgs& args);
// Exit code 0; an InputError (exit 2) when the command cannot be read or makes an impossible scenario.
int import_command(const ImportArgs& args);

}  // namespace trainsim::cli
