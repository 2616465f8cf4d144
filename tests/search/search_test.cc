// The layout search: which axes it tries by default, that every candidate goes through the scenario
// rules, that the ranking agrees with simulating the winner on its own, and that the answer does not
// depend on the thread count.

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "hardware/compute_model.h"
#include "parallel/step_builder.h"
#include "parallel/step_runner.h"
#include "search/search.h"
#include "util/json_node.h"

using namespace trainsim;

namespace {

const std::filesystem::path kData = TRAINSIM_SOURCE_DIR;

// Llama 3.1 8B (32 layers) on 64 H200 (8 per node), 512 sequences of 8192 tokens.
nlohmann::json llama8b() {
  return util::read_json_file((kData / "configs/llama3.1-8b-h200-64.json").string());
}

config::Scenario parse(const nlohmann::json& doc) {
  return config::parse_scenario(util::JsonNode(doc, "test.json"), kData);
}

}  // namespace

TEST_CASE("default axes: tp within a node, pp dividing the layers, cp while a rank keeps 4096 tokens") {
  const auto base = parse(llama8b());
  const search::Axes a = search::default_axes(base);
  CHECK(a.tp == std::vector<std::int64_t>{1, 2, 4, 8});
  // Divisors of 32, and of 34 (the embedding and the loss placed as layers): 17, 34.
  CHECK(a.pp == std::vector<std::int64_t>{1, 2, 4, 8, 16, 17, 32, 34});
  // 8192 tokens: cp 2 keeps 4096, cp 4 would keep 2048.
  CHECK(a.cp == std::vector<std::int64_t>{1, 2});
  // v with 32 % (pp * v) == 0 for some pp > 1: 2, 4, 8 (3, 5, 6, 7 divide no 32 / pp).
  CHECK(a.virtual_stages == std::vector<std::int64_t>{1, 2, 4, 8});
  CHECK(a.micro_batch == std::vector<std::int64_t>{1, 2, 4, 8});
  CHECK(a.recompute.size() == 3);
  CHECK(a.zero == std::vector<std::int64_t>{1});  // the scenario's
}

TEST_CASE("search: every combination is counted, rejected ones by the scenario rules, the rest ranked") {
  const auto doc = llama8b();
  search::Axes a;
  a.tp = {1, 2, 3};  // 3 divides neither the 64 GPUs nor the 32 heads: rejected
  a.pp = {1, 2};
  a.cp = {1};
  a.virtual_stages = {1, 2};  // vp 2 with pp 1 is not a layout and is not enumerated
  a.micro_batch = {1, 2, 3};  // 3 does not divide 512 / dp sequences: rejected
  a.recompute = {config::Recompute::none, config::Recompute::full};
  a.zero = {1};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  // tp 3 x (pp 1 with vp 1, pp 2 with vp 1 or 2) x mbs 3 x recompute 2.
  CHECK(r.enumerated == 3 * 3 * 3 * 2);
  // Valid: tp 1 or 2, mbs 1 or 2, every pipeline shape (pp 2 vp 2: 32 layers in 4 chunks of 8;
  // 512 / (mbs * dp) micro-batches is a multiple of pp 2), both recompute modes.
  CHECK(r.rejected == r.enumerated - 2 * 3 * 2 * 2);
  REQUIRE(r.ranked.size() == 2 * 3 * 2 * 2);
  for (std::size_t i = 1; i < r.ranked.size(); ++i) {
    const auto& x = r.ranked[i - 1].metrics;
    const auto& y = r.ranked[i].metrics;
    CHECK((x.fits > y.fits || (x.fits == y.fits && x.step_time_s <= y.step_time_s)));
  }
  for (const auto& c : r.ranked) {
    CHECK(c.layout.tp != 3);
    CHECK(c.layout.micro_batch != 3);
    CHECK(c.layout.dp == 64 / (c.layout.tp * c.layout.pp));
  }
  REQUIRE(r.fitting > 0);

  // The winner's scenario keys, simulated on their own, give the step time it was ranked by.
  const auto& best = r.ranked.front();
  nlohmann::json d = doc;
  d["parallel"] = best.parallel;
  d["training"] = best.training;
  const auto s = parse(d);
  CHECK(s.parallel.tp == best.layout.tp);
  CHECK(s.parallel.sequence_parallel == (best.layout.tp > 1));
  CHECK(parallel::simulate_step(s).step_time_s == best.metrics.step_time_s);
}

TEST_CASE("search: when the layout rules refuse every layout, it says so and where, not that none fits") {
  const auto doc = llama8b();
  search::Axes a;
  a.tp = {3};     // divides neither the 64 GPUs nor the 32 heads
  a.pp = {1, 5};  // 5: neither 64 GPUs nor 32 layers
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::none};
  a.zero = {1};
  const auto base = parse(doc);
  const auto r = search::run_search(base, doc, a, 2, kData);
  REQUIRE(r.enumerated == 2);
  CHECK(r.all_rejected());
  // Both refused for the GPU count first (tp·pp·cp = 3 and 15 divide no 64): the first one's words.
  CHECK(r.top_rejection_path == "gpus");
  CHECK(r.top_rejection_count == 2);
  CHECK(r.top_rejection == "gpus: 64 is not a multiple of tp*pp*cp = 3*1*1 = 3");
  CHECK(search::to_text(r, base, 10)
            .find("no layout passes the layout rules; 2 of the 2 are refused at gpus, the "
                  "first: gpus: 64 is not a multiple of tp*pp*cp = 3*1*1 = 3\n") != std::string::npos);
  CHECK(search::to_text(r, base, 10).find("fits in memory\n") == std::string::npos);
  const auto j = search::to_json(r, base, 10)["search"]["top_rejection"];
  CHECK(j["path"] == "gpus");
  CHECK(j["layouts"] == 2);

  // A path that takes the lead late still names its first refusal: tp 1 with mbs 3 or 5 is refused
  // at training.global_batch (512 sequences over dp 64), first with 2; gpus then passes it with tp 3
  // (its first refusal) and tp 6, 4 in all.
  a.tp = {1, 3, 6};
  a.pp = {1};
  a.micro_batch = {3, 5};
  const auto late = search::run_search(base, doc, a, 2, kData);
  REQUIRE(late.all_rejected());
  CHECK(late.top_rejection_path == "gpus");
  CHECK(late.top_rejection_count == 4);
  CHECK(late.top_rejection == "gpus: 64 is not a multiple of tp*pp*cp = 3*1*1 = 3");
}

TEST_CASE("search: the ranking is the same on one thread and on several") {
  const auto doc = llama8b();
  search::Axes a = search::default_axes(parse(doc));
  a.pp = {1, 2};
  a.cp = {1};
  a.virtual_stages = {1, 2};
  a.micro_batch = {1, 2};
  a.recompute = {config::Recompute::none, config::Recompute::selective};
  const auto base = parse(doc);
  const auto one = search::run_search(base, doc, a, 1, kData);
  const auto three = search::run_search(base, doc, a, 3, kData);
  CHECK(search::to_json(one, base, 0).dump() == search::to_json(three, base, 0).dump());
  CHECK(search::to_text(one, base, 10) == search::to_text(three, base, 10));
}

TEST_CASE("search: settings tied to one layout are adjusted to each candidate") {
  // The base file runs TE's TP overlap, the distributed optimizer's overlapped gathers in 2
  // instances, context parallelism by all-gather and uneven first/last stages; candidates with tp 1
  // drop the TP overlap (it needs sequence parallelism), cp 1 the CP type, zero 0 the overlapped
  // gather and the instances, and no candidate keeps the fixed stage sizes.
  nlohmann::json doc = llama8b();
  doc["parallel"] = {{"tp", 2},
                     {"pp", 4},
                     {"sequence_parallel", true},
                     {"tp_comm_overlap", true},
                     {"zero", 1},
                     {"overlap_grad_reduce", true},
                     {"overlap_param_gather", true},
                     {"first_stage_layers", 5},
                     {"last_stage_layers", 9},
                     {"cp", 2},
                     {"cp_comm_type", "allgather"},
                     {"distributed_optimizer_instances", 2}};
  doc["gpus"] = 16;
  search::Axes a;
  a.tp = {1, 2};
  a.pp = {1, 4};
  a.cp = {1, 2};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::none};
  a.zero = {0, 1};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  CHECK(r.rejected == 0);
  REQUIRE(r.ranked.size() == 16);
  for (const auto& c : r.ranked) {
    CHECK(c.parallel.value("tp_comm_overlap", false) == (c.layout.tp > 1));
    // The CP type only with cp > 1, the optimizer instances only with the distributed optimizer.
    CHECK(c.parallel.contains("cp_comm_type") == (c.layout.cp > 1));
    CHECK(c.parallel.contains("distributed_optimizer_instances") == (c.layout.zero == 1));
    CHECK(c.parallel.value("overlap_param_gather", false) == (c.layout.zero >= 1));
    CHECK_FALSE(c.parallel.contains("first_stage_layers"));
    CHECK(c.parallel.at("sequence_parallel") == (c.layout.tp > 1));
  }
}

TEST_CASE("search: modules kept above the run's precision go with the layouts whose precision has them") {
  // An NVFP4 scenario keeping its attention linears in FP8, the rest of its GEMMs NVFP4: the
  // BF16 layouts drop module_precision, the FP8 ones drop the FP8 entry (there it is the run's
  // precision), the NVFP4 ones keep it; all are valid scenarios.
  nlohmann::json doc = llama8b();
  doc["cluster"] = "dgx-b200";
  doc["gpus"] = 8;
  doc["training"]["precision"] = "nvfp4";
  doc["training"]["module_precision"] = {{"attention_linears", "fp8"}};
  search::Axes a;
  a.tp = {1, 2};
  a.pp = {1};
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::none};
  a.zero = {1};
  a.precision = {config::Precision::bf16, config::Precision::fp8, config::Precision::nvfp4};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  CHECK(r.rejected == 0);
  REQUIRE(r.ranked.size() == 6);
  for (const auto& c : r.ranked) {
    CHECK(c.training.contains("module_precision") == (c.layout.precision == config::Precision::nvfp4));
    if (c.layout.precision == config::Precision::nvfp4)
      CHECK(c.training["module_precision"] == nlohmann::json({{"attention_linears", "fp8"}}));
  }
}

TEST_CASE("search: zero 3 layouts also run hybrid-sharded (HSDP), each replica over whole nodes") {
  // torchtitan's Llama 3.1 8B on 32 GPUs (4 nodes of 8). A replica spanning s nodes holds 8s/(tp*cp)
  // data-parallel ranks; spans that leave one replica (4 nodes) are not HSDP and are skipped.
  nlohmann::json doc = {
      {"model", "llama3.1-8b"},
      {"cluster", "grand-teton-h100"},
      {"gpus", 32},
      {"parallel", {{"zero", 3}}},
      {"training", {{"framework", "torchtitan"}, {"attention", "flash2"}, {"global_batch", 64}, {"seq_len", 8192}}}};
  const auto base = parse(doc);
  search::Axes a = search::default_axes(base);
  CHECK(a.hsdp_nodes == std::vector<std::int64_t>{0, 1});
  a.tp = {1, 2};
  a.pp = {1};
  a.cp = {1, 2};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::selective};
  a.hsdp_nodes = {0, 1, 2, 4};
  const auto r = search::run_search(base, doc, a, 2, kData);
  CHECK(r.rejected == 0);
  REQUIRE(r.ranked.size() == 12);  // 4 layouts x (plain, 1 node, 2 nodes)
  for (const auto& c : r.ranked) {
    const search::Layout& l = c.layout;
    INFO("tp " << l.tp << " cp " << l.cp << " hsdp " << l.hsdp_nodes);
    if (l.hsdp_nodes == 0) {
      CHECK_FALSE(c.parallel.contains("distributed_optimizer_instances"));
      continue;
    }
    // dp / (ranks per replica): 8 GPUs per node.
    const std::int64_t shard = l.hsdp_nodes * 8 / (l.tp * l.cp);
    CHECK(l.replicas == l.dp / shard);
    CHECK(c.parallel.at("distributed_optimizer_instances") == l.replicas);
    // The keys run as the search ran them, and sharding over fewer ranks holds more memory.
    nlohmann::json d = doc;
    d["parallel"] = c.parallel;
    d["training"] = c.training;
    CHECK(parallel::simulate_step(parse(d)).step_time_s == c.metrics.step_time_s);
    const auto plain = std::find_if(r.ranked.begin(), r.ranked.end(), [&](const search::Candidate& o) {
      return o.layout.tp == l.tp && o.layout.cp == l.cp && o.layout.hsdp_nodes == 0;
    });
    REQUIRE(plain != r.ranked.end());
    CHECK(c.metrics.peak_gib > plain->metrics.peak_gib);
  }
  const std::string text = search::to_text(r, base, 0);
  CHECK(text.find("3h1") != std::string::npos);
  CHECK(text.find("3h2") != std::string::npos);
  CHECK(text.find("3h4") == std::string::npos);
}

TEST_CASE("search: pipelines that do not divide the layers place the embedding and the loss as layers") {
  // Llama 3.1 405B has 126 layers: pp 16 splits 126 + 2 = 128 slots into 8 per stage (Megatron-Core's
  // account-for-embedding/loss-in-pipeline-split); pp 7 divides 126 and splits evenly.
  nlohmann::json doc = util::read_json_file((kData / "configs/llama3.1-405b-h100-16384.json").string());
  doc["gpus"] = 1792;  // 7 x 16 x 16: both pipeline sizes fit the GPU count with tp 8
  doc["training"]["global_batch"] = 224;
  search::Axes a;
  a.tp = {8};
  a.pp = {7, 16};
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::full};
  a.zero = {1};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  CHECK(r.rejected == 0);
  REQUIRE(r.ranked.size() == 2);
  for (const auto& c : r.ranked) {
    const bool accounted = c.parallel.value("account_for_embedding_in_pipeline_split", false);
    CHECK(accounted == (c.layout.pp == 16));
    CHECK(c.parallel.value("account_for_loss_in_pipeline_split", false) == accounted);
    CHECK_FALSE(c.parallel.contains("first_stage_layers"));
  }
}

// Qwen3-30B-A3B (128 experts) on 16 H100: the ep axis, Megatron-Core's folding rule as the filter
// (etp 1 x ep must divide tp x dp = 16 / pp), and the winner's keys giving the same step on their own.
TEST_CASE("search: a mixture-of-experts model adds the ep axis, filtered by the expert folding rule") {
  const auto doc = util::read_json_file((kData / "configs/qwen3-30b-a3b-h100-16.json").string());
  const auto base = parse(doc);
  CHECK(search::default_axes(base).ep == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64});
  search::Axes a;
  a.tp = {1};
  a.pp = {1, 2};
  a.cp = {1};
  a.ep = {4, 8, 16, 32};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::none};
  a.zero = {1};
  const auto r = search::run_search(base, doc, a, 2, kData);
  CHECK(r.enumerated == 2 * 4);
  // pp 1: 16 ranks per stage take ep 4, 8, 16; pp 2: 8 ranks take ep 4, 8. ep 32 never.
  CHECK(r.rejected == 3);
  for (const auto& c : r.ranked) {
    CHECK(c.layout.ep * c.layout.pp <= 16);
    CHECK(c.parallel.at("ep") == c.layout.ep);
    CHECK(c.parallel.at("etp") == 1);
  }
  REQUIRE(r.fitting > 0);
  nlohmann::json d = doc;
  d["parallel"] = r.ranked.front().parallel;
  d["training"] = r.ranked.front().training;
  CHECK(parallel::simulate_step(parse(d)).step_time_s == r.ranked.front().metrics.step_time_s);
  // Inside a node the token all-to-alls stay on NVLink: ep 8 beats ep 16 across two nodes.
  const auto by_ep = [&](std::int64_t pp, std::int64_t ep) {
    return std::find_if(r.ranked.begin(), r.ranked.end(),
                        [&](const auto& c) { return c.layout.pp == pp && c.layout.ep == ep; })
        ->metrics.step_time_s;
  };
  CHECK(by_ep(1, 8) < by_ep(1, 16));
  // The all-to-all overlap as an axis: pp 2 has no virtual stages here, so only pp 1's four layouts
  // come once more with it (ep 32 rejected again), each that runs faster than without.
  CHECK(search::default_axes(base).moe_a2a_overlap == std::vector<bool>{false});
  a.moe_a2a_overlap = {false, true};
  const auto ro = search::run_search(base, doc, a, 2, kData);
  CHECK(ro.enumerated == 2 * 4 + 4);
  CHECK(ro.rejected == 3 + 1);
  for (const auto& c : ro.ranked) {
    CHECK(c.parallel.contains("moe_a2a_overlap") == c.layout.moe_a2a_overlap);
    if (!c.layout.moe_a2a_overlap) continue;
    CHECK(c.layout.pp == 1);
    const auto plain = std::find_if(ro.ranked.begin(), ro.ranked.end(), [&](const auto& o) {
      return !o.layout.moe_a2a_overlap && o.layout.pp == 1 && o.layout.ep == c.layout.ep;
    });
    REQUIRE(plain != ro.ranked.end());
    CHECK(c.metrics.step_time_s < plain->metrics.step_time_s);
  }
  CHECK(search::to_text(ro, base, 0).find("(ep n*: with the all-to-all overlap") != std::string::npos);
  // The token dispatcher as an axis: every layout has ep > 1 here, so all eight come once more with
  // flex (ep 32 rejected again); across the two nodes of ep 16 flex sends fewer copies over the NICs.
  CHECK(search::default_axes(base).moe_dispatcher ==
        std::vector<config::MoeDispatcher>{config::MoeDispatcher::alltoall});
  a.moe_a2a_overlap = {};
  a.moe_dispatcher = {config::MoeDispatcher::alltoall, config::MoeDispatcher::flex};
  const auto rf = search::run_search(base, doc, a, 2, kData);
  CHECK(rf.enumerated == 2 * 4 * 2);
  CHECK(rf.rejected == 3 * 2);
  for (const auto& c : rf.ranked)
    CHECK(c.parallel.value("moe_token_dispatcher", "alltoall") == config::dispatcher_name(c.layout.moe_dispatcher));
  const auto by = [&](std::int64_t ep, bool flex) {
    return std::find_if(rf.ranked.begin(), rf.ranked.end(),
                        [&](const auto& c) {
                          return c.layout.pp == 1 && c.layout.ep == ep &&
                                 (c.layout.moe_dispatcher == config::MoeDispatcher::flex) == flex;
                        })
        ->metrics.step_time_s;
  };
  CHECK(by(16, true) < by(16, false));
  CHECK(search::to_text(rf, base, 0).find("(ep nf: with the flex token dispatcher") != std::string::npos);
  // The allgather dispatcher too: every layout once more (it applies at any ep), its scenario keys
  // naming it; each moves the group's tokens, more than top 4's all-to-alls, so it runs slower, and
  // with the overlap on the axis it runs without it (Megatron-Core refuses the pair).
  a.moe_dispatcher = {config::MoeDispatcher::alltoall, config::MoeDispatcher::allgather};
  a.moe_a2a_overlap = {true};
  const auto rg = search::run_search(base, doc, a, 2, kData);
  CHECK(rg.enumerated == 2 * 4 * 2);
  for (const auto& c : rg.ranked) {
    CHECK(c.parallel.value("moe_token_dispatcher", "alltoall") == config::dispatcher_name(c.layout.moe_dispatcher));
    if (c.layout.moe_dispatcher == config::MoeDispatcher::allgather) CHECK(!c.parallel.contains("moe_a2a_overlap"));
  }
  const auto with = [&](config::MoeDispatcher dispatcher) {
    return std::find_if(rg.ranked.begin(), rg.ranked.end(),
                        [&](const auto& c) {
                          return c.layout.pp == 2 && c.layout.ep == 8 && c.layout.moe_dispatcher == dispatcher;
                        })
        ->metrics.step_time_s;
  };
  CHECK(with(config::MoeDispatcher::allgather) > with(config::MoeDispatcher::alltoall));
  CHECK(search::to_text(rg, base, 0).find("(ep ng: with the allgather token dispatcher") != std::string::npos);
  a.moe_a2a_overlap = {};
  a.moe_dispatcher = {config::MoeDispatcher::alltoall, config::MoeDispatcher::flex};
  // ep 1 has no dispatch: the flex value does not double it.
  a.ep = {1, 8};
  a.pp = {1};
  const auto r1 = search::run_search(base, doc, a, 2, kData);
  CHECK(r1.enumerated == 1 + 2);
}

// DeepSeek-V3 (61 layers, one MTP module) on 256 GB200: pipelines that split 61 + embedding + MTP +
// loss = 64 slots evenly get a generated pipeline layout (Megatron-Bridge's for 16 virtual stages:
// E + 3 t | 4 t x 14 | t m L, here with the embedding, the module and the loss each in a layer's
// place); the winner's keys give the same step on their own.
TEST_CASE("search: a model with multi-token prediction gets pipeline layouts with the module as a layer") {
  const auto doc = util::read_json_file((kData / "configs/deepseek-v3-gb200-256.json").string());
  const auto base = parse(doc);
  const search::Axes defaults = search::default_axes(base);
  // Divisors of 61 (prime) and of 64.
  CHECK(defaults.pp == std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 61, 64});
  search::Axes a;
  a.tp = {1};
  a.pp = {4};
  a.cp = {1};
  a.ep = {64};
  a.virtual_stages = {1, 4};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::none};
  a.zero = {1};
  const auto r = search::run_search(base, doc, a, 2, kData);
  CHECK(r.rejected == 0);
  REQUIRE(r.ranked.size() == 2);
  for (const auto& c : r.ranked) {
    const std::string layout = c.parallel.at("pipeline_layout");
    const auto stages = std::count(layout.begin(), layout.end(), '|') + 1;
    CHECK(stages == c.layout.pp * c.layout.virtual_stages);
    CHECK(std::count(layout.begin(), layout.end(), 't') == 61);
    CHECK(layout.substr(layout.size() - 2) == "mL");
    CHECK_FALSE(c.parallel.contains("account_for_embedding_in_pipeline_split"));
  }
  nlohmann::json d = doc;
  d["parallel"] = r.ranked.front().parallel;
  d["training"] = r.ranked.front().training;
  CHECK(parallel::simulate_step(parse(d)).step_time_s == r.ranked.front().metrics.step_time_s);
}

// Asked for the fastest few, the search simulates in order of each layout's compute floor and skips
// those whose floor outlasts the top-th fastest step that fits: the same top layouts as the
// exhaustive search, bit for bit, on any thread count; the skipped ones are counted apart.
TEST_CASE("search for the top few skips layouts that cannot be among them, with the exhaustive answer") {
  const auto doc = llama8b();
  const auto base = parse(doc);
  search::Axes a = search::default_axes(base);
  a.cp = {1};
  a.virtual_stages = {1, 2};
  const auto every = search::run_search(base, doc, a, 2, kData);
  CHECK(every.skipped == 0);
  for (const std::size_t top : {std::size_t{1}, std::size_t{3}, std::size_t{10}}) {
    INFO("top " << top);
    const auto few = search::run_search(base, doc, a, 2, kData, 0, top);
    CHECK(few.skipped > 0);
    CHECK(few.enumerated == every.enumerated);
    CHECK(few.rejected == every.rejected);
    CHECK(few.rejected + few.skipped + few.too_big + static_cast<std::int64_t>(few.ranked.size()) == few.enumerated);
    REQUIRE(few.fitting >= static_cast<std::int64_t>(top));
    for (std::size_t i = 0; i < top; ++i) {
      CHECK(few.ranked[i].layout.tp == every.ranked[i].layout.tp);
      CHECK(few.ranked[i].layout.pp == every.ranked[i].layout.pp);
      CHECK(few.ranked[i].layout.virtual_stages == every.ranked[i].layout.virtual_stages);
      CHECK(few.ranked[i].layout.micro_batch == every.ranked[i].layout.micro_batch);
      CHECK(few.ranked[i].layout.recompute == every.ranked[i].layout.recompute);
      CHECK(few.ranked[i].metrics.step_time_s == every.ranked[i].metrics.step_time_s);
    }
    // Every layout simulated has its floor under its step.
    for (const auto& c : few.ranked) CHECK(c.floor_s <= c.metrics.step_time_s);
    CHECK(search::to_text(few, base, top) ==
          search::to_text(search::run_search(base, doc, a, 3, kData, 0, top), base, top));
    CHECK(search::to_text(few, base, top)
              .find(fmt::format("not simulated (their kernels and the collectives they wait for outlast the top {})",
                                top)) != std::string::npos);
    CHECK(search::to_json(few, base, top)["search"]["not_simulated"] == few.skipped);
  }
}

TEST_CASE("search: when nothing fits, the memory savers the scenario lacks are tried on the closest layout") {
  // Llama 3.1 70B on one DGX H100 (8 GPUs), 64 sequences of 8192 tokens, tp 8 only: no layout fits
  // (the 70B model's 12 B/param of fp32 Adam states alone take 70.6e9 x 12 / 8 = 99 GiB per GPU
  // with zero 1). The closest layout is the one with the smallest peak; on it the search tries bf16
  // moments and the optimizer's CPU offload, each simulated as its own scenario.
  nlohmann::json doc = util::read_json_file((kData / "configs/llama3.1-70b-h100-1024.json").string());
  doc["gpus"] = 8;
  doc["parallel"]["pp"] = 1;
  doc["parallel"].erase("virtual_stages");
  doc["parallel"]["schedule"] = "1f1b";
  doc["training"]["global_batch"] = 16;
  search::Axes a;
  a.tp = {8};
  a.pp = {1};
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::selective, config::Recompute::full};
  a.zero = {1};
  const auto base = parse(doc);
  const auto r = search::run_search(base, doc, a, 2, kData);
  REQUIRE(r.fitting == 0);
  REQUIRE(r.closest.has_value());
  const auto& closest = r.ranked[*r.closest];
  for (const auto& c : r.ranked) CHECK(c.metrics.peak_gib >= closest.metrics.peak_gib);
  CHECK(closest.layout.recompute == config::Recompute::full);
  REQUIRE(r.levers.size() == 2);  // zero 1 already: bf16 moments, then the CPU offload
  for (const auto& l : r.levers) {
    nlohmann::json d = doc;
    d["parallel"] = closest.parallel;
    d["training"] = closest.training;
    d.merge_patch(l.keys);
    const auto s = parse(d);
    const auto step = parallel::simulate_step(s);
    CHECK(step.step_time_s == l.metrics.step_time_s);
    CHECK(s.training.optimizer.use_precision_aware_optimizer);
  }
  // bf16 moments and 16-bit remainders: 6 of 12 bytes of states per parameter, so the optimizer's
  // share of the peak halves; the CPU offload takes it all off the GPU.
  CHECK(r.levers[0].metrics.peak_gib < closest.metrics.peak_gib);
  CHECK(r.levers[1].metrics.peak_gib < r.levers[0].metrics.peak_gib);
  CHECK(r.levers[1].metrics.host_offload_gib > 0);
  const std::string text = search::to_text(r, base, 10);
  CHECK(text.find("no layout fits in memory\nclosest       tp 8 · pp 1 · cp 1 · dp 1 · vp 1 · mbs 1 · recompute "
                  "full · zero 1 peaks at ") != std::string::npos);
  CHECK(text.find("  with precision-aware Adam with bf16 moments: ") != std::string::npos);
  CHECK(search::to_json(r, base, 10)["search"]["closest"]["memory_savers"].size() == 2);
  // With the saver that fits set, the search finds layouts that fit and names no closest one.
  if (r.levers[1].metrics.fits) {
    doc.merge_patch(r.levers[1].keys);
    const auto r2 = search::run_search(parse(doc), doc, a, 2, kData);
    CHECK(r2.fitting > 0);
    CHECK_FALSE(r2.closest.has_value());
  }
  CHECK(r.levers[1].metrics.fits);
}

TEST_CASE("search for the top few does not simulate layouts whose held memory alone overflows the GPU") {
  // Llama 3.1 70B on two DGX H100 (16 GPUs): with tp 1 or 2 and a short pipeline its weights, gradient
  // buffer and optimizer shard alone exceed 80 GB. Those layouts are counted apart and never
  // simulated; the top layouts are the exhaustive search's, and every layout the floor sets aside
  // also fails to fit there, with a peak above its floor.
  nlohmann::json doc = util::read_json_file((kData / "configs/llama3.1-70b-h100-1024.json").string());
  doc["gpus"] = 16;
  doc["parallel"]["pp"] = 2;
  doc["training"]["global_batch"] = 64;
  const auto base = parse(doc);
  search::Axes a;
  a.tp = {1, 2, 8};
  a.pp = {1, 2, 4};
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::selective, config::Recompute::full};
  a.zero = {1};
  const auto every = search::run_search(base, doc, a, 2, kData);
  const auto few = search::run_search(base, doc, a, 2, kData, 0, 1);
  CHECK(every.too_big == 0);
  REQUIRE(few.too_big > 0);
  CHECK(few.rejected + few.skipped + few.too_big + static_cast<std::int64_t>(few.ranked.size()) == few.enumerated);
  REQUIRE(few.fitting >= 1);
  CHECK(few.ranked[0].layout.tp == every.ranked[0].layout.tp);
  CHECK(few.ranked[0].layout.pp == every.ranked[0].layout.pp);
  CHECK(few.ranked[0].layout.recompute == every.ranked[0].layout.recompute);
  CHECK(few.ranked[0].metrics.step_time_s == every.ranked[0].metrics.step_time_s);
  // The exhaustive search's layouts, with their memory floors: those above the GPU do not fit.
  int over = 0;
  for (const auto& c : every.ranked) {
    nlohmann::json d = doc;
    d["parallel"] = c.parallel;
    d["training"] = c.training;
    const auto sc = parse(d);
    const double held = static_cast<double>(parallel::memory_floor_bytes(sc, hardware::ComputeModel(sc.cluster.gpu)));
    CHECK(held <= c.metrics.peak_gib * 1024.0 * 1024.0 * 1024.0);
    if (held > sc.cluster.gpu.hbm_bytes) {
      ++over;
      CHECK_FALSE(c.metrics.fits);
    }
  }
  CHECK(over == few.too_big);
  CHECK(search::to_text(few, base, 1)
            .find("not simulated (their weights, gradients and optimizer states alone "
                  "overflow the GPU)") != std::string::npos);
  CHECK(search::to_json(few, base, 1)["search"]["too_big"] == few.too_big);
}

// The schedule as an axis: the layouts without virtual stages run each schedule given (pp 1 once,
// whatever it is: there is no pipeline to schedule), those with virtual stages interleaved; each
// candidate's keys say its schedule, and a DualPipeV winner's keys run alone give its step time.
TEST_CASE("search: --schedule tries 1f1b, zb-h1 and dualpipev on the pipelined layouts") {
  const auto doc = llama8b();
  search::Axes a;
  a.tp = {1};
  a.pp = {1, 4};
  a.cp = {1};
  a.virtual_stages = {1, 2};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::full};
  a.zero = {1};
  CHECK(search::default_axes(parse(doc)).schedule == std::vector<config::Schedule>{config::Schedule::one_f_one_b});
  a.schedule = {config::Schedule::one_f_one_b, config::Schedule::zb_h1, config::Schedule::dualpipev};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  // pp 1 once; pp 4 with vp 1 under each of the three schedules; pp 4 vp 2 interleaved once.
  CHECK(r.enumerated == 1 + 3 + 1);
  CHECK(r.rejected == 0);
  for (const auto& c : r.ranked) {
    const auto want = c.layout.virtual_stages > 1 ? "interleaved" : config::schedule_key(c.layout.schedule);
    CHECK(c.parallel.value("schedule", "1f1b") == want);
    if (c.layout.pp == 1) CHECK(c.layout.schedule == config::Schedule::one_f_one_b);
  }
  const auto dual = std::find_if(r.ranked.begin(), r.ranked.end(),
                                 [](const auto& c) { return c.layout.schedule == config::Schedule::dualpipev; });
  REQUIRE(dual != r.ranked.end());
  nlohmann::json d = doc;
  d["parallel"] = dual->parallel;
  d["training"] = dual->training;
  CHECK(parallel::simulate_step(parse(d)).step_time_s == dual->metrics.step_time_s);
  CHECK(search::to_text(r, parse(doc), 0).find("(vp 2V: DualPipeV") != std::string::npos);
}

TEST_CASE("search: a Megatron-DeepSpeed scenario gets DeepSpeed's rules and its pipeline split") {
  // BLOOM 176B (70 layers) on 384 A100 under DeepSpeed's engine: no sequence parallelism (the
  // scenario has none), the gradients reduced after the last micro-batch at pp > 1, the layers split
  // by DeepSpeed's partition_balanced over the transformer layers (pp 12: the first ten stages 6, the
  // last two 5 -- ties go to the later boundary), zero 0 with bf16 under the pipeline engine refused
  // (DeepSpeed runs BF16_Optimizer there), zero 1 keeping the scenario's all-reduce.
  const nlohmann::json doc = util::read_json_file((kData / "configs/bloom-176b-jean-zay-384.json").string());
  search::Axes a;
  a.tp = {4, 8};
  a.pp = {12};
  a.cp = {1};
  a.virtual_stages = {1, 2};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::full};
  a.zero = {0, 1};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  // tp 4 and 8 x vp 1 and 2 x zero 0 and 1: interleaving and zero 0 are DeepSpeed's refusals.
  CHECK(r.rejected == 6);
  REQUIRE(r.ranked.size() == 2);
  for (const auto& c : r.ranked) {
    CHECK(c.layout.zero == 1);
    CHECK(c.parallel["zero1_grad_reduce"] == "all_reduce");
    CHECK(c.parallel["sequence_parallel"] == false);
    CHECK(c.parallel["overlap_grad_reduce"] == false);
    CHECK(c.parallel["pipeline_layout"] == "Et*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*6|t*5|t*5L");
    CHECK(c.training["framework"] == "megatron-deepspeed");
  }
}

TEST_CASE("search: a pre-Megatron-Core scenario keeps its whole hidden states and scatters where it can") {
  // The Megatron-LM README's GPT-3 175B example (2021): no sequence parallelism, and the scatter and
  // gather of the pipeline messages (scatter_gather_tensors_in_pipeline). The search keeps both on
  // the layouts with tp > 1 and pp > 1, and drops the scatter on the others, which it would refuse.
  const nlohmann::json doc = util::read_json_file((kData / "configs/gpt3-175b-a100-1024.json").string());
  search::Axes a;
  a.tp = {1, 8};
  a.pp = {1, 16};
  a.cp = {1};
  a.virtual_stages = {1};
  a.micro_batch = {1};
  a.recompute = {config::Recompute::full};
  a.zero = {1};
  const auto r = search::run_search(parse(doc), doc, a, 2, kData);
  int scattered = 0;
  for (const auto& c : r.ranked) {
    INFO("tp " << c.layout.tp << " pp " << c.layout.pp);
    CHECK(c.parallel["sequence_parallel"] == false);
    const bool applies = c.layout.tp > 1 && c.layout.pp > 1;
    CHECK(c.parallel.contains("scatter_gather_tensors_in_pipeline") == applies);
    scattered += applies;
  }
  CHECK(scattered == 1);
}
