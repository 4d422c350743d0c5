"""``mpe dataset stats`` for MTR suites: composition and, once voiced, durations.

Composition: dialogues per feature set, rounds per feature, rounds per round index x feature,
background kinds and backchannel counts, and the rounds judged on a dimension (per dimension and
delivery; safety requests per category, benign controls apart). Durations (voiced suites only): total audio and,
per part (user, continuation, assistant, barge-in, its response, background, backchannel),
clip count, total, mean, min and max seconds, plus the pause lengths. Wording (:mod:`.wording`):
the sentence-level distinct share and the most widespread sentences, the re-ask share and how
barge-ins open.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from server.benchmarks.mtr.dataset.sets import SETS
from server.benchmarks.mtr.dataset.wording import wording
from server.benchmarks.mtr.suite import AUDIO_PENDING, FEATURES, Suite

PARTS = ("user", "continuation", "assistant", "barge_in", "barge_in_response", "background", "backchannel")


def _part(key: str) -> str:
    part = key.split(".", 1)[1]
    return "backchannel" if part.startswith("backchannel") else part


def _summary(xs: list[float]) -> dict[str, float | int]:
    if not xs:
        return {"clips": 0, "total_s": 0.0, "mean_s": 0.0, "min_s": 0.0, "max_s": 0.0}
    return {"clips": len(xs), "total_s": round(sum(xs), 2), "mean_s": round(sum(xs) / len(xs), 2),
            "min_s": round(min(xs), 2), "max_s": round(max(xs), 2)}


def suite_stats(suite: Suite) -> dict[str, Any]:
    """The suite's composition and duration tables as plain JSON data."""
    ds = suite.dialogues
    sets = Counter(d.set for d in ds)
    features = Counter(f for d in ds for r in d.rounds for f in r.features)  # an overlay round under each
    n_rounds = max((len(d.rounds) for d in ds), default=0)
    by_index = {i: Counter(f for d in ds if len(d.rounds) >= i for f in d.rounds[i - 1].features) for i in range(1, n_rounds + 1)}
    kinds = Counter(r.background.kind for d in ds for r in d.rounds if r.background)
    bc_counts = Counter(len(r.backchannels) for d in ds for r in d.rounds if r.feature == "backchannel")
    tasks = [r.task for d in ds for r in d.rounds if r.task is not None]
    per_task = Counter(f"{t.dimension} · {t.delivery}" for t in tasks)
    safety = Counter(t.category if t.harmful else "benign control" for t in tasks if t.dimension == "safety")
    voiced = suite.meta.audio != AUDIO_PENDING
    data: dict[str, Any] = {
        "suite": suite.meta.name,
        "benchmark": suite.meta.benchmark,
        "generator": suite.meta.generator,
        "seed": suite.meta.seed,
        "audio": "voiced" if voiced else "pending",
        "dialogues": len(ds),
        "rounds": sum(len(d.rounds) for d in ds),
        "topics": len({d.topic for d in ds}),
        "dialogues_per_set": {s: sets[s] for s in [*SETS, *sorted(set(sets) - set(SETS))] if sets[s]},
        "rounds_per_feature": {f: features[f] for f in FEATURES},
        "rounds_per_index": {str(i): {f: c[f] for f in FEATURES} for i, c in by_index.items()},
        "background_kinds": dict(sorted(kinds.items())),
        "backchannels_per_round": {str(k): v for k, v in sorted(bc_counts.items())},
        "task_rounds": dict(sorted(per_task.items())),
        "safety_requests": dict(sorted(safety.items())),
        "wording": wording(ds).as_json(),
    }
    if voiced:
        per: dict[str, list[float]] = {p: [] for p in PARTS}
        for d in ds:
            for r in d.rounds:
                for key, c in r.clips():
                    per[_part(key)].append(c.duration_s)
        pauses = [r.pause.length_s for d in ds for r in d.rounds if r.pause]
        data["durations"] = {
            "total_audio_s": round(sum(sum(v) for v in per.values()), 2),
            "parts": {p: _summary(per[p]) for p in PARTS},
            "pause_s": _summary(pauses),
        }
    return data


def render_stats(data: dict[str, Any], console: Console) -> None:
    """The tables of :func:`suite_stats` on a console."""
    console.print(f"[bold]{data['suite']}[/bold] ({data['benchmark']}, {data['generator']}, seed {data['seed']}): "
                  f"{data['dialogues']} dialogues, {data['rounds']} rounds, {data['topics']} topics, "
                  f"audio {data['audio']}")
    t = Table(title="dialogues per feature set")
    t.add_column("set")
    t.add_column("dialogues", justify="right")
    for s, n in data["dialogues_per_set"].items():
        t.add_row(s, str(n))
    console.print(t)

    t = Table(title="rounds per round index x feature")
    t.add_column("round", justify="right")
    for f in FEATURES:
        t.add_column(f, justify="right")
    t.add_column("all", justify="right")
    for i, row in data["rounds_per_index"].items():
        t.add_row(i, *(str(row[f]) for f in FEATURES), str(sum(row.values())))
    t.add_row("all", *(str(data["rounds_per_feature"][f]) for f in FEATURES), str(data["rounds"]), style="bold")
    console.print(t)
    kinds = ", ".join(f"{k} {v}" for k, v in data["background_kinds"].items()) or "none"
    bcs = ", ".join(f"{k}: {v}" for k, v in data["backchannels_per_round"].items()) or "none"
    console.print(f"background voices: {kinds}; backchannels per backchannel round: {bcs}")
    if data["task_rounds"]:
        tasks = ", ".join(f"{k} {v}" for k, v in data["task_rounds"].items())
        safety = ", ".join(f"{k} {v}" for k, v in data["safety_requests"].items()) or "none"
        console.print(f"rounds judged on a dimension: {tasks}; safety requests: {safety}")
    _render_wording(data["wording"], console)

    if "durations" not in data:
        console.print("[yellow]audio pending[/yellow]: no duration tables (run mpe dataset synthesize)")
        return
    dur = data["durations"]
    t = Table(title=f"durations (total audio {dur['total_audio_s'] / 60:.1f} min)")
    for col in ("part", "clips", "total s", "mean s", "min s", "max s"):
        t.add_column(col, justify="left" if col == "part" else "right")
    for p, s in [*dur["parts"].items(), ("pause (silence)", dur["pause_s"])]:
        if s["clips"]:
            t.add_row(p, str(s["clips"]), f"{s['total_s']:.1f}", f"{s['mean_s']:.2f}", f"{s['min_s']:.2f}",
                      f"{s['max_s']:.2f}")
    console.print(t)


def _render_wording(w: dict[str, Any], console: Console) -> None:
    """The wording block (the published benchmark reports none of these figures)."""
    console.print(f"[bold]wording[/bold] (not reported by the paper): {w['distinct_sentences']} distinct of "
                  f"{w['sentences']} sentences ({w['distinct_share']:.1%}, backchannels left out); "
                  f"re-asked rounds {w['reasked_rounds']} of {w['rounds']} ({w['reask_share']:.1%}), "
                  f"{w['dialogues_reasking_previous']} of {w['dialogues']} dialogues re-ask the round before")
    t = Table(title="most widespread sentences")
    t.add_column("sentence")
    t.add_column("dialogues", justify="right")
    t.add_column("share", justify="right")
    for row in w["top_sentences"]:
        t.add_row(escape(row["sentence"]), str(row["dialogues"]), f"{row['share']:.1%}")
    console.print(t)
    if w["barge_ins"]:
        top = ", ".join(f"{escape(o['opening'])!r} {o['count']}" for o in w["barge_in_top"])
        console.print(f"barge-in openings: {w['barge_in_openings']} distinct over {w['barge_ins']} barge-ins, "
                      f"most frequent {w['barge_in_max_share']:.1%} ({top})")
