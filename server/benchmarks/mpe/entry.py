"""The scoring entry of one Duplex-MPE episode (§6, §7): the ``episodes[]`` item of
``mpe score --json``, the JSON stored per episode of a scoring, and the ``scores`` of the
API's episode document that the pages read.

One serialisation, ``model_dump(mode="json")``, and one parse, ``model_validate``: a field
that is missing, unknown or of the wrong type is an error, never a default. Times inside
``timeline`` and ``fragments`` are stream samples (24 kHz); fields ending in ``_s`` / ``_ms``
are seconds / milliseconds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from server.benchmarks.mpe.judging import AnswerLabel
from server.benchmarks.mpe.judging import SilenceLabel as SilenceVerdict
from server.benchmarks.mpe.rules import N4Category, N4Outcome, SilenceLabel
from server.benchmarks.mpe.suite import bucket_of
from server.core.benchmark import JudgedItem, ScoreEntry, Span
from server.scoring.asr import pad_fragments
from server.scoring.loading import SegmentsSource

# Why a verdict is what it is (§6): no speech / no response (nothing to judge), no ASR
# (duration-only scoring), decided on duration alone, an empty transcript (fails), judged,
# or a reply without a label (fails: the judge's, or a text reference's decision). A text
# reference (``mpe reference``) that chose RESPOND in an N1-N3 window has ``responded`` (fails).
TReason = Literal["no_response", "no_asr", "duration", "empty_transcript", "judged", "unparseable"]
SilenceReason = Literal["no_speech", "no_asr", "duration", "empty_transcript", "judged", "unparseable", "responded"]
ClipSpan = tuple[int, str, str, int, int]  # (turn idx, label, speaker, start, end)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Addressed(_Part):
    """A window of one human turn, with the turn's addressee from the manifest (§2)."""

    addressee: str | None = Field(description="the turn's addressee in the manifest: a speaker letter, Aria, "
                                              "group, device; null when nobody (thinking aloud) or not given")

    @model_validator(mode="before")
    @classmethod
    def _stored_before_addressee(cls, data: Any) -> Any:
        """Entries stored before the addressee was recorded: not given."""
        if isinstance(data, dict) and "addressee" not in data:
            return {**data, "addressee": None}
        return data


class TScore(_Addressed):
    """§6 T: response presence, then the answer's correctness on its transcript."""

    turn_idx: int
    fresh: bool
    present: bool
    already_speaking: bool
    onset_s: float | None = Field(description="the fresh onset, or where the response starts when already speaking")
    e_t_s: float
    wait_end_s: float
    response_speech_ms: int
    fragments: list[Span] = Field(description="the response's speech, judged as one transcript")
    transcript: str | None
    transcript_id: int | None
    correct: bool | None = Field(description="null: not judged (no response, or no ASR)")
    verdict: AnswerLabel | None
    verdict_id: int | None
    reason: TReason
    verdict_note: str | None = Field(default=None, description="the rule's explanation when decided on duration")


class SilenceScore(_Addressed):
    """§6 N1-N3: a window passes without speech; otherwise its judged transcript decides."""

    turn_idx: int
    label: SilenceLabel
    start_s: float
    end_s: float
    speech_ms: int
    overlap_human_ms: int
    fragments: list[Span]
    passed: bool
    transcript: str | None
    transcript_id: int | None
    verdict: SilenceVerdict | None
    verdict_id: int | None
    reason: SilenceReason
    verdict_note: str | None = Field(default=None, description="the rule's explanation when decided on duration")
    utterance_type: str | None = Field(default=None, description="the turn's utterance type in the manifest "
                                       "(device_request, human_request, statement, self_talk); null when not given")


class N4Score(_Addressed):
    """§6 N4: window response, eligibility and the yield outcome of one N4Q/N4R pair (the
    addressee is N4Q's)."""

    q_idx: int
    r_idx: int
    window_response: bool
    category: N4Category
    eligible: bool
    outcome: N4Outcome | None = Field(description="eligible events only")
    speaking_at_t_R: bool
    t_R_s: float
    deadline_s: float
    t_E_s: float
    censored: bool = Field(description="the recording ends before the deadline")


class TimelineInfo(_Part):
    """What the room and the model did, in samples (the report draws it)."""

    end: int
    n_samples: int
    clips: list[ClipSpan]
    speech: list[Span]
    t_wait: tuple[int, int, str] | None = Field(description="(start, end, reason) of the wait after T")
    preamble: Span | None
    detector: str = Field(description="the detector version, or segments.json")
    segments: SegmentsSource

    @model_validator(mode="before")
    @classmethod
    def _stored_before_segments(cls, data: Any) -> Any:
        """Scorings stored before ``segments`` was recorded: their segments were the bundle's
        segments.json (so named in ``detector``) or a replay of the detector."""
        if isinstance(data, dict) and "segments" not in data and "detector" in data:
            return {**data, "segments": "segments.json" if data["detector"] == "segments.json" else "replay"}
        return data


class GraderInfo(_Part):
    """The answer-grading call of a text reference (``mpe reference --grader``): the LLM that graded T's
    answers against the gold answer, and its prompt version."""

    backend: Literal["claude", "openai", "google"]
    model: str
    prompt_version: str


class TextReferenceInfo(_Part):
    """Who decided an episode of a transcript-conditioned text reference (``mpe reference``): its
    backend (``rule``: the name-detection rule baseline; ``claude``, ``openai``, ``google``: an LLM),
    model and prompt version, and who graded its answers (``grader``; null: the scoring's judge)."""

    backend: Literal["rule", "claude", "openai", "google"]
    model: str
    prompt_version: str
    grader: GraderInfo | None = Field(default=None, description="the answer-grading call; null: the answers are "
                                                                "judged by ``mpe score --judge``")

    @property
    def rule_baseline(self) -> bool:
        return self.backend == "rule"

    def describe(self) -> str:
        """How reports name it: a text reference, and a rule baseline where it is one."""
        graded = (f"; answers graded by {self.grader.backend} {self.grader.model} ({self.grader.prompt_version})"
                  if self.grader else "; answers graded by the scoring's judge")
        if self.rule_baseline:
            return (f"text reference, RULE BASELINE ({self.model}, {self.prompt_version}; not a language model: "
                    f"responds when Aria is named and asked something, answers by repeating an earlier turn{graded})")
        return f"transcript-conditioned text reference ({self.backend} {self.model}, prompt {self.prompt_version}{graded})"


class EpisodeScore(ScoreEntry):
    """One scored Duplex-MPE episode: of a speech model from its recording, or of a text reference
    from its decisions on the script (``text_reference``; server.benchmarks.mpe.textref)."""

    pair_id: str
    model_revision: str
    clock: str | None
    semantic: bool = Field(description="transcripts and judges were used (false: duration only)")
    request_time_s: float = Field(description="first human turn to the start of T (input timing)")
    duration_s: float
    speech_ms: int
    gold_answer: str | None
    t: TScore
    silence_windows: list[SilenceScore]
    n4: list[N4Score]
    timeline: TimelineInfo
    text_reference: TextReferenceInfo | None = Field(
        description="the text reference whose decisions on the script made this entry (no audio: T present = "
                    "RESPOND, an N1-N3 window fails on RESPOND, N4Q window response = RESPOND); null: a speech model")

    @model_validator(mode="before")
    @classmethod
    def _stored_before_text_references(cls, data: Any) -> Any:
        """Entries stored before text references existed were all scored from speech."""
        if isinstance(data, dict) and "text_reference" not in data:
            return {**data, "text_reference": None}
        return data

    @property
    def n_speakers(self) -> int | None:
        """How many people speak in the scenario (§2 ``n_speakers``: every one of them has a turn)."""
        return len({c[2] for c in self.timeline.clips}) or None

    @property
    def t_bucket(self) -> str | None:
        """T's position bucket (§2 ``t_bucket``), by the suite's own rule over the turns played."""
        labels = [c[1] for c in self.timeline.clips]
        return bucket_of(labels.index("T"), len(labels)) if "T" in labels else None

    def judged(self) -> list[JudgedItem]:
        t, tl = self.t, self.timeline

        def heard(fragments: list[Span]) -> list[Span]:  # the audio the ASR was given (scoring.py)
            return pad_fragments(fragments, tl.speech, tl.n_samples)

        items = [] if t.verdict_id is None else [JudgedItem(
            task="answer", turn_idx=t.turn_idx, fragments=heard(t.fragments), transcript=t.transcript,
            verdict_id=t.verdict_id, label=t.verdict, reference=self.gold_answer)]
        items += [JudgedItem(task="silence", turn_idx=w.turn_idx, fragments=heard(w.fragments),
                             transcript=w.transcript, verdict_id=w.verdict_id, label=w.verdict)
                  for w in self.silence_windows if w.verdict_id is not None]
        return items
