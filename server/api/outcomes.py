"""Episode outcomes for the pages and the ``outcome`` filter (pure functions).

With scores (the scoring subsystem, DESIGN §6) the outcome follows its verdicts. Without,
a quick live outcome comes from the logged events and the live detector segments: the
T-wait reason, speech inside N1-N3 windows (duration only: no semantic exemption) and
speech still active 2 s after N4R starts. Each outcome names its ``source``.
"""

from __future__ import annotations

from typing import Any, Iterable

from clients.codec import STREAM_RATE

# Failure types, in the order pages list them.
FAILURES = ("no_response", "incorrect", "intrusion", "speech_in_silence", "n4_still_voicing", "n4_resumed")
OUTCOME_FILTERS = ("ok", *FAILURES, "unfinished", "unscored")
N4_DEADLINE = 2 * STREAM_RATE  # §6 N4: silent at t_R + 2 s
CLIP_GAP = STREAM_RATE // 2  # §6 N4: t_E = end of N4R + 0.5 s


def _active(segs: list[tuple[int, int]], t: int) -> bool:
    return any(a <= t < b for a, b in segs)


def _overlaps(segs: list[tuple[int, int]], a: int, b: int) -> bool:
    return any(s < b and e > a for s, e in segs)


def live_outcome(events: Iterable[dict[str, Any]], segments: Iterable[tuple[int, int]]) -> dict[str, Any]:
    """Outcome of a completed attempt from its events ({t, type, data}) and live segments."""
    events = list(events)
    segs = sorted((int(a), int(b)) for a, b in segments)
    starts = [e for e in events if e["type"] == "clip.start"]
    ends = {e["data"].get("idx"): e["t"] for e in events if e["type"] == "clip.end"}
    end_t = next((e["t"] for e in events if e["type"] == "episode.end"), None)
    failures: list[str] = []
    t_wait = next((e["data"] for e in events if e["type"] == "t_wait.end"), None)
    if t_wait is None:
        t_state = None
    elif t_wait.get("already_speaking"):
        t_state = "already_speaking"
    elif t_wait.get("onset_at") is not None:
        t_state = "fresh"
    else:
        t_state = "none"
        failures.append("no_response")
    windows = clean = 0
    n4: list[str] = []
    for i, e in enumerate(starts):
        label = e["data"].get("label")
        nxt = starts[i + 1]["t"] if i + 1 < len(starts) else end_t
        if label in ("N1", "N2", "N3") and nxt is not None:
            windows += 1  # §6: clip start to the next clip's start (or the episode end)
            clean += not _overlaps(segs, e["t"], nxt)
        elif label == "N4R":
            t_r = e["t"]
            t_e = ends.get(e["data"].get("idx"), t_r) + CLIP_GAP
            if not _active(segs, t_r):
                n4.append("not_eligible")
            elif _active(segs, t_r + N4_DEADLINE):
                n4.append("still_voicing")
            elif t_e > t_r + N4_DEADLINE and _overlaps(segs, t_r + N4_DEADLINE, t_e):
                n4.append("resumed")
            else:
                n4.append("pass")
    if clean < windows:
        failures.append("speech_in_silence")
    failures += [f"n4_{o}" for o in dict.fromkeys(n4) if o in ("still_voicing", "resumed")]
    return {"source": "live", "t": t_state, "correct": None, "silence": [clean, windows], "n4": n4,
            "failures": failures, "ok": not failures}


def _passed(w: dict[str, Any]) -> bool | None:
    for key in ("pass", "passed", "ok"):
        if isinstance(w.get(key), bool):
            return w[key]
    verdict = str(w.get("outcome") or w.get("verdict") or "").lower()
    if verdict in ("pass", "silent", "backchannel"):
        return True
    if verdict:
        return False
    return None


def scored_outcome(score: dict[str, Any]) -> dict[str, Any]:
    """Outcome from one episode's scores (the shape of ``mpe score --json``'s episodes[])."""
    failures: list[str] = []
    t = score.get("t") or {}
    present, fresh = t.get("present"), t.get("fresh")
    correct = t.get("correct")
    if correct is None and t.get("verdict") is not None:
        correct = str(t.get("verdict")).upper() == "CORRECT"
    if present is False:
        failures.append("no_response")
    elif correct is False:
        failures.append("incorrect")
    if present is None:
        t_state = None
    elif not present:
        t_state = "none"
    else:
        t_state = "fresh" if fresh else "already_speaking"
    windows = list(score.get("silence_windows") or [])
    results = [_passed(w) for w in windows]
    if any(r is False for r in results):
        failures.append("intrusion")
    n4 = []
    for ev in score.get("n4") or []:
        o = str(ev.get("outcome") or ev.get("yield") or "").lower() or ("not_eligible" if not ev.get("eligible") else "")
        n4.append(o or "unknown")
    failures += [f"n4_{o}" for o in dict.fromkeys(n4) if o in ("still_voicing", "resumed")]
    return {"source": "score", "t": t_state, "correct": correct, "silence": [sum(r is True for r in results), len(windows)],
            "n4": n4, "failures": failures, "ok": not failures}


def matches(outcome: dict[str, Any] | None, status: str, wanted: str) -> bool:
    """Does an episode match the ``outcome`` filter value?"""
    if wanted == "unfinished":
        return status != "completed"
    if outcome is None:
        return False
    if wanted == "unscored":
        return outcome["source"] != "score"
    if wanted == "ok":
        return outcome["ok"]
    return wanted in outcome["failures"]
