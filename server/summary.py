"""A quick per-episode summary from events and live segments (the full scoring lives elsewhere)."""

from __future__ import annotations

from typing import Any

from clients.codec import STREAM_RATE


def _overlap(segments: list[tuple[int, int]], a: int, b: int) -> int:
    return sum(max(0, min(e, b) - max(s, a)) for s, e in segments)


def _active(segments: list[tuple[int, int]], t: int) -> bool:
    return any(s <= t < e for s, e in segments)


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """T-wait outcome, speech inside silence windows, N4 behaviour (durations only)."""
    events = doc["events"]
    segs = [(g["start"], g["end"]) for g in doc["live_segments"]]
    starts = [e for e in events if e["type"] == "clip.start"]
    ends = {e["data"]["idx"]: e["t"] for e in events if e["type"] == "clip.end"}
    end_t = next((e["t"] for e in events if e["type"] == "episode.end"), doc.get("end_sample") or 0)
    t_end = next((e for e in events if e["type"] == "t_wait.end"), None)
    silence_windows = silence_clean = 0
    n4 = []
    for i, e in enumerate(starts):
        label = e["data"]["label"]
        nxt = starts[i + 1]["t"] if i + 1 < len(starts) else end_t
        if label in ("N1", "N2", "N3"):
            silence_windows += 1
            silence_clean += _overlap(segs, e["t"], nxt) == 0
        if label == "N4R":
            t_r = e["t"]
            n4.append({"speaking_at_t_R": _active(segs, t_r), "silent_at_t_R+2s": not _active(segs, t_r + 2 * STREAM_RATE)})
    return {
        "t_wait": None if t_end is None else t_end["data"].get("reason"),
        "t_onset_s": None if t_end is None or t_end["data"].get("onset_at") is None
        else round((t_end["data"]["onset_at"] - ends.get(_t_idx(doc), 0)) / STREAM_RATE, 2),
        "speech_s": round(sum(e - s for s, e in segs) / STREAM_RATE, 2),
        "silence_windows": f"{silence_clean}/{silence_windows}",
        "n4": n4,
        "duration_s": round(end_t / STREAM_RATE, 1),
    }


def _t_idx(doc: dict[str, Any]) -> int | None:
    return next((t["idx"] for t in doc["turns"] if t["label"] == "T"), None)
