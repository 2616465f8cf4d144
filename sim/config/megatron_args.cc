#include "config/megatron_args.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "config/deepspeed_config.h"
#include "config/megatron_flags.h"
#include "config/scenario.h"
#include "util/error.h"
#include "util/json_node.h"

namespace trainsim::config {

namespace {

// The flags that describe the model, which --model replaces (--num-layers still places the layers
// of an interleaved pipeline).
constexpr std::array<std::string_view, 45> kArchitectureFlags{"hidden-size",
                                                              "ffn-hidden-size",
                                                              "num-attention-heads",
                                                              "group-query-attention",
                                                              "num-query-groups",
                                                              "num-key-value-heads",
                                                              "kv-channels",
                                                              "swiglu",
                                                              "quick-geglu",
                                                              "activation-func-clamp-value",
                                                              "squared-relu",
                                                              "normalization",
                                                              "disable-bias-linear",
                                                              "add-bias-linear",
                                                              "add-qkv-bias",
                                                              "position-embedding-type",
                                                              "use-rotary-position-embeddings",
                                                              "no-position-embedding",
                                                              "untie-embeddings-and-output-weights",
                                                              "vocab-size",
                                                              "hidden-dropout",
                                                              "attention-dropout",
                                                              "qk-layernorm",
                                                              "window-size",
                                                              "window-attn-skip-freq",
                                                              "num-experts",
                                                              "moe-router-topk",
                                                              "moe-ffn-hidden-size",
                                                              "moe-shared-expert-intermediate-size",
                                                              "moe-latent-size",
                                                              "moe-layer-freq",
                                                              "multi-latent-attention",
                                                              "kv-lora-rank",
                                                              "q-lora-rank",
                                                              "qk-head-dim",
                                                              "qk-pos-emb-head-dim",
                                                              "v-head-dim",
                                                              "mtp-num-layers",
                                                              "hybrid-override-pattern",
                                                              "mamba-num-heads",
                                                              "mamba-head-dim",
                                                              "mamba-state-dim",
                                                              "mamba-num-groups",
                                                              "moe-grouped-gemm",
                                                              "hybrid-layer-pattern"};

const MegatronFlag* known_flag(std::string_view name) {
  const auto it = std::lower_bound(kMegatronFlags.begin(), kMegatronFlags.end(), name,
                                   [](const MegatronFlag& f, std::string_view n) { return f.name < n; });
  return it != kMegatronFlags.end() && it->name == name ? &*it : nullptr;
}

// Megatron-DeepSpeed's switches (the microsoft and bigscience forks' megatron/arguments.py, and
// DeepSpeed's own --deepspeed), which Megatron-LM does not have.
constexpr std::array<std::string_view, 17> kDeepSpeedSwitches{"deepspeed",
                                                              "deepspeed-activation-checkpointing",
                                                              "partition-activations",
                                                              "contigious-checkpointing",
                                                              "checkpoint-in-cpu",
                                                              "synchronize-each-layer",
                                                              "profile-backward",
                                                              "no-pipeline-parallel",
                                                              "embed-layernorm",
                                                              "sync-tp-duplicated-parameters",
                                                              "abort-on-unmet-fused-kernel-constraints",
                                                              "use-flash-attn-v1",
                                                              "use-flash-attn-v2",
                                                              "use-flash-attn-triton",
                                                              "use-flash-attn-builder",
                                                              "fp8-e4m3",
                                                              "fp8-hybrid"};

// A flag missing from the table takes the words up to the next flag.
bool is_switch(std::string_view name) {
  const MegatronFlag* f = known_flag(name);
  if (f == nullptr)
    return std::find(kDeepSpeedSwitches.begin(), kDeepSpeedSwitches.end(), name) != kDeepSpeedSwitches.end();
  return f->is_switch;
}

// A number as Python's int() and float() read an argparse value: underscores between digits group
// them ("220_000_000"); an underscore anywhere else makes the text no number (an empty result).
std::string python_digits(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      out += text[i];
      continue;
    }
    const bool between = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) != 0 &&
                         std::isdigit(static_cast<unsigned char>(text[i + 1])) != 0;
    if (!between) return {};
  }
  return out;
}

struct Flag {
  std::string name;  // without the dashes, '_' read as '-'
  std::vector<std::string> values;
  int line = 0;
  bool read = false;
};

// The flags of the commands, the last occurrence of each kept (argparse's rule).
class Flags {
 public:
  Flags(const std::vector<util::ShellCommand>& commands, std::string source,
        const std::map<std::string, std::string>& labels)
      : source_(std::move(source)), labels_(labels) {
    for (const auto& command : commands) {
      const auto& w = command.words;
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (w[i].ends_with(".py")) programs_.push_back(std::filesystem::path(w[i]).filename().string());
        if (!w[i].starts_with("--") || w[i].size() == 2) continue;
        std::string name = w[i].substr(2);
        std::optional<std::string> inline_value;
        if (const auto eq = name.find('='); eq != std::string::npos) {
          inline_value = name.substr(eq + 1);
          name.resize(eq);
        }
        std::replace(name.begin(), name.end(), '_', '-');
        Flag f{name, {}, i < command.lines.size() ? command.lines[i] : 0, false};
        if (inline_value) {
          f.values.push_back(*inline_value);
        } else if (!is_switch(name)) {
          while (i + 1 < w.size() && !w[i + 1].starts_with("--")) f.values.push_back(w[++i]);
        }
        auto it = std::find_if(flags_.begin(), flags_.end(), [&](const Flag& g) { return g.name == name; });
        if (it != flags_.end()) flags_.erase(it);
        flags_.push_back(std::move(f));
      }
    }
  }

  const std::string& source() const { return source_; }

  // The flag, marked read; nullptr when absent.
  const Flag* get(std::string_view name) {
    for (Flag& f : flags_)
      if (f.name == name) {
        f.read = true;
        return &f;
      }
    return nullptr;
  }
  bool on(std::string_view name) { return get(name) != nullptr; }

  // The flag as the input spells it: "--num-layers", or its label ("model.num_layers").
  std::string label(std::string_view name) const {
    const auto it = labels_.find(std::string(name));
    return it != labels_.end() ? it->second : fmt::format("--{}", name);
  }

  // "line 12: --tensor-model-parallel-size 3" (without a line for words given on the command line).
  std::string where(const Flag& f) const {
    std::string s = f.line > 0 ? fmt::format("line {}: {}", f.line, label(f.name)) : label(f.name);
    for (const auto& v : f.values) s += " " + v;
    return s;
  }

  [[noreturn]] void fail(const Flag& f, const std::string& problem) const {
    throw util::InputError(source_, f.line > 0 ? fmt::format("line {}: {}", f.line, label(f.name)) : label(f.name),
                           problem);
  }
  [[noreturn]] void fail(const std::string& problem) const { throw util::InputError(source_, "", problem); }

  // The flag's first value; an error when it has none or when the shell could not give it.
  std::optional<std::string> value(std::string_view name) {
    const Flag* f = get(name);
    if (f == nullptr) return std::nullopt;
    if (f->values.empty()) fail(*f, "needs a value");
    check_expanded(*f, f->values[0]);
    return f->values[0];
  }

  std::vector<std::string> list(std::string_view name) {
    const Flag* f = get(name);
    if (f == nullptr) return {};
    if (f->values.empty()) fail(*f, "needs a value");
    for (const auto& v : f->values) check_expanded(*f, v);
    return f->values;
  }

  std::optional<std::int64_t> integer(std::string_view name) {
    const auto v = value(name);
    if (!v) return std::nullopt;
    const std::string digits = python_digits(*v);
    std::int64_t out = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size())
      fail(*get(name), fmt::format("\"{}\" is not an integer", *v));
    return out;
  }

  std::optional<double> number(std::string_view name) {
    const auto v = value(name);
    if (!v) return std::nullopt;
    const std::string digits = python_digits(*v);
    char* end = nullptr;
    const double out = std::strtod(digits.c_str(), &end);
    if (digits.empty() || end != digits.c_str() + digits.size() || !std::isfinite(out))
      fail(*get(name), fmt::format("\"{}\" is not a number", *v));
    return out;
  }

  // Whether the command runs this Python script (pretrain_mamba.py).
  bool runs(std::string_view program) const {
    return std::find(programs_.begin(), programs_.end(), program) != programs_.end();
  }

  std::vector<const Flag*> unread() const {
    std::vector<const Flag*> out;
    for (const Flag& f : flags_)
      if (!f.read) out.push_back(&f);
    return out;
  }

 private:
  void check_expanded(const Flag& f, const std::string& v) const {
    if (v.find("$(") != std::string::npos || v.find('`') != std::string::npos)
      fail(f, fmt::format("\"{}\" is a command's output, which trainsim does not run; give the value itself{}", v,
                          f.name == "nproc-per-node" || f.name == "nnodes" ? " (or the GPUs with --gpus N)" : ""));
    if (v.find('$') != std::string::npos)
      fail(f, fmt::format("\"{}\" is a shell variable the script does not set; give the value itself", v));
  }

  std::string source_;
  const std::map<std::string, std::string>& labels_;
  std::vector<Flag> flags_;
  std::vector<std::string> programs_;
};

// Megatron-Core's --moe-layer-freq as a Python list expression, "([0]*3+[1]*58)" or "[0,1,1,1]":
// one entry per layer, 1 for a mixture-of-experts layer. nullopt when it is not such an expression.
std::optional<std::vector<int>> layer_pattern(std::string_view text) {
  std::string s;
  for (char c : text)
    if (c != ' ') s += c;
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  std::vector<int> out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '[') return std::nullopt;
    const std::size_t close = s.find(']', i);
    if (close == std::string::npos) return std::nullopt;
    std::vector<int> items;
    std::string_view body(s.data() + i + 1, close - i - 1);
    while (!body.empty()) {
      const std::size_t comma = body.find(',');
      const std::string_view item = body.substr(0, comma);
      if (item != "0" && item != "1") return std::nullopt;
      items.push_back(item == "1" ? 1 : 0);
      if (comma == std::string_view::npos) break;
      body.remove_prefix(comma + 1);
    }
    i = close + 1;
    int repeat = 1;
    if (i < s.size() && s[i] == '*') {
      std::size_t j = ++i;
      while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
      const auto [p, ec] = std::from_chars(s.data() + i, s.data() + j, repeat);
      if (ec != std::errc() || p != s.data() + j || repeat < 0 || repeat > 100000) return std::nullopt;
      i = j;
    }
    for (int r = 0; r < repeat; ++r) out.insert(out.end(), items.begin(), items.end());
    if (i < s.size()) {
      if (s[i] != '+') return std::nullopt;
      ++i;
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

// Megatron-Core's placement (mamba_hybrid_layer_allocation.py): round(L·attention) attention layers
// spread evenly between L − A Mamba layers in A + 1 sections, a running budget starting at one
// section's length placing one wherever it falls below half a layer; then round(L·mlp) MLP layers
// the same way over the remaining Mamba layers. Python's round() ties to even, as nearbyint does.
std::string allocate_hybrid_layers(std::int64_t layers, double attention_ratio, double mlp_ratio) {
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(layers, 0));
  std::string out(n, 'M');
  const auto attention = static_cast<std::int64_t>(std::nearbyint(static_cast<double>(layers) * attention_ratio));
  std::int64_t mamba = layers - attention;
  const double section = static_cast<double>(mamba) / static_cast<double>(attention + 1);
  double x = section;
  for (char& c : out) {
    if (x < 0.5) {
      c = '*';
      x += section;
    } else {
      x -= 1;
    }
  }
  const auto mlp = static_cast<std::int64_t>(std::nearbyint(static_cast<double>(layers) * mlp_ratio));
  if (mlp > 0) {
    mamba -= mlp;
    const double per_mlp = static_cast<double>(mamba) / static_cast<double>(mlp);
    x = per_mlp;
    for (char& c : out) {
      if (c != 'M') continue;
      if (x < 0.5) {
        c = '-';
        x += per_mlp;
      } else {
        x -= 1;
      }
    }
  }
  return out;
}

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i > 0 ? std::string(sep) : "") + items[i];
  return out;
}

class Importer {
 public:
  Importer(const std::vector<util::ShellCommand>& commands, const ImportOptions& options)
      : f_(commands, options.source, options.labels), o_(options) {}

  ImportedScenario run() {
    load_deepspeed();
    // What the layout needs from the model, read before the model so --model runs need them too.
    hybrid_pattern();
    parallel();
    if (o_.model.empty()) {
      model();
    } else {
      out_.scenario["model"] = o_.model;
      std::vector<std::string> unused;
      for (std::string_view name : kArchitectureFlags)
        if (f_.get(name) != nullptr) unused.push_back(fmt::format("--{}", name));
      if (!unused.empty())
        note(fmt::format("the model is {} (--model); the command's architecture flags are not used: {}", o_.model,
                         join(unused, " ")));
    }
    if (o_.cluster.empty())
      f_.fail("the cluster is not in a Megatron command: give it with --cluster NAME (topologies/)");
    out_.scenario["cluster"] = o_.cluster;
    // A model without a shared expert has nothing to overlap (Megatron ignores the switch then).
    if (parallel_.contains("moe_shared_expert_overlap") && o_.model.empty() &&
        !model_.contains("shared_expert_ffn_hidden")) {
      parallel_.erase("moe_shared_expert_overlap");
      note("--moe-shared-expert-overlap: the model has no shared expert");
    }
    gpus();
    training();
    // The scenario's key order: model, cluster, gpus, parallel, training.
    nlohmann::ordered_json doc;
    for (const char* key : {"model", "cluster", "gpus"}) doc[key] = out_.scenario[key];
    doc["parallel"] = parallel_;
    doc["training"] = training_;
    out_.scenario = std::move(doc);
    leftovers();
    return std::move(out_);
  }

 private:
  // The layer count, and a hybrid model's pattern: pretrain_mamba.py's --hybrid-override-pattern or
  // pretrain_hybrid.py's --hybrid-layer-pattern (whose length is then the layer count); without one,
  // pretrain_mamba.py builds Mamba layers only (Megatron-Core's allocate_layers with no ratios).
  void hybrid_pattern() {
    const auto layers = f_.integer("num-layers");
    // Bounded before the per-layer patterns below are built from it.
    if (layers && (*layers < 1 || *layers > workload::kMaxLayers))
      f_.fail(*f_.get("num-layers"), fmt::format("{} layers: trainsim models 1 to {}", *layers, workload::kMaxLayers));
    for (std::string_view flag : {"hybrid-override-pattern", "hybrid-layer-pattern"}) {
      if (auto p = f_.value(flag)) {
        pattern_flag_ = flag;
        std::size_t segment = 0;
        for (char c : *p) {
          if (c == '|') {
            pattern_segments_.push_back(segment);
            segment = 0;
          } else {
            pattern_ += c;
            ++segment;
          }
        }
        pattern_segments_.push_back(segment);
      }
    }
    const double attention = f_.number("hybrid-attention-ratio").value_or(0);
    const double mlp = f_.number("hybrid-mlp-ratio").value_or(0);
    if (pattern_.empty() && (attention > 0 || mlp > 0)) {
      const std::string_view flag = attention > 0 ? "hybrid-attention-ratio" : "hybrid-mlp-ratio";
      if (!layers) f_.fail(*f_.get(flag), "needs --num-layers to place the layers");
      if (attention < 0 || mlp < 0 || attention + mlp > 1)
        f_.fail(*f_.get(flag), "the attention and MLP ratios must be at least 0 and add up to at most 1");
      pattern_ = allocate_hybrid_layers(*layers, attention, mlp);
      pattern_flag_ = flag;
      note(
          fmt::format("the hybrid pattern {} from --hybrid-attention-ratio {} and --hybrid-mlp-ratio {} "
                      "(Megatron-Core's allocate_layers)",
                      pattern_, attention, mlp));
    }
    if (pattern_.empty() && layers && (f_.runs("pretrain_mamba.py") || f_.on("is-hybrid-model"))) {
      pattern_ = std::string(static_cast<std::size_t>(std::max<std::int64_t>(*layers, 0)), 'M');
      note("a hybrid model without a pattern: Mamba layers only (Megatron-Core's default)");
    }
    if (!layers && pattern_.empty())
      f_.fail(fmt::format("{} (the model's layer count) is not given", f_.label("num-layers")));
    layers_ = layers ? *layers : static_cast<std::int64_t>(pattern_.size());
  }

  std::int64_t require_int(std::string_view name, std::string_view what) {
    const auto v = f_.integer(name);
    if (!v) f_.fail(fmt::format("{} ({}) is not given", f_.label(name), what));
    return *v;
  }

  // A note, its flags named as the input names them (model.num_layers in a Megatron-Bridge config).
  void note(std::string line) {
    for (const auto& [flag, label] : o_.labels) {
      const std::string spelled = "--" + flag;
      std::size_t at = line.find(spelled);
      while (at != std::string::npos) {
        const std::size_t end = at + spelled.size();
        if (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) != 0 || line[end] == '-')) {
          at = line.find(spelled, end);
          continue;
        }
        line.replace(at, spelled.size(), label);
        at = line.find(spelled, at + label.size());
      }
    }
    out_.notes.push_back(std::move(line));
  }

  // Sets `obj[key]` from `flag` and remembers where it came from.
  template <typename T>
  void put(nlohmann::ordered_json& obj, std::string_view section, const std::string& key, const T& v,
           std::string_view flag) {
    obj[key] = v;
    const Flag* f = f_.get(flag);
    if (f != nullptr) out_.origin[section.empty() ? key : fmt::format("{}.{}", section, key)] = f_.where(*f);
  }

  void parallel() {
    auto& p = parallel_;
    tp_ = f_.integer("tensor-model-parallel-size").value_or(1);
    pp_ = f_.integer("pipeline-model-parallel-size").value_or(1);
    cp_ = f_.integer("context-parallel-size").value_or(1);
    put(p, "parallel", "tp", tp_, "tensor-model-parallel-size");
    put(p, "parallel", "pp", pp_, "pipeline-model-parallel-size");
    if (cp_ != 1) put(p, "parallel", "cp", cp_, "context-parallel-size");
    // Megatron-DeepSpeed's DeepSpeed-Ulysses: q, k and v all-to-all'd from sequence to head shards
    // over the sequence-parallel group, the output back (deepspeed/sequence/layer.py).
    if (auto sp = f_.integer("ds-sequence-parallel-size"); sp && *sp > 1) {
      if (cp_ != 1) f_.fail(*f_.get("ds-sequence-parallel-size"), "does not combine with --context-parallel-size");
      cp_ = *sp;
      put(p, "parallel", "cp", cp_, "ds-sequence-parallel-size");
      put(p, "parallel", "cp_comm_type", "a2a", "ds-sequence-parallel-size");
    }
    // --cp-comm-type: one type for every layer, or one per layer (the first is taken, with a note).
    if (const auto types = f_.list("cp-comm-type"); !types.empty() && cp_ > 1) {
      const std::string& type = types.front();
      if (types.size() > 1)
        note(fmt::format("--cp-comm-type gives a type per layer: every layer simulated with the first, {}", type));
      if (type == "a2a" || type == "allgather") {
        put(p, "parallel", "cp_comm_type", type, "cp-comm-type");
      } else if (type == "a2a+p2p") {
        note(
            "--cp-comm-type a2a+p2p (hierarchical context parallelism) is simulated as p2p (the ring over every CP "
            "rank)");
      } else if (type != "p2p") {
        f_.fail(*f_.get("cp-comm-type"),
                fmt::format("unknown type \"{}\" (expected p2p, a2a, allgather or a2a+p2p)", type));
      }
    }
    if (auto ep = f_.integer("expert-model-parallel-size")) put(p, "parallel", "ep", *ep, "expert-model-parallel-size");
    if (auto etp = f_.integer("expert-tensor-parallel-size"))
      put(p, "parallel", "etp", *etp, "expert-tensor-parallel-size");
    if (f_.on("sequence-parallel")) put(p, "parallel", "sequence_parallel", true, "sequence-parallel");

    // Interleaving: --num-layers-per-virtual-pipeline-stage N gives (layers / pp) / N model chunks.
    std::int64_t vp = 1;
    std::string_view vp_flag;
    if (auto per = f_.integer("num-layers-per-virtual-pipeline-stage")) {
      vp_flag = "num-layers-per-virtual-pipeline-stage";
      if (*per < 1 || layers_ % (pp_ * *per) != 0)
        f_.fail(*f_.get(vp_flag), fmt::format("{} layers do not split into {} pipeline stages of chunks of {} layers",
                                              layers_, pp_, *per));
      vp = layers_ / (pp_ * *per);
    }
    if (auto v = f_.integer("num-virtual-stages-per-pipeline-rank")) {
      vp_flag = "num-virtual-stages-per-pipeline-rank";
      vp = *v;
    }
    if (vp > 1) {
      put(p, "parallel", "schedule", "interleaved", vp_flag);
      put(p, "parallel", "virtual_stages", vp, vp_flag);
    }
    if (auto v = f_.integer("decoder-first-pipeline-num-layers"))
      put(p, "parallel", "first_stage_layers", *v, "decoder-first-pipeline-num-layers");
    if (auto v = f_.integer("decoder-last-pipeline-num-layers"))
      put(p, "parallel", "last_stage_layers", *v, "decoder-last-pipeline-num-layers");
    if (f_.on("account-for-embedding-in-pipeline-split"))
      put(p, "parallel", "account_for_embedding_in_pipeline_split", true, "account-for-embedding-in-pipeline-split");
    if (f_.on("account-for-loss-in-pipeline-split"))
      put(p, "parallel", "account_for_loss_in_pipeline_split", true, "account-for-loss-in-pipeline-split");
    if (auto v = f_.value("pipeline-model-parallel-layout")) {
      put(p, "parallel", "pipeline_layout", *v, "pipeline-model-parallel-layout");
      // Without a virtual size, arguments.py takes it from the layout: its stages over pp.
      const auto flat = expand_pipeline_layout(*v);
      if (vp == 1 && flat) {
        const auto stages = static_cast<std::int64_t>(std::count(flat->begin(), flat->end(), '|')) + 1;
        if (stages > pp_ && stages % pp_ == 0) {
          put(p, "parallel", "schedule", "interleaved", "pipeline-model-parallel-layout");
          put(p, "parallel", "virtual_stages", stages / pp_, "pipeline-model-parallel-layout");
        }
      }
    } else if (vp == 1 && !pattern_segments_.empty() && pattern_segments_.size() > 1) {
      // A hybrid pattern's '|' splits are its pipeline stages (pp x virtual stages of them).
      const auto segments = static_cast<std::int64_t>(pattern_segments_.size());
      std::string layout = "E";
      for (std::size_t i = 0; i < pattern_segments_.size(); ++i) {
        if (i > 0) layout += '|';
        layout += std::string(pattern_segments_[i], 't');
      }
      layout += 'L';
      put(p, "parallel", "pipeline_layout", layout, pattern_flag_);
      if (segments > pp_ && segments % pp_ == 0) {
        put(p, "parallel", "schedule", "interleaved", pattern_flag_);
        put(p, "parallel", "virtual_stages", segments / pp_, pattern_flag_);
      }
    }

    // Data-parallel sharding: the distributed optimizer is ZeRO-1; Megatron FSDP's strategies are
    // ZeRO 0-3 (ecosystem.md §2.1, its default optim_grads_params); PyTorch FSDP2 shards everything.
    if (f_.on("use-distributed-optimizer")) put(p, "parallel", "zero", 1, "use-distributed-optimizer");
    if (auto n = f_.integer("num-distributed-optimizer-instances"); n && *n != 1)
      put(p, "parallel", "distributed_optimizer_instances", *n, "num-distributed-optimizer-instances");
    const bool megatron_fsdp = f_.on("use-megatron-fsdp") || f_.on("use-custom-fsdp");
    if (megatron_fsdp) {
      const std::string strategy = f_.value("data-parallel-sharding-strategy").value_or("optim_grads_params");
      static constexpr std::array<std::string_view, 4> kStrategies{"no_shard", "optim", "optim_grads",
                                                                   "optim_grads_params"};
      const auto it = std::find(kStrategies.begin(), kStrategies.end(), strategy);
      if (it == kStrategies.end())
        f_.fail(*f_.get("data-parallel-sharding-strategy"),
                fmt::format("unknown strategy \"{}\" (expected no_shard, optim, optim_grads or optim_grads_params)",
                            strategy));
      const auto zero = static_cast<std::int64_t>(it - kStrategies.begin());
      put(p, "parallel", "zero", zero,
          f_.get("data-parallel-sharding-strategy") != nullptr ? "data-parallel-sharding-strategy"
          : f_.get("use-megatron-fsdp") != nullptr             ? "use-megatron-fsdp"
                                                               : "use-custom-fsdp");
      if (f_.get("data-parallel-sharding-strategy") == nullptr)
        note("Megatron FSDP without --data-parallel-sharding-strategy: its default optim_grads_params (zero 3)");
      // With --num-distributed-optimizer-instances, the outer strategy no_shard (its default) is HSDP:
      // replicas of the inner sharding, as trainsim's instances with zero 3. optim (HFSDP) also
      // shards the optimizer states across the replicas.
      if (const auto outer = f_.value("outer-dp-sharding-strategy"); outer && *outer == "optim")
        put(p, "parallel", "outer_dp_sharding_strategy", std::string("optim"), "outer-dp-sharding-strategy");
      else if (outer && *outer != "no_shard")
        out_.not_modelled.push_back(fmt::format(
            "--outer-dp-sharding-strategy {} (simulated as no_shard: each replica holds its shard's optimizer states)",
            *outer));
    } else if (f_.on("use-torch-fsdp2")) {
      put(p, "parallel", "zero", 3, "use-torch-fsdp2");
    }
    const bool grad_overlap = f_.on("overlap-grad-reduce");
    if (grad_overlap) put(p, "parallel", "overlap_grad_reduce", true, "overlap-grad-reduce");
    // The parameter gather overlaps only beside the gradient reduction's (Megatron-LM asserts it;
    // Megatron-Bridge configurations may carry it alone, where it does nothing).
    const bool fsdp = p.contains("zero") && p["zero"].get<std::int64_t>() >= 2;
    if (f_.on("overlap-param-gather") && fsdp) {
      note(
          "--overlap-param-gather with FSDP: its parameter gathers are prefetched (parallel.fsdp_prefetch, on by "
          "default)");
    } else if (f_.get("overlap-param-gather") != nullptr) {
      if (grad_overlap) {
        put(p, "parallel", "overlap_param_gather", true, "overlap-param-gather");
        // Megatron-LM aligns the model chunks' gathers unless told not to (--no-align-param-gather).
        if (f_.on("no-align-param-gather")) put(p, "parallel", "align_param_gather", false, "no-align-param-gather");
      } else
        note(
            "--overlap-param-gather without --overlap-grad-reduce: not modelled (trainsim overlaps the gather "
            "beside the reduction's buckets)");
    }
    // Tensor-parallel overlap needs tp > 1 with sequence parallelism; otherwise Megatron-Bridge turns
    // it off with a warning.
    if (f_.on("tp-comm-overlap")) {
      if (tp_ > 1 && p.contains("sequence_parallel"))
        put(p, "parallel", "tp_comm_overlap", true, "tp-comm-overlap");
      else
        note("--tp-comm-overlap is off: it needs tensor parallelism with --sequence-parallel");
    }
    // --moe-shared-expert-overlap overlaps the shared expert with the token all-to-alls: nothing to do
    // without expert parallelism or beside the combined 1F1B (which overlaps them already).
    if (f_.on("moe-shared-expert-overlap")) {
      if (f_.on("overlap-moe-expert-parallel-comm"))
        note(
            "--moe-shared-expert-overlap beside --overlap-moe-expert-parallel-comm: the combined 1F1B overlaps the "
            "all-to-alls already; not modelled on top");
      else if (f_.integer("expert-model-parallel-size").value_or(1) <= 1)
        note("--moe-shared-expert-overlap without expert parallelism: no all-to-all to overlap");
      else
        put(p, "parallel", "moe_shared_expert_overlap", true, "moe-shared-expert-overlap");
    }
    if (f_.on("overlap-moe-expert-parallel-comm"))
      put(p, "parallel", "moe_a2a_overlap", true, "overlap-moe-expert-parallel-comm");
    if (f_.on("delay-wgrad-compute")) put(p, "parallel", "delay_wgrad_compute", true, "delay-wgrad-compute");
    // The output layer's weight gradients in the pipeline's flush (Megatron-Core refuses it without
    // pipeline parallelism).
    if (f_.on("defer-embedding-wgrad-compute")) {
      put(p, "parallel", "defer_embedding_wgrad_compute", true, "defer-embedding-wgrad-compute");
      if (auto limit = f_.integer("wgrad-deferral-limit"); limit && *limit != 0)
        put(p, "parallel", "wgrad_deferral_limit", *limit, "wgrad-deferral-limit");
    } else if (f_.get("wgrad-deferral-limit") != nullptr) {
      note("--wgrad-deferral-limit without --defer-embedding-wgrad-compute: nothing is deferred");
    }
  }

  // Megatron's default MLP width when --ffn-hidden-size is not given: 4h, or with SwiGLU two thirds
  // of it rounded down to a multiple of 64 (arguments.py).
  std::int64_t default_ffn(std::int64_t hidden, bool swiglu) const {
    return swiglu ? (4 * hidden * 2 / 3) / 64 * 64 : 4 * hidden;
  }

  void model() {
    auto& m = model_;
    // Named after the script it came from.
    const std::string stem = std::filesystem::path(o_.source).stem().string();
    m["name"] =
        o_.source == "arguments" || o_.source == "<stdin>" || stem.empty() ? std::string("megatron-arguments") : stem;
    put(m, "model", "layers", layers_, "num-layers");
    hidden_ = require_int("hidden-size", "the model's hidden size");
    put(m, "model", "hidden", hidden_, "hidden-size");
    const std::int64_t heads = require_int("num-attention-heads", "the model's attention heads");
    put(m, "model", "heads", heads, "num-attention-heads");
    std::int64_t kv_heads = heads;
    if (f_.on("group-query-attention")) {
      kv_heads = f_.integer("num-query-groups").value_or(1);
      put(m, "model", "kv_heads", kv_heads, "num-query-groups");
    } else if (auto kv = f_.integer("num-key-value-heads")) {
      // Megatron-DeepSpeed's grouped-query attention (its Llama scripts).
      kv_heads = *kv;
      put(m, "model", "kv_heads", kv_heads, "num-key-value-heads");
    } else {
      m["kv_heads"] = heads;
    }
    if (auto kv = f_.integer("kv-channels")) put(m, "model", "head_dim", *kv, "kv-channels");

    // The MLP kind, and how the command's norm, biases and positions differ from trainsim's kind.
    // --quick-geglu (GPT-OSS's gated quick-GELU) runs SwiGLU's GEMMs: trainsim's swiglu kind.
    const bool quick_geglu = f_.on("quick-geglu");
    const bool swiglu = f_.on("swiglu") || quick_geglu;
    const bool squared_relu = f_.on("squared-relu");
    if (swiglu && squared_relu)
      f_.fail(*f_.get("squared-relu"),
              fmt::format("--{} and --squared-relu both given", quick_geglu ? "quick-geglu" : "swiglu"));
    if (quick_geglu && f_.on("swiglu")) f_.fail(*f_.get("quick-geglu"), "--swiglu and --quick-geglu both given");
    const char* kind = swiglu ? "swiglu" : squared_relu ? "squared_relu" : "gelu";
    put(m, "model", "mlp", kind, quick_geglu ? "quick-geglu" : swiglu ? "swiglu" : squared_relu ? "squared-relu" : "");
    if (quick_geglu) note("--quick-geglu: the gated quick-GELU runs SwiGLU's GEMMs (trainsim's swiglu kind)");
    const bool gelu = !swiglu && !squared_relu;
    // Megatron-DeepSpeed spells them layernorm and rmsnorm.
    std::string norm = f_.value("normalization").value_or("LayerNorm");
    if (norm == "layernorm") norm = "LayerNorm";
    if (norm == "rmsnorm") norm = "RMSNorm";
    if (norm != "LayerNorm" && norm != "RMSNorm")
      f_.fail(*f_.get("normalization"), fmt::format("unknown normalization \"{}\" (LayerNorm or RMSNorm)", norm));
    const bool biases = !f_.on("disable-bias-linear");
    f_.on("add-bias-linear");
    std::string positions = f_.on("use-rotary-position-embeddings")
                                ? std::string("rope")
                                : f_.value("position-embedding-type").value_or("learned_absolute");
    // --no-position-embedding drops only the learned absolute positions (Megatron's add_position_embedding).
    if (f_.on("no-position-embedding") && positions == "learned_absolute") positions = "none";
    const bool hybrid = !pattern_.empty();
    std::vector<std::string> differ;
    if ((norm == "RMSNorm") == gelu) differ.push_back(norm);
    // Megatron's linear biases (its default; --disable-bias-linear drops them) on a non-GPT kind are
    // trainsim's linear_bias, except in a hybrid model or with multi-head latent attention (not
    // modelled there); a GPT (gelu) model without them is not modelled either.
    if (biases && !gelu && !hybrid && !f_.on("multi-latent-attention"))
      put(m, "model", "linear_bias", true, "");
    else if (biases != gelu)
      differ.push_back(biases ? "linear biases" : "no linear biases");
    const bool rotary = positions == "rope" || positions == "yarn";
    if (!hybrid && rotary == gelu) differ.push_back(fmt::format("{} positions", positions));
    if (f_.on("add-qkv-bias")) differ.push_back("QKV biases");
    if (!differ.empty())
      note(fmt::format(
          "the {} MLP is modelled as trainsim's {} kind ({}); the input's {} (a few memory-bound kernels and "
          "parameters apart)",
          gelu ? "GELU" : kind, kind,
          gelu ? "LayerNorm, linear biases, learned positions" : "RMSNorm, rotary positions", join(differ)));

    const auto ffn_flag = f_.integer("ffn-hidden-size");
    // Megatron's 8h/3 default is --swiglu's (arguments.py); --quick-geglu keeps 4h.
    const std::int64_t ffn = ffn_flag.value_or(default_ffn(hidden_, swiglu && !quick_geglu));
    vocab(m);
    if (f_.on("untie-embeddings-and-output-weights"))
      put(m, "model", "tied_embeddings", false, "untie-embeddings-and-output-weights");
    else
      m["tied_embeddings"] = true;

    // Megatron's dropout defaults to 0.1 for both; trainsim has one probability for both.
    const auto hd = f_.number("hidden-dropout");
    const auto ad = f_.number("attention-dropout");
    const double dropout = hd.value_or(0.1);
    put(m, "model", "dropout", dropout, hd ? "hidden-dropout" : "");
    if (!hd || !ad) note("dropout: Megatron's default 0.1 where --hidden-dropout / --attention-dropout is not given");
    if (ad.value_or(0.1) != dropout)
      note(fmt::format("attention dropout {} is modelled as the hidden dropout {} (trainsim has one probability)",
                       ad.value_or(0.1), dropout));
    // Under multi-head latent attention the norms are the latents' own, which trainsim's MLA has.
    if (f_.on("qk-layernorm") && !f_.on("multi-latent-attention")) put(m, "model", "qk_norm", true, "qk-layernorm");

    // Sliding-window attention: --window-size W (keys back; Megatron's "W,0"), every
    // --window-attn-skip-freq-th layer full attention.
    if (auto w = f_.value("window-size")) {
      const std::string left = w->substr(0, w->find(','));
      const std::string stripped =
          left.substr(left.find_first_not_of("([ ") == std::string::npos ? 0 : left.find_first_not_of("([ "));
      std::int64_t window = 0;
      const auto [p, ec] = std::from_chars(stripped.data(), stripped.data() + stripped.size(), window);
      if (ec != std::errc() || window < 1) f_.fail(*f_.get("window-size"), fmt::format("\"{}\" is not a window", *w));
      // Transformer Engine's window (left, 0) sees `left` keys back and the query's own: left + 1.
      put(m, "model", "sliding_window", window + 1, "window-size");
      if (auto skip = f_.integer("window-attn-skip-freq"))
        put(m, "model", "sliding_window_pattern", *skip, "window-attn-skip-freq");
    }

    experts(m, ffn, ffn_flag.has_value(), swiglu && !quick_geglu);
    latent_attention(m);
    if (auto mtp = f_.integer("mtp-num-layers")) put(m, "model", "mtp_layers", *mtp, "mtp-num-layers");
    mamba(m);
    out_.scenario["model"] = model_;
  }

  void vocab(nlohmann::ordered_json& m) {
    // bigscience Megatron-DeepSpeed's --pad-vocab-size-to: the embedding's rows, whatever the tokenizer.
    if (auto v = f_.integer("pad-vocab-size-to")) {
      put(m, "model", "vocab", *v, "pad-vocab-size-to");
      return;
    }
    if (auto v = f_.integer("vocab-size")) {
      // Megatron-LM's NullTokenizer (synthetic data) adds an end-of-document token to --vocab-size.
      if (f_.value("tokenizer-type") == "NullTokenizer") {
        put(m, "model", "vocab", *v + 1, "vocab-size");
        note(fmt::format("vocab: {} (NullTokenizer's --vocab-size {} and its end-of-document token)", *v + 1, *v));
        return;
      }
      put(m, "model", "vocab", *v, "vocab-size");
      return;
    }
    if (o_.vocab > 0) {
      m["vocab"] = o_.vocab;
      return;
    }
    // GPT-2's BPE vocabulary is fixed; any other tokenizer's size lives in its files.
    // A vocabulary file with a merge file is GPT-2's BPE (the GPT examples' --vocab-file and --merge-file).
    const auto tokenizer = f_.value("tokenizer-type");
    const bool bpe_files = f_.get("vocab-file") != nullptr && f_.get("merge-file") != nullptr;
    if (tokenizer == "GPT2BPETokenizer" || (!tokenizer && bpe_files)) {
      m["vocab"] = 50257;
      note(fmt::format("vocab: GPT-2's BPE vocabulary, 50257 tokens ({})",
                       tokenizer ? "--tokenizer-type GPT2BPETokenizer" : "--vocab-file with --merge-file"));
      return;
    }
    f_.fail(fmt::format("the vocabulary size is not in the command ({}): give it with --vocab N",
                        tokenizer ? "--tokenizer-type " + *tokenizer : "no --vocab-size"));
  }

  void experts(nlohmann::ordered_json& m, std::int64_t ffn, bool ffn_given, bool swiglu) {
    const auto experts = f_.integer("num-experts");
    // A hybrid model has dense MLPs only in its '-' layers.
    const bool dense_mlp = pattern_.empty() ? !experts : pattern_.find('-') != std::string::npos;
    if (!experts || !pattern_.empty()) {
      if (dense_mlp) put(m, "model", "ffn_hidden", ffn, ffn_given ? "ffn-hidden-size" : "");
      if (dense_mlp && !ffn_given)
        note(fmt::format("ffn_hidden: Megatron's default {} ({})", ffn, swiglu ? "8h/3 rounded down to 64" : "4h"));
      if (!experts) return;
    }
    put(m, "model", "experts", *experts, "num-experts");
    const auto topk = f_.integer("moe-router-topk");
    put(m, "model", "experts_per_token", topk.value_or(2), "moe-router-topk");
    if (!topk) note("experts_per_token: Megatron's default --moe-router-topk 2");
    const auto moe_ffn = f_.integer("moe-ffn-hidden-size");
    put(m, "model", "moe_ffn_hidden", moe_ffn.value_or(ffn), "moe-ffn-hidden-size");
    if (auto shared = f_.integer("moe-shared-expert-intermediate-size"))
      put(m, "model", "shared_expert_ffn_hidden", *shared, "moe-shared-expert-intermediate-size");
    // The experts' quick-GeGLU clamps its input eagerly (glu_clamp); a SwiGLU's clamp runs inside
    // Megatron-Core's fused kernel where it runs at all, at no cost of its own.
    if (auto clamp = f_.number("activation-func-clamp-value")) {
      if (f_.on("quick-geglu"))
        put(m, "model", "glu_clamp", *clamp, "activation-func-clamp-value");
      else
        note(
            "--activation-func-clamp-value: not read without --quick-geglu (a SwiGLU's clamp runs inside "
            "Megatron-Core's fused kernel, at no cost of its own)");
    }
    if (auto latent = f_.integer("moe-latent-size")) put(m, "model", "moe_latent", *latent, "moe-latent-size");
    // Group-limited routing: both flags, or neither (Megatron-Core asserts the pair).
    const auto groups = f_.integer("moe-router-num-groups"), group_topk = f_.integer("moe-router-group-topk");
    if (groups.has_value() != group_topk.has_value())
      f_.fail(*f_.get(groups ? "moe-router-num-groups" : "moe-router-group-topk"),
              groups ? "needs --moe-router-group-topk" : "needs --moe-router-num-groups");
    if (groups) {
      put(m, "model", "router_groups", *groups, "moe-router-num-groups");
      put(m, "model", "router_group_topk", *group_topk, "moe-router-group-topk");
    }
    // --moe-layer-freq: N (layer i has experts when i mod N is 0; 1: every layer), or a list pattern:
    // dense layers first become first_dense_layers, any other pattern moe_layer_freq's list.
    std::int64_t dense = 0;
    bool dense_anywhere = false;
    if (auto freq = f_.value("moe-layer-freq")) {
      const Flag& flag = *f_.get("moe-layer-freq");
      std::optional<std::vector<int>> pattern;
      std::int64_t every = 0;
      if (const auto [end, ec] = std::from_chars(freq->data(), freq->data() + freq->size(), every);
          ec == std::errc() && end == freq->data() + freq->size()) {
        if (every < 1) f_.fail(flag, fmt::format("must be at least 1, got {}", every));
        pattern.emplace();
        for (std::int64_t i = 0; i < layers_; ++i) pattern->push_back(i % every == 0 ? 1 : 0);
      } else {
        pattern = layer_pattern(*freq);
        if (!pattern) f_.fail(flag, fmt::format("\"{}\" is not N or a list pattern like ([0]*3+[1]*58)", *freq));
      }
      if (static_cast<std::int64_t>(pattern->size()) != layers_)
        f_.fail(flag, fmt::format("the pattern has {} layers, the model {}", pattern->size(), layers_));
      while (dense < layers_ && (*pattern)[static_cast<std::size_t>(dense)] == 0) ++dense;
      if (dense == layers_) f_.fail(flag, "leaves no layer with experts");
      if (std::find(pattern->begin() + dense, pattern->end(), 0) != pattern->end()) {
        dense_anywhere = true;
        dense = 0;
        put(m, "model", "moe_layer_freq", *pattern, "moe-layer-freq");
      }
    }
    if (dense > 0) put(m, "model", "first_dense_layers", dense, "moe-layer-freq");
    if (dense > 0 || dense_anywhere) put(m, "model", "ffn_hidden", ffn, ffn_given ? "ffn-hidden-size" : "");
    if (!pattern_.empty() && !m.contains("ffn_hidden") && pattern_.find('-') != std::string::npos)
      put(m, "model", "ffn_hidden", ffn, ffn_given ? "ffn-hidden-size" : "");
  }

  void latent_attention(nlohmann::ordered_json& m) {
    if (!f_.on("multi-latent-attention")) return;
    // Megatron-Core's MLATransformerConfig defaults: kv_lora_rank 32, qk_head_dim 128,
    // qk_pos_emb_head_dim 64, v_head_dim 128, no query latent.
    put(m, "model", "kv_lora_rank", f_.integer("kv-lora-rank").value_or(32), "kv-lora-rank");
    if (auto q = f_.integer("q-lora-rank")) put(m, "model", "q_lora_rank", *q, "q-lora-rank");
    put(m, "model", "head_dim", f_.integer("qk-head-dim").value_or(128), "qk-head-dim");
    put(m, "model", "qk_rope_head_dim", f_.integer("qk-pos-emb-head-dim").value_or(64), "qk-pos-emb-head-dim");
    put(m, "model", "v_head_dim", f_.integer("v-head-dim").value_or(128), "v-head-dim");
  }

  // A hybrid model (pretrain_mamba.py): the pattern and the Mamba-2 mixer's sizes, Megatron-Core's
  // MambaMixer defaults (state 128, head dim 64, 8 groups, heads = 2·hidden / head dim).
  void mamba(nlohmann::ordered_json& m) {
    if (pattern_.empty()) return;
    put(m, "model", "hybrid_pattern", pattern_, pattern_flag_);
    if (pattern_.find('M') == std::string::npos) return;
    const std::int64_t head_dim = f_.integer("mamba-head-dim").value_or(64);
    if (head_dim < 1)  // the default head count divides by it
      f_.fail(*f_.get("mamba-head-dim"), fmt::format("must be at least 1, got {}", head_dim));
    put(m, "model", "mamba_heads", f_.integer("mamba-num-heads").value_or(2 * hidden_ / head_dim), "mamba-num-heads");
    put(m, "model", "mamba_head_dim", head_dim, "mamba-head-dim");
    put(m, "model", "mamba_state", f_.integer("mamba-state-dim").value_or(128), "mamba-state-dim");
    put(m, "model", "mamba_groups", f_.integer("mamba-num-groups").value_or(8), "mamba-num-groups");
  }

  void gpus() {
    if (o_.gpus > 0) {
      out_.scenario["gpus"] = o_.gpus;
      return;
    }
    // The deepspeed launcher's --num_gpus and --num_nodes.
    if (!f_.value("nproc-per-node") && f_.value("num-gpus")) {
      const Flag& ng = *f_.get("num-gpus");
      out_.scenario["gpus"] = *f_.integer("num-gpus") * f_.integer("num-nodes").value_or(1);
      out_.origin["gpus"] = f_.where(ng);
      return;
    }
    const auto per_node = f_.value("nproc-per-node");
    if (!per_node)
      f_.fail(
          "the GPU count is not in the command: give it with --gpus N (or launch with torchrun's --nproc-per-node "
          "and --nnodes)");
    const Flag& pn = *f_.get("nproc-per-node");
    const auto gpus_per_node = f_.integer("nproc-per-node");
    const auto nodes_text = f_.value("nnodes").value_or("1");
    std::int64_t nodes = 0;
    const auto [p, ec] = std::from_chars(nodes_text.data(), nodes_text.data() + nodes_text.size(), nodes);
    if (ec != std::errc() || p != nodes_text.data() + nodes_text.size() || nodes < 1)
      f_.fail(*f_.get("nnodes"), fmt::format("\"{}\" is not a node count (give the GPUs with --gpus N)", nodes_text));
    std::int64_t gpus = 0;
    if (__builtin_mul_overflow(*gpus_per_node, nodes, &gpus))
      f_.fail(pn,
              fmt::format("{} GPUs per node on {} nodes is beyond any cluster trainsim models", *gpus_per_node, nodes));
    out_.scenario["gpus"] = gpus;
    out_.origin["gpus"] = f_.where(pn);
  }

  void training() {
    auto& t = training_;
    const auto mbs_flag = f_.integer("micro-batch-size");
    const std::int64_t mbs = mbs_flag ? *mbs_flag : ds_ && ds_->micro_batch ? *ds_->micro_batch : 1;
    put(t, "training", "micro_batch", mbs, "micro-batch-size");
    if (!mbs_flag && !(ds_ && ds_->micro_batch)) note("micro_batch: 1 (no --micro-batch-size)");
    const std::int64_t gpus = out_.scenario["gpus"].get<std::int64_t>();
    const std::int64_t replicas = std::max<std::int64_t>(1, gpus / std::max<std::int64_t>(1, tp_ * pp_ * cp_));
    auto gbs = f_.integer("global-batch-size");
    if (!gbs && ds_ && ds_->train_batch) gbs = ds_->train_batch;
    // Megatron's default: one micro-batch per replica (a product that must not overflow).
    std::int64_t one_each = 0;
    if (!gbs && __builtin_mul_overflow(mbs, replicas, &one_each)) {
      const std::string problem =
          fmt::format("{} sequences per micro-batch on {} replicas is beyond any batch trainsim models", mbs, replicas);
      if (mbs_flag) f_.fail(*f_.get("micro-batch-size"), problem);
      f_.fail(problem);
    }
    put(t, "training", "global_batch", gbs.value_or(one_each), "global-batch-size");
    if (!gbs) note(fmt::format("global_batch: Megatron's default, one micro-batch per replica ({})", one_each));
    // --encoder-seq-length is the older name (arguments.py takes it when --seq-length is absent).
    const std::string_view seq_flag = f_.get("seq-length") == nullptr && f_.get("encoder-seq-length") != nullptr
                                          ? "encoder-seq-length"
                                          : "seq-length";
    const std::int64_t seq = require_int(seq_flag, "the training sequence length");
    put(t, "training", "seq_len", seq, seq_flag);
    if (f_.on("rampup-batch-size"))
      note("--rampup-batch-size: the simulated step runs at the full global batch, after the ramp-up");
    if (auto samples = budget("train-samples"))
      put(t, "training", "train_tokens", static_cast<double>(*samples) * static_cast<double>(seq), "train-samples");
    else if (auto iters = budget("train-iters"))
      put(t, "training", "train_tokens",
          static_cast<double>(*iters) * static_cast<double>(t["global_batch"].get<std::int64_t>()) *
              static_cast<double>(seq),
          "train-iters");

    precision();
    recompute();
    attention();
    if (f_.on("cross-entropy-loss-fusion")) put(t, "training", "cross_entropy", "fused", "cross-entropy-loss-fusion");
    f_.on("cross-entropy-fusion-impl");
    if (f_.on("grad-reduce-in-bf16")) put(t, "training", "grad_reduce_in_fp32", false, "grad-reduce-in-bf16");
    if (f_.on("no-gradient-accumulation-fusion")) {
      if (ds_)
        note(
            "--no-gradient-accumulation-fusion: under DeepSpeed's engine the gradients are accumulated by DeepSpeed "
            "(BF16_Optimizer's fp32 add, or autograd's .grad), as trainsim models them with or without it");
      else
        put(t, "training", "gradient_accumulation_fusion", false, "no-gradient-accumulation-fusion");
    }
    // Megatron-Core's router and permutation fusions are off unless asked (arguments.py).
    for (const auto& [flag, key, what] :
         {std::tuple{"moe-router-fusion", "moe_router_fusion", "router"},
          std::tuple{"moe-permute-fusion", "moe_permute_fusion", "token permutation"}}) {
      if (f_.on(flag) || f_.get("num-experts") == nullptr || ds_) continue;
      put(t, "training", key, false, flag);
      note(fmt::format("{} false: without --{} Megatron-Core runs the {} as eager PyTorch ops (its default)", key, flag,
                       what));
    }
    if (!f_.on("moe-grouped-gemm") && f_.get("num-experts") != nullptr && !ds_) {
      put(t, "training", "moe_grouped_gemm", false, "moe-grouped-gemm");
      note(
          "moe_grouped_gemm false: without --moe-grouped-gemm Megatron-Core runs the experts one MLP module at a "
          "time (SequentialMLP, its default)");
    }
    // FP16 keeps its gradients in fp16 unless asked (bf16 and FP8 reduce in fp32 unless asked not to).
    if (f_.on("accumulate-allreduce-grads-in-fp32") && training_["precision"] == "fp16")
      put(t, "training", "grad_reduce_in_fp32", true, "accumulate-allreduce-grads-in-fp32");
    if (f_.on("cpu-offloading")) {
      const auto n = f_.integer("cpu-offloading-num-layers");
      put(t, "training", "cpu_offload_layers", n.value_or(0), "cpu-offloading-num-layers");
      if (!n)
        note("--cpu-offloading without --cpu-offloading-num-layers: Megatron's default 0 layers, nothing offloaded");
    }
    if (f_.on("fine-grained-activation-offloading")) {
      auto modules = f_.list("offload-modules");
      // Transformer Engine's op-fuser grouped MLP keeps the experts' fc1 input and activation input
      // above the default size threshold: trainsim's expert_fc1 and moe_act.
      if (const auto fused = std::find(modules.begin(), modules.end(), "fused_group_mlp"); fused != modules.end()) {
        modules.erase(fused);
        for (const char* name : {"expert_fc1", "moe_act"})
          if (std::find(modules.begin(), modules.end(), name) == modules.end()) modules.emplace_back(name);
        note(
            "--offload-modules fused_group_mlp: offloaded as expert_fc1 and moe_act (the fused grouped MLP's "
            "tensors above Megatron-Core's default min_offloaded_tensor_size); with a threshold that leaves only the "
            "activation's input, as the Nemotron 3 Ultra recipes' 350-500 million, set training.offload_modules to "
            "[\"moe_act\"]");
      }
      if (!modules.empty())
        put(t, "training", "offload_modules", modules, "offload-modules");
      else
        note("--fine-grained-activation-offloading without --offload-modules: nothing offloaded");
    }
    cuda_graphs();
    moe_dispatch();
    optimizer();
    if (ds_) apply_deepspeed();
  }

  // --deepspeed with --deepspeed_config: the configuration's text, from the file given to the import,
  // the here-document the script writes it with, or the file itself (beside the script first).
  void load_deepspeed() {
    const bool on = f_.on("deepspeed");
    const auto path = f_.value("deepspeed-config");
    if (!on) {
      if (path) note("--deepspeed_config without --deepspeed: DeepSpeed is off, its configuration not read");
      return;
    }
    if (!path && o_.deepspeed_config.empty())
      f_.fail(*f_.get("deepspeed"),
              "needs --deepspeed_config FILE (or give the file to the import with --deepspeed-config FILE)");
    std::string text, source;
    if (!o_.deepspeed_config.empty()) {
      source = o_.deepspeed_config;
      text = util::read_text_file(source);
    } else if (const auto it = o_.written_files.find(*path); it != o_.written_files.end()) {
      source = *path;
      text = it->second;
      note(fmt::format("{}: the DeepSpeed configuration the script writes (its here-document)", *path));
    } else {
      namespace fs = std::filesystem;
      const fs::path beside = fs::path(o_.script_dir) / *path;
      source = !o_.script_dir.empty() && fs::path(*path).is_relative() && fs::exists(beside) ? beside.string() : *path;
      if (!fs::exists(source))
        f_.fail(*f_.get("deepspeed-config"),
                fmt::format("{} does not exist (nor does the script write it): give it with --deepspeed-config FILE",
                            *path));
      text = util::read_text_file(source);
    }
    ds_ = read_deepspeed_config(text, source);
    ds_source_ = source;
  }

  [[noreturn]] void ds_fail(const std::string& key, const std::string& problem) const {
    throw util::InputError(ds_source_, key, problem);
  }

  // What DeepSpeed's engine does with the configuration (deepspeedai/DeepSpeed engine.py,
  // pipe/engine.py, bf16_optimizer.py, zero/config.py), as trainsim keys.
  void apply_deepspeed() {
    const DeepSpeedConfig& ds = *ds_;
    auto& p = parallel_;
    auto& t = training_;
    for (const auto& k : ds.no_effect) out_.no_effect.push_back(k);
    for (const auto& k : ds.not_modelled) out_.not_modelled.push_back(k);
    for (const auto& k : ds.unknown) out_.unknown.push_back(k);
    for (std::string_view flag :
         {"deepspeed-activation-checkpointing", "contigious-checkpointing", "synchronize-each-layer",
          "profile-backward", "abort-on-unmet-fused-kernel-constraints", "kill-switch-path", "kill-switch-file",
          "data-impl", "no-query-key-layer-scaling", "tokenizer-name-or-path", "deepspeed-mpi", "hostfile", "include",
          "exclude", "launcher"})
      if (f_.on(flag)) out_.no_effect.push_back(fmt::format("--{}", flag));
    for (std::string_view flag :
         {"partition-activations", "checkpoint-in-cpu", "embed-layernorm", "sync-tp-duplicated-parameters"})
      if (f_.on(flag)) out_.not_modelled.push_back(fmt::format("--{}", flag));
    // The microsoft fork's Transformer Engine FP8, which its pipeline model refuses: the run trains
    // in 16 bits as far as trainsim can tell, so it is an error rather than a silent bf16.
    for (std::string_view flag : {"fp8-e4m3", "fp8-hybrid"})
      if (const Flag* f = f_.get(flag))
        f_.fail(*f,
                "Megatron-DeepSpeed's Transformer Engine FP8 is not modelled (trainsim's megatron-deepspeed runs "
                "bf16 or fp16)");
    if (f_.value("position-embedding-type") == "alibi")
      out_.not_modelled.push_back("--position-embedding-type alibi (the bias added to the attention scores)");

    // The batch: DeepSpeed asserts train_batch_size = micro x accumulation x data-parallel size.
    const std::int64_t gpus = out_.scenario["gpus"].get<std::int64_t>();
    const std::int64_t dp = std::max<std::int64_t>(1, gpus / std::max<std::int64_t>(1, tp_ * pp_ * cp_));
    const std::int64_t mbs = t["micro_batch"].get<std::int64_t>();
    const std::int64_t gbs = t["global_batch"].get<std::int64_t>();
    if (ds.micro_batch && *ds.micro_batch != mbs)
      ds_fail("train_micro_batch_size_per_gpu",
              fmt::format("{} disagrees with the command's --micro-batch-size {}", *ds.micro_batch, mbs));
    if (ds.train_batch && *ds.train_batch != gbs)
      ds_fail("train_batch_size",
              fmt::format("{} disagrees with the command's --global-batch-size {}", *ds.train_batch, gbs));
    if (ds.grad_accum && *ds.grad_accum * mbs * dp != gbs)
      ds_fail("gradient_accumulation_steps",
              fmt::format("{} x micro-batch {} x data-parallel size {} is not the global batch {}", *ds.grad_accum, mbs,
                          dp, gbs));

    // Precision: the configuration's must be the model's.
    const std::string precision = t["precision"].get<std::string>();
    const bool bf16 = precision != "fp16";
    if (bf16 && !ds.bf16) ds_fail("bf16", "is not enabled, but the command trains in bf16 (--bf16)");
    if (!bf16 && !ds.fp16) ds_fail("fp16", "is not enabled, but the command trains in fp16 (--fp16)");

    const std::int64_t stage = ds.zero_stage;
    if (auto z = f_.integer("zero-stage"); z && *z != stage)
      note(fmt::format("--zero-stage {} only sets Megatron-DeepSpeed's zero.Init; DeepSpeed runs {}'s stage {}", *z,
                       ds_source_, stage));
    // With DeepSpeed, Megatron-DeepSpeed builds GPTModelPipe (a PipelineModule, run by the pipeline
    // engine) unless --no-pipeline-parallel, at pp 1 too.
    const bool pipeline = !f_.on("no-pipeline-parallel");
    if (f_.on("no-pipeline-parallel") && pp_ > 1)
      f_.fail(*f_.get("no-pipeline-parallel"), "with --pipeline-model-parallel-size > 1");
    if (pipeline && stage >= 2)
      ds_fail("zero_optimization.stage",
              fmt::format("{}: DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only", stage));
    if (p.contains("schedule") && p["schedule"] == "interleaved")
      f_.fail("DeepSpeed's pipeline engine has no interleaved (virtual) stages");

    // The optimizer wrapper: bf16 with the pipeline and no ZeRO (or ZeRO-1 accumulating in fp32) is
    // BF16_Optimizer: fp32 master weights and Adam states sharded over the data-parallel ranks, the
    // whole gradients all-reduced, the bf16 shards all-gathered after the step. Otherwise bf16 and
    // fp16 without ZeRO all-reduce (DDP_BFLOAT16, FP16_Optimizer), and ZeRO 1-3 shard as Megatron's.
    const std::string accum = !ds.grad_accum_dtype.empty() ? ds.grad_accum_dtype : bf16 ? "bf16" : "fp16";
    const bool bf16_optimizer =
        bf16 && ((stage == 0 && pipeline) || (stage == 1 && accum == "fp32" && ds.offload_optimizer.empty()));
    std::int64_t zero = stage;
    if (bf16_optimizer) zero = 1;
    // Megatron's distributed optimizer is not built under DeepSpeed (get_megatron_optimizer returns
    // the plain Adam for DeepSpeed to wrap).
    if (f_.get("use-distributed-optimizer") != nullptr)
      note("--use-distributed-optimizer: Megatron-DeepSpeed ignores it under DeepSpeed, whose ZeRO stage shards");
    p.erase("zero");
    p.erase("distributed_optimizer_instances");
    if (zero > 0) p["zero"] = zero;
    out_.origin["parallel.zero"] = fmt::format("{}: zero_optimization.stage {}", ds_source_, stage);
    t["framework"] = "megatron-deepspeed";
    if (bf16_optimizer || (stage == 1 && !ds.reduce_scatter)) p["zero1_grad_reduce"] = "all_reduce";
    if (bf16_optimizer)
      note(
          fmt::format("bf16 with ZeRO stage {}{}: DeepSpeed's BF16_Optimizer (zero 1 with the whole gradients "
                      "all-reduced)",
                      stage, pipeline ? " and the pipeline" : ""));
    if (stage == 3)
      note("ZeRO-3: DeepSpeed's parameter fetches simulated as trainsim's zero 3, each layer gathered one layer ahead");
    // The gradients' dtype on the wire: communication_data_type, by default the gradients' own.
    const std::string wire = !ds.comm_dtype.empty() ? ds.comm_dtype : bf16_optimizer ? (bf16 ? "bf16" : "fp16") : accum;
    t["grad_reduce_in_fp32"] = wire == "fp32";
    if (accum == "fp32" && wire != "fp32")
      note("fp32 gradient accumulation sent as 16-bit: the gradients are counted at 2 bytes each, not 4");

    // Overlap: the pipeline engine reduces after the last micro-batch; ZeRO-1 turns overlap_comm off;
    // ZeRO-2 overlaps when asked; ZeRO-3 by default. Parameters are gathered after the step.
    p.erase("overlap_param_gather");
    const bool overlap = !pipeline && stage >= 2 && ds.overlap_comm.value_or(stage == 3);
    p["overlap_grad_reduce"] = overlap;
    if (overlap) {
      const double elements = ds.reduce_bucket_elements.value_or(5e8);  // DeepSpeed's default
      p["dp_bucket_mb"] = elements * (wire == "fp32" ? 4 : 2) / 1e6;
    }
    // Pipeline messages: DeepSpeed's engine partitions them over the tensor-parallel ranks and gathers
    // them on arrival (PartitionedTensor) unless pipeline.pipe_partitioned or grad_partitioned is false;
    // the scenario's default for megatron-deepspeed where it applies, one switch for both directions.
    if (ds.pipe_partitioned || ds.grad_partitioned) {
      const bool fwd = ds.pipe_partitioned.value_or(true), bwd = ds.grad_partitioned.value_or(true);
      if (pipeline && tp_ > 1 && pp_ > 1 && !p.value("sequence_parallel", false) && !(fwd && bwd)) {
        p["scatter_gather_tensors_in_pipeline"] = false;
        out_.origin["parallel.scatter_gather_tensors_in_pipeline"] =
            fmt::format("{}: pipeline.{} false", ds_source_, fwd ? "grad_partitioned" : "pipe_partitioned");
        if (fwd != bwd)
          note(
              fmt::format("{}: pipeline.pipe_partitioned {} and grad_partitioned {}: trainsim partitions the "
                          "messages of both directions or of neither; both sent whole",
                          ds_source_, fwd, bwd));
      }
    }
    if (!ds.offload_optimizer.empty())
      out_.not_modelled.push_back(
          fmt::format("{}: zero_optimization.offload_optimizer {} (DeepSpeed's CPU Adam; simulated on the GPU)",
                      ds_source_, ds.offload_optimizer));
    if (!ds.offload_param.empty())
      out_.not_modelled.push_back(
          fmt::format("{}: zero_optimization.offload_param {} (simulated on the GPU)", ds_source_, ds.offload_param));

    // Attention: Megatron-DeepSpeed runs its unfused kernels unless a flash-attention flag asks.
    if (f_.on("use-flash-attn-v2") || f_.on("use-flash-attn-builder"))
      t["attention"] = "flash2";
    else if (f_.on("use-flash-attn") || f_.on("use-flash-attn-v1") || f_.on("use-flash-attn-triton"))
      t["attention"] = "flash1";
    else if (!t.contains("attention"))
      t["attention"] = "softmax";

    // The pipeline split: DeepSpeed's PipelineModule over GPTModelPipe's layers.
    if (pipeline && pp_ > 1 && !p.contains("pipeline_layout") && !p.contains("first_stage_layers")) {
      const bool bigscience = f_.get("pp-partition-method") != nullptr || f_.get("embed-layernorm") != nullptr ||
                              f_.get("pad-vocab-size-to") != nullptr || f_.get("position-embedding-type") != nullptr;
      std::string method = f_.value("pp-partition-method").value_or("type:transformer");
      // BLOOM's scripts quote it inside a string that `srun bash -c` reads again, which removes them.
      if (method.size() >= 2 && (method.front() == '\'' || method.front() == '"') && method.back() == method.front())
        method = method.substr(1, method.size() - 2);
      const bool tied = !(model_.contains("tied_embeddings") && model_["tied_embeddings"] == false);
      std::string problem;
      const auto layout = deepspeed_pipeline_layout(layers_, pp_, method, bigscience, tied, problem);
      if (!layout) {
        if (const Flag* m = f_.get("pp-partition-method")) f_.fail(*m, problem);
        f_.fail(problem);
      }
      // An even split is trainsim's default: the layout only where DeepSpeed's split is not one.
      std::string even = "E";
      for (std::int64_t st = 0; st < pp_; ++st) even += fmt::format("{}t*{}", st > 0 ? "|" : "", layers_ / pp_);
      even += "L";
      if (layers_ % pp_ != 0 || expand_pipeline_layout(*layout) != expand_pipeline_layout(even)) {
        put(p, "parallel", "pipeline_layout", *layout, f_.get("pp-partition-method") ? "pp-partition-method" : "");
        note(fmt::format("pipeline_layout {}: DeepSpeed's PipelineModule split ({}) of {}'s layers", *layout, method,
                         bigscience ? "bigscience Megatron-DeepSpeed" : "Megatron-DeepSpeed"));
      }
    }
  }

  // --train-samples / --train-iters, which only give the token budget: one the script leaves to a
  // variable it does not set is a note, not an error.
  std::optional<std::int64_t> budget(std::string_view name) {
    const Flag* f = f_.get(name);
    if (f != nullptr && !f->values.empty() && f->values[0].find('$') != std::string::npos) {
      note(fmt::format("--{} {}: not set in the script, so no token budget", name, f->values[0]));
      return std::nullopt;
    }
    return f_.integer(name);
  }

  void precision() {
    auto& t = training_;
    const bool bf16 = f_.on("bf16");
    const bool fp16 = f_.on("fp16");
    if (!bf16 && !fp16) f_.fail("neither --bf16 nor --fp16: fp32 training is not modelled");
    std::string precision = fp16 ? "fp16" : "bf16";
    std::string_view flag = fp16 ? "fp16" : "bf16";
    if (auto fp8 = f_.value("fp8-format")) {
      precision = "fp8";
      flag = "fp8-format";
      // Megatron-Core's recipes; "custom" (a user-supplied recipe factory) is not modelled: the GPU's
      // default stands for it.
      if (auto recipe = f_.value("fp8-recipe")) {
        if (fp8_recipe_named(*recipe))
          fp8_recipe_ = *recipe;
        else
          note(
              fmt::format("--fp8-recipe {}: not modelled; the GPU's default recipe stands for it (training.fp8_recipe "
                          "absent: mxfp8 on Blackwell, delayed scaling on Hopper)",
                          *recipe));
      }
    }
    if (auto fp4 = f_.value("fp4-format")) {
      const auto recipe = f_.value("fp4-recipe").value_or("nvfp4");
      if (recipe != "nvfp4")
        f_.fail(*f_.get("fp4-recipe"), fmt::format("the {} recipe is not modelled (nvfp4 is)", recipe));
      precision = "nvfp4";
      flag = "fp4-format";
    }
    put(t, "training", "precision", precision, flag);
    if (precision == "fp8" && !fp8_recipe_.empty()) put(t, "training", "fp8_recipe", fp8_recipe_, "fp8-recipe");
    // FP8 parameters, gathered in FP8 by the distributed optimizer (Megatron asserts one, or FSDP).
    if (f_.on("fp8-param-gather")) {
      if (precision == "fp8")
        put(t, "training", "fp8_param_gather", true, "fp8-param-gather");
      else
        note("--fp8-param-gather without --fp8-format: no FP8 parameters to gather");
    }
    // MXFP8 parameters gathered in BF16 into the gradient buffer: what trainsim models for them.
    if (f_.on("reuse-grad-buf-for-mxfp8-param-ag") && !f_.on("fp8-param-gather"))
      note("--reuse-grad-buf-for-mxfp8-param-ag without --fp8-param-gather: no MXFP8 parameters to gather");
    // Megatron-Core's multi-token prediction layers and a hybrid stack's attention layers kept in BF16.
    const bool quantised = precision == "fp8" || precision == "nvfp4";
    if (f_.on("keep-mtp-spec-in-bf16")) {
      if (!quantised)
        note("--keep-mtp-spec-in-bf16 without --fp8-format or --fp4-format: every layer is already 16-bit");
      else if (f_.integer("mtp-num-layers").value_or(0) == 0)
        note("--keep-mtp-spec-in-bf16 without --mtp-num-layers: no multi-token prediction layers to keep");
      else
        put(t["module_precision"], "training.module_precision", "mtp", "bf16", "keep-mtp-spec-in-bf16");
    }
    if (f_.on("keep-mamba-stack-attention-linear-in-bf16")) {
      if (!quantised)
        note(
            "--keep-mamba-stack-attention-linear-in-bf16 without --fp8-format or --fp4-format: every layer is "
            "already 16-bit");
      else if (pattern_.empty())
        note("--keep-mamba-stack-attention-linear-in-bf16 applies to hybrid (Mamba) models only: left out");
      else
        put(t["module_precision"], "training.module_precision", "attention_linears", "bf16",
            "keep-mamba-stack-attention-linear-in-bf16");
    }
    // Megatron-Core's first and last layers kept in BF16 (its defaults: one of each).
    if (f_.on("first-last-layers-bf16")) {
      const auto start = f_.integer("num-layers-at-start-in-bf16").value_or(1);
      const auto end = f_.integer("num-layers-at-end-in-bf16").value_or(1);
      if (precision == "fp8" || precision == "nvfp4") {
        if (start != 0) put(t, "training", "bf16_layers_at_start", start, "num-layers-at-start-in-bf16");
        if (end != 0) put(t, "training", "bf16_layers_at_end", end, "num-layers-at-end-in-bf16");
        if (f_.get("num-layers-at-start-in-bf16") == nullptr || f_.get("num-layers-at-end-in-bf16") == nullptr)
          note(
              "--first-last-layers-bf16: Megatron's default of one layer where --num-layers-at-start-in-bf16 / "
              "--num-layers-at-end-in-bf16 is not given");
      } else {
        note("--first-last-layers-bf16 without --fp8-format or --fp4-format: every layer is already 16-bit");
      }
    }
  }

  void recompute() {
    auto& t = training_;
    auto granularity = f_.value("recompute-granularity");
    // The older switches: --recompute-activations is selective (arguments.py sets it over any
    // --recompute-granularity), --checkpoint-activations full.
    if (f_.on("recompute-activations")) {
      put(t, "training", "recompute", "selective", "recompute-activations");
      return;
    }
    if (!granularity && f_.on("checkpoint-activations")) {
      put(t, "training", "recompute", "full", "checkpoint-activations");
      return;
    }
    if (!granularity) return;
    const Flag& g = *f_.get("recompute-granularity");
    if (*granularity == "selective") {
      put(t, "training", "recompute", "selective", "recompute-granularity");
      const auto modules = f_.list("recompute-modules");
      if (!modules.empty()) put(t, "training", "recompute_modules", modules, "recompute-modules");
      return;
    }
    if (*granularity != "full") f_.fail(g, fmt::format("unknown granularity \"{}\" (full or selective)", *granularity));
    put(t, "training", "recompute", "full", "recompute-granularity");
    const auto method = f_.value("recompute-method");
    const auto n = f_.integer("recompute-num-layers");
    if (method == "block") {
      if (n) put(t, "training", "recompute_layers", *n, "recompute-num-layers");
    } else if (method == "uniform" || !method) {
      if (n.value_or(1) != 1)
        note(
            fmt::format("--recompute-method uniform --recompute-num-layers {}: modelled layer by layer (each "
                        "layer's input kept instead of each {}-layer chunk's)",
                        *n, *n));
    } else {
      f_.fail(*f_.get("recompute-method"), fmt::format("unknown method \"{}\" (uniform or block)", *method));
    }
  }

  // Transformer Engine's fused attention unless the command asks for the unfused kernels.
  void attention() {
    const auto backend = f_.value("attention-backend");
    const bool local_impl = f_.value("transformer-impl") == "local";
    const bool flash_flag = f_.on("use-flash-attn");
    if ((backend == "unfused" || backend == "local") || (local_impl && !flash_flag)) {
      // trainsim's multi-head latent attention runs fused only.
      if (f_.on("multi-latent-attention"))
        note("unfused attention under multi-head latent attention is not modelled: simulated with the fused kernels");
      else
        put(training_, "training", "attention", "softmax", backend ? "attention-backend" : "transformer-impl");
    }
  }

  void cuda_graphs() {
    std::string impl = f_.value("cuda-graph-impl").value_or("none");
    if (f_.on("enable-cuda-graph")) impl = "local";
    if (f_.on("external-cuda-graph")) impl = "transformer_engine";
    // --cuda-graph-modules is the newer name of --cuda-graph-scope.
    auto scopes = f_.list("cuda-graph-scope");
    for (auto& m : f_.list("cuda-graph-modules")) scopes.push_back(m);
    if (impl == "none") return;
    const bool full_iteration =
        impl == "full_iteration" || std::find(scopes.begin(), scopes.end(), "full_iteration") != scopes.end();
    if (impl == "full_iteration") impl = "local";
    if (impl == "local" && full_iteration) {
      put(training_, "training", "cuda_graph_scope", std::vector<std::string>{"full_iteration"}, "cuda-graph-scope");
      return;
    }
    if (impl != "transformer_engine") {
      out_.not_modelled.push_back(fmt::format("--cuda-graph-impl {} (per-layer graphs)", impl));
      return;
    }
    static constexpr std::array<std::string_view, 5> kScopes{"attn", "mlp", "moe_router", "moe_preprocess", "mamba"};
    std::vector<std::string> kept, dropped;
    for (const auto& s : scopes)
      (std::find(kScopes.begin(), kScopes.end(), s) != kScopes.end() ? kept : dropped).push_back(s);
    if (scopes.empty()) dropped.push_back("the whole layer (no --cuda-graph-scope)");
    if (!kept.empty()) put(training_, "training", "cuda_graph_scope", kept, "cuda-graph-scope");
    if (!dropped.empty())
      out_.not_modelled.push_back(
          fmt::format("--cuda-graph-scope {} (the graphs trainsim knows are attn, mlp, "
                      "moe_router, moe_preprocess, mamba and full_iteration)",
                      join(dropped, " ")));
  }

  void moe_dispatch() {
    auto& p = parallel_;
    std::string dispatcher = f_.value("moe-token-dispatcher-type").value_or("allgather");
    if (f_.on("moe-enable-deepep")) dispatcher = "flex";
    f_.on("moe-flex-dispatcher-backend");
    if (f_.get("num-experts") != nullptr) {
      if (dispatcher == "allgather" || dispatcher == "flex") {
        if (dispatcher == "allgather" && f_.get("moe-token-dispatcher-type") == nullptr)
          note("moe_token_dispatcher allgather: Megatron's default --moe-token-dispatcher-type");
        put(p, "parallel", "moe_token_dispatcher", dispatcher, "moe-token-dispatcher-type");
      } else if (dispatcher != "alltoall") {
        f_.fail(*f_.get("moe-token-dispatcher-type"),
                fmt::format("unknown dispatcher \"{}\" (alltoall, flex or allgather)", dispatcher));
      }
    }
    if (auto c = f_.number("moe-expert-capacity-factor"))
      put(p, "parallel", "moe_expert_capacity_factor", *c, "moe-expert-capacity-factor");
    if (f_.on("moe-pad-expert-input-to-capacity"))
      put(p, "parallel", "moe_pad_expert_input_to_capacity", true, "moe-pad-expert-input-to-capacity");
    if (auto c = f_.number("moe-expert-rank-capacity-factor"))
      put(p, "parallel", "moe_expert_rank_capacity_factor", *c, "moe-expert-rank-capacity-factor");
    if (f_.on("moe-paged-stash")) put(p, "parallel", "moe_paged_stash", true, "moe-paged-stash");
    // The published benchmarks force balanced routing; trainsim assumes it unless told otherwise.
    f_.on("moe-router-force-load-balancing");
    if (auto bucket = f_.integer("ddp-bucket-size")) {
      // Megatron counts the bucket in parameters; trainsim in MB of gradients.
      const bool fp32_grads = !training_.contains("grad_reduce_in_fp32");
      put(p, "parallel", "dp_bucket_mb", static_cast<double>(*bucket) * (fp32_grads ? 4.0 : 2.0) / 1e6,
          "ddp-bucket-size");
    }
  }

  void optimizer() {
    const std::string which = f_.value("optimizer").value_or("adam");
    if (which != "adam")
      f_.fail(*f_.get("optimizer"), fmt::format("the {} optimizer is not modelled (adam is)", which));
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    if (f_.on("use-precision-aware-optimizer"))
      put(o, "training.optimizer", "use_precision_aware_optimizer", true, "use-precision-aware-optimizer");
    for (const char* key : {"main-params-dtype", "exp-avg-dtype", "exp-avg-sq-dtype"}) {
      if (auto v = f_.value(key)) {
        std::string k = key;
        std::replace(k.begin(), k.end(), '-', '_');
        put(o, "training.optimizer", k, *v, key);
      }
    }
    if (f_.on("no-store-param-remainders"))
      put(o, "training.optimizer", "store_param_remainders", false, "no-store-param-remainders");
    if (f_.on("optimizer-cpu-offload"))
      put(o, "training.optimizer", "optimizer_cpu_offload", true, "optimizer-cpu-offload");
    // The fraction means something only with the offload on (Megatron-Bridge dumps carry 0.0 without).
    if (o.contains("optimizer_cpu_offload"))
      if (auto v = f_.number("optimizer-offload-fraction"))
        put(o, "training.optimizer", "optimizer_offload_fraction", *v, "optimizer-offload-fraction");
    if (f_.on("overlap-cpu-optimizer-d2h-h2d"))
      put(o, "training.optimizer", "overlap_cpu_optimizer_d2h_h2d", true, "overlap-cpu-optimizer-d2h-h2d");
    if (!o.empty()) training_["optimizer"] = o;
  }

  // Every flag not read: without effect on a step, or not modelled.
  void leftovers() {
    for (const Flag* f : f_.unread()) {
      const std::string shown = f_.label(f->name);
      const MegatronFlag* known = known_flag(f->name);
      (known == nullptr ? out_.unknown : known->no_effect ? out_.no_effect : out_.not_modelled).push_back(shown);
    }
  }

  Flags f_;
  const ImportOptions& o_;
  ImportedScenario out_;
  nlohmann::ordered_json model_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json parallel_ = nlohmann::ordered_json::object();
  nlohmann::ordered_json training_ = nlohmann::ordered_json::object();
  std::int64_t layers_ = 0, hidden_ = 0, tp_ = 1, pp_ = 1, cp_ = 1;
  std::string pattern_;                        // a hybrid model's layer pattern, '|' removed
  std::vector<std::size_t> pattern_segments_;  // its layers between '|' splits (pipeline stages)
  std::string_view pattern_flag_;
  std::optional<DeepSpeedConfig> ds_;  // Megatron-DeepSpeed's configuration (--deepspeed)
  std::string ds_source_;
  std::string fp8_recipe_;  // --fp8-recipe, where trainsim models it
};

}  // namespace

ImportedScenario import_megatron(const std::vector<util::ShellCommand>& commands, const ImportOptions& options) {
  return Importer(commands, options).run();
}

}  // namespace trainsim::config
