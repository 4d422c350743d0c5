#!/usr/bin/env python
"""The bridge check's rate line (server/bridgecheck/vocaltract.py) on the voices available offline:
the apparent vocal-tract length of each voice as a correct bridge sends it, and as a bridge with a
sample-rate mix-up does.

Conditions, each as the server records the bridge's speech (a 24 kHz track):

``24k``        a correct 24 kHz bridge
``16k``        a correct 16 kHz bridge (the speech resampled to 16 kHz, the server brings it back to 24 kHz)
``16k-said``   announces 16 kHz, sends 24 kHz audio: played 1.5 times slow (formants x 2/3): must fail
``24k-said``   announces 24 kHz, sends 16 kHz audio: played 1.5 times fast (formants x 3/2): should warn

Voices: piper ``joe`` (the project's TTS voice), espeak-ng's four default speakers (two male,
two female variants), and Kokoro's when its extra is installed. Each voice says two sentences of
about the probe reply's length; the speech segments come from the project's detector, as in a
check. The verdicts use the bounds of server/bridgecheck/evaluate.py (from published data, never
from these voices).

Usage::

    python bench/vocal_tract.py            # the table (Markdown)
    python bench/vocal_tract.py --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clients.codec import STREAM_RATE  # noqa: E402
from server.bridgecheck.evaluate import TRACT_FAIL_CM, TRACT_WARN_CM  # noqa: E402
from server.bridgecheck.vocaltract import estimate, tract_frames  # noqa: E402
from server.core.detector import detect_segments  # noqa: E402
from server.tts import ESPEAK_VOICES, KOKORO_VOICES, TTSUnavailable, kokoro_available, speak  # noqa: E402

RATE = STREAM_RATE
SENTENCES = (
    "Yes, I can hear you clearly. The weather is fine today and I am happy to help with anything you need.",
    "Sure, it is a quarter past three. Is there anything else you would like to know about the schedule?",
)
CONDITIONS = ("24k", "16k", "16k-said", "24k-said")


def recorded(x: np.ndarray, condition: str) -> np.ndarray:
    """The 24 kHz track the server records when a bridge sends ``x`` (24 kHz speech) under ``condition``."""
    if condition == "24k":
        return x
    if condition == "16k":
        return soxr.resample(soxr.resample(x, RATE, 16_000), 16_000, RATE).astype(np.int16)
    if condition == "16k-said":  # 24 kHz samples taken as 16 kHz and resampled to 24 kHz
        return soxr.resample(x, 16_000, RATE).astype(np.int16)
    return soxr.resample(x, RATE, 16_000).astype(np.int16)  # 16 kHz samples taken as 24 kHz


def verdict(length_cm: float) -> str:
    return "fail" if length_cm > TRACT_FAIL_CM else "warn" if length_cm < TRACT_WARN_CM else "pass"


def voices() -> list[str]:
    found = ["piper:joe@1.0", *ESPEAK_VOICES.values()]
    if kokoro_available():
        found += list(KOKORO_VOICES.values())
    return found


def measure(data_dir: Path) -> list[dict]:
    rows = []
    for voice in voices():
        try:
            speech = [speak(text, voice, data_dir) for text in SENTENCES]
        except TTSUnavailable as e:
            print(f"{voice}: skipped ({e})", file=sys.stderr)
            continue
        for i, x in enumerate(speech):
            row = {"voice": voice, "sentence": i + 1}
            for condition in CONDITIONS:
                y = recorded(x, condition)
                spans = [(s.start, s.end) for s in detect_segments(y)]
                found = estimate([tract_frames(y, RATE, spans)])
                row[condition] = None if found is None else round(found.length_cm, 1)
            rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--data-dir", type=Path, help="TTS cache directory (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(args.data_dir or Path(tmp))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"fail above {TRACT_FAIL_CM:.2f} cm, warn below {TRACT_WARN_CM:.2f} cm\n")
    print("| voice | sentence | " + " | ".join(CONDITIONS) + " |")
    print("|---|---|" + "---|" * len(CONDITIONS))
    for r in rows:
        cells = ["-" if r[c] is None else f"{r[c]:.1f} ({verdict(r[c])})" for c in CONDITIONS]
        print(f"| {r['voice']} | {r['sentence']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
