#include "report/chrome_trace.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "parallel/rank_grid.h"
#include "parallel/step_builder.h"
#include "util/error.h"

namespace trainsim::report {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A JSON string literal; bytes that are not UTF-8 (a file name, say) become U+FFFD.
std::string json_str(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Picoseconds as µs with three decimals (ns resolution), Kineto's convention.
void put_us(fmt::memory_buffer& b, std::int64_t ns) {
  fmt::format_to(std::back_inserter(b), "{}.{:03}", ns / 1000, ns % 1000);
}

std::uint32_t parse_rank(std::string_view text, const std::string& what, std::int64_t gpus) {
  std::uint64_t v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw util::InputError(
        what, "",
        fmt::format("\"{}\" is not a rank (expected stages, all, or ranks like 0,8,16-23)", std::string(text)));
  if (v >= static_cast<std::uint64_t>(gpus))
    throw util::InputError(what, "", fmt::format("rank {} is out of range (the scenario has {} GPUs)", v, gpus));
  return static_cast<std::uint32_t>(v);
}

}  // namespace

std::vector<std::uint32_t> parse_rank_selection(const std::string& spec, const config::Scenario& sc,
                                                const std::string& what) {
  if (spec == "stages" || spec.empty()) return stage_ranks(sc);
  std::vector<std::uint32_t> out;
  if (spec == "all") {
    for (std::uint32_t r = 0; r < static_cast<std::uint32_t>(sc.gpus); ++r) out.push_back(r);
    return out;
  }
  std::string_view rest = spec;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const std::size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      out.push_back(parse_rank(item, what, sc.gpus));
    } else {
      const std::uint32_t lo = parse_rank(item.substr(0, dash), what, sc.gpus);
      const std::uint32_t hi = parse_rank(item.substr(dash + 1), what, sc.gpus);
      if (hi < lo)
        throw util::InputError(what, "", fmt::format("range {}-{} is empty (write the lower rank first)", lo, hi));
      for (std::uint32_t r = lo; r <= hi; ++r) out.push_back(r);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string rank_title(const config::Scenario& sc, std::uint32_t rank) {
  const auto& p = sc.parallel;
  const parallel::Coords c = parallel::RankGrid(p.tp, p.cp, p.dp, p.pp).coords(rank);
  return fmt::format("rank {} · node {} gpu {} · tp {} cp {} dp {} pp {}", rank, sc.cluster.node_of(rank),
                     static_cast<std::int64_t>(rank) % sc.cluster.gpus_per_node, c.tp, c.cp, c.dp, c.pp);
}

void write_chrome_trace(std::ostream& out, const config::Scenario& sc, const parallel::StepResult& result,
                        const Timeline& tl, const std::vector<std::uint32_t>& ranks) {
  std::vector<std::string> names;
  names.reserve(tl.names.size());
  for (const auto& n : tl.names) names.push_back(json_str(n));

  fmt::memory_buffer b;
  auto it = std::back_inserter(b);
  auto flush = [&](bool force) {
    if (!force && b.size() < (1u << 20)) return;
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
    b.clear();
  };
  const auto& p = sc.parallel;
  fmt::format_to(it,
                 "{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"generator\":\"trainsim\",\"scenario\":{},"
                 "\"model\":{},\"cluster\":{},\"gpus\":{},\"layout\":\"tp {} pp {} cp {} dp {}\","
                 "\"step_time_s\":{:.9f},\"simulated\":\"{}\"}},\n\"traceEvents\":[\n",
                 json_str(sc.file), json_str(sc.model.name), json_str(sc.cluster.name), sc.gpus, p.tp, p.pp, p.cp, p.dp,
                 result.step_time_s, result.all_ranks ? "every rank" : "one rank per class of identical ranks");
  bool first = true;
  auto sep = [&] {
    if (!first) fmt::format_to(it, ",\n");
    first = false;
  };

  // Which recv of a rank consumes which send: the n-th message a rank sends on a slot is the n-th
  // its peer receives on the paired slot (slot ^ 1). Flows only between written ranks.
  std::map<std::tuple<std::uint32_t, std::uint8_t, std::uint32_t>, std::uint64_t> flow_in;  // (rank, slot, n)
  std::uint64_t next_flow = 1;
  const std::vector<std::uint32_t>& written = ranks;
  TRAINSIM_ASSERT(std::is_sorted(written.begin(), written.end()));
  auto is_written = [&](std::int64_t r) {
    return r >= 0 && std::binary_search(written.begin(), written.end(), static_cast<std::uint32_t>(r));
  };

  for (std::uint32_t rank : ranks) {
    const RankTimeline* rt = tl.find(rank);
    TRAINSIM_ASSERT(rt != nullptr && rt->spans_recorded);
    sep();
    std::string title = rank_title(sc, rank);
    if (rt->cluster_rank != rank) title += fmt::format(" (as simulated rank {})", rt->cluster_rank);
    fmt::format_to(it, "{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}", rank,
                   json_str(title));
    sep();
    fmt::format_to(
        it, "{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
        rank, rank);
    std::array<bool, engine::kMaxStreams> used{};
    for (const Span& s : rt->spans) used[s.stream] = true;
    for (int s = 0; s < engine::kMaxStreams; ++s) {
      if (!used[static_cast<std::size_t>(s)]) continue;
      sep();
      fmt::format_to(it, "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"{}\"}}}}",
                     rank, s, parallel::stream_name(s));
      sep();
      fmt::format_to(
          it, "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
          rank, s, s);
    }
    flush(false);
  }

  for (std::uint32_t rank : ranks) {
    const RankTimeline& rt = *tl.find(rank);
    std::array<std::uint32_t, engine::kMaxSlots> sent{};
    for (const Span& s : rt.spans) {
      const std::int64_t start_ns = s.start_ps / 1000, end_ns = s.end_ps / 1000;
      sep();
      fmt::format_to(it, "{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":", rank, s.stream);
      put_us(b, start_ns);
      fmt::format_to(it, ",\"dur\":");
      put_us(b, end_ns - start_ns);
      fmt::format_to(it, ",\"name\":{}", names[s.name]);
      const std::int64_t peer = rank + rt.peer_offset[s.slot];
      switch (s.kind) {
        case engine::TaskKind::compute:
          if (s.flops > 0)
            fmt::format_to(it, ",\"args\":{{\"flops\":{:.4g}}}}}", s.flops);
          else
            fmt::format_to(it, "}}");
          break;
        case engine::TaskKind::collective: {
          const GroupInfo& g = tl.groups[s.group];
          // The name says the operation; a category would add 2 MB to a 1,024-GPU trace.
          fmt::format_to(it, ",\"args\":{{\"bytes\":{},\"group\":\"{}\",\"ranks\":{}}}}}", s.bytes, g.kind, g.size);
          break;
        }
        case engine::TaskKind::send: {
          fmt::format_to(it, ",\"cat\":\"send\",\"args\":{{\"bytes\":{},\"peer\":{}}}}}", s.bytes, peer);
          const std::uint32_t n = sent[s.slot]++;
          if (rt.has_peer[s.slot] && is_written(peer)) {
            const std::uint64_t id = next_flow++;
            flow_in[{static_cast<std::uint32_t>(peer), static_cast<std::uint8_t>(s.slot ^ 1u), n}] = id;
            sep();
            fmt::format_to(it, "{{\"ph\":\"s\",\"pid\":{},\"tid\":{},\"ts\":", rank, s.stream);
            put_us(b, start_ns);
            fmt::format_to(it, ",\"id\":{},\"name\":\"{}\",\"cat\":\"p2p\"}}", id,
                           s.stream == parallel::kCpSend ? "cp" : "pp");
          }
          break;
        }
        case engine::TaskKind::recv:
          fmt::format_to(it, ",\"cat\":\"recv\",\"args\":{{\"peer\":{}}}}}", peer);
          break;
      }
      flush(false);
    }
  }
  // Flow ends, now that every send's id is known.
  for (std::uint32_t rank : ranks) {
    const RankTimeline& rt = *tl.find(rank);
    std::array<std::uint32_t, engine::kMaxSlots> received{};
    for (const Span& s : rt.spans) {
      if (s.kind != engine::TaskKind::recv) continue;
      const std::uint32_t n = received[s.slot]++;
      auto f = flow_in.find({rank, s.slot, n});
      if (f == flow_in.end()) continue;
      sep();
      fmt::format_to(it, "{{\"ph\":\"f\",\"bp\":\"e\",\"pid\":{},\"tid\":{},\"ts\":", rank, s.stream);
      put_us(b, s.start_ps / 1000);
      fmt::format_to(it, ",\"id\":{},\"name\":\"{}\",\"cat\":\"p2p\"}}", f->second,
                     s.stream == parallel::kCpRecv ? "cp" : "pp");
      flush(false);
    }
  }
  // Memory per category, GiB: one counter track each, a sample where it changes.
  for (std::uint32_t rank : ranks) {
    const RankTimeline& rt = *tl.find(rank);
    std::array<std::int64_t, engine::kMaxMemCategories> held = rt.initial_mem, shown{};
    shown.fill(-1);
    auto sample = [&](std::int64_t t_ps) {
      for (int c = 0; c < parallel::kMemCategoryCount; ++c) {
        const auto k = static_cast<std::size_t>(c);
        if (held[k] == shown[k]) continue;
        shown[k] = held[k];
        sep();
        fmt::format_to(it, "{{\"ph\":\"C\",\"pid\":{},\"name\":\"{} GiB\",\"ts\":", rank,
                       parallel::mem_category_name(c));
        put_us(b, t_ps / 1000);
        fmt::format_to(it, ",\"args\":{{\"GiB\":{:.4f}}}}}", static_cast<double>(held[k]) / kGiB);
      }
    };
    sample(0);
    for (std::size_t i = 0; i < rt.mem.size(); ++i) {
      held[rt.mem[i].category] += rt.mem[i].delta;
      if (i + 1 == rt.mem.size() || rt.mem[i + 1].t_ps != rt.mem[i].t_ps) sample(rt.mem[i].t_ps);
      flush(false);
    }
  }
  fmt::format_to(it, "\n]}}\n");
  flush(true);
}

}  // namespace trainsim::report
