// Audio: one mixer (room and Aria each with volume and pan) fed either by the recorded
// stereo mix (replay: left = room, right = Aria, streamed with range requests) or by the
// live socket's frames, scheduled on the audio clock.

import { FRAME, RATE } from "./api.js";

export class Mixer {
  constructor() {
    this.ctx = null;
    this.settings = { room: { volume: 1, pan: 0 }, assistant: { volume: 1, pan: 0 } };
  }

  // Must run inside a user gesture (autoplay policies).
  ensure() {
    if (!this.ctx) {
      const Ctx = window.AudioContext || window.webkitAudioContext;
      // The device's own rate: 24 kHz buffers are resampled by the browser, and media
      // element sources need the context at the default rate in some browsers.
      this.ctx = new Ctx({ latencyHint: "playback" });
      this.nodes = {};
      for (const track of ["room", "assistant"]) {
        const gain = this.ctx.createGain();
        const pan = this.ctx.createStereoPanner();
        gain.connect(pan).connect(this.ctx.destination);
        this.nodes[track] = { gain, pan };
        this.apply(track);
      }
    }
    if (this.ctx.state === "suspended") this.ctx.resume();
    return this.ctx;
  }

  input(track) {
    return this.nodes[track].gain;
  }

  set(track, key, value) {
    this.settings[track][key] = value;
    this.apply(track);
  }

  apply(track) {
    if (!this.ctx) return;
    const { gain, pan } = this.nodes[track];
    gain.gain.value = this.settings[track].volume;
    pan.pan.value = this.settings[track].pan;
  }
}

// Replay: an <audio> element playing the stereo mix, split into the mixer's two inputs.
export class ReplayAudio {
  constructor(mixer, audio) {
    this.mixer = mixer;
    this.audio = audio;
    this.wired = false;
  }

  wire() {
    if (this.wired) return;
    const ctx = this.mixer.ensure();
    const src = ctx.createMediaElementSource(this.audio);
    const split = ctx.createChannelSplitter(2);
    src.connect(split);
    split.connect(this.mixer.input("room"), 0);
    split.connect(this.mixer.input("assistant"), 1);
    this.wired = true;
  }

  async toggle() {
    this.wire();
    if (this.audio.paused) await this.audio.play();
    else this.audio.pause();
  }

  seek(t) {
    const d = isFinite(this.audio.duration) ? this.audio.duration : t;
    this.audio.currentTime = Math.max(0, Math.min(t, d));
  }

  get time() {
    return this.audio.currentTime;
  }

  get playing() {
    return !this.audio.paused;
  }
}

// Live: 80 ms frames scheduled at base + slot * 80 ms; late frames re-anchor the base so
// playback restarts a little behind the stream rather than stuttering frame by frame.
export class LiveAudio {
  constructor(mixer) {
    this.mixer = mixer;
    this.enabled = false;
    this.base = null;
    this.lead = 0.3; // seconds of buffer
    this.sources = new Set();
  }

  enable() {
    this.mixer.ensure();
    this.enabled = true;
    this.base = null;
  }

  disable() {
    this.enabled = false;
    for (const s of this.sources) s.stop();
    this.sources.clear();
  }

  push(track, slot, pcm) {
    if (!this.enabled || !pcm) return;
    const ctx = this.mixer.ctx;
    let when = this.base === null ? -1 : this.base + (slot * FRAME) / RATE;
    if (when < ctx.currentTime + 0.02) {
      this.base = ctx.currentTime + this.lead - (slot * FRAME) / RATE;
      when = this.base + (slot * FRAME) / RATE;
    }
    const buf = ctx.createBuffer(1, pcm.length, RATE);
    const ch = buf.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(this.mixer.input(track));
    src.onended = () => this.sources.delete(src);
    this.sources.add(src);
    src.start(when);
  }

  // Stream time being heard now (null when not listening).
  get time() {
    if (!this.enabled || this.base === null) return null;
    return Math.max(0, this.mixer.ctx.currentTime - this.base);
  }
}

// Binary listener frames use the wire v1 header: u8 version, u8 kind, u16 flags, u32 seq.
export function decodeFrame(buf) {
  const v = new DataView(buf);
  const kind = v.getUint8(1), flags = v.getUint16(2, true), seq = v.getUint32(4, true);
  const silent = (flags & 1) === 1;
  const pcm = silent ? null : new Int16Array(buf.slice(8));
  return { track: kind === 1 ? "room" : "assistant", seq, pcm };
}

export function frameLevel(pcm) {
  if (!pcm) return 0;
  let sum = 0;
  for (let i = 0; i < pcm.length; i++) sum += pcm[i] * pcm[i];
  const rms = Math.sqrt(sum / pcm.length) / 32768;
  const db = 20 * Math.log10(Math.max(rms, 1e-9));
  return Math.round(100 * Math.min(1, Math.max(0, (db + 60) / 60)));
}
