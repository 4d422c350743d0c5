import { api, benchmarkInfo, cellNode, clearError, el, fmtDate, fmtTime, param, progressBar, requireSignIn, showError }
  from "./api.js";

const runId = param("id");
const PAGE = 50;
const REFRESH_MS = 2000;
let offset = 0;
let timer = null;
let run = null;
let metricsShown = null;

// The run's benchmark (GET /v1/benchmarks): its quantities key -> {title, description, format, ...},
// in the order they are shown (each stands on its own denominator), its failure titles and the
// episodes table's outcome columns.
let quantities = new Map();
let bench = null;

async function loadBenchmark(name) {
  bench = await benchmarkInfo(name);
  quantities = new Map(bench.quantities.map((q) => [q.key, q]));
  const head = document.getElementById("episodes-head");
  head.replaceChildren(...[...head.children].slice(0, 6), ...bench.outcome_columns.map((c) => el("th", { scope: "col" }, c.title)),
    el("th", { scope: "col" }, "Failures"));
  const option = (value, text) => el("option", { value }, text);
  document.querySelector("#filters [name=condition]").replaceChildren(option("", "all"),
    ...bench.conditions.map((c) => option(c, c)));
  document.querySelector("#filters [name=outcome]").replaceChildren(option("", "all"), option("ok", "passed everything"),
    ...bench.failure_types.map((f) => option(f, bench.failure_titles[f] ?? f.replaceAll("_", " "))),
    option("unfinished", "not finished"));
  for (const [k, v] of new URLSearchParams(location.search)) {
    const field = document.querySelector(`#filters [name="${k}"]`);
    if (field) field.value = v;
  }
}

function facts(r) {
  const item = (k, v) => el("div", {}, el("dt", {}, k), el("dd", {}, v));
  return el("dl", {},
    item("Run", r.id), item("Model", r.model), item("Suite", `${r.suite.name} v${r.suite.version}`), item("Clock", r.clock),
    item("Conditions", r.conditions.join(", ")), item("Status", el("span", { class: `status status-${r.status}` }, r.status)),
    item("Created", fmtDate(r.created_at)), item("Finished", fmtDate(r.finished_at)),
    item("Team", r.team), el("div", { class: "span2" }, el("dt", {}, "Progress"), el("dd", {}, progressBar(r.progress))));
}

function ciOf(q, boot) {
  if (boot && boot.lo !== null && boot.lo !== undefined) return [boot.lo, boot.hi];
  if (Array.isArray(q.ci)) return q.ci;
  if ("ci_low" in q && "ci_high" in q) return [q.ci_low, q.ci_high];
  return null;
}

// A value that is not a share (seconds, a score, a rate) is shown as a number, without a bar.
function plainValue(v, format) {
  return format === "seconds" ? `${v.toFixed(2)} s` : v.toFixed(2);
}

function valueCell(q, boot, format = "percent") {
  if (!q) return el("td", { class: "muted" }, "–");
  const v = q.value;
  const ci = ciOf(q, boot);
  const frac = q.den !== undefined ? `${q.num}/${q.den}` : "";
  if (v === null || v === undefined) {
    return el("td", { class: "muted" }, `n/a ${frac ? "(" + frac + ")" : ""}`, q.note ? el("div", { class: "small" }, q.note) : null);
  }
  if (format !== "percent") return el("td", { class: "metric" }, el("div", { class: "small" }, el("strong", {}, plainValue(v, format))));
  const bar = el("div", { class: "mbar", "aria-hidden": "true" },
    el("span", { class: "fill", style: { width: `${Math.max(0, Math.min(1, v)) * 100}%` } }),
    ci ? el("span", { class: "ci", style: { left: `${ci[0] * 100}%`, width: `${Math.max(0.5, (ci[1] - ci[0]) * 100)}%` } }) : null);
  const ciText = ci ? ` [${(ci[0] * 100).toFixed(1)}–${(ci[1] * 100).toFixed(1)}]` : "";
  return el("td", { class: "metric" }, bar,
    el("div", { class: "small" }, el("strong", {}, `${(v * 100).toFixed(1)}%`), ciText, frac ? ` · ${frac}` : ""));
}

function renderMetrics(m) {
  const box = document.getElementById("metrics");
  if (!m.scored) {
    box.replaceChildren(el("p", { class: "muted", id: "not-scored" }, "Not scored yet. Scores appear here once ",
      el("code", {}, `mpe score ${runId}`), " has run."));
    return;
  }
  const results = m.results || {};
  const metrics = results.metrics || {};
  const analyses = results.analyses || {};
  const boot = analyses.bootstrap || {};
  const parts = [];
  for (const [model, byCond] of Object.entries(metrics)) {
    const conds = Object.keys(byCond);
    const known = [...quantities.keys()];
    const names = [...new Set([...known, ...conds.flatMap((c) => Object.keys(byCond[c] || {}))])]
      .filter((n) => conds.some((c) => byCond[c]?.[n]));
    const table = el("table", { class: "grid metrics-table" },
      el("caption", {}, `${model}: each quantity on its own denominator; bars show the value, whiskers the 95% bootstrap CI`),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Quantity"), ...conds.map((c) => el("th", { scope: "col" }, c)))),
      el("tbody", {}, ...names.map((n) => el("tr", {},
        el("th", { scope: "row" }, quantities.get(n)?.title ?? n.replaceAll("_", " "),
          quantities.get(n)?.description ? el("div", { class: "muted small" }, quantities.get(n).description) : null),
        ...conds.map((c) => valueCell(byCond[c]?.[n], boot[model]?.[c]?.[n], quantities.get(n)?.format))))));
    parts.push(table);
    for (const note of m.notes?.[model] ?? []) parts.push(el("p", { class: "small" }, note));
  }
  const info = results.scoring;
  if (info) {
    parts.push(el("p", { class: "muted small" }, `Scoring ${info.scoring_id} of ${info.n_episodes} episodes`,
      info.config ? ` · ${Object.entries(info.config).filter(([, v]) => typeof v !== "object").map(([k, v]) => `${k} ${v}`).join(" · ")}` : ""));
  }
  const rest = Object.fromEntries(Object.entries(analyses).filter(([k]) => !["bootstrap"].includes(k)));
  if (Object.keys(rest).length) {
    parts.push(el("details", {}, el("summary", {}, "All analyses (JSON)"), el("pre", { class: "json" }, JSON.stringify(rest, null, 2))));
  }
  box.replaceChildren(...(parts.length ? parts : [el("p", { class: "muted" }, "Scored, but no metrics were reported.")]));
}

// The benchmark's cells of an episode's outcome (its outcome columns), then its failures.
function outcomeCells(ep) {
  const o = ep.outcome;
  const n = bench.outcome_columns.length;
  if (!o || !ep.cells) {
    const why = ep.status === "completed" ? "–" : ep.status;
    return [el("td", { class: "muted" }, why), ...Array.from({ length: n }, () => el("td", {}))];
  }
  const failures = o.failures.length
    ? o.failures.map((f) => el("span", { class: `chip fail` }, bench.failure_titles[f] ?? f.replaceAll("_", " ")))
    : [el("span", { class: "chip ok" }, "none")];
  const src = o.source === "live" ? el("span", { class: "muted small", title: "from the live detector, not scored" }, " (live)") : null;
  return [...ep.cells.map((c, i) => cellNode(c, i === 0 ? src : null)), el("td", {}, ...failures)];
}

function episodeRow(ep) {
  return el("tr", {},
    el("td", {}, ep.ordinal === null ? "–" : ep.ordinal + 1),
    // while the team's run of this suite is active the scenario is withheld: the episode goes by its id
    el("th", { scope: "row" }, el("a", { href: `episode.html?id=${encodeURIComponent(ep.id)}` }, ep.scenario_id ?? ep.id),
      ep.live ? el("span", { class: "badge live" }, "live") : null),
    el("td", {}, ep.condition),
    el("td", {}, el("span", { class: `status status-${ep.status}` }, ep.status)),
    el("td", {}, ep.attempts),
    el("td", {}, ep.duration_s === null ? "–" : fmtTime(ep.duration_s)),
    ...outcomeCells(ep));
}

async function loadEpisodes() {
  const q = new URLSearchParams({ limit: PAGE, offset });
  for (const [k, v] of new FormData(document.getElementById("filters"))) if (v) q.set(k, v);
  const page = await api(`/v1/runs/${encodeURIComponent(runId)}/episodes?${q}`);
  document.getElementById("episodes").replaceChildren(...page.items.map(episodeRow));
  document.getElementById("no-episodes").hidden = page.total > 0;
  document.getElementById("page-info").textContent = page.total ? `${offset + 1}–${offset + page.items.length} of ${page.total}` : "";
  document.getElementById("prev").disabled = offset === 0;
  document.getElementById("next").disabled = offset + page.items.length >= page.total;
}

async function load() {
  clearTimeout(timer);
  try {
    run = await api(`/v1/runs/${encodeURIComponent(runId)}`);
    document.title = `${run.label} · Duplex-MPE`;
    document.getElementById("title").textContent = run.label;
    document.getElementById("crumb").textContent = run.id;
    document.getElementById("facts").replaceChildren(facts(run));
    document.getElementById("cancel-run").hidden = !["queued", "running"].includes(run.status);
    if (!bench) await loadBenchmark(run.benchmark);
    if (metricsShown !== run.scored) {
      renderMetrics(await api(`/v1/runs/${encodeURIComponent(runId)}/metrics`));
      metricsShown = run.scored;
    }
    await loadEpisodes();
    clearError("error");
  } catch (err) {
    showError("error", err);
    if (err.status === 404) return;
  }
  if (!run || ["queued", "running"].includes(run.status) || !run.scored) timer = setTimeout(load, REFRESH_MS);
}

document.getElementById("filters").addEventListener("change", () => { offset = 0; load(); });
document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
document.getElementById("prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); load(); });
document.getElementById("next").addEventListener("click", () => { offset += PAGE; load(); });
document.getElementById("cancel-run").addEventListener("click", async () => {
  if (!confirm("Cancel this run? Queued episodes are dropped and running ones stop.")) return;
  try {
    await api(`/v1/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
  } catch (err) {
    showError("error", err);
  }
  load();
});

await requireSignIn();
if (!runId) showError("error", "No run given.");
else load();
