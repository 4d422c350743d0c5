import { api, benchmarkInfo, cellNode, clearError, el, fmtTime, listenUrl, param, RATE, requireSignIn, showError }
  from "./api.js";
import { decodeFrame, frameLevel, LiveAudio, Mixer, ReplayAudio } from "./player.js";
import { EpisodeModel, TimelineView } from "./timeline.js";

const episodeId = param("id");
const $ = (id) => document.getElementById(id);
const audioEl = $("audio");
const mixer = new Mixer();
const replay = new ReplayAudio(mixer, audioEl);
const live = new LiveAudio(mixer);
const view = new TimelineView($("timeline"), { onSeek: (t) => seek(t) });

let doc = null;
let model = null;
let mode = "loading"; // live | replay | waiting
let socket = null;
let dirty = false;
let lastStatus = null;

// --- shared rendering -----------------------------------------------------------------------

function setMode(m, text) {
  mode = m;
  const badge = $("mode");
  badge.textContent = text ?? m;
  badge.className = `badge ${m}`;
  $("play").textContent = m === "replay" ? (replay.playing ? "Pause" : "Play") : live.enabled ? "Mute live audio" : "Listen live";
  $("seek").disabled = m !== "replay";
}

// Realtime: the server's own record of room frames it sent late (the model heard them late).
function roomTiming() {
  const a = doc.attempts.find((x) => x.id === doc.attempt_id);
  if (!a || a.room_late === null || a.room_late === undefined) return [];
  const text = a.room_late
    ? `${a.room_late_frames} room frame${a.room_late_frames === 1 ? "" : "s"} sent late `
      + `(up to ${a.max_room_lateness_ms} ms behind their deadline); the model heard them late, so this attempt's timing is not clean`
    : `on time (largest delay ${a.max_room_lateness_ms} ms)`;
  return [el("div", { class: "span2" }, el("dt", {}, "Room timing"),
    el("dd", { id: "room-timing", class: a.room_late ? "bad" : "" }, text))];
}

function facts() {
  const item = (k, v) => el("div", {}, el("dt", {}, k), el("dd", {}, v));
  const o = doc.outcome;
  return el("dl", {},
    item("Model", `${doc.model.name}${doc.model.revision ? " @ " + doc.model.revision : ""}`),
    item("Condition", doc.condition), item("Pair", doc.pair_id ?? "withheld while the run is active"), item("Clock", doc.clock),
    item("Status", el("span", { class: `status status-${doc.status}` }, doc.status)),
    item("Length", doc.duration_s === null ? "–" : fmtTime(doc.duration_s)),
    item("Attempt", doc.attempt_id ? `${doc.attempts.findIndex((a) => a.id === doc.attempt_id) + 1} of ${doc.attempts.length}` : "–"),
    ...roomTiming(),
    item("Outcome", !o ? "–" : o.failures.length ? o.failures.join(", ").replaceAll("_", " ") : "passed",
      o && o.source === "live" ? el("span", { class: "muted small" }, " (live detector, not scored)") : ""),
    ...(doc.script === "withheld"
      ? [el("div", { class: "span2" }, el("dt", {}, "Script"), el("dd", { id: "script-withheld" },
        "withheld until the run has ended (always, on a held-out suite): labels, texts and answers are not shown"))]
      : (doc.timeline?.facts ?? []).map((f) => el("div", { class: "span2" }, el("dt", {}, f.title), el("dd", {}, f.text)))));
}

// The script table: the rows the server made of the episode's script (its benchmark's columns),
// each with where it began and its window's verdict; then the benchmark's notes (e.g. the answer).
function renderTurns() {
  const rows = (model.timeline?.rows ?? []).map((r) => {
    const start = r.start === null ? null : r.start / RATE;
    const verdict = r.verdict ? el("span", { class: `chip v-${r.verdict.state}` }, r.verdict.text || "–") : "–";
    return el("tr", { class: r.now ? "now" : "" },
      el("td", {}, start !== null ? el("button", { type: "button", class: "link", onclick: () => seek(start),
        "data-focus-key": r.key, "aria-label": `Play ${r.name ? r.name + " " : ""}from ${fmtTime(start)}` }, fmtTime(start)) : "–"),
      ...r.cells.map((c) => cellNode(c)), el("td", {}, verdict));
  });
  $("turns").replaceChildren(...rows);
  $("answer").replaceChildren(...(model.timeline?.notes ?? []).map((n) =>
    el("p", {}, el("strong", {}, `${n.title}: `), n.text || el("em", {}, "(empty transcript)"))));
}

function renderEvents() {
  const items = model.events.slice(-2000).map((e) =>
    el("li", {}, el("code", {}, fmtTime(e.t)), " ", el("strong", {}, e.type), " ",
      Object.keys(e.data).length ? JSON.stringify(e.data) : ""));
  $("events").replaceChildren(...items);
}

function redraw() {
  if (!model) return;
  // Redrawing replaces elements: keep the keyboard focus on the same clip or turn.
  const focused = document.activeElement?.dataset?.focusKey;
  view.render(model);
  renderTurns();
  if ($("events-box").open) renderEvents();
  if (focused) document.querySelector(`[data-focus-key="${focused}"]`)?.focus();
}

let lastDraw = 0;

function frameLoop(now) {
  if (dirty && now - lastDraw > (mode === "live" ? 200 : 0)) {
    dirty = false;
    lastDraw = now;
    redraw();
  }
  let t;
  if (mode === "replay") {
    t = replay.time;
    $("clock").textContent = `${fmtTime(t)} / ${fmtTime(model?.duration ?? 0)}`;
    if (document.activeElement !== $("seek")) $("seek").value = t;
  } else if (model) {
    const heard = live.time;
    t = heard ?? model.head;
    $("clock").textContent = `stream ${fmtTime(model.head)}${heard !== null ? ` · hearing ${fmtTime(heard)}` : ""}`;
  }
  if (model && t !== undefined) view.setPlayhead(t);
  requestAnimationFrame(frameLoop);
}

function seek(t) {
  if (mode !== "replay") return;
  replay.seek(t);
  view.setPlayhead(t);
}

// --- replay ---------------------------------------------------------------------------------

async function startReplay() {
  model = new EpisodeModel();
  for (const e of doc.events) model.apply(e);
  model.setSegments(doc.segments);
  model.setTimeline(doc.timeline);
  if (doc.end_sample) model.end = doc.end_sample / RATE;
  setMode("replay", doc.status === "completed" ? "replay" : doc.status);
  $("status-line").textContent = doc.status === "completed" ? "" : `This attempt ${doc.attempts.at(-1)?.status ?? doc.status}.`;
  const q = doc.attempt ? `?attempt=${doc.attempt}` : "";
  if (doc.attempt_id) {
    try {
      const [url, levels] = await Promise.all([
        api(`/v1/episodes/${encodeURIComponent(episodeId)}/audio-url${q ? q + "&" : "?"}track=mix`),
        api(`/v1/episodes/${encodeURIComponent(episodeId)}/levels${q}`),
      ]);
      model.levels = levels;
      audioEl.src = url.url;
    } catch (err) {
      showError("error", err);
    }
  }
  $("seek").max = model.duration.toFixed(1);
  dirty = true;
}

audioEl.addEventListener("play", () => setMode("replay"));
audioEl.addEventListener("pause", () => setMode("replay"));
audioEl.addEventListener("loadedmetadata", () => { $("seek").max = Math.max(model?.duration ?? 0, audioEl.duration).toFixed(1); });
$("seek").addEventListener("input", (e) => seek(Number(e.target.value)));

// --- live -----------------------------------------------------------------------------------

async function startLive() {
  model = new EpisodeModel();
  setMode("live", "connecting");
  socket = new WebSocket(await listenUrl(episodeId));
  socket.binaryType = "arraybuffer";
  socket.onmessage = (m) => (typeof m.data === "string" ? onText(JSON.parse(m.data)) : onFrame(m.data));
  socket.onclose = (e) => {
    socket = null;
    if (mode === "live" || mode === "waiting") {
      if (e.code !== 1000) showError("error", `Live connection closed (${e.code}${e.reason ? ": " + e.reason : ""}).`);
      reload();
    }
  };
}

function onText(msg) {
  switch (msg.type) {
    case "hello":
      model.reset();
      model.head = msg.t / RATE;
      setMode("live", msg.tail ? "live (remote)" : "live");
      $("status-line").textContent = "Live";
      break;
    case "levels":
      model.levels = { room: msg.room.slice(), assistant: msg.assistant.slice() };
      break;
    case "event":
      model.apply(msg);
      if ($("events-box").open) $("events").append(el("li", {}, el("code", {}, fmtTime(msg.t_s)), " ", el("strong", {}, msg.event), " ",
        JSON.stringify(msg.data)));
      break;
    case "timeline": // the windows so far, computed by the server
      model.setTimeline(msg);
      break;
    case "status":
      lastStatus = msg;
      model.head = Math.max(model.head, msg.t / RATE);
      $("status-line").textContent = msg.text ?? msg.state; // the scheduler's state in words, from the server
      break;
    case "waiting":
      setMode("waiting", msg.status);
      $("status-line").textContent = msg.status === "queued" ? "Queued: waiting for a bridge to pick this episode up" : `Waiting (${msg.status})`;
      break;
    case "end":
      $("status-line").textContent = msg.reason === "completed" ? "Episode completed" : `Attempt ended: ${msg.reason}`;
      break;
    case "done":
      mode = "done";
      reload();
      return;
    case "error":
      showError("error", `${msg.message} (${msg.code})`);
      break;
  }
  dirty = true;
}

function onFrame(buf) {
  const f = decodeFrame(buf);
  model.levels[f.track][f.seq] = frameLevel(f.pcm);
  if (f.track === "room") model.head = Math.max(model.head, ((f.seq + 1) * 1920) / RATE);
  live.push(f.track, f.seq, f.pcm);
  dirty = true;
}

// --- controls -------------------------------------------------------------------------------

$("play").addEventListener("click", async () => {
  try {
    if (mode === "replay") await replay.toggle();
    else if (live.enabled) live.disable();
    else live.enable();
  } catch (err) {
    showError("error", err);
  }
  setMode(mode, $("mode").textContent);
});
for (const track of ["room", "assistant"]) {
  $(`vol-${track}`).addEventListener("input", (e) => mixer.set(track, "volume", Number(e.target.value) / 100));
  $(`pan-${track}`).addEventListener("input", (e) => mixer.set(track, "pan", Number(e.target.value) / 100));
}
$("follow").addEventListener("change", (e) => { view.follow = e.target.checked; });
$("zoom-in").addEventListener("click", () => view.zoom(1.5));
$("zoom-out").addEventListener("click", () => view.zoom(1 / 1.5));
$("events-box").addEventListener("toggle", () => { if ($("events-box").open && model) renderEvents(); });
$("attempt").addEventListener("change", (e) => reload(Number(e.target.value)));
document.addEventListener("keydown", (e) => {
  if (e.key !== " " || e.target.closest("input, button, select, textarea, a, summary")) return;
  e.preventDefault();
  $("play").click();
});

// The headers of the script table and the legend's labels: the episode's benchmark says them.
async function drawTables() {
  const bench = await benchmarkInfo(doc.benchmark);
  $("turns-head").replaceChildren(el("th", { scope: "col" }, "Start"),
    ...bench.script_columns.map((c) => el("th", { scope: "col" }, c.title)), el("th", { scope: "col" }, "Window"));
  $("legend").replaceChildren(...bench.labels.map((l) => el("li", {}, el("i", { class: `sw label-${l.key}` }), l.legend)),
    el("li", {}, el("i", { class: "sw speech" }), "Aria speaks"), el("li", {}, el("i", { class: "sw v-pass" }), "pass"),
    el("li", {}, el("i", { class: "sw v-fail" }), "fail"));
}

async function reload(attempt) {
  if (socket) socket.close(1000);
  live.disable();
  audioEl.pause();
  try {
    doc = await api(`/v1/episodes/${encodeURIComponent(episodeId)}${attempt ? "?attempt=" + attempt : ""}`);
    clearError("error");
  } catch (err) {
    showError("error", err);
    return;
  }
  const name = doc.scenario_id ?? `episode ${doc.id ?? doc.episode_id}`; // the scenario is withheld during a run
  document.title = `${name} ${doc.condition} · Duplex-MPE`;
  $("title").textContent = `${name} · ${doc.condition}`;
  $("crumb").textContent = doc.episode_id;
  $("run-link").textContent = doc.run_id;
  $("run-link").href = `run.html?id=${encodeURIComponent(doc.run_id)}`;
  $("facts").replaceChildren(facts());
  await drawTables();
  const sel = $("attempt");
  sel.replaceChildren(...doc.attempts.map((a) => el("option", { value: a.number, selected: a.number === doc.attempt },
    `${a.number} (${a.status}${a.error_code ? ": " + a.error_code : ""}${a.room_late ? ", room late" : ""})`)));
  $("attempt-wrap").hidden = doc.attempts.length < 2;
  try {
    if (!attempt && (doc.status === "queued" || doc.status === "running")) await startLive();
    else await startReplay();
  } catch (err) {
    showError("error", err);
  }
}

await requireSignIn();
if (!episodeId) showError("error", "No episode given.");
else {
  await reload();
  requestAnimationFrame(frameLoop);
}
