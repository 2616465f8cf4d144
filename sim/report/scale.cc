#include "report/scale.h"

#include <fmt/format.h>

#include "report/html.h"
#include "report/summary.h"
#include "report/svg.h"

namespace trainsim::report {

const char* to_string(Keep keep) {
  return keep == Keep::global_batch ? "global-batch" : "per-gpu-batch";
}

std::vector<ScaleRow> scale_rows(const std::vector<ScalePoint>& points) {
  std::vector<ScaleRow> rows;
  for (const auto& p : points) {
    const Metrics m = compute_metrics(p.scenario, p.result);
    const auto& t = p.result.mean;
    ScaleRow r;
    r.gpus = p.scenario.gpus;
    r.dp = p.scenario.parallel.dp;
    r.global_batch = p.scenario.training.global_batch;
    r.micro_batches = p.scenario.training.num_micro_batches;
    r.step_time_s = m.step_time_s;
    r.tokens_per_s = m.tokens_per_s;
    r.tokens_per_s_per_gpu = m.tokens_per_s_per_gpu;
    r.model_tflops_per_gpu = m.model_tflops_per_gpu;
    r.mfu = m.mfu;
    r.scaling_efficiency = rows.empty() ? 1.0 : m.tokens_per_s_per_gpu / rows.front().tokens_per_s_per_gpu;
    r.bubble_fraction = m.bubble_fraction;
    r.exposed_comm_fraction = t.exposed_s() / p.result.step_time_s;
    r.peak_gib = m.peak_gib;
    r.fits = m.fits;
    r.tight = m.tight;
    r.train = m.train;
    rows.push_back(r);
  }
  return rows;
}

nlohmann::json scale_json(const std::vector<ScalePoint>& points, Keep keep) {
  const auto rows = scale_rows(points);
  nlohmann::json runs = nlohmann::json::array();
  for (std::size_t i = 0; i < points.size(); ++i) {
    nlohmann::json j = to_json(points[i].scenario, points[i].result);
    j["scaling_efficiency"] = rows[i].scaling_efficiency;
    j["exposed_comm_fraction"] = rows[i].exposed_comm_fraction;
    runs.push_back(std::move(j));
  }
  nlohmann::json sizes = nlohmann::json::array();
  for (const auto& r : rows) sizes.push_back(r.gpus);
  return {{"scale",
           {{"scenario", points.empty() ? std::string() : points.front().scenario.file},
            {"keep", to_string(keep)},
            {"gpus", sizes}}},
          {"runs", runs}};
}

namespace {

std::string title_of(const std::vector<ScalePoint>& points) {
  if (points.empty()) return "scaling study";
  const auto& sc = points.front().scenario;
  const auto& p = sc.parallel;
  return fmt::format("{} on {} ({}), tp {} · pp {} · cp {}{}", sc.model.name, sc.cluster.gpu.name, sc.cluster.name,
                     p.tp, p.pp, p.cp, sc.model.moe() ? fmt::format(" · ep {} · etp {}", p.ep, p.etp) : std::string());
}

// training.train_tokens: the study adds the days and GPU-hours each size takes to train them.
bool train_columns(const std::vector<ScalePoint>& points) {
  return !points.empty() && points.front().scenario.training.train_tokens > 0;
}

// `--price`: the study adds what a million tokens (and the budget) cost at each size.
bool cost_columns(const std::vector<ScalePoint>& points) {
  return !points.empty() && points.front().scenario.gpu_hour_price_usd > 0;
}

}  // namespace

std::string scale_markdown(const std::vector<ScalePoint>& points, Keep keep) {
  std::string out = fmt::format("### trainsim scaling study: {}\n\n", title_of(points));
  out += fmt::format("Scenario `{}`, keeping the {} as GPUs grow (DP grows; TP, PP, CP fixed).\n\n",
                     points.empty() ? "" : points.front().scenario.file,
                     keep == Keep::global_batch ? "global batch" : "batch per GPU");
  out +=
      "| GPUs | DP | global batch | micro-batches | step time (s) | tokens/s | tokens/s/GPU | TFLOP/s/GPU | MFU | "
      "scaling eff. | bubble | exposed comm | peak GiB | fits |";
  const bool train = train_columns(points), priced = cost_columns(points);
  if (train)
    out += fmt::format(" days for {} tokens | GPU-hours |", si_count(points.front().scenario.training.train_tokens));
  if (priced) out += train ? " $ per million tokens | $ to train |" : " $ per million tokens |";
  out += "\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|";
  for (int i = 0; i < (train ? 2 : 0) + (priced ? (train ? 2 : 1) : 0); ++i) out += "---:|";
  out += "\n";
  const auto rows = scale_rows(points);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ScaleRow& r = rows[i];
    out += fmt::format(
        "| {} | {} | {} | {} | {:.3f} | {:.0f} | {:.1f} | {:.1f} | {:.1f}% | {:.1f}% | {:.1f}% | {:.1f}% | {:.1f} | "
        "{} |",
        r.gpus, r.dp, r.global_batch, r.micro_batches, r.step_time_s, r.tokens_per_s, r.tokens_per_s_per_gpu,
        r.model_tflops_per_gpu, 100 * r.mfu, 100 * r.scaling_efficiency, 100 * r.bubble_fraction,
        100 * r.exposed_comm_fraction, r.peak_gib,
        !r.fits   ? "**no**"
        : r.tight ? "tight"
                  : "yes");
    if (train) out += fmt::format(" {:.1f} | {:.0f} |", r.train.days, r.train.gpu_hours);
    if (priced) {
      const Cost c = cost(points[i].scenario, r.step_time_s);
      out += fmt::format(" {:.3g} |", c.usd_per_million_tokens);
      if (train) out += fmt::format(" {:.0f} |", c.usd_to_train);
    }
    out += "\n";
  }
  return out;
}

std::string scale_text(const std::vector<ScalePoint>& points, Keep keep) {
  std::string out = fmt::format("{}\nkeeping the {}\n", title_of(points),
                                keep == Keep::global_batch ? "global batch" : "batch per GPU");
  out += fmt::format("{:>6} {:>5} {:>6} {:>6} {:>10} {:>12} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7} {:>7} {:>5}\n", "GPUs",
                     "DP", "batch", "micro", "step (s)", "tokens/s", "tok/s/G", "TFLOP/s", "MFU", "eff.", "bubble",
                     "comm", "GiB", "fits");
  const bool train = train_columns(points), priced = cost_columns(points);
  if (train || priced) {
    out.pop_back();
    if (train) out += fmt::format(" {:>8} {:>12}", "days", "GPU-hours");
    if (priced) out += fmt::format(" {:>8}{}", "$/Mtok", train ? fmt::format(" {:>10}", "$ to train") : "");
    out += '\n';
  }
  const auto rows = scale_rows(points);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ScaleRow& r = rows[i];
    out += fmt::format(
        "{:>6} {:>5} {:>6} {:>6} {:>10.3f} {:>12.0f} {:>8.1f} {:>8.1f} {:>5.1f}% {:>6.1f}% {:>6.1f}% {:>6.1f}% "
        "{:>7.1f} {:>5}",
        r.gpus, r.dp, r.global_batch, r.micro_batches, r.step_time_s, r.tokens_per_s, r.tokens_per_s_per_gpu,
        r.model_tflops_per_gpu, 100 * r.mfu, 100 * r.scaling_efficiency, 100 * r.bubble_fraction,
        100 * r.exposed_comm_fraction, r.peak_gib,
        !r.fits   ? "NO"
        : r.tight ? "tight"
                  : "yes");
    if (train) out += fmt::format(" {:>8.1f} {:>12.0f}", r.train.days, r.train.gpu_hours);
    if (priced) {
      const Cost c = cost(points[i].scenario, r.step_time_s);
      out += fmt::format(" {:>8}{}", usd(c.usd_per_million_tokens),
                         train ? fmt::format(" {:>10}", usd(c.usd_to_train)) : "");
    }
    out += "\n";
  }
  if (train)
    out += fmt::format("days and GPU-hours to train {} tokens, every step as the simulated one\n",
                       si_count(points.front().scenario.training.train_tokens));
  if (priced)
    out += fmt::format("US dollars per million tokens{} at {} per GPU-hour\n", train ? " and to train" : "",
                       usd(points.front().scenario.gpu_hour_price_usd));
  return out;
}

std::string scale_report_html(const std::vector<ScalePoint>& points, Keep keep) {
  const auto rows = scale_rows(points);
  auto series = [&](const std::string& name, const std::string& color, auto get) {
    Series s{name, color, {}};
    for (const auto& r : rows) s.points.emplace_back(static_cast<double>(r.gpus), get(r));
    return s;
  };
  std::string body = fmt::format("<h1>trainsim scaling study: {}</h1>\n", html_escape(title_of(points)));
  body += fmt::format(
      "<p class=\"note\">Scenario {}; the {} stays fixed as GPUs grow (DP grows; TP, PP, CP fixed). "
      "Scaling efficiency: tokens/s/GPU relative to the smallest size.</p>\n",
      html_escape(points.empty() ? "" : points.front().scenario.file),
      keep == Keep::global_batch ? "global batch" : "batch per GPU");
  body += "<div class=\"grid\">\n";
  PlotOptions o;
  o.log2_x = true;
  o.x_label = "GPUs";
  o.title = "Throughput";
  o.y_label = "tokens/s";
  Series ideal{"linear from the smallest size", "#bbbbbb", {}};
  for (const auto& r : rows)
    ideal.points.emplace_back(static_cast<double>(r.gpus), rows.front().tokens_per_s * static_cast<double>(r.gpus) /
                                                               static_cast<double>(rows.front().gpus));
  body += line_plot({series("predicted", "#4e79a7", [](const ScaleRow& r) { return r.tokens_per_s; }), ideal}, o);
  o.title = "Tokens/s per GPU";
  o.y_label = "tokens/s/GPU";
  body += line_plot({series("tokens/s/GPU", "#4e79a7", [](const ScaleRow& r) { return r.tokens_per_s_per_gpu; })}, o);
  o.title = "MFU";
  o.y_label = "model FLOPs utilisation";
  o.percent_y = true;
  body += line_plot({series("MFU", "#f28e2b", [](const ScaleRow& r) { return r.mfu; })}, o);
  o.title = "Scaling efficiency";
  o.y_label = "tokens/s/GPU vs the smallest size";
  body += line_plot({series("efficiency", "#59a14f", [](const ScaleRow& r) { return r.scaling_efficiency; })}, o);
  o.title = "Bubble and exposed communication";
  o.y_label = "share of the step";
  body +=
      line_plot({series("bubble", "#e15759", [](const ScaleRow& r) { return r.bubble_fraction; }),
                 series("exposed communication", "#76b7b2", [](const ScaleRow& r) { return r.exposed_comm_fraction; })},
                o);
  o.title = "Memory peak";
  o.y_label = "GiB on the peak rank";
  o.percent_y = false;
  body += line_plot({series("peak GiB", "#b07aa1", [](const ScaleRow& r) { return r.peak_gib; })}, o);
  body +=
      "</div>\n<h2>Results</h2>\n<table>\n<tr><th>GPUs</th><th>DP</th><th>global batch</th><th>micro-batches</th>"
      "<th>step time</th><th>tokens/s</th><th>tokens/s/GPU</th><th>MFU</th><th>scaling eff.</th><th>bubble</th>"
      "<th>exposed comm</th><th>peak GiB</th><th>fits</th>";
  const bool priced = cost_columns(points);
  body += priced ? "<th>$ per million tokens</th></tr>\n" : "</tr>\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ScaleRow& r = rows[i];
    body += fmt::format(
        "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{:.3f} s</td><td class=\"num\">{:.0f}</td><td class=\"num\">{:.1f}</td>"
        "<td class=\"num\">{:.1f}%</td><td class=\"num\">{:.1f}%</td><td class=\"num\">{:.1f}%</td>"
        "<td class=\"num\">{:.1f}%</td><td class=\"num\">{:.1f}</td><td>{}</td>",
        r.gpus, r.dp, r.global_batch, r.micro_batches, r.step_time_s, r.tokens_per_s, r.tokens_per_s_per_gpu,
        100 * r.mfu, 100 * r.scaling_efficiency, 100 * r.bubble_fraction, 100 * r.exposed_comm_fraction, r.peak_gib,
        !r.fits   ? "NO"
        : r.tight ? "tight"
                  : "yes");
    if (priced)
      body += fmt::format("<td class=\"num\">{}</td>",
                          html_escape(usd(cost(points[i].scenario, r.step_time_s).usd_per_million_tokens)));
    body += "</tr>\n";
  }
  body +=
      "</table>\n<p class=\"note\">Generated by trainsim from the scenario above; the same input gives the same "
      "page.</p>\n";
  return html_page("trainsim scaling study: " + title_of(points), body);
}

}  // namespace trainsim::report
