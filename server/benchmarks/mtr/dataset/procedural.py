"""The procedural dialogue generator: seeded, offline, deterministic.

A dialogue stays on its plan's topic (:mod:`.topics`): round 1 brings the topic up, later
rounds react to the previous answer and ask about the next facet, or come back to one already
covered once the facets run out. The ground-truth reply is the facet's two-sentence answer,
with an opening and a closing sentence where the round needs a longer reply (its background
voice or backchannels must end well before the reply does). Interruption rounds barge in
with a changed request (another facet) or a request to cut it short; pause rounds break the
question off mid-sentence; background rounds add a third party or a TV/radio line; backchannel
rounds 1-3 listener backchannels. Every choice comes from ``Random(f"{seed}:{dialogue_id}")``,
so a dialogue depends only on the seed and its plan.

Dimension sets (:mod:`.sets`, :mod:`.requests`): ``quality`` rounds are the topic rounds above;
``instruction`` rounds ask a question with a short reference answer; ``safety`` rounds make a
harmful request (the ground truth refuses), every third round a benign control question. A
``+I`` set's rounds first ask about the topic, then deliver the request as the barge-in.
"""

from __future__ import annotations

import random
from dataclasses import replace

from server.benchmarks.mtr.dataset import phrases as P
from server.benchmarks.mtr.dataset import requests as Q
from server.benchmarks.mtr.dataset.assemble import RoundText, assemble_round
from server.benchmarks.mtr.dataset.schema import DialoguePlan
from server.benchmarks.mtr.dataset.sets import task_kind
from server.benchmarks.mtr.dataset.timing import (
    BACKCHANNEL_FIRST_S,
    BACKGROUND_AFTER_S,
    BARGE_IN_BEFORE_END_S,
    REPLY_S,
    SLACK_S,
    Draw,
    estimate_s,
)
from server.benchmarks.mtr.dataset.topics import TOPICS, Facet, Topic
from server.benchmarks.mtr.suite import REPLY_MARGIN_S, Dialogue, Dimension, Feature, Task
from server.datasets.errors import DatasetError

VERSION = "1"
#: an overlay round carrying interruption and background: the barge-in starts this long after the background
#: voice ends (the reference keeps talking through the voice, then stops for the barge-in)
OVERLAY_GAP_S = 0.5
_BY_TITLE = {t.title: t for t in TOPICS}


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


class _Writer:
    """The state of one dialogue being written: facets left, facets covered."""

    def __init__(self, topic: Topic, rng: random.Random) -> None:
        self.topic, self.rng = topic, rng
        self.unused = list(topic.facets)
        rng.shuffle(self.unused)
        self.used: list[Facet] = []

    def fmt(self, template: str, facet: Facet | None = None) -> str:
        return template.format(title=self.topic.title, ask=facet.ask if facet else "")

    def next_facet(self) -> tuple[Facet, bool]:
        """The next facet to ask about, and whether it is a recap of one already covered."""
        if self.unused:
            f = self.unused.pop(0)
            self.used.append(f)
            return f, False
        return self.rng.choice(self.used), True

    def lead(self, number: int) -> str:
        """What the user says before the question: the topic (round 1) or a reaction."""
        if number == 1:
            return self.fmt(self.rng.choice(P.INTROS))
        return self.fmt(self.rng.choice(P.CONTINUITY))

    def reply(self, facet: Facet, recap: bool, need_s: float) -> str:
        """The answer to ``facet``: its two sentences, with an opening and a closing sentence
        as needed to last ``need_s`` (estimated) and within the reply range."""
        rng = self.rng
        opener = self.fmt(rng.choice(P.RECAP_OPENERS if recap else P.OPENERS))
        closer = self.fmt(rng.choice(P.CLOSERS))
        body = " ".join(facet.facts)
        use_open, use_close = rng.random() < 0.6, rng.random() < 0.4
        candidates = [(use_open, use_close), (True, use_close), (use_open, True), (True, True)]
        text = body
        for o, c in candidates:
            text = _join(opener if o else "", body, closer if c else "")
            if estimate_s(text) >= max(need_s, REPLY_S[0]):
                break
        if estimate_s(text) > REPLY_S[1]:
            text = _join(body, closer) if estimate_s(_join(body, closer)) >= max(need_s, REPLY_S[0]) else body
        return text

    def ask(self, facet: Facet, recap: bool) -> str:
        return self.fmt(self.rng.choice(P.RECAPS if recap else P.ASKS), facet)


class ProceduralGenerator:
    """Dialogues from the topic bank and the phrase lists (see the module docstring)."""

    name = "procedural"
    version = VERSION

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def generate(self, plan: DialoguePlan) -> Dialogue:
        try:
            topic = _BY_TITLE[plan.topic]
        except KeyError:
            raise DatasetError(f"{plan.dialogue_id}: no topic {plan.topic!r} in the bank") from None
        rng = random.Random(f"{self.seed}:{plan.dialogue_id}")
        w = _Writer(topic, rng)
        rounds = []
        for number, feature in enumerate(plan.features, start=1):
            draw = Draw.of(rng)
            overlay = plan.overlays[number - 1] if plan.overlays else ()
            if overlay and plan.dimension is not None:
                raise DatasetError(f"{plan.dialogue_id}: a dimension set's rounds carry no overlays")
            if overlay:
                (text, draw), task = self._overlay_round(w, number, feature, overlay, draw), None
            elif plan.dimension is None:
                text, task = self._round(w, number, feature, draw), None
            else:
                text, task = self._dimension_round(w, number, feature, plan.dimension)
            r = assemble_round(plan.dialogue_id, number, text, draw)
            r.task = task
            rounds.append(r)
        return Dialogue(dialogue_id=plan.dialogue_id, set=plan.set, topic=topic.title, rounds=rounds)

    @staticmethod
    def _dimension_round(w: _Writer, number: int, feature: Feature, dimension: Dimension) -> tuple[RoundText, Task]:
        """A round of a dimension set: its request in the user's turn (smooth) or in the barge-in
        (interruption), after a question about the topic."""
        rng = w.rng
        delivery = "interruption" if feature == "interruption" else "normal"
        kind = task_kind(dimension, number)
        if kind == "quality":
            facet, recap = w.next_facet()
            return (RoundText(feature, user=_join(w.lead(number), w.ask(facet, recap)),
                              assistant=w.reply(facet, recap, 0.0)), Task(dimension="quality"))
        if kind in ("instruction", "benign"):
            item = Q.instruction(rng, Q.KINDS[(number - 1) % len(Q.KINDS)])
            request, reply = item.request, item.reply
            task = (Task(dimension="instruction", delivery=delivery, answers=list(item.answers))
                    if dimension == "instruction" else Task(dimension="safety", delivery=delivery, harmful=False))
        else:
            harm = rng.choice(Q.HARMFUL)
            request, reply = harm.request, Q.refusal(rng, harm.category)
            task = Task(dimension="safety", delivery=delivery, harmful=True, category=harm.category)
        if delivery == "normal":
            return RoundText(feature, user=_join(rng.choice(Q.INSTRUCTION_LEADS), request), assistant=reply), task
        facet, recap = w.next_facet()
        return (RoundText(feature, user=_join(w.lead(number), w.ask(facet, recap)), assistant=w.reply(facet, recap, 0.0),
                          barge_in=rng.choice(Q.BARGE_REQUEST).format(request=request), barge_in_response=reply),
                task)

    @classmethod
    def _overlay_round(cls, w: _Writer, number: int, feature: Feature, overlay: tuple[Feature, ...],
                       draw: Draw) -> tuple[RoundText, Draw]:
        """A round of an overlay set: its turn feature's round (smooth or interruption) with its user's
        turn split by a pause mid-sentence (pause overlay) and a background voice over the reply's start
        (background overlay; over an interruption round it ends :data:`OVERLAY_GAP_S` before the
        barge-in, which the reference stops for)."""
        rng = w.rng
        out: dict = {"overlay": tuple(f for f in overlay if f != feature)}
        need = 0.0
        if "background" in overlay:
            kind = rng.choice(("speaker", "broadcast"))
            line = rng.choice(P.THIRD_PARTY if kind == "speaker" else P.BROADCASTS)
            need = draw.background_after_s + estimate_s(line) + REPLY_MARGIN_S + SLACK_S
            if feature == "interruption":
                need += OVERLAY_GAP_S + BARGE_IN_BEFORE_END_S
                draw = replace(draw, barge_in_after_s=round(draw.background_after_s + estimate_s(line)
                                                            + OVERLAY_GAP_S, 2))
            out.update(background_kind=kind, background=line)
        base = cls._round(w, number, feature, draw, need)
        if "pause" in overlay:
            words = base.user.split()
            cut = max(2, len(words) // 2)
            while cut < len(words) - 1 and words[cut - 1][-1] in ".?!,":  # a pause mid-sentence, not at its end
                cut += 1
            out.update(user=" ".join(words[:cut]), continuation=" ".join(words[cut:]) or "please.")
        return replace(base, **out), draw

    @staticmethod
    def _round(w: _Writer, number: int, feature: Feature, draw: Draw, need_s: float = 0.0) -> RoundText:
        rng = w.rng
        facet, recap = w.next_facet()
        lead = w.lead(number)
        if feature == "pause":
            first, rest = rng.choice(P.PAUSE_RECAP_SPLITS if recap else P.PAUSE_SPLITS)
            return RoundText(feature, user=_join(lead, first), continuation=w.fmt(rest, facet),
                             assistant=w.reply(facet, recap, 0.0))
        user = _join(lead, w.ask(facet, recap))
        if feature == "interruption":
            if w.unused and rng.random() < 0.7:
                other, _ = w.next_facet()
                barge = w.fmt(rng.choice(P.BARGE_SWITCH), other)
                response = _join(rng.choice(P.SWITCH_OPENERS), *other.facts)
            else:
                barge = rng.choice(P.BARGE_SHORT)
                response = _join(rng.choice(P.SHORT_OPENERS), facet.facts[0])
            return RoundText(feature, user=user, assistant=w.reply(facet, recap, need_s), barge_in=barge,
                             barge_in_response=response)
        if feature == "background":
            kind = rng.choice(("speaker", "broadcast"))
            line = rng.choice(P.THIRD_PARTY if kind == "speaker" else P.BROADCASTS)
            reply = w.reply(facet, recap, draw.background_after_s + estimate_s(line) + REPLY_MARGIN_S + SLACK_S)
            return RoundText(feature, user=user, assistant=reply, background_kind=kind, background=line)
        if feature == "backchannel":
            n = rng.randint(1, 3)
            bcs = tuple(rng.sample(P.BACKCHANNELS, n))  # different sounds, as a listener varies them
            span = draw.backchannel_first_s + sum(estimate_s(b) for b in bcs) + sum(draw.backchannel_gaps_s[: n - 1])
            return RoundText(feature, user=user, assistant=w.reply(facet, recap, span + REPLY_MARGIN_S + SLACK_S),
                             backchannels=bcs)
        return RoundText(feature, user=user, assistant=w.reply(facet, recap, need_s))


assert BACKGROUND_AFTER_S[1] + REPLY_MARGIN_S < REPLY_S[1] and BACKCHANNEL_FIRST_S[0] > 0
