"""The procedural dialogue generator: seeded, offline, deterministic.

A dialogue starts on its plan's topic (:mod:`.topics`): round 1 brings the topic up, later
rounds react to the previous answer (a sound, or picking it up) and ask about the next facet,
taking up the reply's offer of it where there was one; once the topic's facets are covered the
user turns to another topic. A round asks the previous question again only right after a person
in the room talked over the reply (:data:`REASK_AFTER_SPEAKER`). The ground-truth reply is the
facet's two-sentence answer, with an opening and a closing sentence where the round needs a
longer reply (its background voice or backchannels must end well before the reply does).
Interruption rounds barge in (one of many openings) with a changed request (another facet) or
a request to cut it short; pause rounds break the question off inside its embedded question;
background rounds add a third party or a TV/radio line; backchannel rounds 1-3 listener
backchannels. Template banks are drawn without repeats within a dialogue. Every choice comes
from ``Random(f"{seed}:{dialogue_id}")``, so a dialogue depends only on the seed and its plan.

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

VERSION = "3"
#: an overlay round carrying interruption and background: the barge-in starts this long after the background
#: voice ends (the reference keeps talking through the voice, then stops for the barge-in)
OVERLAY_GAP_S = 0.5
_BY_TITLE = {t.title: t for t in TOPICS}
#: the share of background rounds with a person talking after which the user asks the same
#: thing again (they were talked over): the only re-asks
REASK_AFTER_SPEAKER = 0.5
#: at most this many re-asks in a dialogue, never two in a row
MAX_REASKS = 2
#: the share of interruption rounds whose barge-in switches to another facet of the topic (the
#: others ask to cut the reply short)
SWITCH_SHARE = 0.35
#: the shares of replies with an opening sentence naming what was asked, and with a closing sentence
#: (both added as well where a reply must last longer)
OPEN_SHARE = 0.1
CLOSE_SHARE = 0.2
#: the share of replies heard to the end that close by offering the next facet
OFFER_SHARE = 0.35


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


_KEEP_CAPITAL = ("I", "I'm", "I'd", "I've", "I'll")


#: words a fact may open with that keep their capital inside a sentence: the names, i.e. the words
#: the topic bank writes with a capital inside a sentence
_NAMES = frozenset(w.strip(",.?!:;'") for t in TOPICS for f in t.facets for s in (f.ask, *f.facts)
                   for w in s.split()[1:] if w[:1].isupper()) - {"A", "Blue", "East"}  # opening a fact they are no names: "A black hole", "Blue whales", "East and west"


def _lead_into(lead: str, sentence: str) -> str:
    """``sentence`` said after ``lead`` ("Sure,"), in the same sentence: its first word in lower case
    unless it is a name (:data:`_NAMES`) or "I"."""
    first = sentence.split()[0]
    if first.strip(",.?!:;'") not in _NAMES and first not in _KEEP_CAPITAL:
        sentence = sentence[:1].lower() + sentence[1:]
    return f"{lead} {sentence}"


def _after(opening: str, body: str) -> str:
    """``body`` spoken after ``opening``: capitalised after a full stop or question mark, in
    lower case after a comma (but "I")."""
    if opening.endswith((".", "?", "!")):
        return _join(opening, _cap(body))
    first = body.split()[0] if body.split() else ""
    return _join(opening, body if first in _KEEP_CAPITAL else body[:1].lower() + body[1:])


def _cut(rng: random.Random, n: int) -> int:
    """Where a pause breaks off an embedded question of ``n`` words: after its first two words where
    it has them (fewer would leave a stock start, "Do you know what"), leaving at least
    :data:`P.PAUSE_MIN_REST` words for after the pause, three where the question is long enough."""
    hi = max(1, n - max(P.PAUSE_MIN_REST, 3 if n >= 5 else 0))
    return rng.randint(min(2, hi), hi)


class _Writer:
    """The state of one dialogue being written: its topic and the facets left, what the user
    last heard answered, an offer or a re-ask pending, and the template banks drawn without
    repeats (so stock wording does not come back within a dialogue)."""

    def __init__(self, topic: Topic, rng: random.Random) -> None:
        self.topic, self.rng = topic, rng
        self.unused = list(topic.facets)
        rng.shuffle(self.unused)
        self.used: list[Facet] = []
        self.later = [t for t in TOPICS if t.title != topic.title]  # topics to move on to, drawn as needed
        self.heard: Facet | None = None  # the facet whose answer the user heard last
        self.offered: Facet | None = None  # the facet the last reply offered
        self.new_topic = False  # the next round opens a new topic
        self.reask_due = False  # the next round asks the previous one's question again
        self.reasking = False  # this round asks it again
        self.reasks = 0
        self.name = rng.choice(P.NAMES)  # what the person in the room calls the user
        self.who = rng.choice(P.RECAP_WHO)  # what the user calls that person
        self._decks: dict[int, list[str]] = {}
        self._said: dict[str, str] = {}
        self.asked = ""  # the embedded question of the user's last question  # a facet's answer as first said in this dialogue
        self._last: dict[int, str] = {}

    def draw(self, bank: tuple[str, ...]) -> str:
        """A template of ``bank``, none twice before the bank is used up."""
        left = self._decks.get(id(bank))
        if not left:
            last = self._last.get(id(bank))
            left = list(bank)
            self.rng.shuffle(left)
            if len(left) > 1 and left[-1] == last:  # not the same template twice running across a refill
                left[0], left[-1] = left[-1], left[0]
            self._decks[id(bank)] = left
        self._last[id(bank)] = left[-1]
        return left.pop()

    def fmt(self, template: str, facet: Facet | None = None, **extra: str) -> str:
        ask = facet.ask if facet else ""
        return template.format(title=self.topic.title, Title=_cap(self.topic.title), ask=ask, Ask=_cap(ask), **extra)

    def next_facet(self) -> tuple[Facet, bool]:
        """The next facet to ask about, and whether it is asked again (the previous round's,
        talked over by a third party). A topic whose facets are all covered gives way to another."""
        self.reasking = False
        if self.reask_due and self.heard is not None:
            self.reask_due, self.reasking = False, True
            self.reasks += 1
            return self.heard, True
        self.reask_due = False
        if not self.unused:
            self.topic = self.later.pop(self.rng.randrange(len(self.later)))
            self.unused = list(self.topic.facets)
            self.rng.shuffle(self.unused)
            self.new_topic = True
        f = self.unused.pop(0)
        self.used.append(f)
        return f, False

    def lead(self, number: int) -> str:
        """What the user says before the question: the topic (round 1, or a new topic), a
        reaction to the previous answer, or nothing."""
        rng = self.rng
        if number == 1:
            return self.fmt(self.draw(P.INTROS))
        if self.new_topic:
            self.new_topic = False
            return self.fmt(self.draw(P.TOPIC_CHANGES))
        if self.reasking:
            return ""
        x = rng.random()
        if x < 0.45:
            return ""
        prev = self.heard
        if x < 0.77 or prev is None or prev.ask.split()[0] not in P.ECHO_WORDS:
            return self.draw(P.REACTIONS)
        return self.draw(P.ECHOES).format(prev=prev.ask)

    def answer(self, facet: Facet, lead: str = "") -> str:
        """``facet``'s two sentences as said in this dialogue: the first after a short
        acknowledgement (``lead``, or one of :data:`P.FACT_LEADS`), the second joined on by a
        connective. Said again (a re-ask, a changed request back to it), they come out the same."""
        if facet.ask not in self._said:
            first, second = facet.facts
            self._said[facet.ask] = _join(_lead_into(lead or self.draw(P.FACT_LEADS), first),
                                          _lead_into(self.draw(P.FACT_LINKS), second))
        return self._said[facet.ask]

    def reply(self, facet: Facet, recap: bool, need_s: float, heard: bool = True) -> str:
        """The answer to ``facet``: its two sentences, with an opening and a closing sentence
        as needed to last ``need_s`` (estimated) and within the reply range. A reply ``heard``
        to its end may close by offering the next facet."""
        rng = self.rng
        opener = self.fmt(self.draw(P.RECAP_OPENERS if recap else P.OPENERS), facet)
        nxt = self.unused[0] if self.unused else None
        offer = nxt is not None and not recap and heard and rng.random() < OFFER_SHARE
        closer = (self.draw(P.OFFERS).format(next=nxt.ask) if offer and nxt is not None
                  else self.fmt(self.draw(P.ASK_CLOSERS if facet.ask.split()[0] in P.ECHO_WORDS and
                                          rng.random() < 0.5 else P.TOPIC_CLOSERS), facet))
        body = self.answer(facet)
        use_open, use_close = rng.random() < OPEN_SHARE, rng.random() < CLOSE_SHARE
        candidates = [(use_open, use_close), (True, use_close), (use_open, True), (True, True)]
        text = body
        for o, c in candidates:
            text = _join(opener if o else "", body, closer if c else "")
            if estimate_s(text) >= max(need_s, REPLY_S[0]):
                break
        if estimate_s(text) > REPLY_S[1]:
            fits = [t for t in (_join(body, closer), _join(opener, body))
                    if max(need_s, REPLY_S[0]) <= estimate_s(t) <= REPLY_S[1]]
            text = fits[0] if fits else body
        self.offered = nxt if offer and text.endswith(closer) else None
        if heard:
            self.heard = facet
        return text

    def question(self, lead: str, facet: Facet, recap: bool) -> str:
        """The user's turn: ``lead`` (a reaction said into the question, or a sentence of its own) and the question."""
        q = self.ask(facet, recap)
        self.asked = facet.ask
        return _after(lead, q) if lead else q

    def ask(self, facet: Facet, recap: bool) -> str:
        if recap:
            return self.fmt(self.draw(P.RECAPS), facet, who=self.who)
        if facet is self.offered:
            return self.fmt(self.draw(P.UPTAKES), facet)
        return self.fmt(self.draw(P.ASKS), facet)

    def third_party(self) -> str:
        """A line of the person in the room, addressed to the user (by this dialogue's name) or not."""
        address = self.rng.choice((*P.ADDRESSES, f"{self.name}, "))
        return P.addressed(address, self.draw(P.SAID))

    def resume(self, rest: str) -> str:
        """The rest of a question broken off by a pause, after a hesitation where it is short."""
        return _join(self.draw(P.PAUSE_RESUMES), rest) if len(rest.split()) <= P.PAUSE_SHORT_REST else rest

    def broadcast(self) -> str:
        return P.broadcast(self.draw(P.BROADCAST_TEMPLATES), self.rng)

    def barge(self, bank: tuple[str, ...], facet: Facet | None = None, **extra: str) -> str:
        """A barge-in: an opening, then a template of ``bank``."""
        return _after(self.draw(P.BARGE_OPENINGS), self.fmt(self.draw(bank), facet, **extra))


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
            return (RoundText(feature, user=w.question(w.lead(number), facet, recap),
                              assistant=w.reply(facet, recap, 0.0)), Task(dimension="quality"))
        w.heard = w.offered = None  # the last answer heard is not about the topic
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
        return (RoundText(feature, user=w.question(w.lead(number), facet, recap),
                          assistant=w.reply(facet, recap, 0.0, heard=False),
                          barge_in=w.barge(Q.BARGE_REQUEST, request=request), barge_in_response=reply),
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
            line = w.third_party() if kind == "speaker" else w.broadcast()
            need = draw.background_after_s + estimate_s(line) + REPLY_MARGIN_S + SLACK_S
            if feature == "interruption":
                need += OVERLAY_GAP_S + BARGE_IN_BEFORE_END_S
                draw = replace(draw, barge_in_after_s=round(draw.background_after_s + estimate_s(line)
                                                            + OVERLAY_GAP_S, 2))
            out.update(background_kind=kind, background=line)
        base = cls._round(w, number, feature, draw, need)
        if "pause" in overlay:
            words = base.user.split()
            asked = len(words) - len(w.asked.split())  # the question's embedded question starts here
            if w.asked and base.user.rstrip(".?").endswith(w.asked) and asked >= 0:  # broken off inside it
                cut = asked + _cut(rng, len(w.asked.split()))
            else:
                cut = max(2, len(words) // 2)
            while cut < len(words) - 1 and words[cut - 1][-1] in ".?!,":  # a pause mid-sentence, not at its end
                cut += 1
            out.update(user=" ".join(words[:cut]), continuation=w.resume(" ".join(words[cut:]) or "please."))
        return replace(base, **out), draw

    @staticmethod
    def _round(w: _Writer, number: int, feature: Feature, draw: Draw, need_s: float = 0.0) -> RoundText:
        rng = w.rng
        facet, recap = w.next_facet()
        lead = w.lead(number)
        if feature == "pause":
            template, end = w.draw(P.PAUSE_RECAP_LEADS if recap else P.PAUSE_LEADS)
            words = facet.ask.split()
            cut = _cut(rng, len(words))
            start = template.format(ask=" ".join(words[:cut]))
            return RoundText(feature, user=_after(lead, start) if lead else start,
                             continuation=w.resume(" ".join(words[cut:]) + end), assistant=w.reply(facet, recap, 0.0))
        user = w.question(lead, facet, recap)
        if feature == "interruption":
            assistant = w.reply(facet, recap, need_s, heard=False)
            if w.unused and rng.random() < SWITCH_SHARE:
                other, _ = w.next_facet()
                barge = w.barge(P.BARGE_SWITCH, other)
                opener = w.fmt(w.draw(P.SWITCH_OPENERS), other)
                response = (w.answer(other, opener) if opener.endswith((",", "so")) else _join(opener, w.answer(other)))
                w.heard = other
            else:
                barge = w.barge(P.BARGE_SHORT, facet)
                response = _join(w.draw(P.SHORT_OPENERS), facet.facts[0])
                w.heard = facet
            return RoundText(feature, user=user, assistant=assistant, barge_in=barge, barge_in_response=response)
        if feature == "background":
            kind = rng.choice(("speaker", "broadcast"))
            line = w.third_party() if kind == "speaker" else w.broadcast()
            reply = w.reply(facet, recap, draw.background_after_s + estimate_s(line) + REPLY_MARGIN_S + SLACK_S)
            w.reask_due = (kind == "speaker" and not recap and w.reasks < MAX_REASKS
                           and rng.random() < REASK_AFTER_SPEAKER)
            return RoundText(feature, user=user, assistant=reply, background_kind=kind, background=line)
        if feature == "backchannel":
            n = rng.randint(1, 3)
            bcs = tuple(rng.sample(P.BACKCHANNELS, n))  # different sounds, as a listener varies them
            span = draw.backchannel_first_s + sum(estimate_s(b) for b in bcs) + sum(draw.backchannel_gaps_s[: n - 1])
            return RoundText(feature, user=user, assistant=w.reply(facet, recap, span + REPLY_MARGIN_S + SLACK_S),
                             backchannels=bcs)
        return RoundText(feature, user=user, assistant=w.reply(facet, recap, need_s))


assert BACKGROUND_AFTER_S[1] + REPLY_MARGIN_S < REPLY_S[1] and BACKCHANNEL_FIRST_S[0] > 0
