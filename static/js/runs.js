import { api, clearError, el, fmtDate, fmtDuration, progressBar, requireSignIn, showError } from "./api.js";

const PAGE = 25;
const REFRESH_MS = 2000;
let offset = 0;
let timer = null;

const tbody = document.getElementById("runs");
const statusFilter = document.getElementById("status-filter");

function clockCell(run) {
  const started = new Date(run.created_at).getTime();
  const end = run.finished_at ? new Date(run.finished_at).getTime() : Date.now();
  return el("td", {}, el("span", { class: `chip clock-${run.clock}` }, run.clock),
    el("div", { class: "muted small", title: "wall-clock time since the run was created" }, fmtDuration(end - started)));
}

function row(run) {
  // The run's label (model · clock · suite · short id) tells two runs of one model apart.
  const link = el("a", { href: `run.html?id=${encodeURIComponent(run.id)}`, class: "run-label" }, run.label);
  return el(
    "tr",
    {},
    el("th", { scope: "row" }, link, run.live_episodes.length ? el("span", { class: "badge live" }, "live") : null,
      el("div", { class: "muted small run-id" }, run.id)),
    el("td", {}, run.model),
    el("td", {}, `${run.suite.name} v${run.suite.version}`),
    clockCell(run),
    el("td", {}, run.conditions.join(", ")),
    el("td", {}, el("span", { class: `status status-${run.status}` }, run.status)),
    el("td", {}, progressBar(run.progress)),
    el("td", {}, fmtDate(run.created_at)),
  );
}

async function load() {
  clearTimeout(timer);
  const q = new URLSearchParams({ limit: PAGE, offset });
  if (statusFilter.value) q.set("status", statusFilter.value);
  try {
    const page = await api(`/v1/runs?${q}`);
    tbody.replaceChildren(...page.items.map(row));
    document.getElementById("empty").hidden = page.total > 0;
    document.getElementById("page-info").textContent = page.total
      ? `${offset + 1}–${offset + page.items.length} of ${page.total}` : "";
    document.getElementById("prev").disabled = offset === 0;
    document.getElementById("next").disabled = offset + page.items.length >= page.total;
    clearError("error");
  } catch (err) {
    showError("error", err);
  }
  timer = setTimeout(load, REFRESH_MS);
}

document.getElementById("prev").addEventListener("click", () => { offset = Math.max(0, offset - PAGE); load(); });
document.getElementById("next").addEventListener("click", () => { offset += PAGE; load(); });
statusFilter.addEventListener("change", () => { offset = 0; load(); });
document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });

// --- new run ------------------------------------------------------------------------------

const dialog = document.getElementById("run-dialog");
const form = document.getElementById("run-form");
const suiteSelect = document.getElementById("f-suite");

async function fillSuites() {
  const [registered, available] = await Promise.all([api("/v1/suites?limit=200"), api("/v1/suites/available")]);
  const options = [];
  for (const s of registered.items) {
    options.push(el("option", { value: `id:${s.id}`, "data-conditions": s.run_conditions.join(",") },
      `${s.name} v${s.version} · ${s.benchmark} (${s.n_scenarios})`));
  }
  for (const d of available) {
    options.push(el("option", { value: `path:${d.path}`, "data-conditions": d.run_conditions.join(",") },
      `${d.path} — ${d.name} v${d.version} · ${d.benchmark} (${d.n_scenarios})`));
  }
  if (!options.length) options.push(el("option", { value: "", disabled: true }, "no suites: register one with mpe run create"));
  suiteSelect.replaceChildren(...options);
  fillConditions();
}

// The condition boxes follow the chosen suite's benchmark (its run conditions, as the server lists them).
function fillConditions() {
  const chosen = suiteSelect.selectedOptions[0];
  const names = (chosen?.dataset.conditions || "").split(",").filter(Boolean);
  const boxes = names.map((c) => el("label", { class: "inline" },
    el("input", { type: "checkbox", name: "conditions", value: c, checked: true }), ` ${c}`));
  document.getElementById("f-conditions").replaceChildren(el("legend", {}, "Conditions"), ...boxes);
}
suiteSelect.addEventListener("change", fillConditions);

document.getElementById("new-run").addEventListener("click", async () => {
  clearError("form-error");
  try {
    await fillSuites();
  } catch (err) {
    showError("form-error", err);
  }
  dialog.showModal();
  document.getElementById("f-model").focus();
});
document.getElementById("cancel-dialog").addEventListener("click", () => dialog.close());

form.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  clearError("form-error");
  const data = new FormData(form);
  const model = String(data.get("model") || "").trim();
  const suite = String(data.get("suite") || "");
  const conditions = data.getAll("conditions");
  if (!model) return showError("form-error", "Enter the model name.");
  if (!suite) return showError("form-error", "Choose a suite.");
  if (!conditions.length) return showError("form-error", "Choose at least one condition.");
  const body = { model, clock: data.get("clock"), conditions, max_attempts: Number(data.get("max_attempts") || 3) };
  if (data.get("limit")) body.limit = Number(data.get("limit"));
  if (suite.startsWith("id:")) body.suite_id = suite.slice(3);
  else body.suite = suite.slice(5);
  try {
    const run = await api("/v1/runs", { method: "POST", body });
    dialog.close();
    location.href = `run.html?id=${encodeURIComponent(run.id)}`;
  } catch (err) {
    showError("form-error", err);
  }
});

await requireSignIn();
load();
