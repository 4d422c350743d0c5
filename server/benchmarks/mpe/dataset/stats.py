"""Suite accounting: composition and duration tables, in the spirit of a paper's data section.

:func:`suite_stats` is a pure function of a loaded suite and returns plain data (the
``--json`` output); :func:`render_stats` draws it as rich tables.

Durations per condition: a *scene* is one scenario version's human speech (the sum of its
clips); *turn* and *T* are single clips; the *minimum episode* adds what the scheduler
always plays around them (preamble, 0.5 s after every clip, 3 s after N4Q) and leaves out
the open-ended wait after T. Clip time is *distinct* when counted once per clip file and
*reused* for every further play of the same file (a turn shared by both conditions plays
twice, once per condition).

Realism, set against the paper's figures (:func:`realism`), with or without audio:

* *distinct turn texts*: the turn texts of a suite are its spoken lines, one per turn of
  each pair, where a turn whose text is the same in both conditions counts once and a
  turn whose text differs counts once per condition (for a generated suite, one per clip
  file); the figure is the number of different strings among them over their number.
* *conversation* and *turn* durations: a conversation is one scenario version played
  through, its clips plus the 0.5 s the scheduler inserts after each (DESIGN §3; the
  open-ended wait after T and the longer pause after an N4 question left out). Voiced
  suites use the clip durations; text-only suites estimate each clip from its words at
  :data:`SPEAKING_RATE_WPS`.
* *preceding-turn revisions*: pairs whose turn right before T differs between the
  explicit and the implicit version.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from server.benchmarks.mpe.scheduler import GAP_S, N4_GAP_S  # §3: silence after each clip / after N4Q
from server.benchmarks.mpe.suite import CONDITIONS, LABELS, T_BUCKETS, Suite, audio_pending, mentions_aria
from server.datasets.realism import normalise, sentence_spread, split_sentences, top_share

# Words per second of the default piper voices as the suites use them (joe at four pitches):
# 1,123 words in 339.4 s over 48 turns of a paper-length suite, each in its speaker's voice
# (joe@1.0 alone: 3.2; the slowest, joe@0.84: 3.0; the fastest, joe@1.19: 3.6).
SPEAKING_RATE_WPS = 3.3

# The paper's figures that suites are set against: the mean conversation (99.8 s), the mean
# T turn (about 8 s) and the pairs whose turn before T was revised (42 of 2,000). Its finer
# per-label duration tables (App. A2.5) are not reproduced here.
PAPER_CONVERSATION_S = 99.8
PAPER_T_S = 8.0
PAPER_REVISED_PAIRS, PAPER_PAIRS = 42, 2000
# The paper's implicit versions whose cue is in T itself (1,958 of 2,000; the other 42 revise
# the turn before T).
PAPER_CUE_IN_T = 1958

#: How many side questions / sentences the wording block lists.
TOP_SIDE_QUESTIONS = 5
TOP_SENTENCES = 10
_SECOND_PERSON = frozenset({"you", "your", "you're", "you've", "you'll", "you'd", "yours", "yourself"})
_ADDRESS = frozenset({"aria", "hey"})


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    a = np.asarray(values, dtype=np.float64)
    return {
        "n": int(a.size),
        "mean_s": round(float(a.mean()), 3),
        "median_s": round(float(np.median(a)), 3),
        "p5_s": round(float(np.percentile(a, 5)), 3),
        "p95_s": round(float(np.percentile(a, 95)), 3),
        "min_s": round(float(a.min()), 3),
        "max_s": round(float(a.max()), 3),
        "total_h": round(float(a.sum()) / 3600.0, 4),
    }


def suite_stats(suite: Suite) -> dict[str, Any]:
    meta = suite.meta
    pairs = suite.pairs()
    first = {pid: next(iter(v.values())) for pid, v in pairs.items()}
    pending = audio_pending(meta)

    comp: dict[str, Any] = {
        "pairs": len(pairs),
        "scenario_versions": len(suite.scenarios),
        "speakers": {str(k): v for k, v in sorted(Counter(sc.n_speakers for sc in first.values()).items())},
        "t_buckets": {b: sum(sc.t_bucket == b for sc in first.values()) for b in T_BUCKETS},
        "n4_pairs": sum(any(t.label == "N4Q" for t in sc.turns) for sc in first.values()),
    }
    others = Counter(sc.t_bucket for sc in first.values() if sc.t_bucket not in T_BUCKETS)
    if others:
        comp["t_buckets"].update(dict(others))
    comp["n4_share"] = round(comp["n4_pairs"] / len(pairs), 4) if pairs else 0.0
    comp["turns_per_scenario"] = _counts(Counter(len(sc.turns) for sc in first.values()))
    comp["labels"] = {
        cond: {lab: sum(t.label == lab for sc in suite.scenarios if sc.condition == cond for t in sc.turns)
               for lab in sorted(LABELS)}
        for cond in CONDITIONS
    }
    # §2: an N4 event is an N4Q with its N4R; a pair may hold several.
    comp["n4_events"] = {cond: comp["labels"][cond]["N4Q"] for cond in CONDITIONS}
    # Implicit cue: the turn before T kept (the context is in T or earlier), or revised too.
    revised = _revised_pairs(pairs)
    comp["implicit_cue"] = {"turn_before_t_kept": len(pairs) - revised, "revised_turn_before_t": revised}
    comp["attributes"] = {
        key: dict(Counter(sc.attributes.get(key, "") for sc in first.values()).most_common())
        for key in ("setting", "activity", "relationship", "device_context", "register")
    }
    words = [len(t.text.split()) for sc in suite.scenarios for t in sc.turns]
    comp["words_per_turn"] = round(float(np.mean(words)), 2) if words else 0.0

    out: dict[str, Any] = {
        "name": meta.name,
        "version": meta.version,
        "generator": meta.generator,
        "seed": meta.seed,
        "audio": "pending" if pending else (meta.model_extra or {}).get("audio", "present"),
        "composition": comp,
        "realism": realism(suite, revised=revised),
    }
    if pending:
        return out

    durations: dict[str, Any] = {}
    for cond in CONDITIONS:
        scs = [sc for sc in suite.scenarios if sc.condition == cond]
        scene = [sum(t.duration_s for t in sc.turns) for sc in scs]
        episode = [meta.preamble.duration_s + GAP_S
                   + sum(t.duration_s + (N4_GAP_S if t.label == "N4Q" else GAP_S) for t in sc.turns) for sc in scs]
        durations[cond] = {
            "scene": _summary(scene),
            "turn": _summary([t.duration_s for sc in scs for t in sc.turns]),
            "t": _summary([t.duration_s for sc in scs for t in sc.turns if t.label == "T"]),
            "min_episode": _summary(episode),
        }
    played: dict[str, float] = {}
    plays: Counter = Counter()
    for sc in suite.scenarios:
        for t in sc.turns:
            played[t.clip] = t.duration_s
            plays[t.clip] += 1
    distinct = sum(played.values())
    total = sum(played[c] * n for c, n in plays.items())
    shared = sum(d for c, d in played.items() if plays[c] > 1)
    out["durations"] = durations
    out["clips"] = {
        "files": len(played),
        "distinct_h": round(distinct / 3600.0, 4),
        "played_h": round(total / 3600.0, 4),
        "reused_h": round((total - distinct) / 3600.0, 4),
        "shared_by_conditions_h": round(shared / 3600.0, 4),
        "preamble_s": meta.preamble.duration_s,
    }
    return out


def _revised_pairs(pairs: dict) -> int:
    revised = 0
    for p in pairs.values():
        if set(p) >= set(CONDITIONS):
            ex, im = p["explicit"], p["implicit"]
            try:  # §2: T is paired by label, not position (the versions may differ in length)
                te, ti = ex.t_index, im.t_index
            except ValueError:
                continue
            if te > 0 and ti > 0 and ex.turns[te - 1].text != im.turns[ti - 1].text:
                revised += 1
    return revised


def turn_texts(suite: Suite) -> list[str]:
    """The suite's spoken lines: per pair, each turn's text once, or once per condition
    where the conditions' texts differ (see the module docstring)."""
    seen: set[tuple[str, int, str]] = set()
    out = []
    for sc in suite.scenarios:
        for i, t in enumerate(sc.turns):
            key = (sc.pair_id, i, t.text)
            if key not in seen:
                seen.add(key)
                out.append(t.text)
    return out


def estimated_duration_s(text: str) -> float:
    """A clip's duration estimated from its words (text-only suites)."""
    return len(text.split()) / SPEAKING_RATE_WPS


def realism(suite: Suite, revised: int | None = None) -> dict[str, Any]:
    """The figures that say how much a suite's conversations resemble the paper's."""
    pairs = suite.pairs()
    texts = turn_texts(suite)
    voiced = not audio_pending(suite.meta)

    def dur(t) -> float:
        return t.duration_s if voiced else estimated_duration_s(t.text)

    conv = [sum(dur(t) + GAP_S for t in sc.turns) for sc in suite.scenarios]
    by_label: dict[str, list[float]] = {lab: [] for lab in sorted(LABELS)}
    for sc in suite.scenarios:
        for t in sc.turns:
            by_label.setdefault(t.label, []).append(dur(t))
    if revised is None:
        revised = _revised_pairs(pairs)
    mean = lambda xs: round(float(np.mean(xs)), 2) if xs else 0.0  # noqa: E731
    return {
        "turn_texts": len(texts),
        "distinct_turn_texts": len(set(texts)),
        "distinct_share": round(len(set(texts)) / len(texts), 4) if texts else 0.0,
        "durations_from": "clips" if voiced else "words",
        "speaking_rate_wps": None if voiced else SPEAKING_RATE_WPS,
        "conversation_mean_s": mean(conv),
        "t_mean_s": mean(by_label.get("T", [])),
        "turn_mean_s": mean([d for ds in by_label.values() for d in ds]),
        "turn_mean_s_by_label": {lab: mean(ds) for lab, ds in by_label.items()},
        "preceding_revised_pairs": revised,
        "preceding_revised_share": round(revised / len(pairs), 4) if pairs else 0.0,
        **wording(suite),
        "paper": {
            "conversation_mean_s": PAPER_CONVERSATION_S,
            "t_mean_s": PAPER_T_S,
            "preceding_revised_pairs": PAPER_REVISED_PAIRS,
            "pairs": PAPER_PAIRS,
            "preceding_revised_share": round(PAPER_REVISED_PAIRS / PAPER_PAIRS, 4),
            "cue_in_t_pairs": PAPER_CUE_IN_T,
            "cue_in_t_share": round(PAPER_CUE_IN_T / PAPER_PAIRS, 4),
        },
    }


def side_question(text: str) -> str:
    """The side question of an N4Q turn: its last question sentence without the address
    ("Aria", "hey Aria"), so the same question asked by name or not counts once."""
    questions = [s for s in split_sentences(text) if s.endswith("?")] or [text]
    words = normalise(questions[-1].split(": ")[-1]).split()  # "while your light's on: is it ...?"
    if "aria" in words:  # "oh and Aria, is it ...?" / "is it ..., Aria?": the words on the question's side
        i = words.index("aria")
        words = words[i + 1:] if 2 * i < len(words) else words[:i]
    return " ".join(w for w in words if w not in _ADDRESS)


def implicit_cue(explicit_t: str, implicit_t: str) -> str | None:
    """The cue the implicit T adds to the request: its words that the explicit T does not
    have, in order, when they speak to someone ("you ..."); None when the implicit T only
    drops the name (a bare question to the room)."""
    left = Counter(normalise(explicit_t).split())
    extra = []
    for w in normalise(implicit_t).split():
        if left[w] > 0:
            left[w] -= 1
        else:
            extra.append(w)
    return " ".join(extra) if _SECOND_PERSON & set(extra) else None


def wording(suite: Suite) -> dict[str, Any]:
    """Sentence-level wording figures: how varied the sentences are, how widespread the
    commonest ones, how concentrated the side questions, where the implicit cue sits and
    how varied its forms are."""
    pairs = suite.pairs()
    by_pair: dict[str, list[str]] = {}
    seen: set[tuple[str, int, str]] = set()
    for sc in suite.scenarios:
        for i, t in enumerate(sc.turns):
            if (sc.pair_id, i, t.text) not in seen:
                seen.add((sc.pair_id, i, t.text))
                by_pair.setdefault(sc.pair_id, []).append(t.text)
    spread = sentence_spread(list(by_pair.values()), top=TOP_SENTENCES)
    first = {pid: v.get("explicit") or next(iter(v.values())) for pid, v in pairs.items()}
    side = [side_question(t.text) for sc in first.values() for t in sc.turns if t.label == "N4Q"]
    side_share, side_top = top_share(side, TOP_SIDE_QUESTIONS)
    cues: Counter[str] = Counter()
    with_implicit = 0
    for p in pairs.values():
        if not set(p) >= set(CONDITIONS):
            continue
        try:
            ex, im = p["explicit"], p["implicit"]
            te, ti = ex.turns[ex.t_index], im.turns[im.t_index]
        except ValueError:
            continue
        with_implicit += 1
        cue = implicit_cue(te.text, ti.text) if not mentions_aria(ti.text) else None
        if cue is not None:
            cues[cue] += 1
    in_t = sum(cues.values())
    form, form_n = cues.most_common(1)[0] if cues else ("", 0)
    return {
        "sentences": spread.sentences,
        "distinct_sentences": spread.distinct,
        "sentence_distinct_share": round(spread.distinct_share, 4),
        "top_sentences": [{"sentence": c.sentence, "scenes": c.scenes, "share": c.share} for c in spread.top],
        "side_questions": len(side),
        "distinct_side_questions": len(set(side)),
        "top_side_questions_share": side_share,
        "top_side_questions": [{"question": q, "count": n} for q, n in side_top],
        "cue_in_t_pairs": in_t,
        "cue_in_t_share": round(in_t / with_implicit, 4) if with_implicit else 0.0,
        "cue_forms": len(cues),
        "top_cue_form": form,
        "top_cue_form_share": round(form_n / len(pairs), 4) if pairs else 0.0,
    }


def _counts(c: Counter) -> dict[str, int]:
    return {str(k): v for k, v in sorted(c.items())}


def _render_realism(r: dict[str, Any], console) -> None:
    from rich.table import Table

    paper = r["paper"]
    how = "clip durations" if r["durations_from"] == "clips" else \
        f"estimated from words at {r['speaking_rate_wps']} words/s"
    rt = Table(title=f"Realism against the paper (durations: {how}, + {GAP_S} s after each clip)")
    rt.add_column("quantity")
    rt.add_column("suite", justify="right")
    rt.add_column("paper", justify="right")
    rt.add_row("distinct turn texts", f"{r['distinct_turn_texts']} of {r['turn_texts']} "
               f"({100 * r['distinct_turn_texts'] / max(r['turn_texts'], 1):.1f} %)", "not published")
    rt.add_row("conversation mean (s)", f"{r['conversation_mean_s']:.1f}", f"{paper['conversation_mean_s']:.1f}")
    rt.add_row("T turn mean (s)", f"{r['t_mean_s']:.2f}", f"about {paper['t_mean_s']:.0f}")
    rt.add_row("turn mean (s), all labels", f"{r['turn_mean_s']:.2f}", "not available")
    for lab, v in r["turn_mean_s_by_label"].items():
        if lab == "T":
            continue
        rt.add_row(f"  {lab} turn mean (s)", f"{v:.2f}", "not available")
    rt.add_row("turn before T revised (pairs)",
               f"{r['preceding_revised_pairs']} ({100 * r['preceding_revised_share']:.2f} %)",
               f"{paper['preceding_revised_pairs']} of {paper['pairs']} "
               f"({100 * paper['preceding_revised_share']:.2f} %)")
    rt.add_row("distinct sentences", f"{r['distinct_sentences']} of {r['sentences']} "
               f"({100 * r['sentence_distinct_share']:.1f} %)", "not published")
    if r["top_sentences"]:
        top = r["top_sentences"][0]
        rt.add_row("most widespread sentence (scenes)", f"{top['scenes']} ({100 * top['share']:.1f} %)",
                   "not published")
    rt.add_row(f"top {TOP_SIDE_QUESTIONS} side questions (of N4 events)",
               f"{100 * r['top_side_questions_share']:.1f} % ({r['distinct_side_questions']} distinct "
               f"of {r['side_questions']})", "not published")
    rt.add_row("implicit cue in T (pairs)", f"{r['cue_in_t_pairs']} ({100 * r['cue_in_t_share']:.1f} %)",
               f"{paper['cue_in_t_pairs']} of {paper['pairs']} ({100 * paper['cue_in_t_share']:.1f} %)")
    rt.add_row("implicit cue forms / commonest form's share of pairs",
               f"{r['cue_forms']} / {100 * r['top_cue_form_share']:.1f} %", "not published")
    console.print(rt)
    tops = ((f"The {len(r['top_sentences'])} most widespread sentences (scenes they occur in)", "sentence",
             "scenes", [(c["sentence"], f"{c['scenes']} ({100 * c['share']:.1f} %)") for c in r["top_sentences"]]),
            (f"The {len(r['top_side_questions'])} commonest side questions (N4 events)", "question", "events",
             [(q["question"], str(q["count"])) for q in r["top_side_questions"]]))
    for title, what, count, rows in tops:
        if rows:
            t = Table(title=title)
            t.add_column(what)
            t.add_column(count, justify="right")
            for row in rows:
                t.add_row(*row)
            console.print(t)


def render_stats(stats: dict[str, Any], console) -> None:
    """Rich tables for ``mpe dataset stats``."""
    from rich.table import Table

    comp = stats["composition"]
    console.print(f"[bold]{stats['name']}[/bold] v{stats['version']}  generator={stats['generator']} "
                  f"seed={stats['seed']}  audio={'pending' if stats['audio'] == 'pending' else 'synthesised'}")
    t = Table(title="Composition (per pair)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("pairs", str(comp["pairs"]))
    t.add_row("scenario versions", str(comp["scenario_versions"]))
    for k, v in comp["speakers"].items():
        t.add_row(f"{k}-human scenarios", str(v))
    for k, v in comp["t_buckets"].items():
        t.add_row(f"T bucket {k}", str(v))
    t.add_row("pairs with an N4 event", f"{comp['n4_pairs']} ({100 * comp['n4_share']:.1f} %)")
    t.add_row("N4 events per condition", " / ".join(f"{c}: {v}" for c, v in comp["n4_events"].items()))
    t.add_row("turn before T kept / revised for the implicit version",
              f"{comp['implicit_cue']['turn_before_t_kept']} / {comp['implicit_cue']['revised_turn_before_t']}")
    t.add_row("turns per scenario", ", ".join(f"{k}: {v}" for k, v in comp["turns_per_scenario"].items()))
    t.add_row("words per turn (mean)", str(comp["words_per_turn"]))
    console.print(t)

    lt = Table(title="Turn labels per condition")
    lt.add_column("label")
    for cond in comp["labels"]:
        lt.add_column(cond, justify="right")
    for lab in sorted(LABELS):
        lt.add_row(lab, *(str(comp["labels"][c][lab]) for c in comp["labels"]))
    console.print(lt)

    _render_realism(stats["realism"], console)

    at = Table(title="Scene attributes (pairs)")
    at.add_column("attribute")
    at.add_column("values")
    for key, counts in comp["attributes"].items():
        at.add_row(key, "; ".join(f"{v} ({n})" for v, n in counts.items()))
    console.print(at)

    if "durations" not in stats:
        console.print("[yellow]audio pending[/yellow]: no duration tables (run mpe dataset synthesize)")
        return
    for cond, d in stats["durations"].items():
        dt = Table(title=f"Durations, {cond} condition (seconds; totals in hours)")
        for col in ("unit", "n", "mean", "median", "p5", "p95", "total h"):
            dt.add_column(col, justify="right" if col != "unit" else "left")
        for unit, label in (("scene", "scene (speech)"), ("turn", "turn"), ("t", "T turn"),
                            ("min_episode", "minimum episode")):
            s = d[unit]
            if s["n"] == 0:
                continue
            dt.add_row(label, str(s["n"]), f"{s['mean_s']:.2f}", f"{s['median_s']:.2f}", f"{s['p5_s']:.2f}",
                       f"{s['p95_s']:.2f}", f"{s['total_h']:.3f}")
        console.print(dt)
    c = stats["clips"]
    ct = Table(title="Clip time (hours)")
    for col in ("files", "distinct", "played", "reused", "shared by both conditions", "preamble s"):
        ct.add_column(col, justify="right")
    ct.add_row(str(c["files"]), f"{c['distinct_h']:.3f}", f"{c['played_h']:.3f}", f"{c['reused_h']:.3f}",
               f"{c['shared_by_conditions_h']:.3f}", f"{c['preamble_s']:.2f}")
    console.print(ct)
