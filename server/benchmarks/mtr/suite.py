"""MTR-DuplexBench suites (DESIGN §13.2): the manifest schema, loading and validation.

A suite directory is the engine's (:mod:`server.engine.suitedir`): ``suite.json``
(:class:`MTRMeta`, ``"benchmark": "mtr-duplexbench"``), ``scenarios.jsonl`` with one
:class:`Dialogue` per line, and ``clips/``. A dialogue has R rounds (10 by default); each
round has a conversational **feature**, the user's clip, the ground-truth assistant response,
and the feature's own parts (a pause and the utterance's continuation, a barge-in and the
ground-truth answer to it, a background voice, listener backchannels), placed relative to the
model's actual speech onset by the scheduler. :func:`check_suite` returns every problem at once,
each naming its file, line, dialogue, round and rule id (:data:`RULES`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from server.benchmarks.mtr.judges import COMPLIANCE, REFUSALS, says
from server.engine.suitedir import (
    SCENARIOS_FILE,
    SUITE_FILE,
    SuiteError,
    clip_path,
    clip_problems,
    content_hash_of,
    lines_to_bytes,
    load_clip,
    meta_to_bytes,
    read_suite_files,
    suite_root,
    write_suite_files,
)

BENCHMARK_NAME = "mtr-duplexbench"
Feature = Literal["smooth", "interruption", "pause", "background", "backchannel"]
FEATURES: tuple[Feature, ...] = ("smooth", "interruption", "pause", "background", "backchannel")
#: short letters of the published combination sets (S, S+I, S+I+P, S+I+P+B) and of ours
FEATURE_LETTER: dict[str, str] = {"smooth": "S", "interruption": "I", "pause": "P", "background": "B",
                                  "backchannel": "C"}
#: history modes = the run conditions: ``gt`` (the published protocol: rounds before k are
#: ground truth, one episode per round) and ``free`` (one episode, the model's own history)
HISTORY_MODES: tuple[str, str] = ("gt", "free")
#: the benchmark's non-feature dimensions (DESIGN §12.5): what a round's ``task`` asks of the model
Dimension = Literal["quality", "instruction", "safety"]
DIMENSIONS: tuple[Dimension, ...] = ("quality", "instruction", "safety")
#: how a task's request reaches the model: the round's user turn, or a barge-in over its speech
Delivery = Literal["normal", "interruption"]
DELIVERIES: tuple[Delivery, ...] = ("normal", "interruption")
#: published spellings of a round's feature (the feature scripts' labels, notes §2)
FEATURE_ALIASES: dict[str, Feature] = {
    "smooth-turntaking": "smooth", "smooth_turntaking": "smooth", "smooth-turn-taking": "smooth",
    "pause-handling": "pause", "pause_handling": "pause", "background-speech": "background",
    "background_speech": "background", "backchanneling": "backchannel"}
ROLES = ("user", "assistant", "third", "broadcast")
AUDIO_PENDING = "pending"  # suite.json "audio": text-only suite, clips not synthesised yet


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Clip(_M):
    """One spoken line: its text and its clip (relative to the suite)."""

    text: str
    clip: str
    duration_s: float = Field(ge=0)


class Pause(_M):
    """Pause handling: the user stops mid-utterance for ``length_s``, then says ``continuation``."""

    length_s: float = Field(gt=0)
    continuation: Clip


class BargeIn(Clip):
    """Interruption: the user's new request, spoken over the model ``after_onset_s`` after its
    onset, and the ground-truth answer to it."""

    after_onset_s: float = Field(ge=0)
    response: Clip


class Background(Clip):
    """Background speech: a third party (``speaker``) or a TV/radio-like voice (``broadcast``),
    played ``after_onset_s`` after the model's onset."""

    kind: Literal["speaker", "broadcast"]
    after_onset_s: float = Field(ge=0)


class Backchannel(Clip):
    """A listener backchannel ("mm-hmm") played ``after_onset_s`` after the model's onset."""

    after_onset_s: float = Field(ge=0)


class Task(_M):
    """What a round is judged on beyond its feature (DESIGN §12.5). ``normal``: the request is the
    user's turn and the ground-truth reply its answer; ``interruption`` (an interruption round):
    the request is the barge-in and the reply to judge is the answer to it."""

    dimension: Dimension
    delivery: Delivery = "normal"
    answers: list[str] = Field(default_factory=list,
                               description="instruction: reference answers, any one is correct (none: correctness "
                                           "is not judged)")
    harmful: bool | None = Field(default=None, description="safety: a harmful request, or a benign control")
    category: str | None = Field(default=None, description="safety, harmful: the kind of harm")


#: the features a round may carry over its turn feature (an overlay round of a published combination set,
#: ``eval_3_scenarios.py`` / ``eval_4_scenarios.py``): a pause inside the user's turn, a background voice over
#: the reply; ``smooth`` over an interruption round names its turn-taking (scored as a smooth round's too)
OVERLAYS: tuple[Feature, ...] = ("smooth", "pause", "background")
#: the features whose round the overlays ride on
TURN_FEATURES: tuple[Feature, ...] = ("smooth", "interruption")


class SourceTimes(_M):
    """Where a round lies in the published source audio it was cut from (seconds from the file's start,
    the published encodings' keys; notes §1), kept by the published-layout import: a published-layout
    recording of the round (its stereo file, the same timeline) is scored on these times."""

    audio: str = Field(description="the source file, relative to the dataset's feature-audio folder "
                                   "(``original/<name>.wav`` or ``woPAUSE/<name>.wav``)")
    user_start: float = Field(ge=0)
    user_end: float = Field(ge=0)
    model_start: float = Field(ge=0)
    model_end: float = Field(ge=0)
    pause_start: float | None = None
    pause_end: float | None = None
    interruption_start: float | None = None
    interruption_end: float | None = None
    background_start: float | None = None
    background_end: float | None = None
    next_user_start: float | None = Field(default=None, description="where the next round's user turn starts "
                                                                    "(None: the last round; its file's end)")


class Round(_M):
    round: int = Field(ge=1, description="1-based")
    feature: Feature = Field(description="the round's feature; with overlays, its turn feature (smooth or "
                                         "interruption)")
    overlay: list[Feature] = Field(default_factory=list, exclude_if=lambda v: not v,
                                   description="further features the round carries at once (OVERLAYS), in "
                                               "FEATURES order: its verdict is given per feature")
    task: Task | None = Field(default=None, description="the dimension the round is judged on (none: its feature "
                                                        "only)")
    user: Clip
    assistant: Clip = Field(description="the ground-truth assistant response")
    pause: Pause | None = None
    barge_in: BargeIn | None = None
    background: Background | None = None
    backchannels: list[Backchannel] = Field(default_factory=list)
    source: SourceTimes | None = Field(default=None, exclude_if=lambda v: v is None,
                                       description="the round's times in the published audio it was cut from")

    @property
    def features(self) -> tuple[Feature, ...]:
        """Every feature the round carries: its own, then its overlays."""
        return (self.feature, *self.overlay)

    def label(self) -> str:
        """The round's features as one label (``interruption+pause``)."""
        return "+".join(self.features)

    def clips(self) -> Iterator[tuple[str, Clip]]:
        """Every clip of the round with its key (unique within the dialogue)."""
        p = f"r{self.round:02d}."
        yield p + "user", self.user
        yield p + "assistant", self.assistant
        if self.pause:
            yield p + "continuation", self.pause.continuation
        if self.barge_in:
            yield p + "barge_in", self.barge_in
            yield p + "barge_in_response", self.barge_in.response
        if self.background:
            yield p + "background", self.background
        for i, b in enumerate(self.backchannels):
            yield p + f"backchannel{i}", b

    def request_text(self) -> str:
        """What the user asks in the round: the barge-in of an interruption-delivered task, else
        the user's turn (with a pause round's continuation)."""
        if self.task is not None and self.task.delivery == "interruption" and self.barge_in is not None:
            return self.barge_in.text
        return " ".join([self.user.text] + ([self.pause.continuation.text] if self.pause else []))

    def reference_reply(self) -> str:
        """The ground-truth reply to :meth:`request_text`."""
        if self.task is not None and self.task.delivery == "interruption" and self.barge_in is not None:
            return self.barge_in.response.text
        return self.assistant.text


class Dialogue(_M):
    dialogue_id: str
    set: str = Field(description="the feature set: one feature name, or a combination like S+I+P+B")
    topic: str
    rounds: list[Round]


class MTRMeta(_M):
    benchmark: Literal["mtr-duplexbench"]
    name: str
    version: str
    generator: str
    seed: int
    voices: dict[str, str] = Field(description="role (user, assistant, third, broadcast) -> voice spec")
    audio: Literal["pending"] | None = None
    held_out: bool = Field(default=False, exclude_if=lambda v: not v,
                           description="the script is for admin tokens only (server.engine.disclosure)")


def key(round_: int, part: str) -> str:
    """The clip key of one part of a round (as :meth:`Round.clips` names it)."""
    return f"r{round_:02d}.{part}"


class Suite:
    """A loaded MTR suite: metadata, dialogues and access to its clips."""

    def __init__(self, root: Path | str, meta: MTRMeta, dialogues: list[Dialogue]) -> None:
        self.root = Path(root)
        self.meta = meta
        self.dialogues = dialogues
        self.lines: list[int] = []
        self._raw: tuple[bytes, bytes] | None = None
        self._index = {d.dialogue_id: d for d in dialogues}

    @classmethod
    def load(cls, path: Path | str) -> Suite:
        root = suite_root(path)
        meta, dialogues, lines, meta_bytes, scen_bytes = read_suite_files(root, MTRMeta, Dialogue)
        suite = cls(root, meta, dialogues)
        suite.lines, suite._raw = lines, (meta_bytes, scen_bytes)
        return suite

    @property
    def scenarios(self) -> list[Dialogue]:
        """The suite's items (the engine counts them as scenarios)."""
        return self.dialogues

    def dialogue(self, dialogue_id: str) -> Dialogue:
        try:
            return self._index[dialogue_id]
        except KeyError:
            raise SuiteError(f"suite {self.meta.name!r} has no dialogue {dialogue_id!r}") from None

    def clip_path(self, rel: str) -> Path:
        return clip_path(self.root, rel)

    def load_clip(self, rel: str) -> np.ndarray:
        return load_clip(self.root, rel)

    def content_hash(self) -> str:
        if self._raw is not None:
            return content_hash_of(*self._raw)
        return content_hash_of(meta_to_bytes(self.meta), lines_to_bytes(self.dialogues))

    def write(self) -> None:
        write_suite_files(self.root, self.meta, self.dialogues)


# -------------------------------------------------------------------- validation

#: a harmful request names what it wants; longer than this, it starts to say how
MAX_HARMFUL_REQUEST_WORDS = 30
RULES: dict[str, str] = {
    "suite-empty": "the suite has at least one dialogue",
    "unique-dialogue": "each dialogue_id appears once",
    "rounds-present": "a dialogue has rounds",
    "round-number": "rounds are numbered 1..R in order",
    "text-present": "every clip of a suite still to be voiced has text (a voiced suite's clips may have none: "
                    "published audio comes without), and so does a task round's request and reference reply",
    "feature-parts": "a round has exactly the parts of the features it carries (pause / barge_in / background / "
                     "backchannels), and no other feature's parts",
    "overlay": "a round's overlays are distinct features of OVERLAYS, none its own feature, over a smooth or "
               "interruption round (smooth over an interruption round only), in FEATURES order",
    "backchannel-order": "backchannels are placed in increasing order and do not overlap",
    "reply-covers": "the ground-truth response outlasts the background voice and the backchannels placed "
                    "over it (so the reference behaviour keeps talking through them), and the barge-in "
                    "starts inside it; a background voice over an interruption round ends before the barge-in "
                    "starts (the reference stops for the barge-in)",
    "task-delivery": "a task delivered as an interruption is an interruption round's, and an interruption "
                     "round's task is delivered as one",
    "task-fields": "a task has its dimension's fields only: reference answers for instruction, harmful for "
                   "safety (with a category when harmful), none for quality; answers and category are not blank",
    "task-reply": "the ground truth answers the task: an instruction round's reference reply says one of its "
                  "answers; a harmful request's is a refusal (refusal wording) that hands over no instructions",
    "task-request": "a harmful request carries no operational detail: at most "
                    f"{MAX_HARMFUL_REQUEST_WORDS} words and no instruction wording (steps, what you will need)",
    "voice-map": "the voice map names every role the suite's clips use",
    "audio-pending": "the suite's audio has been synthesised",
    "clip-path": "clip paths are relative and stay inside the suite",
    "clip-exists": "every clip exists and is readable audio",
    "clip-format": "clips are 24 kHz mono 16-bit WAV or FLAC",
    "clip-duration": "duration_s matches the clip's audio (within 1 ms)",
}
#: seconds the ground-truth response must still run after the last feature clip placed over it
REPLY_MARGIN_S = 2.0


@dataclass(frozen=True)
class Problem:
    rule: str
    message: str
    file: str = SCENARIOS_FILE
    line: int | None = None
    dialogue: str | None = None
    round: int | None = None

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line else "")
        scope = " ".join(x for x in (self.dialogue, f"round {self.round}" if self.round else None) if x)
        return f"{where}: {scope + ': ' if scope else ''}{self.message} [{self.rule}]"


def _roles(r: Round) -> set[str]:
    roles = {"user", "assistant"}
    if r.background:
        roles.add("third" if r.background.kind == "speaker" else "broadcast")
    return roles


def _round_problems(r: Round, voiced: bool = False) -> Iterator[tuple[str, str]]:
    for name, c in r.clips():
        if not c.text.strip() and not voiced:
            yield "text-present", f"clip {name} has no text"
    if voiced and r.task is not None and not (r.request_text().strip() and r.reference_reply().strip()):
        yield "text-present", "a task round's request or reference reply has no text"
    yield from _overlay_problems(r)
    parts = {"pause": r.pause is not None, "interruption": r.barge_in is not None,
             "background": r.background is not None, "backchannel": bool(r.backchannels)}
    for feature, present in parts.items():
        if present != (feature in r.features):
            what = "lacks" if not present else "has"
            yield "feature-parts", f"a {r.label()} round {what} {feature} parts"
    if r.barge_in and r.background and r.background.after_onset_s + r.background.duration_s > r.barge_in.after_onset_s:
        yield "reply-covers", (f"the background voice ends {r.background.after_onset_s + r.background.duration_s:.2f} s "
                               f"after the onset, after the barge-in starts ({r.barge_in.after_onset_s:.2f} s)")
    if r.task is not None:
        yield from _task_problems(r)
    reply = r.assistant.duration_s
    if r.barge_in and r.barge_in.after_onset_s >= reply:
        yield "reply-covers", (f"the barge-in starts {r.barge_in.after_onset_s:.2f} s after the onset, after the "
                               f"ground-truth response ends ({reply:.2f} s)")
    over = []
    if r.background:
        over.append(("background", r.background.after_onset_s + r.background.duration_s))
    end = -1.0
    for i, b in enumerate(r.backchannels):
        if b.after_onset_s < end:
            yield "backchannel-order", f"backchannel {i} starts before backchannel {i - 1} ends"
        end = b.after_onset_s + b.duration_s
        over.append((f"backchannel {i}", end))
    for name, stop in over:
        if stop + REPLY_MARGIN_S > reply:
            yield "reply-covers", (f"{name} ends {stop:.2f} s after the onset; the ground-truth response "
                                   f"({reply:.2f} s) must run {REPLY_MARGIN_S} s longer")


def _overlay_problems(r: Round) -> Iterator[tuple[str, str]]:
    if not r.overlay:
        return
    if r.feature not in TURN_FEATURES:
        yield "overlay", f"overlays {r.overlay} over a {r.feature} round (only over {' or '.join(TURN_FEATURES)})"
    bad = [f for f in r.overlay if f not in OVERLAYS or f == r.feature or (f == "smooth" and r.feature != "interruption")]
    if bad:
        yield "overlay", f"{', '.join(bad)} cannot overlay a {r.feature} round"
    if len(set(r.overlay)) != len(r.overlay) or list(r.overlay) != sorted(r.overlay, key=FEATURES.index):
        yield "overlay", f"overlays {r.overlay} repeat or are out of order ({', '.join(FEATURES)})"


def _task_problems(r: Round) -> Iterator[tuple[str, str]]:
    t, feature = r.task, r.feature
    assert t is not None
    if (t.delivery == "interruption") != (feature == "interruption"):
        yield "task-delivery", f"a {feature} round has a task delivered as {t.delivery!r}"
    yield from _task_text_problems(r, t)
    if t.answers and t.dimension != "instruction":
        yield "task-fields", f"a {t.dimension} task has reference answers"
    if any(not a.strip() for a in t.answers):
        yield "task-fields", "a reference answer is blank"
    if t.dimension == "safety":
        if t.harmful is None:
            yield "task-fields", "a safety task does not say whether its request is harmful"
        elif t.harmful and not (t.category or "").strip():
            yield "task-fields", "a harmful safety request has no category"
        elif not t.harmful and t.category is not None:
            yield "task-fields", "a benign safety control has a category"
    elif t.harmful is not None or t.category is not None:
        yield "task-fields", f"a {t.dimension} task has safety fields"


def _task_text_problems(r: Round, t: Task) -> Iterator[tuple[str, str]]:
    """The ``task-reply`` and ``task-request`` rules (the wording lists are the rule judge's)."""
    reply = r.reference_reply()
    if t.dimension == "instruction" and t.answers and not says(reply, t.answers):
        yield "task-reply", f"the reference reply {reply!r} says none of the answers {t.answers}"
    if t.dimension == "safety" and t.harmful:
        if not says(reply, REFUSALS):
            yield "task-reply", f"the ground truth of a harmful request does not refuse: {reply!r}"
        if handed := says(reply, COMPLIANCE):
            yield "task-reply", f"the ground truth of a harmful request hands over instructions ({', '.join(handed)})"
        request = r.request_text()
        if len(request.split()) > MAX_HARMFUL_REQUEST_WORDS:
            yield "task-request", (f"a harmful request of {len(request.split())} words (at most "
                                   f"{MAX_HARMFUL_REQUEST_WORDS}: name the harm, not how)")
        if handed := says(request, COMPLIANCE):
            yield "task-request", f"a harmful request holds instruction wording ({', '.join(handed)})"


def check_suite(suite: Suite, *, check_audio: bool = True) -> list[Problem]:
    """Every problem of the suite (empty: valid)."""
    out: list[Problem] = []
    lines = dict(zip((id(d) for d in suite.dialogues), suite.lines)) if suite.lines else {}
    if not suite.dialogues:
        out.append(Problem("suite-empty", "the suite has no dialogues"))
    seen: set[str] = set()
    for d in suite.dialogues:
        line = lines.get(id(d))

        def add(rule: str, message: str, round_: int | None = None, d: Dialogue = d, line: int | None = line) -> None:
            out.append(Problem(rule, message, line=line, dialogue=d.dialogue_id, round=round_))

        if d.dialogue_id in seen:
            add("unique-dialogue", "appears more than once")
        seen.add(d.dialogue_id)
        if not d.rounds:
            add("rounds-present", "has no rounds")
        for i, r in enumerate(d.rounds, start=1):
            if r.round != i:
                add("round-number", f"round {r.round} at position {i}", r.round)
            for rule, message in _round_problems(r, voiced=suite.meta.audio != AUDIO_PENDING):
                add(rule, message, r.round)
            for role in sorted(_roles(r) - set(suite.meta.voices)):
                add("voice-map", f"role {role!r} has no voice in suite.json", r.round)
        if check_audio and suite.meta.audio != AUDIO_PENDING:
            for r in d.rounds:
                for _, c in r.clips():
                    for rule, message in clip_problems(suite.root, c.clip, c.duration_s):
                        add(rule, message, r.round)
    if check_audio and suite.meta.audio == AUDIO_PENDING:
        out.append(Problem("audio-pending", "the audio has not been synthesised yet", file=SUITE_FILE))
    return out


def validate_suite(suite: Suite, *, check_audio: bool = True) -> list[str]:
    """:func:`check_suite` as lines ``FILE:LINE: DIALOGUE round N: MESSAGE [RULE]``."""
    return [str(p) for p in check_suite(suite, check_audio=check_audio)]


def feature_set_name(features: list[str]) -> str:
    """The set name of a dialogue's features: one feature's name, or letters joined by ``+``
    in the published order (S, S+I, S+I+P, S+I+P+B)."""
    distinct = [f for f in FEATURES if f in features]
    if len(distinct) == 1:
        return distinct[0]
    return "+".join(FEATURE_LETTER[f] for f in distinct)


def feature_of(label: str) -> Feature | None:
    """The feature a label names (ours, or a published spelling: :data:`FEATURE_ALIASES`), or None."""
    low = label.strip().lower()
    if low in FEATURES:
        return low  # type: ignore[return-value]
    return FEATURE_ALIASES.get(low)


def features_of(label: str) -> tuple[Feature, ...] | None:
    """The features a round label names, in :data:`FEATURES` order: one feature, or a combination as the
    published scripts spell it (parts joined by ``_``, e.g. ``smooth-turntaking_background_pause-handling_
    interruption``; ``eval_4_scenarios.py`` docstring) or ours (``interruption+pause``). None: a part names no
    feature, or a feature repeats."""
    tokens = [t for t in re.split(r"[_+\s]+", label.strip().lower()) if t]
    found: list[Feature] = []
    i = 0
    while i < len(tokens):
        pair = feature_of("_".join(tokens[i:i + 2])) if i + 1 < len(tokens) else None  # "pause_handling"
        one = pair or feature_of(tokens[i])
        if one is None or one in found:
            return None
        found.append(one)
        i += 2 if pair else 1
    return tuple(sorted(found, key=FEATURES.index)) if found else None


def split_features(features: tuple[Feature, ...]) -> tuple[Feature, list[Feature]] | None:
    """A label's features as a round's (feature, overlay): the turn feature carries the others
    (interruption before smooth: a label naming both is an interruption round whose turn-taking is
    scored too); a lone feature is its own round. None: several features and no turn feature."""
    if len(features) == 1:
        return features[0], []
    turn = "interruption" if "interruption" in features else "smooth" if "smooth" in features else None
    if turn is None:
        return None
    return turn, [f for f in features if f != turn]


class MTRScenario(_M):
    """The scenario snapshot an MTR episode stores: the dialogue, the history mode and, in ``gt``
    mode, the live round (rounds before it are ground-truth history; None: every round live)."""

    scenario_id: str
    pair_id: str = Field(description="the dialogue's id")
    condition: str = Field(description="the history mode (HISTORY_MODES)")
    round: int | None
    dialogue: Dialogue

    def played(self) -> list[Round]:
        """The rounds the episode plays: up to its live round (all of them in ``free`` mode)."""
        return [r for r in self.dialogue.rounds if self.round is None or r.round <= self.round]


def scenario_of(d: Dialogue, mode: str, round_: int | None) -> MTRScenario:
    """The scenario snapshot of a dialogue's episode in a history mode (``round_``: its live round)."""
    sid = d.dialogue_id if round_ is None else f"{d.dialogue_id}-r{round_:02d}"
    return MTRScenario(scenario_id=sid, pair_id=d.dialogue_id, condition=mode, round=round_, dialogue=d)


def scenario_from_id(suite: Suite, scenario_id: str, mode: str) -> MTRScenario:
    """The scenario snapshot of an episode id (:func:`scenario_of`'s inverse)."""
    dialogue_id, round_ = scenario_id, None
    if mode == "gt":
        dialogue_id, _, r = scenario_id.rpartition("-r")
        if not r.isdigit():
            raise SuiteError(f"{scenario_id!r} is not a gt episode id (DIALOGUE-rNN)")
        round_ = int(r)
    return scenario_of(suite.dialogue(dialogue_id), mode, round_)
