// The episode timeline: a time ruler, the room's blocks (coloured by label, with speaker and
// text), Aria's speech and loudness, and the benchmark's windows with their verdicts. The
// blocks and windows come from the server (the episode's `timeline`, and `timeline` messages
// while it runs): this page restates no rule and knows no benchmark. The same model serves live episodes (events
// arrive one by one) and replays.

import { el, fmtTime, RATE } from "./api.js";

const LEVEL_FRAME_S = 0.08;

// Episode state built from §3 events; pure data, no DOM.
export class EpisodeModel {
  constructor() {
    this.reset();
  }

  reset() {
    this.segments = []; // assistant speech {start, end} in seconds (end null while open)
    this.timeline = null; // the server's {head, windows, blocks, rows, notes} (samples)
    this.texts = []; // model text events
    this.head = 0; // seconds of stream produced so far
    this.end = null;
    this.events = [];
    this.levels = { room: [], assistant: [] };
    this.finalSegments = false;
  }

  apply(ev) {
    // ev: {t (samples), event|type, data}
    const type = ev.event ?? ev.type;
    const t = ev.t / RATE;
    const d = ev.data || {};
    this.events.push({ t, type, data: d });
    this.head = Math.max(this.head, t);
    if (type === "vad.onset" && !this.finalSegments) this.segments.push({ start: d.at / RATE, end: null });
    else if (type === "vad.offset" && !this.finalSegments) {
      const s = this.segments[this.segments.length - 1];
      if (s && s.end === null) s.end = d.at / RATE;
    } else if (type === "text") this.texts.push({ t, text: d.text });
    else if (type === "episode.end") this.end = t;
  }

  setSegments(segs) {
    this.segments = segs.map((g) => ({ start: g.start / RATE, end: g.end / RATE }));
    this.finalSegments = true;
  }

  get duration() {
    return Math.max(this.end ?? 0, this.head, this.levels.room.length * LEVEL_FRAME_S);
  }

  setTimeline(timeline) {
    this.timeline = timeline ?? null;
  }

  // The server's windows in seconds, with their verdicts {state, text, scored}.
  windows() {
    return (this.timeline?.windows ?? []).map((w) => ({ ...w, start: w.start / RATE, end: w.end / RATE,
      deadline: w.deadline === null || w.deadline === undefined ? null : w.deadline / RATE }));
  }

  // The server's room blocks in seconds (end null while it plays).
  blocks() {
    return (this.timeline?.blocks ?? []).map((b) => ({ ...b, start: b.start / RATE, end: b.end === null ? null : b.end / RATE }));
  }
}

// --- rendering ----------------------------------------------------------------------------

export class TimelineView {
  constructor(root, { onSeek } = {}) {
    this.root = root;
    this.scale = 50; // px per second
    this.onSeek = onSeek;
    this.follow = true;
    this.scroll = root.querySelector(".tl-scroll");
    this.inner = root.querySelector(".tl-inner");
    this.ruler = root.querySelector(".tl-ruler");
    this.room = root.querySelector(".lane-room .lane-body");
    this.aria = root.querySelector(".lane-aria .lane-body");
    this.wins = root.querySelector(".lane-windows .lane-body");
    this.canvas = root.querySelector(".lane-aria canvas");
    this.roomCanvas = root.querySelector(".lane-room canvas");
    this.playhead = root.querySelector(".tl-playhead");
    this.headMark = root.querySelector(".tl-head");
    this.scroll.addEventListener("scroll", () => this.drawLevels());
    this.scroll.addEventListener("click", (e) => {
      if (e.target.closest("button")) return;
      const x = e.clientX - this.inner.getBoundingClientRect().left;
      this.onSeek?.(x / this.scale);
    });
    this.scroll.addEventListener("keydown", (e) => this.key(e));
    this.playT = 0;
  }

  key(e) {
    const step = e.shiftKey ? 1 : 5;
    if (e.key === "ArrowRight") this.onSeek?.(this.playT + step);
    else if (e.key === "ArrowLeft") this.onSeek?.(Math.max(0, this.playT - step));
    else if (e.key === "Home") this.onSeek?.(0);
    else if (e.key === "End" && this.model) this.onSeek?.(this.model.duration);
    else return;
    e.preventDefault();
  }

  zoom(factor) {
    const center = (this.scroll.scrollLeft + this.scroll.clientWidth / 2) / this.scale;
    this.scale = Math.max(5, Math.min(400, this.scale * factor));
    if (this.model) this.render(this.model);
    this.scroll.scrollLeft = center * this.scale - this.scroll.clientWidth / 2;
  }

  x(t) {
    return `${(t * this.scale).toFixed(1)}px`;
  }

  block(t0, t1, cls, attrs = {}, ...children) {
    const node = el(attrs.button ? "button" : "div", { ...attrs, button: undefined, class: cls, type: attrs.button ? "button" : undefined },
      ...children);
    node.style.left = this.x(t0);
    node.style.width = `${Math.max(2, (t1 - t0) * this.scale).toFixed(1)}px`;
    return node;
  }

  render(model) {
    this.model = model;
    const dur = Math.max(model.duration + 2, 10);
    this.inner.style.width = this.x(dur);
    // ruler
    const ticks = [];
    const step = this.scale >= 30 ? 1 : this.scale >= 10 ? 5 : 10;
    for (let s = 0; s <= dur; s += step) {
      const major = s % (step * 5) === 0;
      ticks.push(el("span", { class: major ? "tick major" : "tick", style: { left: this.x(s) } }, major ? fmtTime(s).replace(/\.0$/, "") : ""));
    }
    this.ruler.replaceChildren(...ticks);
    // room blocks
    const clips = model.blocks().map((b) => this.block(b.start, b.end ?? model.head,
      `clip label-${b.kind}${b.end === null ? " open" : ""}`, {
        button: true, title: b.title, "aria-label": b.aria.replaceAll("{t}", fmtTime(b.start)),
        "data-idx": b.idx ?? undefined, "data-focus-key": b.key, onclick: () => this.onSeek?.(b.start) },
      el("span", { class: "who" }, b.who), b.text ? el("span", { class: "txt" }, b.text) : null));
    this.room.replaceChildren(...clips);
    // Aria's speech
    const segs = model.segments.map((g) => this.block(g.start, g.end ?? model.head, `speech${g.end === null ? " open" : ""}`, {
      title: `Aria speaks ${fmtTime(g.start)}–${g.end === null ? "…" : fmtTime(g.end)}`, role: "img",
      "aria-label": `Aria speaks from ${fmtTime(g.start)} to ${g.end === null ? "now" : fmtTime(g.end)}` }));
    for (const t of model.texts) {
      segs.push(el("span", { class: "model-text", style: { left: this.x(t.t) }, title: t.text }, "✎"));
    }
    this.aria.replaceChildren(...segs);
    // windows and verdicts
    const wins = model.windows().map((w) => {
      const node = this.block(w.start, w.end, `win win-${w.kind} v-${w.verdict.state}${w.open ? " open" : ""}`, {
        title: `${w.label} window ${fmtTime(w.start)}–${fmtTime(w.end)} ${w.verdict.text}`, role: "img",
        "aria-label": `${w.label} window from ${fmtTime(w.start)}: ${w.verdict.text || "no verdict"}` },
      el("span", {}, `${w.label}${w.verdict.text ? ": " + w.verdict.text : ""}`));
      if (w.deadline !== null) {
        node.append(el("i", { class: "deadline", style: { left: this.x(w.deadline - w.start) }, title: w.deadline_label ?? "" }));
      }
      return node;
    });
    this.wins.replaceChildren(...wins);
    this.headMark.hidden = model.end !== null;
    this.headMark.style.left = this.x(model.head);
    this.drawLevels();
    this.setPlayhead(this.playT);
  }

  setPlayhead(t) {
    this.playT = t;
    this.playhead.style.left = this.x(t);
    if (this.follow) {
      const x = t * this.scale, left = this.scroll.scrollLeft, w = this.scroll.clientWidth;
      if (x < left || x > left + w * 0.85) this.scroll.scrollLeft = Math.max(0, x - w * 0.25);
    }
  }

  drawLevels() {
    if (!this.model) return;
    for (const [canvas, levels, color] of [[this.canvas, this.model.levels.assistant, "#2f7d5b"],
      [this.roomCanvas, this.model.levels.room, "#8a8fa3"]]) {
      if (!canvas) continue;
      const w = this.scroll.clientWidth, h = canvas.parentElement.clientHeight;
      if (canvas.width !== w) canvas.width = w;
      if (canvas.height !== h) canvas.height = h;
      canvas.style.left = `${this.scroll.scrollLeft}px`;
      const g = canvas.getContext("2d");
      g.clearRect(0, 0, w, h);
      g.fillStyle = color;
      const t0 = this.scroll.scrollLeft / this.scale;
      const first = Math.max(0, Math.floor(t0 / LEVEL_FRAME_S));
      const last = Math.min(levels.length, Math.ceil((t0 + w / this.scale) / LEVEL_FRAME_S));
      const bw = Math.max(1, LEVEL_FRAME_S * this.scale - (this.scale > 30 ? 1 : 0));
      for (let i = first; i < last; i++) {
        const v = levels[i];
        if (!v) continue;
        const bh = (v / 100) * (h - 4);
        g.fillRect(i * LEVEL_FRAME_S * this.scale - this.scroll.scrollLeft, h - 2 - bh, bw, bh);
      }
    }
  }
}
