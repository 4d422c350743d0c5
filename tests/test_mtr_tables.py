"""The paper's tables on literal score entries: the feature table takes each feature from its
single-feature set only (never the combinations' rounds pooled in), the feature-combination table
(S, S+I, S+I+P, S+I+P+B), and "not in this suite" where a set is missing; terminal, JSON and HTML."""

from __future__ import annotations

import json

from rich.console import Console

from server.benchmarks.mtr.entry import MTREpisodeScore, RoundScore
from server.benchmarks.mtr.metrics import NOT_IN_SUITE, ablation, compute_metrics, headline
from server.benchmarks.mtr.report import print_report, render_html


def rs(k: int, feature: str, ok: bool, latency: float | None = 0.5) -> RoundScore:
    return RoundScore(round=k, feature=feature, ok=ok, failure=None if ok else "no_response", responded=ok,
                      latency_s=latency if ok else None, interrupted=None, stop_latency_s=None,
                      barge_in_latency_s=None, own_backchannels=0, user_speech_s=2.0)


def ep(dialogue: str, set_: str, *rounds: RoundScore) -> MTREpisodeScore:
    return MTREpisodeScore(episode_id=f"e-{dialogue}", attempt_id=None, run_id=None, scenario_id=dialogue,
                           condition="free", model="m", source="db", dialogue_id=dialogue, set=set_, mode="free",
                           live_round=None, duration_s=60.0, speech=[], room=[], segments="none",
                           rounds=list(rounds))


ENTRIES = [
    # the smooth set: round 1 passes (0.4 s), round 2 fails -> 100 -> 50, latency 0.4 s
    ep("d1", "smooth", rs(1, "smooth", True, 0.4), rs(2, "smooth", False)),
    # S+I: its smooth rounds fail, its interruption rounds pass (1.5 s)
    ep("d2", "S+I", rs(1, "smooth", False), rs(2, "interruption", True, 1.5), rs(3, "smooth", False),
       rs(4, "interruption", True, 1.5)),
]


def test_the_headline_takes_each_feature_from_its_single_feature_set_only():
    q = compute_metrics(ENTRIES)["m"]["free"]
    assert q["smooth.r01"]["value"] == 0.5  # pooled over the sets: what the headline must not show
    cells = {c.label: c for c in headline(q)}
    smooth = cells["smooth"]
    assert (smooth.set, smooth.in_suite, smooth.rounds) == ("smooth", True, 2)
    assert (smooth.round1, smooth.mean_rounds, smooth.latency_s) == (1.0, 0.5, 0.4)
    for f in ("interruption", "pause", "background", "backchannel"):  # S+I's interruption rounds are no stand-in
        assert cells[f].set == f and not cells[f].in_suite and cells[f].round1 is None


def test_the_ablation_table_has_a_row_per_configuration_from_its_set():
    q = compute_metrics(ENTRIES)["m"]["free"]
    rows = [(c.label, c.set, c.in_suite, c.rounds, c.round1, c.mean_rounds) for c in ablation(q)]
    assert rows == [("S", "smooth", True, 2, 1.0, 0.5),
                    ("S+I", "S+I", True, 4, 0.0, 0.5),  # rounds 1-4: 0, 1, 0, 1
                    ("S+I+P", "S+I+P", False, 0, None, None), ("S+I+P+B", "S+I+P+B", False, 0, None, None)]


def test_terminal_json_and_html_show_both_tables_and_say_what_is_not_in_the_suite():
    console = Console(record=True, width=300)
    data = print_report(ENTRIES, console)
    text = console.export_text()
    row = next(line for line in text.splitlines() if line.startswith("│ m · free") and "→" in line)
    assert "100.0 → 50.0  0.40 s" in row and row.count(NOT_IN_SUITE) == 4
    assert "smooth (set smooth)" in text and "S (set smooth)" in text and "Feature combinations" in text
    combos = [line for line in text.splitlines() if line.startswith("│ m · free") and "│ 0.0 → 50.0 │" in line]
    assert len(combos) == 1 and combos[0].count(NOT_IN_SUITE) == 2
    assert [c["set"] for c in data["headline"]["m"]["free"]] == ["smooth", "interruption", "pause", "background",
                                                                  "backchannel"]
    assert [(c["label"], c["mean_rounds"]) for c in data["ablation"]["m"]["free"]] == [
        ("S", 0.5), ("S+I", 0.5), ("S+I+P", None), ("S+I+P+B", None)]
    json.dumps(data)  # what `mpe report --json` prints
    page = render_html(ENTRIES, max_timelines=0)
    assert "smooth (set smooth)" in page and "Feature combinations" in page and page.count(NOT_IN_SUITE) == 6
    assert "100.0 → 50.0 · 0.40 s" in page
