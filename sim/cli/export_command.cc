#include "cli/export_command.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/report_commands.h"
#include "config/bridge_export.h"
#include "config/megatron_export.h"
#include "config/scenario.h"
#include "config/torchtitan_export.h"
#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::cli {

CLI::App* add_export_command(CLI::App& app, ExportArgs& args) {
  CLI::App* exp = app.add_subcommand("export", "Write the command that runs a scenario in another tool");
  exp->require_subcommand(1);
  // Each tool's subcommand: the scenario, --set as run takes it, and where the output goes.
  auto tool = [&](const char* name, const char* what, const char* out) {
    CLI::App* sub = exp->add_subcommand(name, what);
    sub->add_option("scenario", args.scenario, "Scenario JSON file")->required();
    sub->add_option("--set", args.sets, "Override a scenario key first: PATH=VALUE (repeatable), as run takes it")
        ->allow_extra_args(false);
    sub->add_option("-o,--out", args.out, out);
    return sub;
  };
  tool("megatron",
       "Write the Megatron-LM launch script (torchrun, pretrain_gpt.py or pretrain_mamba.py and their flags) that "
       "runs a scenario; `import megatron` reads it back",
       "Write the script to this file, executable (default: stdout)");
  CLI::App* torchtitan =
      tool("torchtitan",
           "Write the torchtitan job configuration (TOML, with its launch command) that runs a torchtitan scenario; "
           "`import torchtitan` reads it back",
           "Write the TOML to this file (default: stdout)");
  args.torchtitan_app = torchtitan;
  CLI::App* bridge = tool(
      "bridge",
      "Write the Megatron-Bridge (NeMo) configuration (the ConfigContainer keys that decide a step, YAML) that runs "
      "a scenario over a recipe of its model; `import bridge` reads it back",
      "Write the YAML (or the overrides) to this file (default: stdout)");
  bridge->add_flag("--overrides", args.overrides,
                   "Print the keys as Hydra overrides, one per line (section.key=value), as Megatron-Bridge's "
                   "scripts/training/run_recipe.py takes them");
  args.bridge_app = bridge;
  return exp;
}

namespace {

// The notes on stderr, then `text` on stdout or into `out` (made executable when asked).
void emit(const std::vector<std::string>& notes, const std::string& text, const std::string& out, bool executable) {
  for (const auto& n : notes) fmt::print(stderr, "note: {}\n", n);
  if (out.empty()) {
    fmt::print("{}", text);
    return;
  }
  {
    std::ofstream f(out, std::ios::binary);
    if (!f) throw util::InputError(out, "", "cannot write the file");
    f << text;
    if (!f) throw util::InputError(out, "", "cannot write the file");
  }
  if (executable) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::permissions(out, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add,
                    ec);
  }
  fmt::print(stderr, "wrote {}\n", out);
}

}  // namespace

void write_megatron_script(const nlohmann::json& doc, const std::string& file, const std::string& out) {
  const config::Scenario scenario = config::parse_scenario(util::JsonNode(doc, file), config::default_data_dir());
  const config::MegatronExport exported = config::export_megatron(doc, scenario);
  emit(exported.notes, exported.script, out, true);
}

void write_torchtitan_toml(const nlohmann::json& doc, const std::string& file, const std::string& out) {
  const config::Scenario scenario = config::parse_scenario(util::JsonNode(doc, file), config::default_data_dir());
  const config::TorchtitanExport exported = config::export_torchtitan(scenario);
  emit(exported.notes, exported.toml, out, false);
}

void write_bridge_config(const nlohmann::json& doc, const std::string& file, const std::string& out, bool overrides) {
  const config::Scenario scenario = config::parse_scenario(util::JsonNode(doc, file), config::default_data_dir());
  const config::BridgeExport exported = config::export_bridge(doc, scenario);
  if (!overrides) return emit(exported.notes, exported.yaml, out, false);
  std::string text;
  for (const auto& o : exported.overrides) text += o + "\n";
  std::vector<std::string> notes = exported.notes;
  notes.insert(notes.end(), exported.override_notes.begin(), exported.override_notes.end());
  emit(notes, text, out, false);
}

int export_command(const ExportArgs& args) {
  if (args.bridge_app != nullptr && args.bridge_app->parsed()) {
    write_bridge_config(scenario_doc(args.scenario, args.sets), args.scenario, args.out, args.overrides);
    return 0;
  }
  if (args.torchtitan_app != nullptr && args.torchtitan_app->parsed()) {
    write_torchtitan_toml(scenario_doc(args.scenario, args.sets), args.scenario, args.out);
    return 0;
  }
  write_megatron_script(scenario_doc(args.scenario, args.sets), args.scenario, args.out);
  return 0;
}

}  // namespace trainsim::cli
