#pragma once
// `trainsim export megatron SCENARIO`: the Megatron-LM launch script that runs a scenario
// (config/megatron_export.h); `trainsim export torchtitan SCENARIO`: the torchtitan job configuration
// (config/torchtitan_export.h); `trainsim export bridge SCENARIO`: the Megatron-Bridge configuration
// (config/bridge_export.h). main.cc registers them and maps exceptions to exit codes.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace trainsim::cli {

struct ExportArgs {
  std::string scenario;
  std::vector<std::string> sets;       // --set PATH=VALUE, as `run` takes them
  std::string out;                     // -o: the script (default: stdout)
  CLI::App* torchtitan_app = nullptr;  // set by add_export_command
  CLI::App* bridge_app = nullptr;
  bool overrides = false;  // export bridge --overrides: Hydra overrides instead of the YAML
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& args);
// Exit code 0; an InputError (exit 2) when the scenario is invalid or the tool cannot run it.
int export_command(const ExportArgs& args);
// The Megatron-LM script of the scenario `doc` (its errors naming `file`) into `out` (made
// executable; stdout when empty), its notes on stderr. `search --megatron-script` writes its best
// layout's with it.
void write_megatron_script(const nlohmann::json& doc, const std::string& file, const std::string& out);
// The same for torchtitan's job configuration (`search --torchtitan-toml`).
void write_torchtitan_toml(const nlohmann::json& doc, const std::string& file, const std::string& out);
// The same for Megatron-Bridge's configuration (`search --bridge-config`): the YAML, or with
// `overrides` its keys as Hydra overrides, one per line.
void write_bridge_config(const nlohmann::json& doc, const std::string& file, const std::string& out,
                         bool overrides = false);

}  // namespace trainsim::cli
