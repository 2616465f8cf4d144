#include "config/torchtitan_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "config/scenario.h"
#include "util/error.h"

namespace trainsim::config {

namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

struct Entry {
  json value;
  std::string where;      // "line 12: training.seq_len", or "argument --training.seq_len"
  bool override = false;  // given on the command line
};

// The configuration's keys by their dotted names ("training.seq_len"), each with where it was
// written; a command-line override replaces the file's value. Reading a key marks it, so that the
// keys left at the end can be listed.
class Keys {
 public:
  explicit Keys(std::string source) : source_(std::move(source)) {}

  void set(const std::string& key, json value, std::string where, bool override = false) {
    entries_[key] = {std::move(value), std::move(where), override};
  }

  // The first of `names` given on the command line, else the first in the file (the 2025 spelling
  // of a key before its December 2024 one); every one of them is marked read.
  const Entry* find(std::initializer_list<std::string_view> names) {
    const Entry* found = nullptr;
    for (const std::string_view n : names) {
      read_.emplace(n);
      const auto it = entries_.find(std::string(n));
      if (it == entries_.end()) continue;
      if (found == nullptr || (it->second.override && !found->override)) found = &it->second;
    }
    return found;
  }

  bool any_under(std::string_view section) const {
    const std::string prefix = std::string(section) + ".";
    const auto it = entries_.lower_bound(prefix);
    return it != entries_.end() && it->first.starts_with(prefix);
  }

  [[noreturn]] void fail(const Entry& e, const std::string& problem) const {
    throw util::InputError(source_, e.where, problem);
  }

  std::int64_t integer(const Entry& e) const {
    if (e.value.is_number_integer()) return e.value.get<std::int64_t>();
    if (e.value.is_string()) {
      const std::string s = e.value.get<std::string>();
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return v;
    }
    fail(e, fmt::format("expects an integer, got {}", e.value.dump()));
  }

  bool boolean(const Entry& e) const {
    if (e.value.is_boolean()) return e.value.get<bool>();
    if (e.value.is_string()) {
      const std::string s = e.value.get<std::string>();
      if (s == "true" || s == "True" || s == "1") return true;
      if (s == "false" || s == "False" || s == "0") return false;
    }
    fail(e, fmt::format("expects true or false, got {}", e.value.dump()));
  }

  std::string text(const Entry& e) const {
    if (e.value.is_string()) return e.value.get<std::string>();
    if (e.value.is_number_integer()) return std::to_string(e.value.get<std::int64_t>());
    fail(e, fmt::format("expects a string, got {}", e.value.dump()));
  }

  // A list of strings: a TOML array, or one string of comma-separated items (as torchtitan's
  // command line and its older configurations write lists).
  std::vector<std::string> strings(const Entry& e) const {
    std::vector<std::string> out;
    if (e.value.is_array()) {
      for (const json& v : e.value) {
        if (!v.is_string()) fail(e, fmt::format("expects a list of strings, got {}", e.value.dump()));
        out.push_back(v.get<std::string>());
      }
      return out;
    }
    if (!e.value.is_string()) fail(e, fmt::format("expects a list of strings, got {}", e.value.dump()));
    std::stringstream in(e.value.get<std::string>());
    for (std::string item; std::getline(in, item, ',');) {
      const auto first = item.find_first_not_of(" \t");
      if (first == std::string::npos) continue;
      out.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
    }
    return out;
  }

  // The keys never read, in name order.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& entry : entries_)
      if (!read_.contains(entry.first)) out.push_back(entry.first);
    return out;
  }

 private:
  std::string source_;
  std::map<std::string, Entry> entries_;
  std::set<std::string, std::less<>> read_;
};

json to_json(const toml::node& n) {
  if (const toml::array* a = n.as_array()) {
    json out = json::array();
    for (const toml::node& el : *a) out.push_back(to_json(el));
    return out;
  }
  if (const toml::table* t = n.as_table()) {
    json out = json::object();
    for (const auto& [k, v] : *t) out[std::string(k.str())] = to_json(v);
    return out;
  }
  if (const auto* v = n.as_integer()) return v->get();
  if (const auto* v = n.as_boolean()) return v->get();
  if (const auto* v = n.as_floating_point()) return v->get();
  if (const auto* v = n.as_string()) return v->get();
  std::ostringstream text;  // a date or a time: its TOML text
  n.visit([&text](const auto& x) { text << x; });
  return text.str();
}

void flatten(const toml::table& table, const std::string& prefix, Keys& keys) {
  for (const auto& [k, v] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : fmt::format("{}.{}", prefix, k.str());
    if (const toml::table* sub = v.as_table()) {
      flatten(*sub, key, keys);
      continue;
    }
    keys.set(key, to_json(v), fmt::format("line {}: {}", v.source().begin.line, key));
  }
}

// A word after an option is its value unless it is an option itself: it does not start with '-',
// or it is a negative number (--parallelism.data_parallel_shard_degree -1).
bool is_value(const std::string& word) {
  if (!word.starts_with("-")) return true;
  double v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  return ec == std::errc() && end == word.data() + word.size();
}

// torchtitan's command line after the configuration: `--section.key VALUE`, `--section.key=VALUE`,
// a bare `--section.key` for true and `--section.no_key` for false (its switches); dashes in a name
// read as underscores.
void apply_overrides(const std::vector<std::string>& words, Keys& keys) {
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!w.starts_with("--") || w.size() == 2)
      throw util::InputError("arguments", w,
                             "is not a torchtitan option (--section.key VALUE); trainsim's own options go before --");
    std::string name = w.substr(2);
    std::optional<std::string> value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < words.size() && is_value(words[i + 1])) {
      value = words[++i];
    }
    std::replace(name.begin(), name.end(), '-', '_');
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == name.size())
      throw util::InputError("arguments", w,
                             "is not a torchtitan option: its names are section.key (--training.steps 50)");
    const std::string where = fmt::format("argument --{}", name);
    if (value) {
      keys.set(name, *value, where, true);
    } else if (name.compare(dot + 1, 3, "no_") == 0) {
      keys.set(name.substr(0, dot + 1) + name.substr(dot + 4), false, where, true);
    } else {
      keys.set(name, true, where, true);
    }
  }
}

constexpr std::array kFlavors{
    TorchtitanFlavor{"llama3", "8B", "llama3.1-8b"},     TorchtitanFlavor{"llama3", "70B", "llama3.1-70b"},
    TorchtitanFlavor{"llama3", "405B", "llama3.1-405b"}, TorchtitanFlavor{"llama2", "7B", "llama2-7b"},
    TorchtitanFlavor{"llama2", "13B", "llama2-13b"},     TorchtitanFlavor{"llama2", "70B", "llama2-70b"},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

class Importer {
 public:
  Importer(Keys& keys, const ImportOptions& options) : k_(keys), o_(options) {}

  ImportedScenario run() {
    // The rules for the keys left out changed twice: [parallelism] and model.converters came in early
    // 2025; the pipeline's microbatch size and its weighted split (generate_llm_fqn_per_model_part) in
    // mid 2025, with local_batch_size. A file that names the old batch_size keeps the older rules.
    const bool old_batch = k_.find({"training.batch_size"}) != nullptr;
    layout2025_ = k_.any_under("parallelism") || k_.any_under("compile") ||
                  k_.find({"training.local_batch_size"}) != nullptr || k_.find({"model.converters"}) != nullptr;
    pipeline2025_ =
        layout2025_ && (!old_batch || k_.find({"parallelism.pipeline_parallel_microbatch_size"}) != nullptr ||
                        k_.find({"parallelism.pipeline_parallel_layers_per_stage"}) != nullptr);
    // What the configuration was read as decides the defaults of the keys it leaves out.
    // The scenario's keys in the order the other importers write them.
    out_.scenario["model"] = nullptr;
    out_.scenario["cluster"] = o_.cluster;
    out_.scenario["gpus"] = 0;
    out_.scenario["parallel"] = ojson::object();
    out_.scenario["training"] = {{"framework", "torchtitan"}, {"micro_batch", 1}};  // pipeline() sets it
    note(layout2025_ ? "read as torchtitan's 2025 configuration ([parallelism], [compile]): its defaults fill the keys "
                       "left out"
                     : "read as torchtitan's December 2024 configuration (degrees under [training], pipeline and "
                       "context parallelism under [experimental]): its defaults fill the keys left out");
    model();
    degrees();
    batch();
    pipeline();
    precision();
    recompute();
    other_settings();
    leftovers();
    return std::move(out_);
  }

 private:
  void note(std::string text) { out_.notes.push_back(std::move(text)); }
  // An error at `e`, or at `key` (a default the configuration left out) when it is not written.
  [[noreturn]] void fail_at(const Entry* e, std::string_view key, const std::string& problem) const {
    if (e != nullptr) k_.fail(*e, problem);
    throw util::InputError(o_.source, std::string(key), problem);
  }
  void origin(const std::string& scenario_key, const Entry* e) {
    if (e != nullptr) out_.origin[scenario_key] = e->where;
  }

  void model() {
    const Entry* name_e = k_.find({"model.name"});
    const Entry* flavor_e = k_.find({"model.flavor"});
    if (!o_.model.empty()) {
      out_.scenario["model"] = o_.model;
      layers_ = load_model(o_.model, default_data_dir(), "--model").layers;
      note(fmt::format("the model is {} (--model); model.name and model.flavor are not used", o_.model));
      return;
    }
    const std::string name = name_e == nullptr ? "llama3" : k_.text(*name_e);
    const std::string flavor = flavor_e == nullptr ? "debugmodel" : k_.text(*flavor_e);
    bool known_name = false;
    for (const TorchtitanFlavor& f : kFlavors) {
      if (f.name != name) continue;
      known_name = true;
      if (f.flavor != flavor) continue;
      out_.scenario["model"] = std::string(f.model);
      origin("model", flavor_e);
      layers_ = load_model(std::string(f.model), default_data_dir(), "model.flavor").layers;
      note(fmt::format("model: torchtitan's {} {} -> models/{}.json", name, flavor, f.model));
      return;
    }
    if (!known_name) {
      const std::string problem =
          fmt::format("torchtitan's model \"{}\" has no trainsim model (llama2 and llama3 have): give --model", name);
      if (name_e == nullptr) throw util::InputError(o_.source, "model.name", problem);
      k_.fail(*name_e, problem);
    }
    std::string flavors;
    for (const TorchtitanFlavor& f : kFlavors)
      if (f.name == name) flavors += fmt::format("{}{}", flavors.empty() ? "" : ", ", f.flavor);
    const std::string problem =
        fmt::format("flavor \"{}\" of {} has no trainsim model file ({} have): give --model", flavor, name, flavors);
    if (flavor_e == nullptr) throw util::InputError(o_.source, "model.flavor (default debugmodel)", problem);
    k_.fail(*flavor_e, problem);
  }

  // A parallel degree: at least 1 (-1 too for the data-parallel shard degree: the ranks left).
  std::int64_t degree(std::initializer_list<std::string_view> names, std::int64_t fallback, const Entry** where,
                      bool may_be_left = false) {
    const Entry* e = k_.find(names);
    *where = e;
    if (e == nullptr) return fallback;
    const std::int64_t v = k_.integer(*e);
    if (v >= 1 || (may_be_left && v == -1)) return v;
    k_.fail(*e, fmt::format("must be at least 1{}, got {}", may_be_left ? " (or -1: the ranks left)" : "", v));
  }

  void degrees() {
    const Entry *replicate_e = nullptr, *shard_e = nullptr, *tp_e = nullptr, *cp_e = nullptr, *ep_e = nullptr;
    const std::int64_t replicate = degree(
        {"parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree"}, 1, &replicate_e);
    shard_ =
        degree({"parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree"}, -1, &shard_e, true);
    tp_ = degree({"parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"}, 1, &tp_e);
    pp_ = degree({"parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"}, 1, &pp_e_);
    cp_ = degree({"parallelism.context_parallel_degree", "experimental.context_parallel_degree"}, 1, &cp_e);
    const std::int64_t ep =
        degree({"parallelism.expert_parallel_degree", "experimental.expert_parallel_degree"}, 1, &ep_e);
    k_.find({"parallelism.expert_tensor_parallel_degree"});  // experts only
    if (ep > 1)
      k_.fail(*ep_e, "expert parallelism needs a mixture-of-experts model; trainsim's torchtitan runs Llama models");
    if (replicate > 1 && shard_ == 1 && cp_ == 1)
      k_.fail(*replicate_e, fmt::format("{} replicas without sharding (DDP) are not modelled: trainsim's torchtitan "
                                        "shards with FSDP2 (give data_parallel_shard_degree above 1 for HSDP)",
                                        replicate));
    const std::int64_t others = replicate * tp_ * pp_ * cp_;
    if (o_.gpus > 0) {
      gpus_ = o_.gpus;
      if (shard_ == -1) {
        if (gpus_ % others != 0)
          throw util::InputError(
              "--gpus", "",
              fmt::format("{} GPUs are not a multiple of dp_replicate {} x tp {} x pp {} x cp {} = {} "
                          "(the configuration's degrees)",
                          gpus_, replicate, tp_, pp_, cp_, others));
        shard_ = gpus_ / others;
        note(fmt::format("data_parallel_shard_degree -1: the {} ranks left of {} GPUs (--gpus)", shard_, gpus_));
        if (replicate > 1 && shard_ == 1 && cp_ == 1)
          k_.fail(*replicate_e, fmt::format("{} replicas leave no ranks to shard over (DDP): not modelled, trainsim's "
                                            "torchtitan shards with FSDP2",
                                            replicate));
      } else if (shard_ * others != gpus_) {
        k_.fail(*shard_e,
                fmt::format("dp_replicate {} x dp_shard {} x tp {} x pp {} x cp {} = {} ranks, not the {} GPUs "
                            "of --gpus",
                            replicate, shard_, tp_, pp_, cp_, shard_ * others, gpus_));
      }
    } else {
      if (shard_ == -1) {
        const std::string problem =
            "-1 takes the ranks left, and a torchtitan configuration does not say how many GPUs torchrun starts: "
            "give --gpus";
        if (shard_e == nullptr)
          throw util::InputError(o_.source, "parallelism.data_parallel_shard_degree (default -1)", problem);
        k_.fail(*shard_e, problem);
      }
      gpus_ = shard_ * others;
      origin("gpus", shard_e);
      note(fmt::format("gpus {}: dp_replicate {} x dp_shard {} x tp {} x pp {} x cp {}", gpus_, replicate, shard_, tp_,
                       pp_, cp_));
    }
    dp_ = replicate * shard_;
    out_.scenario["gpus"] = gpus_;
    ojson& p = out_.scenario["parallel"];
    p["tp"] = tp_;
    origin("parallel.tp", tp_e);
    p["pp"] = pp_;
    origin("parallel.pp", pp_e_);
    p["cp"] = cp_;
    origin("parallel.cp", cp_e);
    p["zero"] = 3;
    if (replicate > 1) {
      // HSDP: FSDP2 shards within each replica's dp_shard x cp ranks and all-reduces the shards
      // across the replicas.
      p["distributed_optimizer_instances"] = replicate;
      origin("parallel.distributed_optimizer_instances", replicate_e);
      note(fmt::format("HSDP: {} replicas of {}-way FSDP sharding -> distributed_optimizer_instances {}", replicate,
                       shard_ * cp_, replicate));
    }
    if (tp_ > 1) {
      // torchtitan's tensor-parallel plan for Llama shards the norms over the sequence.
      p["sequence_parallel"] = true;
      origin("parallel.sequence_parallel", tp_e);
    }
    const Entry* async_e =
        k_.find({"parallelism.enable_async_tensor_parallel", "experimental.enable_async_tensor_parallel"});
    if (async_e != nullptr && k_.boolean(*async_e)) {
      if (tp_ == 1) {
        note("enable_async_tensor_parallel has no effect without tensor parallelism");
      } else {
        p["tp_comm_overlap"] = true;
        origin("parallel.tp_comm_overlap", async_e);
      }
    }
    const Entry* rotate_e =
        k_.find({"parallelism.context_parallel_rotate_method", "experimental.context_parallel_rotate_method"});
    const std::string rotate = rotate_e == nullptr ? "allgather" : k_.text(*rotate_e);
    if (rotate != "allgather" && rotate != "alltoall")
      k_.fail(*rotate_e, fmt::format("\"{}\" is not a rotate method (allgather, alltoall)", rotate));
    if (cp_ > 1) {
      // PyTorch's context_parallel: "allgather" gathers K and V; "alltoall" passes them around the ring.
      p["cp_comm_type"] = rotate == "allgather" ? "allgather" : "p2p";
      origin("parallel.cp_comm_type", rotate_e);
    }
  }

  void batch() {
    const Entry* local_e = k_.find({"training.local_batch_size", "training.batch_size"});
    local_ = local_e == nullptr ? 8 : k_.integer(*local_e);
    if (local_ < 1) k_.fail(*local_e, fmt::format("must be at least 1, got {}", local_));
    if (local_e == nullptr) note("local batch 8: torchtitan's default training.local_batch_size");
    local_e_ = local_e;
    const std::int64_t dp = dp_;
    const Entry* global_e = k_.find({"training.global_batch_size"});
    const std::int64_t global = global_e == nullptr ? -1 : k_.integer(*global_e);
    if (global > 0) {
      if (global % (local_ * dp) != 0)
        k_.fail(*global_e, fmt::format("{} is not a multiple of local_batch_size {} x data-parallel degree {}", global,
                                       local_, dp));
      global_ = global;
      accumulation_ = global / (local_ * dp);
      origin("training.global_batch", global_e);
      if (accumulation_ > 1)
        note(
            fmt::format("global_batch_size {}: {} gradient-accumulation steps of local batch {} over {} data-parallel "
                        "ranks",
                        global, accumulation_, local_, dp));
    } else {
      global_ = local_ * dp;
      origin("training.global_batch", local_e);
    }
    const Entry* seq_e = k_.find({"training.seq_len"});
    seq_ = seq_e == nullptr ? 2048 : k_.integer(*seq_e);
    if (seq_e == nullptr) note("seq_len 2048: torchtitan's default training.seq_len");
    ojson& t = out_.scenario["training"];
    t["global_batch"] = global_;
    t["seq_len"] = seq_;
    origin("training.seq_len", seq_e);
    const Entry* steps_e = k_.find({"training.steps"});
    if (steps_e != nullptr) {
      const std::int64_t steps = k_.integer(*steps_e);
      if (steps > 0) {
        const double tokens = static_cast<double>(steps) * static_cast<double>(global_) * static_cast<double>(seq_);
        if (tokens < 9e18)
          t["train_tokens"] = steps * global_ * seq_;
        else
          t["train_tokens"] = tokens;  // the scenario check refuses it
        origin("training.train_tokens", steps_e);
      }
    }
  }

  // The layers of each virtual stage, as torchtitan splits the model, written as a pipeline_layout;
  // the schedule and the micro-batches.
  void pipeline() {
    ojson& t = out_.scenario["training"];
    const Entry* sched_e =
        k_.find({"parallelism.pipeline_parallel_schedule", "experimental.pipeline_parallel_schedule"});
    const Entry* csv_e =
        k_.find({"parallelism.pipeline_parallel_schedule_csv", "experimental.pipeline_parallel_schedule_csv"});
    const Entry* mbs_e = k_.find({"parallelism.pipeline_parallel_microbatch_size"});
    const Entry* nmb_e =
        k_.find({"parallelism.pipeline_parallel_microbatches", "experimental.pipeline_parallel_microbatches"});
    const Entry* splits_e =
        k_.find({"parallelism.pipeline_parallel_split_points", "experimental.pipeline_parallel_split_points"});
    const Entry* per_stage_e = k_.find({"parallelism.pipeline_parallel_layers_per_stage"});
    const Entry* fqns_e = k_.find({"parallelism.module_fqns_per_model_part"});
    const Entry* first_less_e = k_.find({"parallelism.pipeline_parallel_first_stage_less_layers"});
    const Entry* last_less_e = k_.find({"parallelism.pipeline_parallel_last_stage_less_layers"});
    if (pp_ == 1) {
      t["micro_batch"] = local_;
      origin("training.micro_batch", local_e_);
      return;
    }
    ojson& p = out_.scenario["parallel"];
    const std::string sched = sched_e == nullptr ? "1F1B" : k_.text(*sched_e);
    const std::string s = lower(sched);
    bool multi = false;
    if (s == "1f1b") {
      p["schedule"] = "1f1b";
    } else if (s == "gpipe") {
      p["schedule"] = "gpipe";
    } else if (s == "interleaved1f1b") {
      p["schedule"] = "interleaved";
      multi = true;
    } else {
      k_.fail(*sched_e,
              fmt::format("schedule \"{}\" is not modelled (trainsim runs GPipe, 1F1B and Interleaved1F1B)", sched));
    }
    origin("parallel.schedule", sched_e);
    if (csv_e != nullptr && !k_.text(*csv_e).empty())
      k_.fail(*csv_e,
              "a schedule read from a CSV file is not modelled (trainsim runs GPipe, 1F1B and Interleaved1F1B)");

    // Micro-batches: the 2025 microbatch size (1 by default), or the December 2024 count (the
    // pipeline degree by default) splitting the local batch.
    if (mbs_e != nullptr || (nmb_e == nullptr && pipeline2025_)) {
      const std::int64_t mbs = mbs_e == nullptr ? 1 : k_.integer(*mbs_e);
      if (mbs < 1 || local_ % mbs != 0)
        fail_at(mbs_e, "parallelism.pipeline_parallel_microbatch_size",
                fmt::format("{} does not divide the local batch {}", mbs, local_));
      t["micro_batch"] = mbs;
      origin("training.micro_batch", mbs_e != nullptr ? mbs_e : local_e_);
      note(fmt::format(
          "pipeline: {} micro-batches of {} per schedule (local batch {} / pipeline_parallel_microbatch_size)",
          local_ / mbs, mbs, local_));
    } else {
      const std::int64_t n = nmb_e == nullptr ? pp_ : k_.integer(*nmb_e);
      if (n < 1 || local_ % n != 0)
        fail_at(nmb_e != nullptr ? nmb_e : local_e_, "training.batch_size (default 8)",
                fmt::format("{} micro-batches do not divide the local batch {}", n, local_));
      t["micro_batch"] = local_ / n;
      origin("training.micro_batch", nmb_e != nullptr ? nmb_e : local_e_);
      note(fmt::format("pipeline: {} micro-batches of {} per schedule ({})", n, local_ / n,
                       nmb_e == nullptr ? "pipeline_parallel_microbatches defaults to the pipeline degree"
                                        : "pipeline_parallel_microbatches"));
    }
    if (accumulation_ > 1)
      note(
          fmt::format("torchtitan runs the pipeline schedule once per gradient-accumulation step ({}); trainsim runs "
                      "one schedule of all the step's micro-batches, with one fill and drain instead of {}",
                      accumulation_, accumulation_));

    // The layers per virtual stage.
    std::vector<std::int64_t> counts;
    const Entry* split_origin = nullptr;
    std::string how;
    if (fqns_e != nullptr) {
      counts = stages_from_fqns(*fqns_e);
      split_origin = fqns_e;
      how = "module_fqns_per_model_part";
    } else if (splits_e != nullptr && !k_.strings(*splits_e).empty()) {
      counts = stages_from_split_points(*splits_e);
      split_origin = splits_e;
      how = "pipeline_parallel_split_points";
    } else {
      std::int64_t stages = pp_ * (multi ? 2 : 1);
      const std::int64_t in_w = first_less_e == nullptr ? 1 : k_.integer(*first_less_e);
      const std::int64_t out_w = last_less_e == nullptr ? 1 : k_.integer(*last_less_e);
      if (per_stage_e != nullptr) {
        const std::int64_t per = k_.integer(*per_stage_e);
        if (per < 1) k_.fail(*per_stage_e, fmt::format("must be at least 1, got {}", per));
        stages = (layers_ + in_w + out_w + per - 1) / per;
        if (stages % pp_ != 0)
          k_.fail(*per_stage_e,
                  fmt::format("makes {} virtual stages, not a multiple of the pipeline degree {}", stages, pp_));
        split_origin = per_stage_e;
      } else {
        split_origin = sched_e != nullptr ? sched_e : pp_e_;
      }
      if (pipeline2025_) {
        counts = generate_fqn_per_model_part(stages, in_w, out_w, split_origin);
        how = fmt::format(
            "torchtitan's generate_llm_fqn_per_model_part over {} stages (the embedding and the output "
            "counted as {} and {} layers)",
            stages, in_w, out_w);
      } else {
        counts = generate_split_points(stages, split_origin);
        how = fmt::format("torchtitan's generate_split_points (before mid 2025) over {} stages", stages);
      }
    }
    const auto stages = static_cast<std::int64_t>(counts.size());
    constexpr std::string_view kPp = "parallelism.pipeline_parallel_degree";
    if (stages % pp_ != 0)
      fail_at(split_origin, kPp, fmt::format("makes {} stages, not a multiple of the pipeline degree {}", stages, pp_));
    const std::int64_t per_rank = stages / pp_;
    if (!multi && per_rank != 1)
      fail_at(split_origin, kPp, fmt::format("makes {} stages per rank; schedule {} runs one", per_rank, sched));
    if (multi && per_rank < 2)
      fail_at(split_origin, kPp, fmt::format("makes 1 stage per rank; schedule {} needs at least 2", sched));
    if (multi) {
      p["virtual_stages"] = per_rank;
      origin("parallel.virtual_stages", split_origin);
    }
    std::string layout = "E";
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (i > 0) layout += "|";
      if (counts[i] > 0) layout += fmt::format("t*{}", counts[i]);
    }
    layout += "L";
    p["pipeline_layout"] = layout;
    origin("parallel.pipeline_layout", split_origin);
    chunk_layers_ = counts;
    note(fmt::format("pipeline_layout \"{}\": {}", layout, how));
  }

  // torchtitan/distributed/pipeline_parallel.py (2025): the embedding and the output count as
  // `in_w` and `out_w` layers; the effective layers split evenly, the first stages one more while
  // the remainder lasts.
  std::vector<std::int64_t> generate_fqn_per_model_part(std::int64_t stages, std::int64_t in_w, std::int64_t out_w,
                                                        const Entry* blame) const {
    if (stages == 1) return {layers_};
    const std::int64_t effective = layers_ + in_w + out_w;
    const std::int64_t base = effective / stages;
    const std::int64_t extra = effective % stages;
    if (base == 0 || in_w < 0 || out_w < 0 || in_w > base || out_w > base)
      fail_at(blame, "parallelism.pipeline_parallel_degree",
              fmt::format("{} stages over {} layers (with the embedding as {} and the output as {}) leave a stage "
                          "without layers",
                          stages, layers_, in_w, out_w));
    std::vector<std::int64_t> counts;
    std::int64_t placed = 0;
    for (std::int64_t i = 0; i < stages; ++i) {
      std::int64_t n = base + (i < extra ? 1 : 0);
      if (i == 0) n -= in_w;
      if (i == stages - 1) n -= out_w;
      n = std::min(n, layers_ - placed);
      counts.push_back(n);
      placed += n;
    }
    return counts;
  }

  // torchtitan/parallelisms/pipeline_llama.py (2024-12): the first and last stages get
  // layers / stages, the middle ones one more while the remainder lasts, the last what is left.
  std::vector<std::int64_t> generate_split_points(std::int64_t stages, const Entry* blame) const {
    if (stages > layers_)
      fail_at(blame, "experimental.pipeline_parallel_degree",
              fmt::format("{} stages are more than the model's {} layers", stages, layers_));
    const std::int64_t base = layers_ / stages;
    std::int64_t extra = layers_ % stages;
    std::vector<std::int64_t> counts{base};
    std::int64_t placed = base;
    for (std::int64_t i = 1; i + 1 < stages; ++i) {
      const std::int64_t n = base + (extra > 0 ? 1 : 0);
      if (extra > 0) --extra;
      counts.push_back(n);
      placed += n;
    }
    if (stages > 1) counts.push_back(layers_ - placed);
    return counts;
  }

  // "layers.4,layers.8": each point begins a stage.
  std::vector<std::int64_t> stages_from_split_points(const Entry& e) const {
    std::vector<std::int64_t> counts;
    std::int64_t prev = 0;
    for (const std::string& point : k_.strings(e)) {
      const std::int64_t at = layer_index(e, point);
      if (at <= prev || at >= layers_)
        k_.fail(e,
                fmt::format("split point \"{}\" must come after the previous one and before layer {}", point, layers_));
      counts.push_back(at - prev);
      prev = at;
    }
    counts.push_back(layers_ - prev);
    return counts;
  }

  // [["tok_embeddings", "layers.0", ...], [...], [..., "norm", "output"]]: the transformer layers of
  // each stage, in order.
  std::vector<std::int64_t> stages_from_fqns(const Entry& e) const {
    if (!e.value.is_array() || e.value.empty())
      k_.fail(e, "expects a list of lists of module names, one list per stage");
    std::vector<std::int64_t> counts;
    std::int64_t next = 0;
    for (std::size_t s = 0; s < e.value.size(); ++s) {
      const json& stage = e.value[s];
      if (!stage.is_array()) k_.fail(e, "expects a list of lists of module names, one list per stage");
      std::int64_t n = 0;
      for (const json& m : stage) {
        const std::string name = m.is_string() ? m.get<std::string>() : m.dump();
        if (name == "tok_embeddings" || name == "norm" || name == "output") {
          const bool in_place = name == "tok_embeddings" ? s == 0 : s + 1 == e.value.size();
          if (!in_place)
            k_.fail(e, fmt::format("\"{}\" in stage {} is not modelled: the embedding belongs to the first stage, the "
                                   "norm and the output to the last",
                                   name, s));
          continue;
        }
        if (layer_index(e, name) != next)
          k_.fail(e, fmt::format("\"{}\" in stage {}: the stages must hold layers.0 to layers.{} in order", name, s,
                                 layers_ - 1));
        ++next;
        ++n;
      }
      counts.push_back(n);
    }
    if (next != layers_) k_.fail(e, fmt::format("places {} of the model's {} layers", next, layers_));
    return counts;
  }

  std::int64_t layer_index(const Entry& e, const std::string& name) const {
    std::int64_t v = -1;
    if (name.starts_with("layers.")) {
      const char* first = name.data() + 7;
      const char* last = name.data() + name.size();
      const auto [end, ec] = std::from_chars(first, last, v);
      if (ec != std::errc() || end != last || first == last) v = -1;
    }
    if (v < 0) k_.fail(e, fmt::format("\"{}\" is not a module trainsim places (layers.N)", name));
    return v;
  }

  void precision() {
    ojson& t = out_.scenario["training"];
    const Entry* param_e = k_.find({"training.mixed_precision_param"});
    const std::string param = param_e == nullptr ? "bfloat16" : k_.text(*param_e);
    if (param != "bfloat16")
      k_.fail(*param_e, fmt::format("\"{}\" parameters are not modelled: trainsim's torchtitan computes in bfloat16 "
                                    "(or Float8)",
                                    param));
    // training.dtype bfloat16 (2025) keeps the weights, gradients and AdamW states in bf16 too, with no
    // fp32 copy; trainsim's FSDP2 holds them in fp32 (16 bytes per parameter).
    const Entry* dtype_e = k_.find({"training.dtype"});
    if (dtype_e != nullptr && k_.text(*dtype_e) != "float32")
      out_.not_modelled.push_back(
          fmt::format("training.dtype {} (trainsim keeps fp32 weights, gradients and AdamW "
                      "states)",
                      k_.text(*dtype_e)));
    const Entry* reduce_e = k_.find({"training.mixed_precision_reduce"});
    const std::string reduce = reduce_e == nullptr ? "float32" : k_.text(*reduce_e);
    if (reduce != "float32" && reduce != "bfloat16")
      k_.fail(*reduce_e, fmt::format("\"{}\" is not a reduce dtype (float32, bfloat16)", reduce));
    if (reduce == "bfloat16") {
      t["grad_reduce_in_fp32"] = false;
      origin("training.grad_reduce_in_fp32", reduce_e);
    }

    // Float8: the December 2024 [float8] switch, or the 2025 converters.
    const Entry* conv_e = k_.find({"model.converters"});
    const Entry* f8_switch_e = k_.find({"float8.enable_float8_linear"});
    bool float8 = f8_switch_e != nullptr && k_.boolean(*f8_switch_e);
    const Entry* f8_origin = float8 ? f8_switch_e : nullptr;
    if (conv_e != nullptr) {
      for (const std::string& c : k_.strings(*conv_e)) {
        if (c == "float8" || c == "quantize.linear.float8") {
          float8 = true;
          f8_origin = conv_e;
        } else if (c == "mx" || c == "mxfp8" || c == "quantize.linear.mx") {
          k_.fail(*conv_e, fmt::format("converter \"{}\" (MXFP8 linears) is not modelled: trainsim's torchtitan runs "
                                       "bfloat16 or tensorwise Float8",
                                       c));
        } else {
          out_.not_modelled.push_back(fmt::format("model.converters {}", c));
        }
      }
    }
    t["precision"] = float8 ? "fp8" : "bf16";
    origin("training.precision", f8_origin);
    const auto f8 = [this](std::string_view key) {
      return k_.find({fmt::format("float8.{}", key), fmt::format("quantize.linear.float8.{}", key)});
    };
    const Entry* all_gather_e = f8("enable_fsdp_float8_all_gather");
    const Entry* precompute_e = f8("precompute_float8_dynamic_scale_for_fsdp");
    const Entry* recipe_e = f8("recipe_name");
    const Entry* filter_e = f8("filter_fqns");
    const Entry* force_e = f8("force_recompute_fp8_weight_in_bwd");
    const Entry* emulate_e = f8("emulate");
    f8("moe_fqns_prototype");  // experts only
    if (!float8) return;
    // trainsim's Float8 is torchao's tensorwise recipe with FSDP's float8 all-gather and the
    // precomputed scales, in every linear of the blocks and not the output layer.
    if (all_gather_e == nullptr || !k_.boolean(*all_gather_e))
      out_.not_modelled.push_back("float8.enable_fsdp_float8_all_gather false (trainsim gathers the fp8 weights)");
    if (precompute_e == nullptr || !k_.boolean(*precompute_e))
      out_.not_modelled.push_back(
          "float8.precompute_float8_dynamic_scale_for_fsdp false (trainsim precomputes the scales)");
    if (recipe_e != nullptr && k_.text(*recipe_e) != "tensorwise")
      out_.not_modelled.push_back(
          fmt::format("float8.recipe_name {} (trainsim scales tensorwise)", k_.text(*recipe_e)));
    if (filter_e != nullptr)
      for (const std::string& f : k_.strings(*filter_e))
        if (f != "output") out_.not_modelled.push_back(fmt::format("float8.filter_fqns {}", f));
    if (force_e != nullptr && k_.boolean(*force_e))
      out_.not_modelled.push_back("float8.force_recompute_fp8_weight_in_bwd");
    if (emulate_e != nullptr && k_.boolean(*emulate_e)) out_.not_modelled.push_back("float8.emulate");
  }

  void recompute() {
    ojson& t = out_.scenario["training"];
    const Entry* mode_e = k_.find({"activation_checkpoint.mode"});
    const Entry* option_e = k_.find({"activation_checkpoint.selective_ac_option"});
    k_.find({"activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns"});  // the MoE router's
    const std::string mode = mode_e == nullptr ? "selective" : k_.text(*mode_e);
    if (mode == "none" || mode == "full") {
      t["recompute"] = mode;
      origin("training.recompute", mode_e);
      return;
    }
    if (mode != "selective") k_.fail(*mode_e, fmt::format("mode \"{}\" is not modelled (none, selective, full)", mode));
    const std::string option = option_e == nullptr ? "2" : k_.text(*option_e);
    if (mode_e == nullptr || option_e == nullptr)
      note(fmt::format("activation checkpointing: torchtitan's default{} {}",
                       mode_e == nullptr ? " mode selective," : "",
                       option_e == nullptr ? "selective_ac_option 2" : "selective_ac_option " + option));
    if (option == "op") {
      t["recompute"] = "selective";
      origin("training.recompute", option_e != nullptr ? option_e : mode_e);
      return;
    }
    std::int64_t every = 0;
    const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
    if (ec != std::errc() || end != option.data() + option.size() || every < 1)
      fail_at(option_e, "activation_checkpoint.selective_ac_option",
              fmt::format("\"{}\" is neither \"op\" nor a positive layer interval", option));
    // Every `every`-th block of a rank is checkpointed whole (its counter runs over the rank's
    // blocks in order): trainsim checkpoints as many blocks per model chunk, the first ones.
    std::int64_t rank_layers = layers_, chunks = 1;
    if (!chunk_layers_.empty()) {
      rank_layers = 0;
      chunks = static_cast<std::int64_t>(chunk_layers_.size()) / pp_;
      for (std::size_t c = 0; c < chunk_layers_.size(); c += static_cast<std::size_t>(pp_))
        rank_layers += chunk_layers_[c];
    }
    const std::int64_t per_chunk = rank_layers / every / chunks;
    const Entry* blame = option_e != nullptr ? option_e : mode_e;
    if (per_chunk == 0) {
      t["recompute"] = "none";
      origin("training.recompute", blame);
      note(fmt::format("selective_ac_option {}: no block of a rank's {} is checkpointed", every, rank_layers));
      return;
    }
    t["recompute"] = "full";
    origin("training.recompute", blame);
    if (every > 1) {
      t["recompute_layers"] = per_chunk;
      origin("training.recompute_layers", blame);
      note(
          fmt::format("selective_ac_option {}: one block in {} checkpointed whole -> recompute full of {} blocks per "
                      "model chunk (recompute_layers; trainsim takes the chunk's first ones)",
                      every, every, per_chunk));
    }
  }

  void other_settings() {
    ojson& t = out_.scenario["training"];
    const Entry* compile_e = k_.find({"compile.enable", "training.compile"});
    bool compile = compile_e != nullptr && k_.boolean(*compile_e);
    const Entry* components_e = k_.find({"compile.components"});
    // The loss: compiled with the model by 2025's build_cross_entropy_loss (training.compile), or as
    // compile.components says; December 2024's train.py left it eager.
    bool compile_loss = compile && layout2025_;
    if (compile && components_e != nullptr) {
      const auto c = k_.strings(*components_e);
      compile_loss = std::find(c.begin(), c.end(), "loss") != c.end();
      if (std::find(c.begin(), c.end(), "model") == c.end()) {
        compile = false;
        note("compile.components leaves out the model: its blocks run eager");
      }
    }
    if (compile_loss) {
      t["torch_compile_loss"] = true;
      origin("training.torch_compile_loss", components_e != nullptr ? components_e : compile_e);
    }
    const Entry* backend_e = k_.find({"compile.backend"});
    if (compile && backend_e != nullptr && k_.text(*backend_e) != "inductor")
      out_.not_modelled.push_back(fmt::format("compile.backend {}", k_.text(*backend_e)));
    if (compile) t["torch_compile"] = true;
    origin("training.torch_compile", compile_e);
    // scaled_dot_product_attention's backend for bf16 on A100 and H100 is FlashAttention-2: PyTorch
    // made cuDNN's its first choice in 2.5.0 and took it back in 2.5.1 (pytorch/pytorch#138522).
    t["attention"] = "flash2";
    note(
        "attention flash2: scaled_dot_product_attention's FlashAttention-2 backend, PyTorch's choice for bf16 "
        "(pytorch/pytorch#138522)");

    const auto flag = [this](std::initializer_list<std::string_view> names, std::string_view what) {
      const Entry* e = k_.find(names);
      if (e != nullptr && k_.boolean(*e)) out_.not_modelled.push_back(std::string(what));
    };
    flag({"training.enable_cpu_offload"}, "training.enable_cpu_offload (FSDP's CPU offload)");
    flag({"parallelism.enable_compiled_autograd", "experimental.enable_compiled_autograd"},
         "parallelism.enable_compiled_autograd");
    flag({"optimizer.early_step_in_backward"}, "optimizer.early_step_in_backward");
    flag({"fault_tolerance.enable"}, "fault_tolerance.enable (TorchFT)");
    flag({"model.use_flex_attn"}, "model.use_flex_attn (FlexAttention)");
    const Entry* loss_e = k_.find({"parallelism.disable_loss_parallel", "training.disable_loss_parallel"});
    if (loss_e != nullptr && k_.boolean(*loss_e) && tp_ > 1)
      out_.not_modelled.push_back("parallelism.disable_loss_parallel (trainsim computes the loss vocabulary-parallel)");
    // FSDP2's reshard_after_forward: "default" reshards without pipelining and keeps the weights
    // gathered through the step with it, as trainsim's torchtitan does; "never" without pipelining
    // keeps each block from its forward to its backward (zero 2 with per-unit gathers).
    const Entry* reshard_e = k_.find({"parallelism.fsdp_reshard_after_forward"});
    const std::string reshard = reshard_e == nullptr ? "default" : k_.text(*reshard_e);
    if (reshard != "default" && reshard != "always" && reshard != "never")
      k_.fail(*reshard_e, fmt::format("\"{}\" is not a policy (default, always, never)", reshard));
    if (reshard == "never" && pp_ == 1) {
      ojson& p = out_.scenario["parallel"];
      p["zero"] = 2;
      p["zero2_param_gather"] = "per_unit";
      origin("parallel.zero", reshard_e);
      origin("parallel.zero2_param_gather", reshard_e);
      note(
          "fsdp_reshard_after_forward never: each block stays gathered from its forward to its backward -> zero 2 "
          "with zero2_param_gather per_unit");
    } else if (reshard == "always" && pp_ > 1) {
      out_.not_modelled.push_back(
          "parallelism.fsdp_reshard_after_forward always (with pipelining trainsim keeps each block gathered "
          "through the step)");
    }
    const Entry* norm_e = k_.find({"model.norm_type"});
    if (norm_e != nullptr && k_.text(*norm_e) != "rmsnorm")
      out_.not_modelled.push_back(
          fmt::format("model.norm_type {} (trainsim runs torchtitan's eager RMSNorm)", k_.text(*norm_e)));
    const Entry* attn_e = k_.find({"model.attn_type"});
    if (attn_e != nullptr && k_.text(*attn_e) != "sdpa")
      out_.not_modelled.push_back(fmt::format("model.attn_type {}", k_.text(*attn_e)));
    const Entry* mask_e = k_.find({"model.attn_mask_type"});
    if (mask_e != nullptr && k_.text(*mask_e) != "causal")
      out_.not_modelled.push_back(fmt::format("model.attn_mask_type {}", k_.text(*mask_e)));
    const Entry* opt_e = k_.find({"optimizer.name"});
    if (opt_e != nullptr && k_.text(*opt_e) != "AdamW" && k_.text(*opt_e) != "Adam")
      out_.not_modelled.push_back(fmt::format("optimizer.name {} (trainsim steps AdamW)", k_.text(*opt_e)));
    const Entry* impl_e = k_.find({"optimizer.implementation"});
    const Entry* fused_e = k_.find({"optimizer.fused"});
    if (impl_e != nullptr && k_.text(*impl_e) != "fused")
      out_.not_modelled.push_back(
          fmt::format("optimizer.implementation {} (trainsim steps the fused AdamW)", k_.text(*impl_e)));
    if (fused_e != nullptr && !k_.boolean(*fused_e))
      out_.not_modelled.push_back("optimizer.fused false (trainsim steps the fused AdamW)");
    if (impl_e == nullptr && fused_e == nullptr && !layout2025_)
      note(
          "optimizer: December 2024 torchtitan steps the foreach AdamW unless optimizer.fused; trainsim steps the "
          "fused one");
    for (std::string_view key :
         {"experimental.custom_import", "experimental.custom_model_path", "experimental.custom_args_module"}) {
      const Entry* e = k_.find({key});
      if (e != nullptr && !k_.text(*e).empty()) out_.not_modelled.push_back(std::string(key));
    }
  }

  // Keys never read: those of sections and names that leave a step unchanged, and the others.
  void leftovers() {
    static constexpr std::array kNoEffectSections{"job.",   "profiling.",      "metrics.",    "checkpoint.",
                                                  "comm.",  "lr_scheduler.",   "validation.", "memory_estimation.",
                                                  "debug.", "fault_tolerance."};
    static constexpr std::array kNoEffectKeys{"model.tokenizer_path",
                                              "model.hf_assets_path",
                                              "model.print_after_conversion",
                                              "optimizer.lr",
                                              "optimizer.beta1",
                                              "optimizer.beta2",
                                              "optimizer.eps",
                                              "optimizer.weight_decay",
                                              "training.dataset",
                                              "training.dataset_path",
                                              "training.max_norm",
                                              "training.gc_freq",
                                              "training.gc_debug",
                                              "training.seed",
                                              "training.deterministic",
                                              "training.warmup_steps",
                                              "training.use_cpu_offload_for_grads",
                                              "parallelism.pipeline_parallel_expert_parallel_overlap"};
    for (const std::string& key : k_.unread()) {
      const bool section = std::any_of(kNoEffectSections.begin(), kNoEffectSections.end(),
                                       [&key](const char* s) { return key.starts_with(s); });
      const bool name = std::find(kNoEffectKeys.begin(), kNoEffectKeys.end(), key) != kNoEffectKeys.end();
      (section || name ? out_.no_effect : out_.unknown).push_back(key);
    }
  }

  Keys& k_;
  const ImportOptions& o_;
  ImportedScenario out_;
  bool layout2025_ = true, pipeline2025_ = true;
  std::int64_t layers_ = 0, gpus_ = 0, shard_ = 1, dp_ = 1, tp_ = 1, pp_ = 1, cp_ = 1;
  std::int64_t local_ = 8, global_ = 8, seq_ = 2048, accumulation_ = 1;
  const Entry* local_e_ = nullptr;
  const Entry* pp_e_ = nullptr;             // the pipeline degree's key, when written
  std::vector<std::int64_t> chunk_layers_;  // per virtual stage, with pipelining
};

}  // namespace

std::span<const TorchtitanFlavor> torchtitan_flavors() {
  return kFlavors;
}

ImportedScenario import_torchtitan(const std::string& toml_text, const std::vector<std::string>& overrides,
                                   const ImportOptions& options) {
  toml::table table;
  try {
    table = toml::parse(toml_text, options.source);
  } catch (const toml::parse_error& e) {
    throw util::InputError(options.source, fmt::format("line {}", e.source().begin.line), std::string(e.description()));
  }
  Keys keys(options.source);
  flatten(table, "", keys);
  apply_overrides(overrides, keys);
  return Importer(keys, options).run();
}

}  // namespace trainsim::config
