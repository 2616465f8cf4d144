#include "report/html.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "parallel/rank_grid.h"
#include "parallel/step_builder.h"
#include "report/chrome_trace.h"
#include "report/summary.h"
#include "report/svg.h"

namespace trainsim::report {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What a moment of a rank's timeline shows.
enum Kind : int { kForward, kBackward, kRecompute, kWeightGrad, kOtherCompute, kComm, kBubble, kKinds };
constexpr std::array<const char*, kKinds> kKindName = {"forward",          "backward",      "recompute",
                                                       "weight gradients", "other compute", "communication (exposed)",
                                                       "bubble (idle)"};
constexpr std::array<const char*, kKinds> kKindColor = {"#4e79a7", "#f28e2b", "#edc948", "#b07aa1",
                                                        "#9c9c9c", "#59a14f", "#f6d5d3"};
constexpr std::array<const char*, parallel::kMemCategoryCount> kMemColor = {"#4e79a7", "#76b7b2", "#b07aa1", "#f28e2b"};

Kind compute_kind(std::string_view name) {
  if (name.starts_with("forward")) return kForward;
  if (name.starts_with("backward")) return kBackward;
  if (name.starts_with("recompute")) return kRecompute;
  if (name.starts_with("weight_grad")) return kWeightGrad;
  return kOtherCompute;
}

// "12.5 ms", "3.20 s".
std::string time_label(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.0f} µs", s * 1e6);
}

std::string time_tick(double s, double span_s) {
  if (span_s >= 2) return tick_label(s) + " s";
  if (span_s >= 2e-3) return tick_label(std::round(s * 1e6) / 1e3) + " ms";
  return tick_label(std::round(s * 1e9) / 1e3) + " µs";
}

void legend(Svg& svg, double x, double y, const std::vector<std::pair<std::string, std::string>>& items) {
  for (const auto& [name, color] : items) {
    svg.rect(x, y - 9, 10, 10, color);
    svg.text(x + 14, y, name, "start", 10);
    x += 28 + 6 * static_cast<double>(name.size());
  }
}

// One row per stage over [t0, t1]: the main lane shows what the stage's compute stream did (or
// exposed communication, or a bubble) pixel by pixel; a thin lane below shows any communication.
std::string pipeline_chart(const config::Scenario& sc, const Timeline& tl, std::int64_t t0, std::int64_t t1,
                           std::string_view title) {
  const auto stages = stage_ranks(sc);
  const double left = 90, right = 16, top = 36, row_h = 22, lane_h = 5, gap = 8;
  const int px = 880;
  const double width = left + px + right;
  const double height = top + static_cast<double>(stages.size()) * (row_h + lane_h + gap) + 44;
  Svg svg(width, height, title);
  svg.text(left, 16, title, "start", 13);
  const double span = static_cast<double>(t1 - t0);
  const double px_ps = span / px;
  for (std::size_t row = 0; row < stages.size(); ++row) {
    const RankTimeline* rt = tl.find(stages[row]);
    if (rt == nullptr) continue;
    std::vector<std::array<double, kKinds>> cover(static_cast<std::size_t>(px));
    std::vector<double> comm(static_cast<std::size_t>(px), 0.0);
    for (const Span& s : rt->spans) {
      if (s.end_ps <= t0 || s.start_ps >= t1 || s.end_ps == s.start_ps) continue;
      if (s.stream == parallel::kHost) continue;  // the CPU issuing kernels: neither compute nor communication
      const bool is_compute = s.stream == parallel::kCompute;
      const Kind k = is_compute ? compute_kind(tl.names[s.name]) : kComm;
      const double a = (static_cast<double>(std::max(s.start_ps, t0) - t0)) / px_ps;
      const double b = (static_cast<double>(std::min(s.end_ps, t1) - t0)) / px_ps;
      for (int p = static_cast<int>(a); p < px && p < b; ++p) {
        const double overlap = std::min(b, p + 1.0) - std::max(a, static_cast<double>(p));
        if (overlap <= 0) continue;
        if (is_compute)
          cover[static_cast<std::size_t>(p)][static_cast<std::size_t>(k)] += overlap;
        else
          comm[static_cast<std::size_t>(p)] += overlap;
      }
    }
    std::vector<int> main(static_cast<std::size_t>(px)), lane(static_cast<std::size_t>(px));
    for (std::size_t p = 0; p < main.size(); ++p) {
      double compute = 0, best = 0;
      int kind = kBubble;
      for (int k = 0; k < kComm; ++k) {
        compute += cover[p][static_cast<std::size_t>(k)];
        if (cover[p][static_cast<std::size_t>(k)] > best) {
          best = cover[p][static_cast<std::size_t>(k)];
          kind = k;
        }
      }
      if (compute < 0.5) kind = comm[p] >= 0.5 ? kComm : kBubble;
      main[p] = kind;
      lane[p] = comm[p] > 0.2 ? kComm : kBubble;
    }
    const double y = top + static_cast<double>(row) * (row_h + lane_h + gap);
    svg.text(left - 8, y + 15, fmt::format("stage {}", rt->stage), "end", 11);
    svg.rect(left, y, px, row_h, kKindColor[kBubble], "bubble: nothing runs");
    auto runs = [&](const std::vector<int>& v, double ry, double rh, bool skip_bubble) {
      for (int p = 0; p < px;) {
        int q = p;
        while (q < px && v[static_cast<std::size_t>(q)] == v[static_cast<std::size_t>(p)]) ++q;
        const int k = v[static_cast<std::size_t>(p)];
        if (!(skip_bubble && k == kBubble))
          svg.rect(left + p, ry, q - p, rh, kKindColor[static_cast<std::size_t>(k)],
                   fmt::format("{}: {} to {}", kKindName[static_cast<std::size_t>(k)],
                               time_label((static_cast<double>(t0) + p * px_ps) * 1e-12),
                               time_label((static_cast<double>(t0) + q * px_ps) * 1e-12)));
        p = q;
      }
    };
    runs(main, y, row_h, true);
    runs(lane, y + row_h + 1, lane_h, true);
  }
  const double axis_y = top + static_cast<double>(stages.size()) * (row_h + lane_h + gap);
  svg.line(left, axis_y, left + px, axis_y, "#555");
  const double s0 = static_cast<double>(t0) * 1e-12, s1 = static_cast<double>(t1) * 1e-12;
  for (double t : ticks(s0, s1, 8)) {
    const double x = left + (t - s0) / (s1 - s0) * px;
    if (x < left - 0.5 || x > left + px + 0.5) continue;
    svg.line(x, axis_y, x, axis_y + 4, "#555");
    svg.text(x, axis_y + 15, time_tick(t, s1 - s0), "middle", 10);
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (int k = 0; k < kKinds; ++k)
    items.emplace_back(kKindName[static_cast<std::size_t>(k)], kKindColor[static_cast<std::size_t>(k)]);
  legend(svg, left, height - 8, items);
  return svg.str();
}

// Memory of one rank over the step, stacked by category; per pixel the moment of highest use.
std::string memory_chart(const config::Scenario& sc, const RankTimeline& rt, std::int64_t step_ps, double capacity,
                         std::string_view title) {
  const double left = 64, right = 16, top = 40, ph = 220;
  const int px = 880;
  const double width = left + px + right, height = top + ph + 56;
  constexpr int kCats = parallel::kMemCategoryCount;
  using State = std::array<std::int64_t, engine::kMaxMemCategories>;
  auto total = [](const State& s) {
    std::int64_t t = 0;
    for (int c = 0; c < kCats; ++c) t += s[static_cast<std::size_t>(c)];
    return t;
  };
  State held = rt.initial_mem;
  std::vector<State> best(static_cast<std::size_t>(px));
  std::int64_t peak = total(held);
  std::size_t i = 0;
  const double px_ps = static_cast<double>(std::max<std::int64_t>(step_ps, 1)) / px;
  for (int p = 0; p < px; ++p) {
    const auto end_ps = static_cast<std::int64_t>(std::llround((p + 1) * px_ps));
    State top_state = held;
    while (i < rt.mem.size() && (rt.mem[i].t_ps < end_ps || p == px - 1)) {
      held[rt.mem[i].category] += rt.mem[i].delta;
      if (total(held) > total(top_state)) top_state = held;
      ++i;
    }
    best[static_cast<std::size_t>(p)] = top_state;
    peak = std::max(peak, total(top_state));
  }
  const double y_max = std::max(capacity, static_cast<double>(peak) / kGiB);
  const auto yt = ticks(0, y_max * 1.05);
  const double y_top = yt.back();
  auto py = [&](double gib) { return top + ph - gib / y_top * ph; };
  Svg svg(width, height, title);
  svg.text(left, 16, title, "start", 13);
  svg.text(left, 32, "GiB", "start", 10, "#555");
  for (double t : yt) {
    svg.line(left, py(t), left + px, py(t), "#e3e3e3");
    svg.text(left - 6, py(t) + 4, tick_label(t), "end", 10);
  }
  // Stacked areas, bottom to top, as step shapes.
  std::vector<double> base(static_cast<std::size_t>(px), 0.0);
  for (int c = 0; c < kCats; ++c) {
    std::vector<std::pair<double, double>> upper, lower;
    for (int p = 0; p < px; ++p) {
      const double b = base[static_cast<std::size_t>(p)];
      const double t = b + static_cast<double>(best[static_cast<std::size_t>(p)][static_cast<std::size_t>(c)]) / kGiB;
      upper.emplace_back(left + p, py(t));
      upper.emplace_back(left + p + 1, py(t));
      lower.emplace_back(left + p, py(b));
      lower.emplace_back(left + p + 1, py(b));
      base[static_cast<std::size_t>(p)] = t;
    }
    // Drop interior points of flat stretches to keep the page small.
    auto simplify = [](std::vector<std::pair<double, double>> v) {
      std::vector<std::pair<double, double>> out;
      for (std::size_t k = 0; k < v.size(); ++k) {
        const bool interior =
            k > 0 && k + 1 < v.size() && v[k - 1].second == v[k].second && v[k + 1].second == v[k].second;
        if (!interior) out.push_back(v[k]);
      }
      return out;
    };
    upper = simplify(upper);
    lower = simplify(lower);
    std::reverse(lower.begin(), lower.end());
    upper.insert(upper.end(), lower.begin(), lower.end());
    svg.polygon(upper, kMemColor[static_cast<std::size_t>(c)], parallel::mem_category_name(c));
  }
  svg.line(left, py(capacity), left + px, py(capacity), "#c0392b", 1.5, "6 4");
  svg.text(left + px - 4, py(capacity) - 5, fmt::format("GPU memory {:.1f} GiB", capacity), "end", 10, "#c0392b");
  const double peak_gib = static_cast<double>(peak) / kGiB;
  svg.line(left, py(peak_gib), left + px, py(peak_gib), "#333", 1, "2 3");
  svg.text(left + 4, py(peak_gib) - 5, fmt::format("peak {:.2f} GiB", peak_gib), "start", 10, "#333");
  svg.line(left, top + ph, left + px, top + ph, "#555");
  const double s1 = static_cast<double>(step_ps) * 1e-12;
  for (double t : ticks(0, s1, 8)) {
    const double x = left + t / s1 * px;
    if (x > left + px + 0.5) continue;
    svg.line(x, top + ph, x, top + ph + 4, "#555");
    svg.text(x, top + ph + 15, time_tick(t, s1), "middle", 10);
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (int c = 0; c < kCats; ++c)
    items.emplace_back(parallel::mem_category_name(c), kMemColor[static_cast<std::size_t>(c)]);
  legend(svg, left, height - 8, items);
  (void)sc;
  return svg.str();
}

std::string breakdown_chart(const parallel::StepResult& r) {
  std::vector<std::pair<const char*, double>> parts = {
      {"compute", r.mean.compute_s},       {"exposed TP", r.mean.tp_exposed_s}, {"exposed CP", r.mean.cp_exposed_s},
      {"exposed EP", r.mean.ep_exposed_s}, {"exposed PP", r.mean.pp_exposed_s}, {"exposed DP", r.mean.dp_exposed_s},
      {"bubble", r.mean.bubble_s}};
  std::vector<const char*> colors = {"#4e79a7", "#59a14f", "#8cd17d", "#b07aa1", "#76b7b2", "#e15759", "#f6d5d3"};
  // Host copies appear only when activation offloading exposed some.
  if (r.mean.offload_exposed_s > 0) {
    parts.insert(parts.end() - 1, {"exposed offload", r.mean.offload_exposed_s});
    colors.insert(colors.end() - 1, "#edc948");
  }
  // The GPU waiting for the CPU (Megatron's host overhead), where it did.
  if (r.mean.host_bound_s > 0) {
    parts.insert(parts.end() - 1, {"host-bound", r.mean.host_bound_s});
    colors.insert(colors.end() - 1, "#9c755f");
  }
  const double left = 16, w = 940, top = 30, h = 34;
  Svg svg(left * 2 + w, 100, "Step time breakdown");
  svg.text(left, 16, fmt::format("Step time breakdown (mean over ranks): {}", time_label(r.step_time_s)), "start", 13);
  double x = left;
  std::vector<std::pair<std::string, std::string>> items;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const double share = r.step_time_s > 0 ? parts[i].second / r.step_time_s : 0;
    const double bw = share * w;
    items.emplace_back(fmt::format("{} {:.1f}%", parts[i].first, 100 * share), colors[i]);
    if (bw <= 0) continue;
    svg.rect(x, top, bw, h, colors[i],
             fmt::format("{}: {} ({:.1f}%)", parts[i].first, time_label(parts[i].second), 100 * share));
    if (bw > 60) svg.text(x + bw / 2, top + 21, fmt::format("{:.1f}%", 100 * share), "middle", 11, "#111");
    x += bw;
  }
  legend(svg, left, 90, items);
  return svg.str();
}

// "812 MB", "1.24 PB": decimal units, three significant digits.
std::string bytes_label(double bytes) {
  constexpr std::array<const char*, 6> kUnits = {"B", "kB", "MB", "GB", "TB", "PB"};
  std::size_t u = 0;
  while (bytes >= 1000 && u + 1 < kUnits.size()) {
    bytes /= 1000;
    ++u;
  }
  return fmt::format("{:.3g} {}", bytes, kUnits[u]);
}

std::string network_chart(const parallel::StepResult& r) {
  const auto& tiers = r.network->tiers;
  const double left = 130, w = 600, top = 30, row = 26;
  Svg svg(left + w + 220, top + row * static_cast<double>(tiers.size()) + 30, "Link utilisation per tier");
  svg.text(16, 16, "Link utilisation per tier (busy time / (links x step time))", "start", 13);
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    const auto& t = tiers[i];
    const double u = t.links > 0 ? t.busy_s / (static_cast<double>(t.links) * r.step_time_s) : 0;
    const double y = top + row * static_cast<double>(i);
    svg.text(left - 8, y + 15, t.name, "end", 11);
    svg.rect(left, y, w, row - 6, "#eeeeee");
    svg.rect(left, y, std::min(1.0, u) * w, row - 6, "#4e79a7",
             fmt::format("{}: {} links, {} carried, {:.1f}% busy", t.name, t.links, bytes_label(t.bytes), 100 * u));
    svg.text(left + w + 8, y + 15, fmt::format("{:.1f}% · {} links · {}", 100 * u, t.links, bytes_label(t.bytes)),
             "start", 11);
  }
  return svg.str();
}

std::string summary_table(const config::Scenario& sc, const parallel::StepResult& r) {
  const Metrics m = compute_metrics(sc, r);
  const auto& p = sc.parallel;
  std::vector<std::pair<std::string, std::string>> rows = {
      {"step time", time_label(m.step_time_s)},
      {"throughput", fmt::format("{:.0f} tokens/s · {:.1f} tokens/s/GPU", m.tokens_per_s, m.tokens_per_s_per_gpu)},
      {"model FLOPs", fmt::format("{:.1f} TFLOP/s/GPU · MFU {:.1f}%", m.model_tflops_per_gpu, 100 * m.mfu)},
      {"bubble", fmt::format("{:.1f}% of the step", 100 * m.bubble_fraction)},
      {"memory peak",
       fmt::format("{:.1f} GiB of {:.1f} GiB (rank {})", m.peak_gib, m.capacity_gib, r.cluster_rank[r.peak_rank])},
      {"fits", !m.fits   ? std::string("NO: DOES NOT FIT")
               : m.tight ? fmt::format("yes, but tight: {:.1f}% of the GPU's memory, above what {:g}% of the published "
                                       "runs fill ({:.1f}%)",
                                       100 * m.peak_gib / m.capacity_gib, 100 * sc.memory_fill->quantile,
                                       100 * sc.memory_fill->fill)
                         : std::string("yes")},
      {"layout", fmt::format("tp {} · pp {} · dp {} · cp {} · zero {}", p.tp, p.pp, p.dp, p.cp, p.zero)},
      {"batch", fmt::format("{} sequences of {} tokens · micro-batch {} · {} micro-batches per pipeline",
                            sc.training.global_batch, sc.training.seq_len, sc.training.micro_batch,
                            sc.training.num_micro_batches)},
  };
  if (const BusiestKernels k = busiest_kernels(r); k.total_s > 0)
    rows.insert(rows.begin() + 3,
                {"kernels", fmt::format("{} of stage {}: GEMM {:.1f}% · attention {:.1f}% · memory-bound {:.1f}% · "
                                        "optimizer {:.1f}%",
                                        time_label(k.total_s), k.stage, k.percent[parallel::kGemmKernels],
                                        k.percent[parallel::kAttentionKernels], k.percent[parallel::kMemoryKernels],
                                        k.percent[parallel::kOptimizerKernels])});
  if (const std::string opt = optimizer_line(sc); !opt.empty()) rows.emplace_back("optimizer", opt);
  if (const std::string acc = model_accuracy_line(sc); !acc.empty()) rows.insert(rows.begin() + 1, {"", acc});
  if (const std::string acc = accuracy_line(sc); !acc.empty()) rows.insert(rows.begin() + 1, {"accuracy", acc});
  if (sc.training.train_tokens > 0)
    rows.insert(rows.begin() + 3,
                {"to train", fmt::format("{} tokens: {:.1f} days · {} GPU-hours", si_count(sc.training.train_tokens),
                                         m.train.days, si_count(m.train.gpu_hours))});
  if (sc.gpu_hour_price_usd > 0)
    rows.insert(rows.begin() + (sc.training.train_tokens > 0 ? 4 : 3), {"cost", cost_line(sc, m.step_time_s)});
  std::string out = "<table class=\"summary\">\n";
  for (const auto& [k, v] : rows)
    out += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(v));
  return out + "</table>\n";
}

}  // namespace

ReportRanks report_ranks(const config::Scenario& sc) {
  ReportRanks out;
  out.spans = stage_ranks(sc);
  const auto& p = sc.parallel;
  parallel::RankGrid grid(p.tp, p.cp, p.dp, p.pp);
  for (std::int64_t s = 0; s < p.pp; ++s)
    for (std::int64_t c = 0; c < p.cp; ++c) out.mem.push_back(grid.rank({0, c, 0, s}));
  return out;
}

std::int64_t first_round_trip_ps(const Timeline& tl, const RankTimeline& stage0, std::int64_t step_ps) {
  bool in_backward = false;
  std::int64_t end = 0;
  std::vector<const Span*> compute;
  for (const Span& s : stage0.spans)
    if (s.stream == parallel::kCompute) compute.push_back(&s);
  std::stable_sort(compute.begin(), compute.end(),
                   [](const Span* a, const Span* b) { return a->start_ps < b->start_ps; });
  for (const Span* s : compute) {
    const Kind k = compute_kind(tl.names[s->name]);
    if (k == kBackward || k == kRecompute) {
      in_backward = true;
      end = s->end_ps;
    } else if (in_backward && k == kForward) {
      break;
    }
  }
  return in_backward ? end : step_ps;
}

std::pair<std::int64_t, std::int64_t> steady_period_ps(const Timeline& tl, const RankTimeline& stage0) {
  std::vector<std::int64_t> ends;
  for (const Span& s : stage0.spans)
    if (s.kind == engine::TaskKind::send && s.stream == parallel::kPpSend && tl.names[s.name] == "send_forward")
      ends.push_back(s.end_ps);
  std::sort(ends.begin(), ends.end());
  if (ends.size() < 2) return {0, 0};
  const std::size_t k = ends.size() / 2;
  return {ends[k - 1], ends[k]};
}

std::string html_page(std::string_view title, std::string_view body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n"
      "body {{ font-family: sans-serif; margin: 24px auto; max-width: 1000px; color: #222; }}\n"
      "h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }}\n"
      "table {{ border-collapse: collapse; font-size: 14px; }}\n"
      "th, td {{ padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }}\n"
      "table.summary th {{ color: #555; font-weight: normal; }}\n"
      "td.num {{ text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }}\n"
      "pre {{ background: #f6f6f6; padding: 10px; font-size: 12px; overflow-x: auto; }}\n"
      "svg {{ display: block; margin: 8px 0; }} p.note {{ color: #555; font-size: 13px; }}\n"
      "div.grid {{ display: flex; flex-wrap: wrap; gap: 4px 24px; }}\n"
      "</style>\n</head>\n<body>\n{}</body>\n</html>\n",
      html_escape(title), body);
}

std::string run_report_html(const config::Scenario& sc, const parallel::StepResult& r, const Timeline& tl) {
  const auto step_ps = static_cast<std::int64_t>(std::llround(r.step_time_s * 1e12));
  const std::string title = fmt::format("{} on {} x {}", sc.model.name, sc.gpus, sc.cluster.gpu.name);
  std::string body;
  body += fmt::format("<h1>trainsim: {}</h1>\n", html_escape(title));
  body += fmt::format("<p class=\"note\">Scenario {} · cluster {} · {} simulated ranks ({})</p>\n",
                      html_escape(sc.file), html_escape(sc.cluster.name), r.ranks.size(),
                      r.all_ranks ? "every rank" : "one per class of identical ranks");
  body += "<h2>Summary</h2>\n" + summary_table(sc, r);
  body += "<h2>Where the step time goes</h2>\n" + breakdown_chart(r);

  const auto stages = stage_ranks(sc);
  if (const RankTimeline* s0 = tl.find(stages.front())) {
    const std::int64_t trip = first_round_trip_ps(tl, *s0, step_ps);
    body += "<h2>Pipeline timeline</h2>\n";
    body += fmt::format(
        "<p class=\"note\">One rank per stage (tp = cp = dp = 0). First: micro-batch 0's round trip, from the "
        "start of the step to the end of stage 0's first backward ({}). Then one micro-batch period in the middle "
        "of the step (between two forward sends of stage 0), and the whole step. Each pixel shows what ran most "
        "of its time; the thin lane below each stage is any communication.</p>\n",
        time_label(static_cast<double>(trip) * 1e-12));
    body += pipeline_chart(sc, tl, 0, std::max<std::int64_t>(trip, 1), "First micro-batch round trip, per stage");
    if (const auto [from, to] = steady_period_ps(tl, *s0); to > from)
      body += pipeline_chart(sc, tl, from, to,
                             fmt::format("One micro-batch period in the steady state ({}), per stage",
                                         time_label(static_cast<double>(to - from) * 1e-12)));
    body += pipeline_chart(sc, tl, 0, std::max<std::int64_t>(step_ps, 1), "Whole step, per stage");
  }

  const std::uint32_t peak = r.cluster_rank[r.peak_rank];
  const RankTimeline* mem = tl.find(peak);
  std::uint32_t shown = peak;
  if (mem == nullptr) {
    shown = representative(sc, peak);
    mem = tl.find(shown);
  }
  if (mem != nullptr) {
    body += "<h2>Memory of the peak rank</h2>\n";
    std::string whose = fmt::format("rank {}", peak);
    if (shown != peak) whose += fmt::format(" (the timeline of rank {}, which runs the same program)", shown);
    body += fmt::format("<p class=\"note\">{}: {}</p>\n", html_escape(whose), html_escape(rank_title(sc, peak)));
    body += memory_chart(sc, *mem, step_ps, sc.cluster.gpu.hbm_bytes / kGiB,
                         fmt::format("Memory of rank {} over the step, by category", peak));
  }
  if (r.network) {
    body += "<h2>Network</h2>\n";
    body += fmt::format("<p class=\"note\">Flow network: {} flows.</p>\n", r.network->flows);
    body += network_chart(r);
  }
  body += "<h2>Text summary</h2>\n<pre>" + html_escape(to_text(sc, r)) + "</pre>\n";
  body += "<p class=\"note\">Generated by trainsim from the scenario above; the same input gives the same page.</p>\n";
  return html_page("trainsim: " + title, body);
}

}  // namespace trainsim::report
