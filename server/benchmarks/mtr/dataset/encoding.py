"""Importer of a scenario-encoding file in the published layout (``mpe dataset import FILE --format
encoding``; docs/mtr.md "Importers").

The published encodings (``scenario_encoding_{smooth,interruption,pause,background}.json``,
``…_{1..4}.json``, notes §1) have no published schema. What the notes do state: per round, the
keys ``user_start/end``, ``model_start/end``, ``interruption_start/end``, ``pause_start/end``,
``background_start/end`` in seconds from the file's start, and, for the round-start file, entries
``{dialogue_id, round_num, scenario, timestamp: {…}}``. This importer accepts exactly that shape,
plus the texts a suite needs (what is said cannot be inferred from times):

* the file: a JSON array of entries, or JSON Lines (one entry per line, ``.jsonl``);
* an entry: ``dialogue_id`` (string or integer), ``round_num`` (1-based; ``round`` also read),
  ``scenario`` (``smooth``, ``interruption``, ``pause``, ``background``, ``backchannel`` or a
  published spelling such as ``smooth-turntaking``; or a combination as the published
  multi-scenario scripts read them, parts joined by ``_``, such as ``interruption_pause-handling``
  or ``smooth-turntaking_background_pause-handling_interruption``: an **overlay round** whose turn
  feature is interruption when named, else smooth, carrying the others, :func:`~.suite.split_features`),
  ``timestamp`` (the keys above; they may also
  stand at the entry's top level), ``user_text`` and ``model_text``; a pause round also
  ``continuation_text``; an interruption round ``interruption_text`` and
  ``interruption_response_text``; a background round ``background_text`` (and
  ``background_kind``: ``speaker``, the default, or ``broadcast``); a backchannel round
  ``backchannel_texts`` (a list).
* what the times become: a pause lasts ``pause_end − pause_start``; a barge-in starts
  ``interruption_start − model_start`` after the model's onset, a background voice
  ``background_start − model_start`` (an overlay round takes each of its features' times); the rest of the times are the published recording's and
  are not needed (our scheduler places the user's turn and waits for the model).

Entries are grouped by ``dialogue_id`` (in order of first appearance) and ordered by round; the
rounds of a dialogue must be 1…R. Every bad entry is named (``FILE:LINE`` for JSON Lines,
``FILE: entry I`` for an array) and nothing is written. The result is a text-only suite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.benchmarks.mtr.dataset.assemble import RoundText, assemble_round
from server.benchmarks.mtr.dataset.schema import ImportProblems
from server.benchmarks.mtr.dataset.timing import BACKCHANNEL_FIRST_S, BACKCHANNEL_GAP_S, Draw
from server.benchmarks.mtr.suite import Dialogue, Round, feature_set_name, features_of, split_features
from server.datasets.errors import DatasetError

TIME_KEYS = ("user_start", "user_end", "model_start", "model_end", "interruption_start", "interruption_end",
             "pause_start", "pause_end", "background_start", "background_end")
#: the text fields each feature needs beyond ``user_text`` and ``model_text``
NEEDS = {"pause": ("continuation_text",), "interruption": ("interruption_text", "interruption_response_text"),
         "background": ("background_text",), "backchannel": ("backchannel_texts",), "smooth": ()}
#: the times each feature's placement is taken from
TIMES = {"pause": ("pause_start", "pause_end"), "interruption": ("model_start", "interruption_start"),
         "background": ("model_start", "background_start"), "backchannel": (), "smooth": ()}


def _entries(path: Path) -> list[tuple[str, Any]]:
    """(where, raw entry) of every entry of the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    if path.suffix.lower() == ".jsonl":
        out, bad = [], []
        for line, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    out.append((f"{path}:{line}", json.loads(raw)))
                except ValueError as exc:
                    bad.append(f"{path}:{line}: not JSON ({exc.msg})")
        if bad:
            raise ImportProblems(bad)
        return out
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ImportProblems([f"{path}:{exc.lineno}: not JSON ({exc.msg})"]) from None  # type: ignore[attr-defined]
    if not isinstance(data, list):
        raise ImportProblems([f"{path}: expected a JSON array of round entries (or JSON Lines)"])
    return [(f"{path}: entry {i}", e) for i, e in enumerate(data, start=1)]


def _text(e: dict, key: str, problems: list[str], required: bool = True) -> str:
    v = e.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or (required and not v.strip()):
        problems.append(f"no {key}")
        return ""
    return v.strip()


def _times(e: dict, problems: list[str]) -> dict[str, float]:
    ts = e.get("timestamp", {})
    if not isinstance(ts, dict):
        problems.append("timestamp is not an object")
        return {}
    out = {}
    for k in TIME_KEYS:
        v = ts.get(k, e.get(k))
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            problems.append(f"{k} is not a time in seconds ({v!r})")
        else:
            out[k] = float(v)
    return out


@dataclass(frozen=True)
class Entry:
    """One round entry of an encoding file: where it is, its dialogue and round, texts and times."""

    where: str
    dialogue_id: str
    round: int
    text: RoundText
    times: dict[str, float]
    raw: dict


def parse_entry(e: Any, where: str, *, texts: bool = True) -> Entry | list[str]:
    """One entry's dialogue, round, features, texts and times, or its problems. ``texts``: the text
    fields are required (a suite to be voiced); without, they are read where given."""
    if not isinstance(e, dict):
        return ["not a JSON object"]
    p: list[str] = []
    did = e.get("dialogue_id")
    if isinstance(did, bool) or not isinstance(did, (str, int)) or not str(did).strip():
        p.append("no dialogue_id")
    k = e.get("round_num", e.get("round"))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        p.append(f"round_num must be an integer from 1 ({k!r})")
    label = e.get("scenario")
    features = features_of(label) if isinstance(label, str) else None
    split = split_features(features) if features else None
    if split is None:
        return p + [f"scenario {label!r} is not a feature (smooth, interruption, pause, background, backchannel, "
                    "or a published spelling) nor a combination over smooth-turntaking or interruption (e.g. "
                    "interruption_pause-handling)"]
    feature, overlay = split
    user, model = _text(e, "user_text", p, texts), _text(e, "model_text", p, texts)
    t = _times(e, p)
    extra: dict[str, Any] = {}
    for f in features:
        for key in NEEDS[f]:
            extra[key] = e.get(key) if key == "backchannel_texts" else _text(e, key, p, texts)
    if "backchannel" in features:
        bcs = extra["backchannel_texts"]
        if not isinstance(bcs, list) or not bcs or not all(isinstance(b, str) and b.strip() for b in bcs):
            p.append("backchannel_texts must be a list of non-empty strings")
    for f in features:
        a_key, b_key = TIMES[f] or (None, None)
        if a_key is None:
            continue
        missing = [x for x in (a_key, b_key) if x not in t]
        if missing:
            p.append(f"a {f} round needs {' and '.join(missing)}")
        elif t[b_key] < t[a_key] or (f == "pause" and t[b_key] == t[a_key]):
            p.append(f"{b_key} ({t[b_key]}) is before {a_key} ({t[a_key]})")
    kind = e.get("background_kind", "speaker")
    if "background" in features and kind not in ("speaker", "broadcast"):
        p.append(f"background_kind must be speaker or broadcast ({kind!r})")
    if p:
        return p
    text = RoundText(feature, user=user, assistant=model, continuation=extra.get("continuation_text"),
                     barge_in=extra.get("interruption_text"),
                     barge_in_response=extra.get("interruption_response_text"),
                     background_kind=kind if "background" in features else None,
                     background=extra.get("background_text"),
                     backchannels=tuple(b.strip() for b in extra.get("backchannel_texts") or ()),
                     overlay=tuple(overlay))
    return Entry(where, str(did).strip(), k, text, t, e)


def _draw(text: RoundText, t: dict[str, float]) -> Draw:
    """The placement the published times give; backchannels (no published times) at the low ends of
    our ranges: the first 0.8 s after the onset, then 1.0 s apart."""
    r2 = lambda x: round(x, 2)  # noqa: E731
    fs = (text.feature, *text.overlay)
    pause = r2(t["pause_end"] - t["pause_start"]) if "pause" in fs else 0.0
    barge = r2(t["interruption_start"] - t["model_start"]) if "interruption" in fs else 0.0
    bg = r2(t["background_start"] - t["model_start"]) if "background" in fs else 0.0
    return Draw(barge_in_after_s=barge, pause_s=pause, background_after_s=bg, backchannel_first_s=BACKCHANNEL_FIRST_S[0],
                backchannel_gaps_s=(BACKCHANNEL_GAP_S[0], BACKCHANNEL_GAP_S[0]))


def read_dialogue_entries(path: Path, *, texts: bool = True) -> dict[str, list[Entry]]:
    """The entries of an encoding file grouped by dialogue (in order of first appearance), each
    dialogue's ordered by round and numbered 1..R; ImportProblems names every bad entry."""
    bad: list[str] = []
    by_dialogue: dict[str, dict[int, Entry]] = {}
    for where, raw in _entries(path):
        got = parse_entry(raw, where, texts=texts)
        if isinstance(got, list):
            bad += [f"{where}: {m}" for m in got]
            continue
        rounds = by_dialogue.setdefault(got.dialogue_id, {})
        if got.round in rounds:
            bad.append(f"{where}: dialogue {got.dialogue_id} round {got.round} again (also {rounds[got.round].where})")
            continue
        rounds[got.round] = got
    out: dict[str, list[Entry]] = {}
    for did, rounds in by_dialogue.items():
        ks = sorted(rounds)
        if ks != list(range(1, len(ks) + 1)):
            bad.append(f"{path}: dialogue {did}: rounds {ks} are not 1..{len(ks)}")
            continue
        out[did] = [rounds[k] for k in ks]
    if bad or not out:
        raise ImportProblems(bad or [f"{path}: no entries"])
    return out


def set_name_of(rounds: list[Round]) -> str:
    """A dialogue's feature set from every feature its rounds carry."""
    features = [f for r in rounds for f in r.features]
    return feature_set_name(features) if features else "smooth"


def read_encoding(path: Path) -> list[Dialogue]:
    """The dialogues of an encoding file (module docstring); ImportProblems names every bad entry."""
    bad: list[str] = []
    dialogues = []
    for did, entries in read_dialogue_entries(path).items():
        rs: list[Round] = []
        for en in entries:
            try:
                rs.append(assemble_round(did, en.round, en.text, _draw(en.text, en.times)))
            except DatasetError as exc:
                bad.append(f"{en.where}: {exc}")
        dialogues.append(Dialogue(dialogue_id=did, set=set_name_of(rs), topic=f"encoding {did}", rounds=rs))
    if bad:
        raise ImportProblems(bad)
    return dialogues
