"""Every rule a generated script must satisfy, checked before it reaches a suite.

The suite rules of DESIGN §2 and the construction rules (``strict``) live in
:mod:`server.benchmarks.mpe.suite`; a script is expanded into its two scenario versions and run through
the same checker, so a script that passes here yields a suite that passes
``mpe dataset validate --strict``. Among the construction rules are the generator-side pair
checks (``pair-turns``, ``pair-labels``, ``pair-speakers``, ``pair-minimal``): a generated pair
is one script, so its versions have the same turns unless its plan asks for a version difference
(then ``pair-difference`` checks it is exactly the declared one); a suite from elsewhere may
differ beyond T (DESIGN §2 pairs T and the N4 events by label). On top come the rules that only make sense for a
script: it matches its plan (speakers, bucket, N4 event, attributes) and its text is
speakable (no stage directions, speaker tags or line breaks).
"""

from __future__ import annotations

import re

from server.benchmarks.mpe.dataset.schema import PairPlan, PairScript
from server.benchmarks.mpe.suite import CONDITIONS, Preamble, Problem, Scenario, Suite, SuiteMeta, Turn, check_suite

SCRIPT_RULES: dict[str, str] = {
    "plan-speakers": "the script has the number of speakers its plan assigns",
    "plan-bucket": "T sits in the bucket its plan assigns",
    "plan-n4": "the script has the number of N4 events its plan assigns (at most two)",
    "plan-attributes": "the script keeps the scene attributes of its plan",
    "plan-difference": "the script's versions differ as its plan asks (none, reworded, extra_turn, n4_dropped)",
    "plan-ids": "the script keeps the pair and scenario ids of its plan",
    "text-speakable": "turn text is one spoken line: no stage directions, speaker tags or line breaks",
    "implicit-text": "implicit_text is given for T and at most the turn before it",
    "utterance-types": "a script that gives utterance types gives one on every turn but T (none on T); N3 is "
                       "self_talk and N4Q a device_request",
}
#: the utterance type a label fixes (the others depend on what the turn says and to whom)
FIXED_TYPES: dict[str, str] = {"N3": "self_talk", "N4Q": "device_request"}

_MAX_CHARS = 320
_STAGE = re.compile(r"[\[\]\(\)\*<>{}_#|~`]")
_SPEAKER_TAG = re.compile(r"^\s*(?:speaker\s*)?[A-D]\s*:")
_LETTERS = re.compile(r"[A-Za-z]")


def script_scenarios(script: PairScript) -> list[Scenario]:
    """The two scenario versions of a script (clip paths and durations left empty)."""
    out = []
    for cond in CONDITIONS:
        turns = [
            Turn(idx=i, speaker=t.speaker, label=t.label, text=t.text_for(cond), clip="", duration_s=0.0,
                 addressee=t.addressee, utterance_type=t.utterance_type)
            for i, t in enumerate(script.version_turns(cond))
        ]
        out.append(
            Scenario(scenario_id=script.scenario_id, pair_id=script.pair_id, condition=cond,
                     n_speakers=script.n_speakers, t_bucket=script.t_bucket,
                     attributes=script.attributes.model_dump(), gold_answer=script.gold_answer,
                     answer_keys=script.answer_keys, turns=turns, version_difference=script.version_difference)
        )
    return out


_META = SuiteMeta(name="check", version="0", generator="check", seed=0,
                  voices={s: "check" for s in "ABCD"},
                  preamble=Preamble(text="check", clip="clips/preamble.wav", duration_s=0.0))


def check_script(script: PairScript, plan: PairPlan | None = None) -> list[Problem]:
    """All problems of a script (empty = usable), each naming its turn and rule."""
    suite = Suite(".", _META, script_scenarios(script))
    problems = check_suite(suite, check_audio=False, strict=True)
    scope = f"{script.scenario_id}/script"

    def add(rule: str, message: str, turn: int | None = None) -> None:
        problems.append(Problem(rule=rule, message=message, scenario=scope, turn=turn, file="script"))

    for i, t in enumerate(script.turns):
        for cond, text in (("explicit", t.text), ("implicit", t.implicit_text)):
            if text is None:
                continue
            if "\n" in text or "\r" in text:
                add("text-speakable", f"{cond} text has a line break", i)
            if _STAGE.search(text):
                add("text-speakable", f"{cond} text has brackets or markup (stage directions are not spoken)", i)
            if _SPEAKER_TAG.match(text):
                add("text-speakable", f"{cond} text starts with a speaker tag", i)
            if len(text) > _MAX_CHARS:
                add("text-speakable", f"{cond} text is {len(text)} characters (at most {_MAX_CHARS})", i)
            if not _LETTERS.search(text):
                add("text-speakable", f"{cond} text has no words", i)
    t_idx = [i for i, t in enumerate(script.turns) if t.label == "T"]
    allowed = {t_idx[0], t_idx[0] - 1} if len(t_idx) == 1 else set()
    further = [i for i, t in enumerate(script.turns) if t.implicit_text is not None and i not in allowed]
    for i in further[1:] if script.version_difference == "reworded" else further:
        add("implicit-text", "implicit_text is only allowed on T and the turn just before it (and on one more "
            "turn of a reworded pair)", i)
    if len(t_idx) == 1 and script.turns[t_idx[0]].implicit_text is None:
        add("implicit-text", "T has no implicit_text (the implicit condition must not name Aria)", t_idx[0])

    if any(t.utterance_type is not None for t in script.turns):
        for i, t in enumerate(script.turns):
            if t.label == "T" and t.utterance_type is not None:
                add("utterance-types", "T carries no utterance type (it is the request to Aria)", i)
            elif t.label != "T" and t.utterance_type is None:
                add("utterance-types", f"{t.label} turn has no utterance type", i)
            elif t.label in FIXED_TYPES and t.utterance_type != FIXED_TYPES[t.label]:
                add("utterance-types", f"{t.label} turn is {t.utterance_type}, not {FIXED_TYPES[t.label]}", i)

    if plan is not None:
        if (script.pair_id, script.scenario_id) != (plan.pair_id, plan.scenario_id):
            add("plan-ids", f"ids {script.pair_id}/{script.scenario_id} differ from the plan's "
                f"{plan.pair_id}/{plan.scenario_id}")
        used = {t.speaker for t in script.turns}
        if script.n_speakers != plan.n_speakers or len(used) != plan.n_speakers:
            add("plan-speakers", f"plan has {plan.n_speakers} speakers; script declares {script.n_speakers} "
                f"and uses {len(used)}")
        if script.t_bucket != plan.t_bucket:
            add("plan-bucket", f"t_bucket is {script.t_bucket}, the plan says {plan.t_bucket}")
        n4 = sum(t.label == "N4Q" for t in script.version_turns("explicit"))
        if n4 != plan.n4_events:
            add("plan-n4", f"script has {n4} N4 events; the plan asks for {plan.n4_events}")
        if script.attributes != plan.attributes:
            add("plan-attributes", "scene attributes differ from the plan's")
        if (script.version_difference or "none") != plan.difference:
            add("plan-difference", f"the versions differ as {script.version_difference or 'none'}; the plan asks "
                f"for {plan.difference}")
    return problems
