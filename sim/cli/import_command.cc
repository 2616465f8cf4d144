#include "cli/import_command.h"
#include "cli/option_checks.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "config/bridge_config.h"
#include "config/megatron_args.h"
#include "config/scenario.h"
#include "config/torchtitan_config.h"
#include "util/error.h"
#include "util/json_node.h"
#include "util/shell_words.h"

namespace trainsim::cli {

namespace {

// --cluster, --gpus (returned), --model, --vocab and -o of both importers.
CLI::Option* add_common_options(CLI::App* app, ImportArgs& args, const std::string& gpus_help,
                                const std::string& model_replaces, const std::string& vocab_when) {
  app->add_option("--cluster", args.cluster, "Topology name (topologies/NAME.json) or file")->required();
  CLI::Option* gpus = app->add_option("--gpus", args.gpus, gpus_help)->check(kPositive);
  app->add_option("--model", args.model,
                  fmt::format("A model name (models/NAME.json) or file to use instead of {}", model_replaces));
  app->add_option("--vocab", args.vocab, fmt::format("The vocabulary size, when {}", vocab_when))->check(kPositive);
  app->add_option("-o,--out", args.out, "Write the scenario to this file (default: stdout)");
  return gpus;
}

// The text of `path`, or of stdin for "-"; `source` names it in messages.
std::string read_input(const std::string& path, std::string& source) {
  if (path == "-") {
    source = "<stdin>";
    return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  }
  source = path;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw util::InputError(path, "", "cannot read the file");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void print_list(const char* what, const std::vector<std::string>& flags) {
  if (flags.empty()) return;
  std::string line;
  for (const auto& f : flags) line += (line.empty() ? "" : " ") + f;
  fmt::print(stderr, "{} ({}): {}\n", what, flags.size(), line);
}

config::ImportOptions import_options(const ImportArgs& args) {
  config::ImportOptions options;
  options.cluster = args.cluster;
  options.gpus = args.gpus;
  options.model = args.model;
  options.vocab = args.vocab;
  return options;
}

// The scenario of `imported`, checked as `run` will read it (an impossible one blamed on the flag or
// key behind the scenario key that fails), its notes and flag lists on stderr, written out.
int finish(const config::ImportedScenario& imported, const config::ImportOptions& options, const std::string& out_file,
           const std::vector<std::string>& extra_notes, int keys_not_read,
           const char* unknown_what = "not a Megatron-LM flag trainsim knows, skipped") {
  const std::string text = imported.scenario.dump(2) + "\n";

  // The scenario is checked as `run` will read it; an impossible one is blamed on the flag behind the
  // key that fails.
  const std::string checked_as = out_file.empty() ? options.source : out_file;
  try {
    config::parse_scenario(util::JsonNode(nlohmann::json::parse(text), checked_as), config::default_data_dir());
  } catch (const util::InputError& e) {
    const auto it = imported.origin.find(e.path());
    if (it != imported.origin.end())
      throw util::InputError(options.source, it->second, fmt::format("{} (scenario key {})", e.problem(), e.path()));
    throw util::InputError(options.source, e.path().empty() ? "" : "scenario key " + e.path(), e.problem());
  }

  for (const auto& n : extra_notes) fmt::print(stderr, "note: {}\n", n);
  for (const auto& n : imported.notes) fmt::print(stderr, "note: {}\n", n);
  print_list("not modelled", imported.not_modelled);
  print_list(unknown_what, imported.unknown);
  print_list("no effect on a step", imported.no_effect);
  if (keys_not_read > 0)
    fmt::print(stderr, "{} other keys not read (docs/import-megatron.md lists the keys trainsim reads)\n",
               keys_not_read);
  if (out_file.empty()) {
    fmt::print("{}", text);
  } else {
    std::ofstream out(out_file, std::ios::binary);
    if (!out) throw util::InputError(out_file, "", "cannot write the file");
    out << text;
    if (!out) throw util::InputError(out_file, "", "cannot write the file");
    fmt::print(stderr, "wrote {}\n", out_file);
  }
  return 0;
}

}  // namespace

CLI::App* add_import_command(CLI::App& app, ImportArgs& args) {
  CLI::App* import = app.add_subcommand("import", "Write a trainsim scenario from another tool's training command");
  import->require_subcommand(1);
  CLI::App* megatron = import->add_subcommand(
      "megatron",
      "Read a Megatron-LM training command (a launch script, or the arguments after --) and write the scenario it "
      "runs");
  megatron->add_option(
      "script", args.script,
      "A launch script (or - for stdin); Megatron arguments may follow --, after it or instead of "
      "it: `train.sh`, `train.sh --cluster X -- --micro-batch-size 2`, `--cluster X -- --num-layers 32 "
      "...`");
  megatron
      ->add_option("--env", args.env,
                   "Set a variable of the script before it runs, as its environment would: NAME=VALUE (repeatable), "
                   "e.g. --env TP=4 --env MODEL_SIZE=8B")
      ->allow_extra_args(false);
  megatron->add_option("--deepspeed-config", args.deepspeed_config,
                       "Megatron-DeepSpeed: the DeepSpeed JSON configuration to read instead of the one the command "
                       "names with --deepspeed_config (which is otherwise read from the script's here-document that "
                       "writes it, or from the file, looked up beside the script first)");
  add_common_options(megatron, args, "Total GPUs (default: torchrun's --nproc-per-node times --nnodes in the command)",
                     "the command's architecture flags", "the command only names a tokenizer");

  CLI::App* bridge = import->add_subcommand(
      "bridge",
      "Read a Megatron-Bridge (NeMo) run's configuration YAML (the ConfigContainer a run prints, or to_yaml()) and "
      "write the scenario it runs");
  bridge->add_option("config", args.bridge_file, "The configuration YAML (or - for stdin)")->required();
  add_common_options(bridge, args, "Total GPUs (a Megatron-Bridge configuration does not say)",
                     "the configuration's model keys", "the configuration leaves it to the tokenizer")
      ->required();
  args.bridge_app = bridge;

  CLI::App* torchtitan = import->add_subcommand(
      "torchtitan",
      "Read a torchtitan job's TOML configuration (with its command-line overrides after --) and write the scenario "
      "it runs");
  torchtitan->add_option(
      "config", args.torchtitan_file,
      "The job's TOML (or - for stdin); torchtitan overrides may follow --: `llama3_8b.toml --cluster X "
      "--gpus 8 -- --training.steps 50 --parallelism.tensor_parallel_degree 2`. Without it, the "
      "--job.config_file among the overrides (torchtitan's own command line after --)");
  torchtitan->add_option("--cluster", args.cluster, "Topology name (topologies/NAME.json) or file")->required();
  torchtitan
      ->add_option("--gpus", args.gpus,
                   "Total GPUs (torchrun's NGPU x nodes; default: the degrees' product when none is -1)")
      ->check(kPositive);
  torchtitan->add_option("--model", args.model,
                         "A model name (models/NAME.json) or file to use instead of model.name and model.flavor");
  torchtitan->add_option("-o,--out", args.out, "Write the scenario to this file (default: stdout)");
  args.torchtitan_app = torchtitan;
  return import;
}

int split_passthrough_args(int argc, char** argv, ImportArgs& args) {
  if (argc < 3 || std::string_view(argv[1]) != "import" ||
      (std::string_view(argv[2]) != "megatron" && std::string_view(argv[2]) != "torchtitan"))
    return argc;
  for (int i = 3; i < argc; ++i) {
    if (std::string_view(argv[i]) != "--") continue;
    args.passthrough.assign(argv + i + 1, argv + argc);
    return i;
  }
  return argc;
}

int import_command(const ImportArgs& args) {
  if (args.torchtitan_app != nullptr && args.torchtitan_app->parsed()) {
    config::ImportOptions options = import_options(args);
    std::string file = args.torchtitan_file;
    // torchtitan's own command line names its configuration with --job.config_file.
    for (std::size_t i = 0; file.empty() && i < args.passthrough.size(); ++i) {
      const std::string& w = args.passthrough[i];
      for (std::string_view flag : {"--job.config_file", "--job.config-file"}) {
        if (w == flag && i + 1 < args.passthrough.size()) file = args.passthrough[i + 1];
        if (w.starts_with(std::string(flag) + "=")) file = w.substr(flag.size() + 1);
      }
    }
    if (file.empty())
      throw util::InputError("import torchtitan", "", "give the job's TOML, or --job.config_file FILE after --");
    const std::string text = read_input(file, options.source);
    const config::ImportedScenario imported = config::import_torchtitan(text, args.passthrough, options);
    return finish(imported, options, args.out, {}, 0, "not a torchtitan key trainsim knows, skipped");
  }
  if (args.bridge_app != nullptr && args.bridge_app->parsed()) {
    config::ImportOptions options = import_options(args);
    const std::string text = read_input(args.bridge_file, options.source);
    config::BridgeFlags flags = config::read_bridge_config(text, options.source, options.gpus);
    options.labels = flags.labels;
    config::ImportedScenario imported = config::import_megatron({flags.command}, options);
    for (const auto& [key, value] : flags.training.items()) imported.scenario["training"][key] = value;
    imported.origin.insert(flags.training_origin.begin(), flags.training_origin.end());
    if (imported.scenario["model"].is_object()) {  // the flags' model, not a --model
      for (const auto& [key, value] : flags.model.items()) imported.scenario["model"][key] = value;
      imported.origin.insert(flags.model_origin.begin(), flags.model_origin.end());
    }
    return finish(imported, options, args.out, flags.notes, flags.keys_not_read);
  }

  config::ImportOptions options = import_options(args);
  options.deepspeed_config = args.deepspeed_config;
  // The script positional takes the first word after -- when no script came before it.
  std::vector<std::string> words;
  if (!args.script.empty()) words.push_back(args.script);
  words.insert(words.end(), args.passthrough.begin(), args.passthrough.end());
  std::vector<util::ShellCommand> commands;
  std::vector<std::string> shell_notes;
  std::size_t first_arg = 0;
  if (!words.empty() && (words[0] == "-" || !words[0].starts_with("-"))) {
    const std::string text = read_input(words[0], options.source);
    first_arg = 1;
    if (words[0].ends_with(".yaml") || words[0].ends_with(".yml") || text.starts_with("MODEL_ARGS:") ||
        text.find("\nMODEL_ARGS:") != std::string::npos) {
      // Megatron-LM's YAML form (a functional test's model_config.yaml) instead of a script.
      commands.push_back(config::read_megatron_yaml(text, options.source));
    } else {
      std::map<std::string, std::string> environment;
      for (const auto& e : args.env) {
        const auto eq = e.find('=');
        if (eq == std::string::npos || eq == 0)
          throw util::InputError("--env", "", fmt::format("\"{}\" is not NAME=VALUE", e));
        environment[e.substr(0, eq)] = e.substr(eq + 1);
      }
      commands = util::split_shell_commands(text, options.source, &shell_notes, environment, &options.written_files);
      if (words[0] != "-") options.script_dir = std::filesystem::path(words[0]).parent_path().string();
    }
  }
  // Arguments given after the script (or instead of it) come last, so they override the script's.
  if (first_arg < words.size())
    commands.push_back({std::vector<std::string>(words.begin() + static_cast<std::ptrdiff_t>(first_arg), words.end()),
                        std::vector<int>(words.size() - first_arg, 0)});
  if (commands.empty() && first_arg > 0)
    throw util::InputError(options.source, "",
                           "runs no command (it only sets variables): give the script that launches the training, "
                           "or the arguments after --");
  if (commands.empty())
    throw util::InputError("import megatron", "", "give a launch script, or Megatron arguments after --");

  const config::ImportedScenario imported = config::import_megatron(commands, options);
  return finish(imported, options, args.out, shell_notes, 0);
}

}  // namespace trainsim::cli
