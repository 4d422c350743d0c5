// Shared helpers: the token (kept in sessionStorage only), authorised fetch, formatting.

const KEY = "mpe.token";
export const RATE = 24000;
export const FRAME = 1920;

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(value) {
  sessionStorage.setItem(KEY, value);
}

export function signOut() {
  sessionStorage.removeItem(KEY);
  location.href = "signin.html";
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// fetch() with the bearer token; JSON in and out; errors become ApiError with the server's code.
export async function api(path, { method = "GET", body, signal, tokenOverride } = {}) {
  const headers = { Authorization: `Bearer ${tokenOverride ?? token() ?? ""}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "network", "the server cannot be reached");
  }
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!res.ok) {
    const e = data?.error ?? { code: "http_" + res.status, message: res.statusText };
    if (res.status === 401 && !tokenOverride) {
      sessionStorage.removeItem(KEY);
      location.href = "signin.html?expired=1";
    }
    throw new ApiError(res.status, e.code, e.message);
  }
  return data;
}

// Pages call this first: no token -> sign-in page. Returns {team, admin}.
export async function requireSignIn() {
  if (!token()) {
    location.href = "signin.html";
    return new Promise(() => {});
  }
  const me = await api("/v1/me");
  const who = document.getElementById("who");
  if (who) who.textContent = me.admin ? `${me.team} (admin)` : me.team;
  const out = document.getElementById("signout");
  if (out) out.addEventListener("click", signOut);
  return me;
}

// The listen socket's URL, signed by the server so that the token never appears in a URL.
export async function listenUrl(episodeId) {
  const signed = await api(`/v1/episodes/${encodeURIComponent(episodeId)}/listen-url`);
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  return `${proto}//${location.host}${signed.url}`;
}

export function param(name) {
  return new URLSearchParams(location.search).get(name);
}

// --- formatting -----------------------------------------------------------------------------

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "style") Object.assign(node.style, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function fmtTime(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.max(0, seconds);
  const m = Math.floor(s / 60);
  return `${m}:${(s - m * 60).toFixed(1).padStart(4, "0")}`;
}

export function fmtDate(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
}

export function fmtDuration(ms) {
  if (ms < 0 || !isFinite(ms)) return "–";
  const s = Math.round(ms / 1000);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${r}s` : `${r}s`;
}

export function showError(where, err) {
  const box = typeof where === "string" ? document.getElementById(where) : where;
  if (!box) return;
  box.hidden = false;
  box.textContent = err instanceof ApiError ? `${err.message} (${err.code})` : String(err?.message ?? err);
}

export function clearError(where) {
  const box = typeof where === "string" ? document.getElementById(where) : where;
  if (box) {
    box.hidden = true;
    box.textContent = "";
  }
}

// Stacked progress bar: done / failed / running / queued / cancelled of total.
export function progressBar(p) {
  const total = Math.max(1, p.total);
  const seg = (cls, n, label) =>
    n > 0 ? el("span", { class: `seg ${cls}`, style: { width: `${(100 * n) / total}%` }, title: `${n} ${label}` }) : null;
  const done = p.completed + p.failed + p.cancelled;
  const bar = el(
    "div",
    { class: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": p.total, "aria-valuenow": done,
      "aria-label": `${p.completed} of ${p.total} episodes done` },
    seg("done", p.completed, "done"),
    seg("failed", p.failed, "failed"),
    seg("running", p.running, "running"),
    seg("cancelled", p.cancelled, "cancelled"),
  );
  const text = el(
    "div",
    { class: "progress-text" },
    `${p.completed}/${p.total} done`,
    p.running ? ` · ${p.running} running` : "",
    p.failed ? ` · ${p.failed} failed` : "",
    p.cancelled ? ` · ${p.cancelled} cancelled` : "",
    p.failed_attempts ? ` · ${p.failed_attempts} retried` : "",
  );
  return el("div", { class: "progress-wrap" }, bar, text);
}

// A registered benchmark as GET /v1/benchmarks describes it (its conditions, labels, failure
// titles, quantities and table columns): the pages draw what it says and know no benchmark.
const benchmarks = new Map();

export async function benchmarkInfo(name) {
  if (!benchmarks.has(name)) {
    const all = await api("/v1/benchmarks");
    for (const b of all) benchmarks.set(b.name, b);
  }
  return benchmarks.get(name) ?? { name, conditions: [], failure_types: [], failure_titles: {}, quantities: [],
    labels: [], outcome_columns: [], script_columns: [] };
}

// One cell a benchmark fills: {text, bad, chip, title} -> a <td>.
export function cellNode(c, ...extra) {
  const content = c.chip === null || c.chip === undefined ? c.text
    : el("span", { class: c.chip ? `chip label-${c.chip}` : "chip", title: c.title }, c.text);
  return el("td", { class: c.bad ? "bad" : "", title: c.chip ? undefined : c.title }, content, ...extra);
}
