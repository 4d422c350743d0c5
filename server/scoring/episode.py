"""Scoring one episode: load it (bundle or database), detect, apply the window rules,
transcribe and judge what needs it, and build its ``episodes[]`` entry (§6, §7).

The entry is plain JSON. Times inside the ``timeline`` and ``fragments`` fields are stream
samples (24 kHz); fields ending in ``_s`` / ``_ms`` are seconds / milliseconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from server.detector import DETECTOR_VERSION, detect_segments
from server.speech import STREAM_RATE

from .asr import ASRBackend, join_fragments
from .errors import BadBundle
from .judges import AnswerInput, HumanTurn, Judge, SilenceInput
from .store import Cache
from .windows import EpisodeWindows, ms, parse_timeline, sec, episode_windows

SCORING_VERSION = "mpe-scoring-v1"
CONTEXT_TURNS = 3  # §6: up to three human turns ending at the current one


@dataclass
class LoadedEpisode:
    doc: dict[str, Any]  # the episode document of §7 (episode.json)
    assistant: np.ndarray  # int16, 24 kHz
    segments: list[tuple[int, int]] | None  # segments.json override (§7), else None
    source: str  # "db" or the bundle directory


# --- loading -----------------------------------------------------------------------------------


def is_bundle(path: Path) -> bool:
    return (path / "episode.json").is_file()


def find_bundles(paths: list[Path]) -> list[Path]:
    """Bundle directories among ``paths``; a directory of bundles (an export) expands to them."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            raise BadBundle(f"{p}: not a directory")
        if is_bundle(p):
            out.append(p)
            continue
        inner = sorted(d for d in p.iterdir() if d.is_dir() and is_bundle(d))
        if not inner:
            raise BadBundle(f"{p}: neither an episode bundle (episode.json) nor a directory of bundles")
        out.extend(inner)
    return out


def load_bundle(path: Path) -> LoadedEpisode:
    import soundfile as sf

    path = Path(path)
    try:
        doc = json.loads((path / "episode.json").read_text("utf-8"))
    except FileNotFoundError:
        raise BadBundle(f"{path}: episode.json missing") from None
    except (OSError, ValueError) as exc:
        raise BadBundle(f"{path}/episode.json: unreadable ({exc})") from None
    for key in ("episode_id", "events", "turns"):
        if key not in doc:
            raise BadBundle(f"{path}/episode.json: field {key!r} missing")
    wav = path / "assistant.wav"
    try:
        pcm, rate = sf.read(str(wav), dtype="int16", always_2d=False)
    except Exception as exc:  # soundfile raises its own error types
        raise BadBundle(f"{wav}: cannot read ({type(exc).__name__})") from None
    if rate != STREAM_RATE or pcm.ndim != 1:
        raise BadBundle(f"{wav}: expected 24 kHz mono, got {rate} Hz with shape {pcm.shape}")
    segs = None
    seg_file = path / "segments.json"
    if seg_file.is_file():
        segs = _parse_segments(seg_file)
    return LoadedEpisode(doc=doc, assistant=pcm, segments=segs, source=str(path.resolve()))


def _parse_segments(path: Path) -> list[tuple[int, int]]:
    """segments.json: a list of ``{"start", "end"}`` or ``[start, end]`` in stream samples
    (or such a list under ``"segments"``)."""
    try:
        data = json.loads(path.read_text("utf-8"))
        if isinstance(data, dict):
            data = data["segments"]
        out = []
        for g in data:
            s, e = (g["start"], g["end"]) if isinstance(g, dict) else (g[0], g[1])
            if not isinstance(s, int) or not isinstance(e, int) or e < s:
                raise ValueError(f"bad segment {g!r}")
            out.append((s, e))
        return out
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise BadBundle(f"{path}: not a list of segments in stream samples ({exc})") from None


def load_db_episode(db, episode_id: str, attempt_id: str) -> LoadedEpisode:
    from server.export import episode_document, load_track

    doc = episode_document(db, episode_id, attempt_id)
    return LoadedEpisode(doc=doc, assistant=load_track(db, attempt_id, "assistant"), segments=None, source="db")


# --- scoring -----------------------------------------------------------------------------------


def _context(turns: list[dict[str, Any]], idx: int) -> list[HumanTurn]:
    pos = next((i for i, t in enumerate(turns) if t.get("idx") == idx), None)
    if pos is None:
        return []
    return [HumanTurn(speaker=str(t.get("speaker", "")), text=str(t.get("text", "")))
            for t in turns[max(0, pos - CONTEXT_TURNS + 1): pos + 1]]


def _spans(spans) -> list[list[int]]:
    return [[int(s), int(e)] for s, e in spans]


def score_episode(ep: LoadedEpisode, asr: ASRBackend, judge: Judge, cache: Cache) -> dict[str, Any]:
    doc = ep.doc
    track = ep.assistant
    tl = parse_timeline(doc["events"], len(track), doc.get("end_sample"))
    segments = ep.segments if ep.segments is not None else [(g.start, g.end) for g in detect_segments(track)]
    w: EpisodeWindows = episode_windows(tl, segments)
    turns = doc.get("turns") or []
    texts = {t.get("idx"): t.get("text", "") for t in turns}
    semantic = asr.enabled

    # T (§6): response presence, then the answer's correctness on its transcript.
    t = w.t
    t_entry: dict[str, Any] = {
        "turn_idx": t.turn_idx, "fresh": t.fresh, "present": t.present, "already_speaking": t.already_speaking,
        "onset_s": sec(t.onset), "e_t_s": sec(t.e_t), "wait_end_s": sec(t.wait_end),
        "response_speech_ms": ms(t.speech), "fragments": _spans(t.response),
        "transcript": None, "transcript_id": None, "correct": None, "verdict": None, "verdict_id": None,
        "reason": "no_response",
    }
    if t.present:
        early = judge.decide_on_duration("answer", ms(t.speech)) if semantic else None
        if not semantic:
            t_entry["reason"] = "no_asr"
        elif early is not None:
            t_entry.update(correct=early.label == "CORRECT", verdict=early.label, reason="duration",
                           verdict_note=early.raw)
        else:
            tid, text = cache.transcribe(asr, join_fragments(track, t.response))
            t_entry.update(transcript=text, transcript_id=tid)
            if not text.strip():
                t_entry.update(correct=False, reason="empty_transcript")  # §6: empty = incorrect
            else:
                vid, v = cache.judge(judge, "answer", AnswerInput(
                    question=texts.get(t.turn_idx, ""), gold_answer=str(doc.get("gold_answer") or ""),
                    answer_keys=doc.get("answer_keys"), transcript=text))
                t_entry.update(correct=v.label == "CORRECT", verdict=v.label, verdict_id=vid,
                               reason="judged" if v.label else "unparseable")

    # N1-N3 (§6): pass without speech; otherwise the judged transcript decides.
    windows = []
    for sw in w.silence:
        entry: dict[str, Any] = {
            "turn_idx": sw.turn_idx, "label": sw.label, "start_s": sec(sw.start), "end_s": sec(sw.end),
            "speech_ms": ms(sw.speech_samples), "overlap_human_ms": ms(sw.overlap_human),
            "fragments": _spans(sw.speech), "passed": True, "transcript": None, "transcript_id": None,
            "verdict": None, "verdict_id": None, "reason": "no_speech",
        }
        if sw.has_speech:
            entry["passed"] = False
            early = judge.decide_on_duration("silence", ms(sw.speech_samples)) if semantic else None
            if not semantic:
                entry["reason"] = "no_asr"  # duration-only: speech fails
            elif early is not None:
                entry.update(passed=early.label == "BACKCHANNEL", verdict=early.label, reason="duration",
                             verdict_note=early.raw)
            else:
                tid, text = cache.transcribe(asr, join_fragments(track, sw.speech))
                entry.update(transcript=text, transcript_id=tid)
                if not text.strip():
                    entry["reason"] = "empty_transcript"  # §6: an empty transcript fails
                else:
                    vid, v = cache.judge(judge, "silence", SilenceInput(
                        transcript=text, context=_context(turns, sw.turn_idx), speech_ms=ms(sw.speech_samples),
                        overlap_ms=ms(sw.overlap_human)))
                    entry.update(passed=v.label == "BACKCHANNEL", verdict=v.label, verdict_id=vid,
                                 reason="judged" if v.label else "unparseable")
        windows.append(entry)

    n4 = [{"q_idx": e.q_idx, "r_idx": e.r_idx, "window_response": e.window_response, "category": e.category,
           "eligible": e.eligible, "outcome": e.outcome, "speaking_at_t_R": e.speaking_at_t_r,
           "t_R_s": sec(e.t_r), "deadline_s": sec(e.deadline), "t_E_s": sec(e.t_e), "censored": e.censored}
          for e in w.n4]

    model = doc.get("model") or {}
    return {
        "episode_id": str(doc["episode_id"]),
        "attempt_id": doc.get("attempt_id"),
        "run_id": doc.get("run_id"),
        "scenario_id": str(doc.get("scenario_id", "")),
        "pair_id": str(doc.get("pair_id", "")),
        "condition": str(doc.get("condition", "")),
        "model": str(model.get("name", "") if isinstance(model, dict) else model),
        "model_revision": str(model.get("revision", "") if isinstance(model, dict) else ""),
        "clock": doc.get("clock"),
        "source": ep.source,
        "semantic": semantic,
        "request_time_s": sec(w.request_time),
        "duration_s": sec(len(track)),
        "speech_ms": ms(sum(e - s for s, e in w.segments)),
        "gold_answer": doc.get("gold_answer"),
        "t": t_entry,
        "silence_windows": windows,
        "n4": n4,
        "timeline": {
            "end": tl.end, "n_samples": tl.n_samples,
            "clips": [[c.idx, c.label, c.speaker, c.start, c.end] for c in tl.clips],
            "speech": _spans(w.segments),
            "t_wait": list(tl.t_wait) if tl.t_wait else None,
            "preamble": list(tl.preamble) if tl.preamble else None,
            "detector": DETECTOR_VERSION if ep.segments is None else "segments.json",
        },
    }
