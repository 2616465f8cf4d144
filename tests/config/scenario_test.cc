#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "config/scenario.h"
#include "util/error.h"

namespace fs = std::filesystem;
using nlohmann::json;
using trainsim::config::load_scenario;
using trainsim::config::parse_scenario;
using trainsim::config::ParseOptions;
using trainsim::config::Recompute;
using trainsim::config::Scenario;
using trainsim::util::InputError;
using trainsim::util::JsonNode;

namespace {

// A private data directory per test: models/test-70b.json (Llama-3-70B-like shape),
// models/hf-llama.json (a Hugging Face config), topologies/dgx-h100.json (the shipped one).
class DataDir {
 public:
  DataDir() {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() /
            ("trainsim_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "models");
    fs::create_directories(root_ / "topologies");
    fs::create_directories(root_ / "scenarios");
    write("models/test-70b.json", model_json().dump());
    write("models/hf-llama.json", hf_json().dump());
    for (const char* t : {"dgx-h100.json", "dgx-a100.json"})
      fs::copy_file(fs::path(TRAINSIM_SOURCE_DIR) / "topologies" / t, root_ / "topologies" / t);
  }
  ~DataDir() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  const fs::path& root() const { return root_; }
  std::string write(const std::string& rel, const std::string& text) const {
    const fs::path p = root_ / rel;
    std::ofstream(p) << text;
    return p.string();
  }

  static json model_json() {
    return {{"name", "test-70b"}, {"layers", 80},        {"hidden", 8192},  {"heads", 64},
            {"kv_heads", 8},      {"ffn_hidden", 28672}, {"vocab", 128256}, {"mlp", "swiglu"}};
  }
  static json hf_json() {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", 4096},
            {"intermediate_size", 14336},
            {"num_attention_heads", 32},
            {"num_hidden_layers", 32},
            {"num_key_value_heads", 8},
            {"vocab_size", 128256},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", false}};
  }

 private:
  fs::path root_;
};

// 64 H100s: tp 8 x pp 2 -> dp 4; 64 sequences / (1 x 4) = 16 micro-batches per pipeline.
json base_scenario() {
  return {{"model", "test-70b"},
          {"cluster", "dgx-h100"},
          {"gpus", 64},
          {"parallel", {{"tp", 8}, {"pp", 2}, {"sequence_parallel", true}}},
          {"training", {{"global_batch", 64}, {"seq_len", 8192}}}};
}

Scenario parse(const DataDir& data, const json& doc) {
  return parse_scenario(JsonNode(doc, "scenario.json"), data.root());
}

InputError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  FAIL("expected an InputError");
  return InputError("", "", "");
}

InputError parse_error(const DataDir& data, const json& doc) {
  return error_of([&] { (void)parse(data, doc); });
}

}  // namespace

TEST_CASE("a full scenario resolves named model and cluster and derives dp and micro-batches", "[config]") {
  // Megatron: dp = gpus / (tp pp cp); micro-batches per step = global / (micro x dp) (ecosystem.md §2.1).
  DataDir data;
  json doc = base_scenario();
  doc["parallel"] = {
      {"tp", 8},  {"pp", 4}, {"cp", 1}, {"sequence_parallel", true}, {"schedule", "1f1b"}, {"virtual_stages", 1},
      {"zero", 1}};
  doc["gpus"] = 1024;
  doc["training"] = {{"micro_batch", 1},         {"global_batch", 1024}, {"seq_len", 8192},
                     {"recompute", "selective"}, {"precision", "bf16"},  {"attention", "flash"}};
  const Scenario s = parse(data, doc);
  CHECK(s.file == "scenario.json");
  CHECK(s.model.name == "test-70b");
  CHECK(s.model.layers == 80);
  CHECK(s.cluster.name == "dgx-h100");
  CHECK(s.cluster.gpu.id == "h100-sxm");
  CHECK(s.gpus == 1024);
  CHECK(s.parallel.tp == 8);
  CHECK(s.parallel.pp == 4);
  CHECK(s.parallel.dp == 32);
  CHECK(s.parallel.sequence_parallel);
  CHECK(s.parallel.zero == 1);
  CHECK(s.training.recompute == Recompute::selective);
  CHECK(s.training.attention == trainsim::workload::AttentionImpl::flash);
  CHECK(s.training.num_micro_batches == 32);
}

TEST_CASE("omitted parallel and training keys take Megatron's defaults", "[config]") {
  DataDir data;
  json doc = base_scenario();
  doc.erase("parallel");
  doc["gpus"] = 8;
  doc["training"] = {{"global_batch", 16}, {"seq_len", 2048}};
  const Scenario s = parse(data, doc);
  CHECK(s.parallel.tp == 1);
  CHECK(s.parallel.pp == 1);
  CHECK(s.parallel.cp == 1);
  CHECK(s.parallel.dp == 8);
  CHECK_FALSE(s.parallel.sequence_parallel);
  CHECK(s.parallel.virtual_stages == 1);
  CHECK(s.parallel.zero == 0);
  CHECK(s.training.micro_batch == 1);
  CHECK(s.training.recompute == Recompute::none);
  CHECK(s.training.attention == trainsim::workload::AttentionImpl::flash);
  CHECK(s.training.num_micro_batches == 2);
  CHECK(s.training.grad_reduce_in_fp32);  // Megatron forces fp32 gradients with bf16 (arguments.py)

  doc["training"]["precision"] = "fp16";
  CHECK_FALSE(parse(data, doc).training.grad_reduce_in_fp32);  // fp16 keeps them in fp16
  doc["training"]["grad_reduce_in_fp32"] = true;
  CHECK(parse(data, doc).training.grad_reduce_in_fp32);
  doc["training"]["precision"] = "bf16";
  doc["training"]["grad_reduce_in_fp32"] = false;
  CHECK_FALSE(parse(data, doc).training.grad_reduce_in_fp32);
  doc["training"].erase("grad_reduce_in_fp32");

  doc["training"]["attention"] = "softmax";
  doc["training"]["recompute"] = "full";
  const Scenario t = parse(data, doc);
  CHECK(t.training.attention == trainsim::workload::AttentionImpl::softmax);
  CHECK(t.training.recompute == Recompute::full);
}

TEST_CASE("sequence parallelism with tp = 1 is switched off silently, as Megatron does", "[config]") {
  DataDir data;
  json doc = base_scenario();
  doc["parallel"] = {{"tp", 1}, {"pp", 2}, {"sequence_parallel", true}};
  const Scenario s = parse(data, doc);
  CHECK_FALSE(s.parallel.sequence_parallel);
  CHECK(s.parallel.dp == 32);
}

TEST_CASE("tp larger than a node is allowed", "[config]") {
  DataDir data;
  json doc = base_scenario();
  json model = DataDir::model_json();
  model["kv_heads"] = 16;
  doc["model"] = model;
  doc["parallel"] = {{"tp", 16}};
  const Scenario s = parse(data, doc);
  CHECK(s.parallel.tp == 16);
  CHECK(s.parallel.dp == 4);
}

TEST_CASE("model and cluster may be names, paths or inline objects", "[config]") {
  DataDir data;
  SECTION("a Hugging Face config.json by name") {
    json doc = base_scenario();
    doc["model"] = "hf-llama";
    const Scenario s = parse(data, doc);
    CHECK(s.model.hidden == 4096);
    CHECK(s.model.kv_heads == 8);
  }
  SECTION("an absolute path") {
    const std::string model = data.write("elsewhere-model.json", DataDir::model_json().dump());
    json doc = base_scenario();
    doc["model"] = model;
    CHECK(parse(data, doc).model.name == "test-70b");
  }
  SECTION("a path relative to the scenario file") {
    data.write(
        "scenarios/my-cluster.json",
        std::string(std::istreambuf_iterator<char>(std::ifstream(data.root() / "topologies" / "dgx-h100.json").rdbuf()),
                    {}));
    json doc = base_scenario();
    doc["cluster"] = "my-cluster.json";
    const std::string file = data.write("scenarios/s.json", doc.dump());
    const Scenario s = load_scenario(file, data.root());
    CHECK(s.cluster.name == "dgx-h100");
    CHECK(s.file == file);
  }
  SECTION("a path relative to the working directory") {
    const fs::path cwd = fs::current_path();
    fs::current_path(data.root());
    json doc = base_scenario();
    doc["model"] = "scenarios/../models/test-70b.json";
    const std::string file = data.write("scenarios/s.json", doc.dump());
    Scenario s;
    CHECK_NOTHROW(s = load_scenario(file, data.root()));
    fs::current_path(cwd);
    CHECK(s.model.layers == 80);
  }
  SECTION("inline objects") {
    json doc = base_scenario();
    doc["model"] = DataDir::model_json();
    doc["cluster"] = json::parse(std::ifstream(data.root() / "topologies" / "dgx-h100.json"));
    const Scenario s = parse(data, doc);
    CHECK(s.model.hidden == 8192);
    CHECK(s.cluster.nic.per_node == 8);
  }
}

TEST_CASE("the shipped topologies resolve from the default data directory", "[config]") {
  json doc = base_scenario();
  doc["model"] = DataDir::model_json();
  doc["cluster"] = "dgx-a100";
  const Scenario s = parse_scenario(JsonNode(doc, "s.json"), TRAINSIM_SOURCE_DIR);
  CHECK(s.cluster.gpu.id == "a100-sxm-80gb");
}

TEST_CASE("default_data_dir follows TRAINSIM_DATA_DIR, else the source tree", "[config]") {
  const char* old = std::getenv("TRAINSIM_DATA_DIR");
  const std::string saved = old ? old : "";
  ::setenv("TRAINSIM_DATA_DIR", "/some/where", 1);
  CHECK(trainsim::config::default_data_dir() == fs::path("/some/where"));
  ::unsetenv("TRAINSIM_DATA_DIR");
  CHECK(trainsim::config::default_data_dir() == fs::path(TRAINSIM_SOURCE_DIR));
  if (old) ::setenv("TRAINSIM_DATA_DIR", saved.c_str(), 1);
}

TEST_CASE("files that cannot be read or parsed are named in the error", "[config]") {
  DataDir data;
  SECTION("malformed scenario") {
    const std::string file = data.write("bad.json", "{\"gpus\": 8,");
    const InputError e = error_of([&] { (void)load_scenario(file, data.root()); });
    CHECK(e.file() == file);
    CHECK_THAT(e.problem(), Catch::StartsWith("malformed JSON"));
  }
  SECTION("missing scenario file") {
    const InputError e = error_of([&] { (void)load_scenario((data.root() / "nope.json").string(), data.root()); });
    CHECK(e.problem() == "cannot open file");
  }
  SECTION("scenario is not an object") {
    const std::string file = data.write("list.json", "[1, 2]");
    const InputError e = error_of([&] { (void)load_scenario(file, data.root()); });
    CHECK(e.problem() == "expected an object, got an array");
  }
  SECTION("malformed model file") {
    data.write("models/broken.json", "{\"name\": ");
    json doc = base_scenario();
    doc["model"] = "broken";
    const InputError e = parse_error(data, doc);
    CHECK(e.file() == (data.root() / "models" / "broken.json").string());
  }
  SECTION("an error inside a referenced model file names that file and its path") {
    json model = DataDir::model_json();
    model["layerz"] = 3;
    data.write("models/typo.json", model.dump());
    json doc = base_scenario();
    doc["model"] = "typo";
    const InputError e = parse_error(data, doc);
    CHECK(e.file() == (data.root() / "models" / "typo.json").string());
    CHECK(e.path() == "layerz");
  }
  SECTION("an error inside a referenced topology file names that file") {
    json topo = json::parse(std::ifstream(data.root() / "topologies" / "dgx-h100.json"));
    topo["gpu"] = "h900";
    data.write("topologies/future.json", topo.dump());
    json doc = base_scenario();
    doc["cluster"] = "future";
    const InputError e = parse_error(data, doc);
    CHECK(e.file() == (data.root() / "topologies" / "future.json").string());
    CHECK(e.path() == "gpu");
  }
  SECTION("an error inside an inline model carries the scenario path") {
    json doc = base_scenario();
    doc["model"] = DataDir::model_json();
    doc["model"].erase("vocab");
    const InputError e = parse_error(data, doc);
    CHECK(e.file() == "scenario.json");
    CHECK(e.path() == "model.vocab");
  }
}

TEST_CASE("unknown model and cluster names list what is known", "[config]") {
  DataDir data;
  json doc = base_scenario();
  doc["model"] = "gpt-5";
  InputError e = parse_error(data, doc);
  CHECK(e.path() == "model");
  CHECK(e.problem() == "\"gpt-5\" is neither a file in " + (data.root() / "models").string() +
                           " (known: hf-llama, test-70b) nor a path to a file");

  doc = base_scenario();
  doc["cluster"] = "dgx-h300";
  e = parse_error(data, doc);
  CHECK(e.path() == "cluster");
  CHECK_THAT(e.problem(), Catch::Contains("(known: dgx-a100, dgx-h100)"));

  doc = base_scenario();
  doc["cluster"] = 7;
  e = parse_error(data, doc);
  CHECK(e.path() == "cluster");
  CHECK(e.problem() == "expected a name, a path or an object");

  doc = base_scenario();
  doc["model"] = "";
  CHECK(parse_error(data, doc).path() == "model");
}

TEST_CASE("missing, unknown and mistyped keys are errors with their JSON path", "[config]") {
  DataDir data;
  struct Case {
    std::function<void(json&)> edit;
    std::string path;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d.erase("gpus"); }, "gpus", "missing required key"},
      {[](json& d) { d.erase("model"); }, "model", "missing required key"},
      {[](json& d) { d.erase("cluster"); }, "cluster", "missing required key"},
      {[](json& d) { d.erase("training"); }, "training", "missing required key"},
      {[](json& d) { d["training"].erase("global_batch"); }, "training.global_batch", "missing required key"},
      {[](json& d) { d["training"].erase("seq_len"); }, "training.seq_len", "missing required key"},
      {[](json& d) { d["gpu"] = 8; }, "gpu",
       "unknown key (expected one of: model, cluster, gpus, parallel, training, network, "
       "collectives, gpu_profile, segment_gpus)"},
      {[](json& d) { d["parallel"]["dp"] = 4; }, "parallel.dp",
       "unknown key (expected one of: tp, pp, cp, ep, etp, sequence_parallel, schedule, virtual_stages, zero, "
       "overlap_grad_reduce, "
       "overlap_param_gather, align_param_gather, dp_bucket_mb, tp_comm_overlap, moe_a2a_overlap, delay_wgrad_compute, "
       "defer_embedding_wgrad_compute, wgrad_deferral_limit, "
       "moe_token_dispatcher, "
       "moe_expert_capacity_factor, moe_pad_expert_input_to_capacity, moe_expert_rank_capacity_factor, "
       "moe_paged_stash, first_stage_layers, last_stage_layers, "
       "account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split, fsdp_prefetch, "
       "zero2_param_gather, zero1_grad_reduce, pipeline_layout, distributed_optimizer_instances, "
       "outer_dp_sharding_strategy, "
       "cp_comm_type, "
       "moe_shared_expert_overlap, scatter_gather_tensors_in_pipeline)"},
      {[](json& d) { d["training"]["learning_rate"] = 3e-4; }, "training.learning_rate",
       "unknown key (expected one of: micro_batch, global_batch, seq_len, recompute, recompute_layers, precision, "
       "fp8_recipe, fp8_param_gather, attention, framework, host_forward_us, host_backward_us, grad_reduce_in_fp32, "
       "gradient_accumulation_fusion, "
       "moe_router_fusion, moe_permute_fusion, moe_grouped_gemm, cross_entropy, "
       "recompute_modules, cpu_offload_layers, offload_modules, host_overhead, cuda_graph_scope, host_cost_scale, "
       "peft, lora_rank, "
       "lora_targets, document_tokens, train_tokens, moe_load_imbalance, optimizer, bf16_layers_at_start, "
       "bf16_layers_at_end, module_precision, torch_compile, torch_compile_loss)"},
      {[](json& d) { d["training"]["torch_compile_loss"] = true; }, "training.torch_compile_loss",
       "applies to \"framework\": \"torchtitan\" only"},
      {[](json& d) { d["training"]["optimizer"] = "adam"; }, "training.optimizer", "expected an object, got a string"},
      {[](json& d) {
         d["training"]["optimizer"] = {{"use_precision_aware_optimizer", "yes"}};
       },
       "training.optimizer.use_precision_aware_optimizer", "expected true or false, got a string"},
      {[](json& d) { d["training"]["cuda_graph_scope"] = "attn"; }, "training.cuda_graph_scope",
       "must be an array of scope names (empty: no CUDA graphs)"},
      {[](json& d) {
         d["training"]["cuda_graph_scope"] = {"attn", "router"};
       },
       "training.cuda_graph_scope[1]",
       "unknown scope \"router\" (expected one of: attn, mlp, moe_router, moe_preprocess, mamba, full_iteration)"},
      {[](json& d) {
         d["training"]["cuda_graph_scope"] = {"attn", "attn"};
       },
       "training.cuda_graph_scope[1]", "\"attn\" is listed twice"},
      {[](json& d) {
         d["training"]["cuda_graph_scope"] = {"full_iteration", "attn"};
       },
       "training.cuda_graph_scope", "\"full_iteration\" captures everything and takes no other scope"},
      {[](json& d) {
         d["training"]["host_overhead"] = false;
         d["training"]["cuda_graph_scope"] = {"attn"};
       },
       "training.cuda_graph_scope", "needs \"host_overhead\": true (CUDA graphs save host time)"},
      {[](json& d) { d["training"]["cuda_graph_scope"] = {"moe_router"}; }, "training.cuda_graph_scope",
       "\"moe_router\" and \"moe_preprocess\" need a mixture-of-experts model"},
      {[](json& d) { d["training"]["host_overhead"] = "yes"; }, "training.host_overhead",
       "expected true or false, got a string"},
      {[](json& d) {
         d["training"]["host_overhead"] = false;
         d["training"]["host_cost_scale"] = 2;
       },
       "training.host_cost_scale", "needs \"host_overhead\": true"},
      {[](json& d) { d["training"]["host_cost_scale"] = 0; }, "training.host_cost_scale", "must be positive, got 0"},
      {[](json& d) { d["gpus"] = "64"; }, "gpus", "expected an integer, got a string"},
      {[](json& d) { d["gpus"] = 64.5; }, "gpus", "expected an integer, got 64.5"},
      {[](json& d) { d["parallel"]["sequence_parallel"] = 1; }, "parallel.sequence_parallel",
       "expected true or false, got a number"},
      {[](json& d) { d["parallel"] = 8; }, "parallel", "expected an object, got a number"},
      {[](json& d) { d["training"]["recompute"] = true; }, "training.recompute", "expected a string, got a boolean"},
      {[](json& d) { d["gpus"] = 0; }, "gpus", "must be a positive integer, got 0"},
      {[](json& d) { d["gpus"] = -64; }, "gpus", "must be a positive integer, got -64"},
      {[](json& d) { d["parallel"]["tp"] = 0; }, "parallel.tp", "must be a positive integer, got 0"},
      {[](json& d) { d["parallel"]["pp"] = -2; }, "parallel.pp", "must be a positive integer, got -2"},
      {[](json& d) { d["parallel"]["cp"] = 0; }, "parallel.cp", "must be a positive integer, got 0"},
      {[](json& d) { d["parallel"]["virtual_stages"] = 0; }, "parallel.virtual_stages",
       "must be a positive integer, got 0"},
      {[](json& d) { d["parallel"]["zero"] = -1; }, "parallel.zero", "must not be negative, got -1"},
      {[](json& d) { d["parallel"]["zero"] = 4; }, "parallel.zero", "must be 0, 1, 2 or 3, got 4"},
      {[](json& d) { d["training"]["micro_batch"] = 0; }, "training.micro_batch", "must be a positive integer, got 0"},
      {[](json& d) { d["training"]["global_batch"] = -8; }, "training.global_batch",
       "must be a positive integer, got -8"},
      {[](json& d) { d["training"]["seq_len"] = 0; }, "training.seq_len", "must be a positive integer, got 0"},
      {[](json& d) { d["training"]["recompute"] = "partial"; }, "training.recompute",
       "unknown value \"partial\" (expected one of: none, selective, full)"},
      {[](json& d) { d["training"]["attention"] = "xformers"; }, "training.attention",
       "unknown value \"xformers\" (expected one of: flash, flash2, flash1, softmax)"},
      {[](json& d) { d["training"]["precision"] = "fp32"; }, "training.precision",
       "unknown value \"fp32\" (expected one of: bf16, fp16, fp8, nvfp4)"},
      {[](json& d) { d["training"]["cross_entropy"] = "apex"; }, "training.cross_entropy",
       "unknown value \"apex\" (expected one of: unfused, fused)"},
      {[](json& d) { d["parallel"]["schedule"] = "1F1B"; }, "parallel.schedule",
       "unknown value \"1F1B\" (expected one of: 1f1b, gpipe, interleaved, zb-h1, dualpipev)"},
      {[](json& d) {
         d["parallel"]["zero"] = 2;
         d["parallel"]["zero2_param_gather"] = "unit";
       },
       "parallel.zero2_param_gather", "unknown value \"unit\" (expected one of: after_optimizer, per_unit)"},
      {[](json& d) { d["training"]["moe_router_fusion"] = false; }, "training.moe_router_fusion",
       "needs a mixture-of-experts model"},
      {[](json& d) { d["training"]["moe_permute_fusion"] = false; }, "training.moe_permute_fusion",
       "needs a mixture-of-experts model"},
      {[](json& d) { d["training"]["moe_grouped_gemm"] = false; }, "training.moe_grouped_gemm",
       "needs a mixture-of-experts model"},
      {[](json& d) { d["training"]["fp8_recipe"] = "mxfp8"; }, "training.fp8_recipe",
       "applies to precision fp8 only (nvfp4 is a recipe of its own)"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["fp8_recipe"] = "current";
       },
       "training.fp8_recipe", "unknown value \"current\" (expected one of: delayed, tensorwise, mxfp8, blockwise)"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["fp8_recipe"] = "mxfp8";
       },
       "training.fp8_recipe",
       "mxfp8 needs Blackwell's tensor cores, which scale each 32 elements (NVIDIA H100 SXM5 80GB has none): "
       "delayed, tensorwise or blockwise"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["fp8_recipe"] = "delayed";
         d["training"]["bf16_layers_at_start"] = 1;
       },
       "training.fp8_recipe",
       "delayed scaling cannot keep layers in BF16 (Megatron-Core refuses --first-last-layers-bf16 with it): "
       "tensorwise, mxfp8 or blockwise"},
      {[](json& d) {
         d["training"]["module_precision"] = {{"attention_linears", "bf16"}};
       },
       "training.module_precision",
       "applies to precision fp8 or nvfp4 only (the other runs' GEMMs are already 16-bit)"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["module_precision"] = {{"attention_linears", "fp8"}};
       },
       "training.module_precision.attention_linears", "fp8 is above the run's precision under nvfp4 only: bf16"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["module_precision"] = {{"router", "bf16"}};
       },
       "training.module_precision.router",
       "unknown key (expected one of: mtp, attention_linears, mamba_out_proj, moe_latent_proj)"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["module_precision"] = {{"mtp", "bf16"}};
       },
       "training.module_precision.mtp", "the model has no multi-token prediction layers"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["module_precision"] = {{"mamba_out_proj", "bf16"}};
       },
       "training.module_precision.mamba_out_proj", "needs Mamba layers (a hybrid_pattern with 'M')"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["module_precision"] = {{"moe_latent_proj", "bf16"}};
       },
       "training.module_precision.moe_latent_proj", "needs a latent mixture of experts (moe_latent)"},
      {[](json& d) {
         d["training"]["precision"] = "fp8";
         d["training"]["fp8_recipe"] = "delayed";
         d["training"]["module_precision"] = {{"attention_linears", "bf16"}};
       },
       "training.fp8_recipe",
       "delayed scaling cannot keep modules in BF16 (Megatron-Core's per-module recipes refuse it): tensorwise, "
       "mxfp8 or blockwise"},
  };
  for (const Case& c : cases) {
    json doc = base_scenario();
    c.edit(doc);
    INFO(doc.dump());
    const InputError e = parse_error(data, doc);
    CHECK(e.file() == "scenario.json");
    CHECK(e.path() == c.path);
    CHECK(e.problem() == c.problem);
  }
}

TEST_CASE("settings trainsim knows but does not simulate yet are refused on their path", "[config]") {
  DataDir data;
  struct Case {
    std::function<void(json&)> edit;
    std::string path;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {[](json& d) {
         d["parallel"]["schedule"] = "zb-h1";
         d["parallel"]["zero"] = 3;
       },
       "parallel.zero",
       "zero 3 with the zb-h1 schedule is not supported yet (its weight-gradient passes would re-gather each "
       "layer)"},
      {[](json& d) { d["parallel"]["fsdp_prefetch"] = false; }, "parallel.fsdp_prefetch",
       "applies to zero 3 or zero 2 with zero2_param_gather per_unit (FSDP) only"},
      {[](json& d) {
         d["parallel"]["zero"] = 2;
         d["parallel"]["fsdp_prefetch"] = false;
       },
       "parallel.fsdp_prefetch", "applies to zero 3 or zero 2 with zero2_param_gather per_unit (FSDP) only"},
      {[](json& d) { d["parallel"]["zero2_param_gather"] = "per_unit"; }, "parallel.zero2_param_gather",
       "applies to zero 2 only"},
      {[](json& d) {
         d["parallel"]["zero"] = 2;
         d["parallel"]["pp"] = 2;
         d["parallel"]["zero2_param_gather"] = "per_unit";
       },
       "parallel.zero2_param_gather",
       "per_unit (PyTorch FSDP SHARD_GRAD_OP) with pipeline parallelism is not supported yet"},
      {[](json& d) {
         d["parallel"]["zero"] = 2;
         d["parallel"]["pp"] = 1;
         d["parallel"]["zero2_param_gather"] = "per_unit";
         d["parallel"]["overlap_grad_reduce"] = true;
         d["parallel"]["overlap_param_gather"] = true;
       },
       "parallel.overlap_param_gather", "does not apply to FSDP's per-unit all-gathers"},
      {[](json& d) { d["parallel"]["virtual_stages"] = 2; }, "parallel.virtual_stages",
       "2 virtual stages need \"schedule\": \"interleaved\""},
      {[](json& d) { d["parallel"]["schedule"] = "interleaved"; }, "parallel.schedule",
       "the interleaved schedule needs virtual_stages >= 2 (Megatron: VPP 1 disables it)"},
      {[](json& d) {
         d["cluster"] = "dgx-a100";
         d["training"]["precision"] = "fp8";
       },
       "training.precision", "NVIDIA A100 SXM4 80GB has no FP8 tensor cores"},
      {[](json& d) {
         d["cluster"] = "dgx-h100";
         d["training"]["precision"] = "nvfp4";
       },
       "training.precision", "NVIDIA H100 SXM5 80GB has no FP4 tensor cores (NVFP4 needs Blackwell)"},
  };
  for (const Case& c : cases) {
    json doc = base_scenario();
    c.edit(doc);
    INFO(doc.dump());
    const InputError e = parse_error(data, doc);
    CHECK(e.path() == c.path);
    CHECK(e.problem() == c.problem);
  }
}

TEST_CASE("impossible layouts name the numbers that do not fit", "[config]") {
  // test-70b: 80 layers, 64 heads, 8 kv heads; 64 GPUs.
  DataDir data;
  struct Case {
    std::function<void(json&)> edit;
    std::string message;  // the whole line main prints
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["gpus"] = 60; }, "scenario.json: gpus: 60 is not a multiple of tp*pp*cp = 8*2*1 = 16"},
      {[](json& d) {
         d["parallel"]["tp"] = 3;
         d["gpus"] = 48;
       },
       "scenario.json: parallel.tp: 3 does not divide heads (64)"},
      {[](json& d) { d["parallel"]["tp"] = 16; }, "scenario.json: parallel.tp: 16 does not divide kv_heads (8)"},
      {[](json& d) {
         d["parallel"]["pp"] = 3;
         d["gpus"] = 48;
       },
       "scenario.json: parallel.pp: 3 does not divide layers (80)"},
      {[](json& d) { d["training"]["global_batch"] = 66; },
       "scenario.json: training.global_batch: 66 is not a multiple of micro_batch*dp = 1*4 = 4"},
      {[](json& d) { d["training"]["micro_batch"] = 3; },
       "scenario.json: training.global_batch: 64 is not a multiple of micro_batch*dp = 3*4 = 12"},
      {[](json& d) { d["training"]["seq_len"] = 8190; },
       "scenario.json: training.seq_len: 8190 tokens per context-parallel rank are not divisible by tp (8), which "
       "sequence_parallel requires"},
      // Context parallelism: 2·cp equal chunks (Megatron's causal load balancing), fused attention,
      // and SP over each CP rank's tokens.
      {[](json& d) {
         d["parallel"]["cp"] = 4;
         d["training"]["seq_len"] = 8196;
       },
       "scenario.json: parallel.cp: cp = 4 cannot split seq_len 8196 into 2*cp = 8 equal chunks"},
      {[](json& d) {
         d["parallel"]["cp"] = 2;
         d["training"]["attention"] = "softmax";
       },
       "scenario.json: parallel.cp: context parallelism needs fused attention (training.attention flash, flash2 "
       "or flash1), not softmax"},
      {[](json& d) {
         d["parallel"]["cp"] = 4;
         d["training"]["seq_len"] = 40;
       },
       "scenario.json: training.seq_len: 10 tokens per context-parallel rank are not divisible by tp (8), which "
       "sequence_parallel requires"},
  };
  for (const Case& c : cases) {
    json doc = base_scenario();
    c.edit(doc);
    INFO(doc.dump());
    CHECK(std::string(parse_error(data, doc).what()) == c.message);
  }
  // Huge sizes are rejected, not overflowed.
  json doc = base_scenario();
  doc["parallel"]["tp"] = std::int64_t{1} << 40;
  doc["parallel"]["pp"] = std::int64_t{1} << 40;
  CHECK(parse_error(data, doc).path() == "gpus");
}

TEST_CASE("a search's base scenario skips how the global batch splits over its layout, nothing else", "[config]") {
  // test-70b on 64 GPUs at tp 8 · pp 2: dp 4. A batch of 66 does not split over it; a search replaces the
  // layout, so its base parses (the micro-batches one per pipeline at least), while every other rule holds.
  DataDir data;
  constexpr ParseOptions kBase{.check_batch_split = false};
  json doc = base_scenario();
  doc["training"]["global_batch"] = 66;
  CHECK(parse_error(data, doc).path() == "training.global_batch");
  const Scenario s = parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase);
  CHECK(s.training.global_batch == 66);
  CHECK(s.training.num_micro_batches == 66 / 4);
  doc["training"]["global_batch"] = 2;  // fewer sequences than data-parallel ranks
  CHECK(parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase).training.num_micro_batches == 1);
  doc["parallel"]["tp"] = 3;
  doc["gpus"] = 48;
  const InputError e = error_of([&] { (void)parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase); });
  CHECK(std::string(e.what()) == "scenario.json: parallel.tp: 3 does not divide heads (64)");
}

TEST_CASE("a search's base scenario skips the rules that tie a parallel key to its layout, not the keys' values",
          "[config]") {
  // test-70b at tp 8 · pp 2, zero 0, cp 1: each key below needs another layout (Megatron's rules), which
  // a search may reach; its base takes them, while a value no layout takes is refused as before.
  DataDir data;
  constexpr ParseOptions kBase{.check_batch_split = false, .check_layout_rules = false};
  struct Case {
    std::string key;
    json value;
    std::string problem;  // without the option
  };
  const std::vector<Case> cases = {
      {"cp_comm_type", "a2a", "applies with cp > 1 only"},
      {"zero1_grad_reduce", "all_reduce", "applies to zero 1 only"},
      {"zero2_param_gather", "per_unit", "applies to zero 2 only"},
      {"fsdp_prefetch", false, "applies to zero 3 or zero 2 with zero2_param_gather per_unit (FSDP) only"},
      {"distributed_optimizer_instances", 2,
       "applies to the distributed optimizer (zero 1, Megatron's --num-distributed-optimizer-instances) and to fully "
       "sharded data parallelism (zero 3: hybrid sharding, HSDP) only"},
  };
  for (const Case& c : cases) {
    INFO(c.key);
    json doc = base_scenario();
    doc["parallel"][c.key] = c.value;
    const InputError e = parse_error(data, doc);
    CHECK(e.path() == "parallel." + c.key);
    CHECK(e.problem() == c.problem);
    CHECK_NOTHROW(parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase));
    doc["parallel"][c.key] = "none of these";
    CHECK(error_of([&] { (void)parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase); }).path() ==
          "parallel." + c.key);
  }
  // tp_comm_overlap without sequence parallelism: a search turns it on wherever tp > 1.
  json doc = base_scenario();
  doc["parallel"]["sequence_parallel"] = false;
  doc["parallel"]["tp_comm_overlap"] = true;
  CHECK(parse_error(data, doc).problem() == "requires sequence_parallel");
  CHECK(parse_scenario(JsonNode(doc, "scenario.json"), data.root(), kBase).parallel.tp_comm_overlap);
}

// LoRA keys: parsed with Megatron-Bridge's defaults (rank 32, all four linears), refused alone, on
// models and layouts not modelled yet, and with unknown or repeated target names.
TEST_CASE("training.peft lora: defaults, targets and refusals") {
  DataDir data;
  json doc = base_scenario();
  doc["training"]["peft"] = "lora";
  Scenario s = parse(data, doc);
  CHECK(s.training.lora);
  CHECK(s.training.lora_rank == 32);
  CHECK(lora_target_names(s.training) ==
        std::vector<std::string>{"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"});
  doc["training"]["lora_rank"] = 8;
  doc["training"]["lora_targets"] = {"linear_fc2", "linear_qkv"};
  s = parse(data, doc);
  CHECK(s.training.lora_rank == 8);
  CHECK(lora_target_names(s.training) == std::vector<std::string>{"linear_qkv", "linear_fc2"});
  struct Case {
    std::function<void(json&)> edit;
    std::string path;
    std::string problem;
  };
  const std::vector<Case> cases = {
      {[](json& d) { d["training"]["lora_rank"] = 16; }, "training.lora_rank", "applies to \"peft\": \"lora\" only"},
      {[](json& d) {
         d["training"]["peft"] = "none";
         d["training"]["lora_targets"] = {"linear_qkv"};
       },
       "training.lora_targets", "applies to \"peft\": \"lora\" only"},
      {[](json& d) {
         d["training"]["peft"] = "lora";
         d["training"]["lora_targets"] = {"linear_qkv", "lm_head"};
       },
       "training.lora_targets[1]",
       "unknown linear \"lm_head\" (expected one of: linear_qkv, linear_proj, linear_fc1, linear_fc2)"},
      {[](json& d) {
         d["training"]["peft"] = "lora";
         d["training"]["lora_targets"] = json::array();
       },
       "training.lora_targets", "must name at least one linear"},
      {[](json& d) { d["training"]["document_tokens"] = 16384; }, "training.document_tokens",
       "16384 exceeds seq_len (8192): a document longer than the sequence is not packed"},
      {[](json& d) {
         d["training"]["attention"] = "softmax";
         d["training"]["document_tokens"] = 512;
       },
       "training.document_tokens",
       "needs fused attention (Megatron's packed sequences run Transformer Engine's THD kernels)"},
      {[](json& d) {
         d["training"]["document_tokens"] = 510;
         d["parallel"]["cp"] = 2;
         d["parallel"]["tp"] = 4;
       },
       "training.document_tokens",
       "510 tokens per document do not split into 2·cp = 4 chunks (Transformer Engine's packed context "
       "parallelism splits each document so)"},
      {[](json& d) { d["training"]["peft"] = "dora"; }, "training.peft",
       "unknown value \"dora\" (expected one of: none, lora)"},
      {[](json& d) {
         d["training"]["peft"] = "lora";
         d["parallel"]["zero"] = 3;
       },
       "training.peft", "LoRA with zero 3 is not supported yet (use zero 0 or 1)"},
      {[](json& d) { d["training"]["seq_len"] = 33554432; }, "training.seq_len",
       "33554432 exceeds the 16777216 tokens trainsim models"},
      {[](json& d) { d["training"]["global_batch"] = 16385 * 4; }, "training.global_batch",
       "gives 16385 micro-batches per pipeline; trainsim simulates at most 16384 (raise micro_batch or the data "
       "parallelism)"},
      {[](json& d) {
         d["training"]["host_overhead"] = true;
         d["training"]["host_cost_scale"] = 2000;
       },
       "training.host_cost_scale", "2000 exceeds 1000"},
  };
  for (const Case& c : cases) {
    json d = base_scenario();
    c.edit(d);
    INFO(d.dump());
    const InputError e = parse_error(data, d);
    CHECK(e.path() == c.path);
    CHECK(e.problem() == c.problem);
  }
}

TEST_CASE("expert-parallel layouts: Megatron-Core's rules, one line each") {
  const nlohmann::json moe = {{"name", "moe"},          {"layers", 4},          {"hidden", 1024},  {"heads", 16},
                              {"kv_heads", 4},          {"vocab", 1000},        {"mlp", "swiglu"}, {"experts", 32},
                              {"experts_per_token", 4}, {"moe_ffn_hidden", 512}};
  auto make = [&](nlohmann::json par) {
    return nlohmann::json{{"model", moe},
                          {"cluster", "dgx-h100"},
                          {"gpus", 16},
                          {"parallel", par},
                          {"training", {{"micro_batch", 1}, {"global_batch", 64}, {"seq_len", 2048}}}};
  };
  auto error = [&](nlohmann::json par) {
    try {
      parse_scenario(trainsim::util::JsonNode(make(par), "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"ep", 8}}) == "no error");
  CHECK(error({{"ep", 3}}) == "s.json: parallel.ep: 3 does not divide experts (32)");
  CHECK(error({{"ep", 32}}) ==
        "s.json: parallel.ep: etp*ep = 1*32 = 32 does not divide the 16 ranks of a pipeline stage (tp*cp*dp = 1*1*16)");
  // etp defaults to tp (Megatron's --expert-tensor-parallel-size default): tp 2, ep 16 is 32 ranks.
  CHECK(error({{"tp", 2}, {"ep", 16}, {"sequence_parallel", true}}) ==
        "s.json: parallel.ep: etp*ep = 2*16 = 32 does not divide the 16 ranks of a pipeline stage (tp*cp*dp = 2*1*8)");
  CHECK(error({{"tp", 2}, {"ep", 16}, {"etp", 1}, {"sequence_parallel", true}}) == "no error");
  CHECK(error({{"tp", 2}, {"ep", 8}}) ==
        "s.json: parallel.sequence_parallel: mixture-of-experts layers with tp > 1 need sequence_parallel "
        "(Megatron-Core requires it)");
  CHECK(error({{"etp", 3}}) == "s.json: parallel.etp: 3 does not divide moe_ffn_hidden (512)");
  // A full-iteration graph needs the fused permutation: the unfused one's masked_select waits on the CPU.
  auto training_error = [&](nlohmann::json par, nlohmann::json training) {
    nlohmann::json doc = make(par);
    doc["training"].update(training);
    try {
      parse_scenario(trainsim::util::JsonNode(doc, "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const nlohmann::json sync_free = {
      {"ep", 8}, {"moe_token_dispatcher", "flex"}, {"moe_expert_rank_capacity_factor", 1.5}};
  const nlohmann::json graphed = {{"cuda_graph_scope", {"full_iteration"}}};
  CHECK(training_error(sync_free, graphed) == "no error");
  CHECK(training_error(sync_free, {{"cuda_graph_scope", {"full_iteration"}}, {"moe_permute_fusion", false}}) ==
        "s.json: training.cuda_graph_scope: \"full_iteration\" with training.moe_permute_fusion false: the unfused "
        "permutation's masked_select copies its size to the CPU, which a captured graph cannot wait for");
  CHECK(training_error(sync_free, {{"cuda_graph_scope", {"full_iteration"}}, {"moe_router_fusion", false}}) ==
        "no error");
  // SequentialMLP splits the tokens by counts the CPU reads: no sync-free experts.
  CHECK(training_error(sync_free, {{"moe_grouped_gemm", false}}) ==
        "s.json: training.moe_grouped_gemm: false cannot run sync-free experts "
        "(parallel.moe_expert_rank_capacity_factor): SequentialMLP splits the tokens by counts the CPU must read");
  // Megatron FSDP and its optim_grads shard the experts too; PyTorch FSDP's per-unit zero 2 is refused.
  CHECK(error({{"ep", 4}, {"zero", 3}}) == "no error");
  CHECK(error({{"ep", 4}, {"zero", 2}}) == "no error");
  CHECK(error({{"ep", 4}, {"zero", 2}, {"zero2_param_gather", "per_unit"}}) ==
        "s.json: parallel.zero2_param_gather: per_unit (PyTorch FSDP's SHARD_GRAD_OP) with a mixture-of-experts model "
        "is not supported (Megatron FSDP's optim_grads is after_optimizer)");
  auto lora = make({{"ep", 8}});
  lora["training"]["peft"] = "lora";
  try {
    parse_scenario(trainsim::util::JsonNode(lora, "s.json"), TRAINSIM_SOURCE_DIR);
    FAIL("LoRA on a mixture of experts was accepted");
  } catch (const trainsim::util::InputError& e) {
    CHECK(std::string(e.what()) == "s.json: training.peft: LoRA on a mixture-of-experts model is not supported yet");
  }
  auto dense = make({{"ep", 2}});
  dense["model"] = "llama3.1-8b";
  try {
    parse_scenario(trainsim::util::JsonNode(dense, "s.json"), TRAINSIM_SOURCE_DIR);
    FAIL("accepted ep with a dense model");
  } catch (const trainsim::util::InputError& e) {
    CHECK(std::string(e.what()) == "s.json: parallel.ep: 2 needs a mixture-of-experts model");
  }
  const auto sc =
      parse_scenario(trainsim::util::JsonNode(make({{"tp", 2}, {"ep", 4}, {"sequence_parallel", true}}), "s.json"),
                     TRAINSIM_SOURCE_DIR);
  CHECK(sc.parallel.etp == 2);
  CHECK(sc.parallel.expert_dp() == 2);
  // Token dropping: a positive capacity factor, padding only with one, the alltoall dispatcher only
  // (Megatron-Bridge's apply_moe_token_drop asserts it).
  CHECK(error({{"ep", 8}, {"moe_expert_capacity_factor", 1.0}, {"moe_pad_expert_input_to_capacity", true}}) ==
        "no error");
  CHECK(error({{"ep", 8}, {"moe_expert_capacity_factor", 0}}) ==
        "s.json: parallel.moe_expert_capacity_factor: must be positive, got 0");
  CHECK(error({{"ep", 8}, {"moe_expert_capacity_factor", 8.5}}) ==
        "s.json: parallel.moe_expert_capacity_factor: 8.5 exceeds experts / experts_per_token = 32/4 = 8, where each "
        "expert's capacity already holds every token of a rank");
  CHECK(error({{"ep", 8}, {"moe_expert_capacity_factor", 8}, {"moe_pad_expert_input_to_capacity", true}}) ==
        "no error");
  CHECK(error({{"ep", 8}, {"moe_pad_expert_input_to_capacity", true}}) ==
        "s.json: parallel.moe_pad_expert_input_to_capacity: requires moe_expert_capacity_factor");
  CHECK(error({{"ep", 8}, {"moe_token_dispatcher", "flex"}, {"moe_expert_capacity_factor", 1.0}}) ==
        "s.json: parallel.moe_expert_capacity_factor: works with the alltoall token dispatcher only (Megatron-Core: "
        "the flex dispatcher drops no tokens)");
  // Routing imbalance: at least 1; at most E·min(k, L)/(k·L) with L local experts (here 32 experts,
  // top 4, ep 8: L = 4, so 32·4/16 = 8); not with padding (every load is then the capacity); MoE only.
  auto imbalance = [&](nlohmann::json par, nlohmann::json value) {
    auto d = make(std::move(par));
    d["training"]["moe_load_imbalance"] = std::move(value);
    try {
      const auto parsed = parse_scenario(trainsim::util::JsonNode(d, "s.json"), TRAINSIM_SOURCE_DIR);
      CHECK(parsed.training.moe_load_imbalance > 0);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(imbalance({{"ep", 8}}, 1.3) == "no error");
  CHECK(imbalance({{"ep", 8}}, 8) == "no error");
  CHECK(imbalance({{"ep", 8}}, 8.5) ==
        "s.json: training.moe_load_imbalance: 8.5 exceeds 8: with 32 experts, 4 per token and 4 on each of ep 8 ranks, "
        "a rank receives at most that many times the mean");
  CHECK(imbalance({{"ep", 8}}, 0.9) ==
        "s.json: training.moe_load_imbalance: 0.9 is below 1: the busiest rank receives at least the mean");
  CHECK(imbalance({{"ep", 8}, {"moe_expert_capacity_factor", 1.0}, {"moe_pad_expert_input_to_capacity", true}}, 1.2) ==
        "s.json: training.moe_load_imbalance: has no effect with moe_pad_expert_input_to_capacity: every expert's "
        "load is its capacity");
  auto dense_drop = make({{"moe_expert_capacity_factor", 1.0}});
  dense_drop["model"] = "llama3.1-8b";
  try {
    parse_scenario(trainsim::util::JsonNode(dense_drop, "s.json"), TRAINSIM_SOURCE_DIR);
    FAIL("accepted a capacity factor with a dense model");
  } catch (const trainsim::util::InputError& e) {
    CHECK(std::string(e.what()) == "s.json: parallel.moe_expert_capacity_factor: needs a mixture-of-experts model");
  }
}

TEST_CASE("segment_gpus: the job's ranks in NVLink blocks of that many GPUs, each block a node to the network") {
  json j = {{"model", "llama3.1-8b"},
            {"cluster", "gb200-nvl72"},
            {"gpus", 256},
            {"segment_gpus", 64},
            {"parallel", {{"tp", 1}}},
            {"training", {{"micro_batch", 1}, {"global_batch", 256}, {"seq_len", 4096}}}};
  const Scenario s = parse_scenario(trainsim::util::JsonNode(j, "s.json"), TRAINSIM_SOURCE_DIR);
  CHECK(s.cluster.gpus_per_node == 64);
  CHECK(s.cluster.nic.per_node == 64);  // one NIC per GPU, as in the 72-GPU rack
  CHECK(s.cluster.node_of(63) == 0);
  CHECK(s.cluster.node_of(64) == 1);
  auto error = [&](json seg) {
    j["segment_gpus"] = seg;
    try {
      parse_scenario(trainsim::util::JsonNode(j, "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error(80) == "s.json: segment_gpus: 80 exceeds the 72 GPUs of one NVLink domain of gb200-nvl72");
  CHECK(error(48) == "s.json: segment_gpus: 48 does not divide gpus (256)");
  CHECK(error(0) == "s.json: segment_gpus: must be a positive integer, got 0");
}

TEST_CASE("sliding-window models: unfused attention is refused; context parallelism runs") {
  json j = {{"model",
             {{"name", "swa"},
              {"layers", 4},
              {"hidden", 1024},
              {"heads", 16},
              {"kv_heads", 4},
              {"ffn_hidden", 4096},
              {"vocab", 1000},
              {"mlp", "swiglu"},
              {"sliding_window", 512}}},
            {"cluster", "dgx-h100"},
            {"gpus", 8},
            {"parallel", {{"cp", 2}}},
            {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 4096}}}};
  auto error = [&]() {
    try {
      parse_scenario(trainsim::util::JsonNode(j, "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* comm : {"p2p", "allgather", "a2a"}) {
    j["parallel"]["cp_comm_type"] = comm;
    CHECK(error() == "no error");
  }
  j["parallel"] = {{"cp", 1}};
  j["training"]["attention"] = "softmax";
  CHECK(error() ==
        "s.json: training.attention: sliding-window attention runs fused (flash, flash2 or flash1), not softmax "
        "(Megatron-Core's unfused attention takes no window; Gemma 2's, a model with attention_softcap, masks the "
        "whole score matrix)");
  j["training"]["attention"] = "flash";
  CHECK(error() == "no error");
  // Gemma 2's soft-capped attention: unfused (the window masks the whole score matrix), Megatron only.
  j["model"]["attention_softcap"] = 50;
  CHECK(error() ==
        "s.json: training.attention: the model soft-caps its attention scores (attention_softcap), which "
        "Transformer Engine's fused kernels cannot: Megatron-Bridge runs it unfused (Gemma 2's "
        "Gemma2DotProductAttention), attention \"softmax\"");
  j["training"]["attention"] = "softmax";
  CHECK(error() == "no error");
  j["model"].erase("attention_softcap");
  j["model"]["logit_softcap"] = 30;
  j["training"]["framework"] = "pytorch-eager";
  j["gpus"] = 1;
  CHECK(error() ==
        "s.json: training.framework: pytorch-eager with soft-capped logits (attention_softcap, logit_softcap) is "
        "not supported yet");
}

TEST_CASE("pipeline_layout: Megatron-Core's layout string places the layers, one error line per mistake") {
  // A DeepSeek-like model: 7 layers, the first dense, MLA, one multi-token prediction module.
  const nlohmann::json mla = {
      {"name", "mla"},           {"layers", 7},        {"hidden", 1024},      {"heads", 16},
      {"head_dim", 64},          {"q_lora_rank", 256}, {"kv_lora_rank", 128}, {"qk_rope_head_dim", 32},
      {"first_dense_layers", 1}, {"ffn_hidden", 2048}, {"experts", 8},        {"experts_per_token", 2},
      {"moe_ffn_hidden", 256},   {"mtp_layers", 1},    {"vocab", 1000},       {"mlp", "swiglu"}};
  auto make = [&](nlohmann::json par) {
    return nlohmann::json{{"model", mla},
                          {"cluster", "dgx-h100"},
                          {"gpus", 8},
                          {"parallel", par},
                          {"training", {{"micro_batch", 1}, {"global_batch", 16}, {"seq_len", 1024}}}};
  };
  auto error = [&](nlohmann::json par) {
    try {
      parse_scenario(trainsim::util::JsonNode(make(par), "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 2 stages x 2 virtual stages: "Et|(tt|)*2tmL" expands to Et|tt|tt|tmL: 1 + 2 + 2 + 1 = 6 layers.
  const nlohmann::json good = {
      {"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"ep", 2}, {"pipeline_layout", "Et*2|(tt|)*2tmL"}};
  CHECK(error(good) == "no error");
  const Scenario sc = parse_scenario(trainsim::util::JsonNode(make(good), "s.json"), TRAINSIM_SOURCE_DIR);
  // Virtual stage k = chunk * pp + stage: stage 0 holds k = 0 (2 layers) and 2 (2), stage 1 k = 1 (2), 3 (1).
  CHECK(trainsim::config::chunk_layers(sc, 0, 0) == 2);
  CHECK(trainsim::config::chunk_layers(sc, 1, 0) == 2);
  CHECK(trainsim::config::chunk_layers(sc, 0, 1) == 2);
  CHECK(trainsim::config::chunk_layers(sc, 1, 1) == 1);
  CHECK(trainsim::config::stage_layers(sc, 0) == 4);
  CHECK(trainsim::config::stage_layers(sc, 1) == 3);
  CHECK(trainsim::config::chunk_first_layer(sc, 1, 0) == 2);
  CHECK(trainsim::config::chunk_first_layer(sc, 0, 1) == 4);
  CHECK(trainsim::config::chunk_first_layer(sc, 1, 1) == 6);
  auto with = [&](const char* layout) {
    nlohmann::json p = good;
    p["pipeline_layout"] = layout;
    return error(p);
  };
  CHECK(with("Et*2|tt|tt|tL") ==
        "s.json: parallel.pipeline_layout: places 0 multi-token prediction modules ('m'); the model has mtp_layers 1");
  CHECK(with("Et*3|tt|tt|tmL") ==
        "s.json: parallel.pipeline_layout: places 8 transformer layers ('t'); the model has 7");
  CHECK(with("Et*2|tt|tttmL") == "s.json: parallel.pipeline_layout: has 3 virtual stages; pp x virtual_stages = 4");
  CHECK(with("t*2|Ett|tt|tmL") ==
        "s.json: parallel.pipeline_layout: 'E' (the embedding) must open the first "
        "virtual stage, found in stage 1");
  CHECK(with("Et*2|tt|tmt|tL") ==
        "s.json: parallel.pipeline_layout: 'm' (multi-token prediction) belongs to the "
        "last virtual stage, found in stage 2");
  CHECK(with("Et*2|(tt|*2tmL") == "s.json: parallel.pipeline_layout: unclosed '('");
  CHECK(with("Et*|tt|tt|tmL") == "s.json: parallel.pipeline_layout: '*' at offset 2 is not followed by a count");
  CHECK(with("Ex") ==
        "s.json: parallel.pipeline_layout: unexpected 'x' at offset 1 (expected E, t, m, L, |, (, ) or *N)");
  nlohmann::json both = good;
  both["first_stage_layers"] = 3;
  CHECK(error(both) ==
        "s.json: parallel.pipeline_layout: cannot be combined with first_stage_layers / "
        "last_stage_layers / account_for_*_in_pipeline_split");
  // MLA runs context parallelism on Transformer Engine's ring only.
  CHECK(error({{"cp", 2}, {"ep", 4}}) == "no error");
  CHECK(error({{"cp", 2}, {"ep", 4}, {"cp_comm_type", "allgather"}}) ==
        "s.json: parallel.cp_comm_type: context parallelism with multi-head latent attention runs on Transformer "
        "Engine's p2p ring only, not allgather");
}

TEST_CASE("hybrid Mamba models: what Megatron-Core and trainsim refuse, one line each") {
  const nlohmann::json hybrid = {{"name", "h"},
                                 {"hybrid_pattern", "M*ME"},
                                 {"hidden", 1024},
                                 {"heads", 16},
                                 {"kv_heads", 4},
                                 {"vocab", 1000},
                                 {"mlp", "squared_relu"},
                                 {"experts", 32},
                                 {"experts_per_token", 4},
                                 {"moe_ffn_hidden", 512},
                                 {"mamba_heads", 16},
                                 {"mamba_head_dim", 64},
                                 {"mamba_state", 64},
                                 {"mamba_groups", 2}};
  auto error = [&](nlohmann::json par, nlohmann::json training) {
    nlohmann::json t = {{"micro_batch", 1}, {"global_batch", 64}, {"seq_len", 2048}};
    if (par.is_null()) par = nlohmann::json::object();  // {} reads as null
    if (!training.is_null()) t.update(training);
    const nlohmann::json d = {
        {"model", hybrid}, {"cluster", "dgx-h100"}, {"gpus", 16}, {"parallel", par}, {"training", t}};
    try {
      parse_scenario(trainsim::util::JsonNode(d, "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"ep", 8}}, {}) == "no error");
  CHECK(error({{"tp", 4}, {"sequence_parallel", true}}, {}) ==
        "s.json: parallel.tp: 4 does not divide mamba_heads (16) and mamba_groups (2)");
  // Mamba context parallelism: 2 divides the 16 heads and the 2 groups (the refusals are in
  // tests/parallel/step_test.cc, "context parallelism in a hybrid model").
  CHECK(error({{"cp", 2}}, {}) == "no error");
  CHECK(error({}, {{"peft", "lora"}}) ==
        "s.json: training.peft: LoRA on a mixture-of-experts model is not supported yet");
  CHECK(error({}, {{"document_tokens", 512}}) == "no error");
  CHECK(error({{"cp", 2}}, {{"document_tokens", 512}}) ==
        "s.json: training.document_tokens: packed sequences in a hybrid model with context parallelism are not "
        "supported yet");
  CHECK(error({}, {{"host_overhead", true}, {"cuda_graph_scope", {"mamba", "attn"}}}) == "no error");
  CHECK(error({}, {{"recompute", "selective"}, {"recompute_modules", {"mlp"}}}) ==
        "s.json: training.recompute_modules: \"mlp\" needs dense MLP layers");
}

// training.fp8_recipe: absent, the GPU's recipe as `export megatron` writes it (MXFP8 on Blackwell;
// delayed scaling on Hopper, current scaling where layers stay in BF16); stated, the one given.
TEST_CASE("fp8_recipe: the GPU's default, or the recipe the scenario states") {
  auto scenario = [](const char* cluster, const json& extra) {
    json j = {{"model", "llama3.1-8b"},
              {"cluster", cluster},
              {"gpus", 8},
              {"training", {{"micro_batch", 1}, {"global_batch", 8}, {"seq_len", 4096}, {"precision", "fp8"}}}};
    j["training"].update(extra);
    return parse_scenario(trainsim::util::JsonNode(j, "s.json"), TRAINSIM_SOURCE_DIR);
  };
  using trainsim::config::Fp8Recipe;
  CHECK(fp8_recipe(scenario("dgx-b200", json::object())) == Fp8Recipe::mxfp8);
  CHECK(fp8_recipe(scenario("dgx-h100", json::object())) == Fp8Recipe::delayed);
  CHECK(fp8_recipe(scenario("dgx-h100", {{"bf16_layers_at_end", 1}})) == Fp8Recipe::tensorwise);
  CHECK(fp8_recipe(scenario("dgx-h100", {{"module_precision", {{"attention_linears", "bf16"}}}})) ==
        Fp8Recipe::tensorwise);
  const Scenario stated = scenario("dgx-h100", {{"fp8_recipe", "blockwise"}});
  CHECK(stated.training.fp8_recipe == Fp8Recipe::blockwise);
  CHECK(fp8_recipe(stated) == Fp8Recipe::blockwise);
  CHECK(fp8_recipe(scenario("dgx-b200", {{"fp8_recipe", "delayed"}})) == Fp8Recipe::delayed);
  CHECK(fp8_recipe_name(Fp8Recipe::tensorwise) == "tensorwise");
}

TEST_CASE("DeepSeek V4's attention: one rank per sequence and head, Megatron-Core's fused kernels") {
  auto error = [](nlohmann::json par, nlohmann::json training) {
    nlohmann::json t = {{"micro_batch", 1}, {"global_batch", 64}, {"seq_len", 4096}, {"precision", "fp8"}};
    if (par.is_null()) par = nlohmann::json::object();
    if (!training.is_null()) t.update(training);
    const nlohmann::json d = {
        {"model", "deepseek-v4-flash"}, {"cluster", "gb200-nvl72"}, {"gpus", 64}, {"parallel", par}, {"training", t}};
    try {
      parse_scenario(trainsim::util::JsonNode(d, "s.json"), TRAINSIM_SOURCE_DIR);
    } catch (const trainsim::util::InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error({{"ep", 64}}, {{"recompute", "selective"}, {"recompute_modules", {"mla_up_proj", "layernorm"}}}) ==
        "no error");
  // One key/value head: tensor parallelism divides kv_heads only at 1.
  CHECK(error({{"ep", 32}, {"tp", 2}, {"sequence_parallel", true}}, {}) ==
        "s.json: parallel.tp: 2 does not divide kv_heads (1)");
  CHECK(error({{"ep", 32}, {"cp", 2}}, {}) ==
        "s.json: parallel.cp: 2: context parallelism with DeepSeek V4's attention is not supported yet");
  CHECK(error({{"ep", 64}}, {{"attention", "softmax"}}) ==
        "s.json: training.attention: DeepSeek V4's sparse attention runs fused (flash), not softmax");
  CHECK(
      error({{"ep", 64}}, {{"document_tokens", 1024}})
          .starts_with(
              "s.json: training.document_tokens: packed documents with DeepSeek V4's attention are not supported yet"));
}
