"""Turn length and phrase pools: how the procedural generator makes a bare line a spoken turn.

A task line ("the taco place is twenty dollars a head.") is the *core* of a turn. With the
``paper`` turn length, :class:`Elaborator` grows each core into a multi-sentence turn of a
drawn length: an optional lead sentence before it ("Okay, I had a look earlier.") and
continuations after it (where the fact came from, a reaction, a remark on the scene's topic,
a reply's aside ...), drawn from role-specific pools. Every scene draws its activity's
topic remarks in its own shuffled order, so the talk stays on one subject across the scene
and no sentence repeats within it. With the ``short`` turn length a turn is its core alone.

The pools never name Aria except where a turn mentions it anyway (the labels stay true:
N2/N3 continuations do not mention Aria), use ``{other}`` (someone else in the room) and
``{absent}`` (a friend who is not there) but ``{name}`` (the addressee) only in lines to one
person, and state no numbers, days or times a task could depend on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum

from server.benchmarks.mpe.dataset.inventory import NAMES as _NAMES
from server.datasets.realism import split_sentences


class TurnLength(str, Enum):
    """How long the procedural generator's turns are."""

    short = "short"  # one line per turn (about nine words): small suites for the demo and the tests
    paper = "paper"  # multi-sentence turns sized to the paper's conversation and T durations


MAX_TURN_CHARS = 300  # stays below the speakable-text limit of the script rules

# Words per turn (inclusive range) for the paper length, drawn per turn; T has its own.
PAPER_TURN_WORDS = (15, 36)
PAPER_T_WORDS = (21, 34)

# ----------------------------------------------------------------------------- topic remarks

TOPIC: dict[str, tuple[str, ...]] = {
    "restaurant": (
        "I haven't eaten anything since breakfast, so I'm starving.",
        "Last time we went out it took ages to get a table.",
        "I really don't want anything too spicy tonight.",
        "Somewhere we can actually hear each other talk would be nice.",
        "I could honestly eat anything right now.",
        "We always end up at the same place, it'd be nice to try something new.",
        "As long as they have something vegetarian for {absent}.",
        "I'm not dressing up, just so you know.",
        "The last place we tried was a bit disappointing.",
        "I've heard good things about the desserts there.",
        "I don't want a late night, I've got an early start.",
        "Let's just pick somewhere and stop scrolling through menus.",
    ),
    "train": (
        "I'd rather not have to run for the train again.",
        "Last time we went, the train was absolutely packed.",
        "We should get there a bit early to find seats together.",
        "I'll bring snacks for the journey.",
        "I still need to charge my headphones before we go.",
        "The station cafe does really good coffee.",
        "I'm so ready for a day out of the city.",
        "We should check where the tour actually meets.",
        "{absent} went last year and loved it.",
        "I hope it doesn't rain the whole day.",
        "I want to see the old part of town while we're there.",
        "We should book somewhere for lunch once we know when we arrive.",
    ),
    "recipe": (
        "I'm not very good at chopping, just warning you.",
        "We should probably wash up as we go this time.",
        "My mum used to make this all the time.",
        "I always make far too much of this, honestly.",
        "Let's not set off the smoke alarm again.",
        "It's going to smell amazing in here.",
        "We should put some music on while we cook.",
        "I'm going to need an apron for this.",
        "I'll do the washing up if someone else does the chopping.",
        "I've never actually made this from scratch before.",
        "We can freeze whatever's left over.",
        "{absent} gave me this recipe, so it had better be good.",
    ),
    "bill": (
        "I kept all the receipts this time, for once.",
        "It was a really good weekend, though.",
        "I always lose track of who paid for what.",
        "Let's get this sorted before anyone forgets.",
        "I'd rather do it now than chase people for weeks.",
        "My banking app is being really slow today.",
        "Honestly, it was worth every penny.",
        "Next time we should just use one card for everything.",
        "Let's keep it simple this time.",
        "I've been meaning to bring this up since we got back.",
        "We should do that trip again in the autumn.",
        "{absent} still hasn't paid me back from last time, by the way.",
    ),
    "schedule": (
        "It's been ages since we all got together.",
        "Everyone's always so busy these days.",
        "We said we'd do this months ago.",
        "It doesn't have to be anything fancy.",
        "Maybe dinner, maybe just a walk, whatever works.",
        "My calendar is an absolute mess right now.",
        "Let's just pick something and stick to it.",
        "I don't mind where, as long as we actually do it.",
        "We keep talking about it and never doing it.",
        "It would be nice to catch up properly for once.",
        "I'll book somewhere once we've agreed.",
        "{absent} keeps asking when we're meeting up.",
    ),
    "gift": (
        "{absent} is going to be so surprised.",
        "I hope they haven't already bought one for themselves.",
        "They've been talking about it for months.",
        "We should get a card that everyone signs.",
        "{other}, I can pick it up on my way home.",
        "They always get us such nice things, so it's only fair.",
        "Let's keep it a secret until the party.",
        "I'll wrap it, I'm actually good at that.",
        "I think {absent} will really like it.",
        "I hope it arrives in time.",
        "It's so much easier when we all chip in.",
        "Let's not tell {absent} anything, they're terrible at surprises.",
    ),
    "movie": (
        "I'm not in the mood for anything sad tonight.",
        "Last time it took us longer to choose a film than to watch it.",
        "I'll make the popcorn if someone gets the blankets.",
        "We should put our phones away for once.",
        "{absent} recommended one of these, I forget which.",
        "I'm definitely going to fall asleep halfway through.",
        "The sound on this TV isn't great, by the way.",
        "Let's not talk all the way through it this time.",
        "I love a film night.",
        "I've heard the ending is really good.",
        "I need something easy to watch after this week.",
        "Whoever picks the film doesn't get to complain about it.",
    ),
    "roadtrip": (
        "We need a decent playlist for this.",
        "I'm not sitting in the back the whole way again.",
        "We should stop somewhere nice for lunch.",
        "Let's try not to get lost this time.",
        "I hope someone packed enough snacks.",
        "The car really needs a wash after this.",
        "I hope the traffic isn't as bad as last time.",
        "We should check the tyres at the next stop.",
        "It's a long way, but it'll be worth it.",
        "{absent} said the views on the way are amazing.",
        "Nobody is allowed to fall asleep in the front seat.",
        "The maps are downloaded, in case there's no signal.",
    ),
    "paint": (
        "I'm so sick of this colour.",
        "We should have done this years ago.",
        "Let's try not to get paint on the carpet this time.",
        "I've still got paint in my hair from last time.",
        "I'll put some music on while we work.",
        "The room is going to look so much brighter.",
        "We need to tape the edges properly first.",
        "I think we're going to need a ladder.",
        "My arms are going to hurt tomorrow.",
        "{absent} offered to help, but I'll believe it when I see it.",
        "We should move everything into the hall first.",
        "I hope the colour looks the same on the wall as on the card.",
    ),
    "pizza": (
        "It's going to be a great party.",
        "We need to decorate the room as well.",
        "I've already made a playlist, don't worry.",
        "Let's not forget the candles this year.",
        "We should get some drinks that aren't fizzy.",
        "Someone will definitely eat more than their share.",
        "I hope the neighbours don't complain about the noise.",
        "We should do some games as well.",
        "Last year we ran out of food, so let's not do that again.",
        "I'll ask {absent} to bring the speakers.",
        "We'll need bin bags for afterwards, trust me.",
        "I can't believe they're that old already.",
    ),
    "gym": (
        "I really need to start exercising again.",
        "I keep saying I'll go and then I never do.",
        "I just want somewhere that isn't too crowded.",
        "My back has been killing me lately.",
        "We could go together, it'd be more motivating.",
        "I've heard the classes are really good there.",
        "Let's be honest about how often we'll actually go.",
        "{absent} goes every single morning, it's a bit annoying.",
        "The changing rooms there are really nice, apparently.",
        "I need something to get me out of the house.",
        "I'm not doing anything that involves running, though.",
        "I'd like to try swimming again, I haven't done it in years.",
    ),
    "hotel": (
        "I just need somewhere with a comfy bed.",
        "It'll be so nice to get away for a bit.",
        "I hope there's somewhere good for breakfast nearby.",
        "Let's not do anything too exhausting this time.",
        "I've already started thinking about what to pack.",
        "It'd be nice to be able to walk everywhere.",
        "{absent} stayed somewhere around there and liked it.",
        "I don't mind sharing a room, honestly.",
        "As long as it's clean, I'm happy.",
        "I really need this break.",
        "I want to sleep in at least one morning.",
        "Let's find a nice place for dinner on the first night.",
    ),
    "weather": (
        "I don't want to be stuck in the tent all day again.",
        "I still haven't found my walking boots.",
        "We should bring extra blankets either way.",
        "The last time we went camping it poured.",
        "I can't wait to get out of the city.",
        "Let's check we've got enough gas for the stove.",
        "I want at least one properly nice day.",
        "We should plan the long walk for the best day.",
        "I'll bring the big flask for tea.",
        "The stars out there are amazing at night.",
        "Don't forget the waterproofs, just in case.",
        "{absent} lent us their tent, so let's look after it.",
    ),
    "boardgame": (
        "This game always ends in an argument.",
        "I'm definitely winning the next round.",
        "I still don't really understand the rules, to be honest.",
        "Somebody is definitely cheating.",
        "We should play this more often.",
        "I love this game, even when I'm losing.",
        "Let's take a short break after this round, {other}, I'll make tea.",
        "Careful, {other}, I'm watching you.",
        "{absent} would hate this game.",
        "Whoever loses does the washing up, that's the rule.",
        "I've had terrible cards all night.",
        "Don't touch the board, I know exactly where everything was.",
    ),
    "exams": (
        "I haven't even started revising properly yet.",
        "The library is going to be packed all week.",
        "I really need to make some flashcards.",
        "I'm so nervous about these.",
        "Let's do a study session together at some point.",
        "I keep falling asleep when I read my notes.",
        "At least it'll all be over soon.",
        "I need a proper revision plan this time.",
        "We should test each other later.",
        "My notes from the first term are a mess.",
        "{absent} says past papers are the best way to revise.",
        "I'm going to need a lot of coffee for this.",
    ),
    "flights": (
        "I'd rather not get up in the middle of the night for a flight.",
        "I'm so ready for a holiday.",
        "I always get a bit nervous before flying.",
        "We should book before the prices go up again.",
        "I want a window seat, just saying.",
        "Last time my bag got lost, so I'm a bit paranoid.",
        "{absent} said the airport there is tiny.",
        "I need to find my passport first.",
        "Let's not leave it until the last minute this time.",
        "I've already started looking at things to do there.",
        "I'm going to need a new suitcase at this rate.",
        "It's going to be so nice to see the sea.",
    ),
    "laptop": (
        "My old laptop takes forever to turn on.",
        "I need it mostly for work and a bit of gaming.",
        "The battery on mine barely lasts an hour.",
        "I don't need anything too fancy.",
        "{absent} has the same one and loves it.",
        "I'd rather buy it now than wait for another sale.",
        "The reviews are really good, actually.",
        "I'm going to back up all my files first.",
        "I've been putting this off for months.",
        "Honestly, I just want one that doesn't crash.",
        "The keyboard on my old one is missing a key.",
        "I'll give my old one to {absent}, they don't mind if it's slow.",
    ),
    "roast": (
        "Everyone's going to be hungry, so let's not be late.",
        "I love a proper Sunday lunch.",
        "We should do the vegetables first.",
        "Grandma always made the best gravy.",
        "Let's not burn the potatoes this time.",
        "The kitchen is going to be chaos.",
        "I'll make the pudding, don't worry.",
        "We need to clear the table before everyone comes.",
        "The whole house is going to smell of gravy.",
        "I've been looking forward to this all week.",
        "{absent} is bringing the wine, apparently.",
        "We should warm the plates, it makes a difference.",
    ),
}

# ------------------------------------------------------------------------------- role pools

FACT_LEADS = (
    "{other}, I had a look at this earlier.", "{other}, I've got it up on my phone now.",
    "So, {other}, I was looking into this last night.", "Hang on, {other}, let me just find it.", "{other}, listen to this.",
    "I wrote it all down somewhere, {other}, one second.", "Let me just read this out, {other}.",
    "So, {other}, here's what I found out.", "Right, {other}, this is what it says here.",
    "Okay, {other}, I've got the details in front of me.", "I asked {absent} about this, actually.",
    "Wait, {other}, I know this one.",
)
# Where a fact comes from: the activity's own sources (the tin, the rail app, the receipt ...),
# said in one of a few shapes with when it was looked at; filled per sentence, so the same
# source is rarely said the same way twice.
SOURCES: dict[str, tuple[str, ...]] = {
    "restaurant": ("on their menu online", "on the delivery app", "in the reviews", "on the menu in their window",
                   "on their booking page"),
    "train": ("on the rail app", "on the timetable", "on the booking site", "on the live departures page"),
    "recipe": ("in the recipe", "on the back of the packet", "in the cookbook", "on the card Mum wrote it on"),
    "bill": ("on the receipt", "in my banking app", "on my card statement", "in the photos of the receipts"),
    "schedule": ("in my calendar", "on the rota", "on my shift plan", "in the group chat"),
    "gift": ("on the shop's website", "in the group chat", "on the price tag", "on the order page"),
    "movie": ("on the streaming app", "on the film's page", "in the reviews", "on the TV guide"),
    "roadtrip": ("on the map", "in the route planner", "on the trip computer", "on the road atlas"),
    "paint": ("on the tin", "with the tape measure", "on the colour card", "on the shop's label"),
    "pizza": ("in the group chat", "on the pizza place's menu", "in the replies to the invitation",
              "on the order page"),
    "gym": ("on the gym's website", "on the leaflet they gave me", "at the front desk", "on their price board"),
    "hotel": ("on the booking site", "in the listing", "in the host's message", "on the guesthouse's page"),
    "weather": ("on the forecast", "on the weather app", "on the mountain forecast page", "on the radio forecast"),
    "boardgame": ("on the score sheet", "in the rule book", "on the score pad"),
    "exams": ("on the exam timetable", "on the course page", "in the email from the department",
              "on the noticeboard"),
    "flights": ("on the airline's site", "on the comparison site", "in the fare details", "on the booking page"),
    "laptop": ("on the shop's page", "in the online listing", "on the sale flyer", "in the price tracker"),
    "roast": ("in the recipe", "on the label", "in Grandma's notebook", "on the butcher's wrapper"),
}
SOURCE_WHEN = ("this morning", "last night", "just now", "an hour ago", "yesterday", "before we started",
               "a minute ago", "at lunch")
SOURCE_SHAPES = (
    "I saw it {src} {when}.", "That's what it says {src}.", "It's right there {src}, I checked {when}.",
    "{other} found it {src} {when}.", "I only looked {when}, but that's what it says {src}.",
    "I read it {src}, {other}, you saw it too.", "Don't take my word for it, it's {src}.",
    "I double-checked {src} {when}.",
)
FACT_REACTIONS = (
    "{other}, you said the same, didn't you?", "{other}, does that match what you saw?",
    "That's less than I expected, {other}.", "{other} won't like that.", "That's more than {absent} said.",
    "{other}, remember that one.", "Hang on to that, {other}.", "I thought {absent} said otherwise.",
)
OWN_FACT_TAILS = (  # after what someone says about themselves (what they paid, when they are free)
    "Just so you know where I stand.", "That's me, anyway, for what it's worth.",
    "Sorry, I know that's not a lot of help.", "I wanted to say that before I forget.",
    "That's the honest answer, I'm afraid.", "Just so we're all clear on that.",
    "I can show you on my phone if you like.", "I think that's everything from my side.",
    "I'd rather get that out of the way now.", "Don't make that face, it's true.",
)
GENERAL_TAILS = (
    "{other}, what do you reckon?", "{other}, does that work for you?", "Tell me if I'm wrong, {other}.",
    "{other}, you're quiet.", "We can ask {absent} too.", "{other} agrees, I can tell.",
    "{other}, you're nodding, so yes?", "Unless {other} has a better idea.",
)
SMALL_LEADS = (
    "Oh, before I forget.", "Sorry, random question.", "Completely unrelated, but anyway.", "Oh, that reminds me.",
    "Hang on, quick thing.", "Sorry, while I think of it.", "Totally off topic, sorry.",
)
SMALL_TAILS = (
    "I meant to ask you at {absent}'s, but it went right out of my head.", "No rush, {absent} was just wondering.",
    "{absent} said you'd know.", "You mentioned it to {absent} and I've been curious since.",
    "I was thinking about it on the way over with {other}.", "{other} told me to ask you.",
    "Only if it's not a bother, {name}.", "{other} was asking me about it too.",
    "I've been meaning to ask you since {absent}'s party.", "I'd ask {absent}, but they never answer their phone.",
)
REPLY_TAILS = (
    "It's a long story, I'll tell you about it later.", "I told {absent} the same thing.",
    "Anyway, it's all fine now, don't worry.", "Ask {other}, {other} was there.", "Thanks for asking, though.",
    "I'll sort the rest of it out with {absent} tomorrow.", "Remind me if I forget, because I probably will.",
    "Why, did {absent} say something?", "{other} knows the whole story, ask them.",
    "I should have told you at {absent}'s, sorry.", "It's really not a big deal, though.",
    "I was going to mention it to {other}, actually.",
)
REPLY_ASIDES = (
    "You know what {absent} is like.", "Don't get me started on {absent}.", "I'll show you a picture later, {name}.",
    "It's better than it sounds, ask {other}.", "{other} was surprised too.", "Same as always with {absent}, really.",
    "I'll tell {absent} you asked.", "That's what I get for listening to {absent}.",
)
SELF_TAILS = (
    "It was right here a minute ago, I swear.", "Honestly, what is wrong with me today.",
    "Okay, never mind, it doesn't matter.", "I'll deal with that later, I suppose.", "Concentrate, come on.",
    "Why is everything happening at once today.", "Mental note, tell {absent}.",
    "I'm sure it'll turn up somewhere.", "Deep breath, it's fine.", "Right, where was I.",
    "I should really write that down somewhere.", "Later, I'll do it later.", "Not now, not now.",
)
MENTION_TAILS = (
    "{other} says it's been pretty useful lately.", "{absent} still thinks it's a little bit creepy.",
    "{absent} thought that was absolutely hilarious.", "{other} got used to it quicker than me.",
    "I'm not complaining, {other}, it's just a bit odd.", "{other} uses it for pretty much everything now.",
    "{absent} says it's practically part of the furniture now.", "{absent} still isn't sure how to feel about it.",
    "Anyway, {absent} tells that story better.", "{other} will back me up on this one.",
    "{absent} should really read the instructions one day.",
)
DEVICE_TAILS = (
    "Sorry, {other}, carry on.", "That's for later, don't let me forget, {other}.",
    "Okay, sorry, go on, {other}, I'm listening.", "Right, sorry, {other}, where were we?", "That's so I don't forget to tell {absent}.",
    "Sorry, that's been bugging me since {absent} left.", "Okay, done, sorry about that, {other}.", "Right, carry on, {other}.",
)
N4Q_LEADS = (
    "Oh, while I think of it.", "Sorry, one more thing.", "Before I forget.", "Completely different question.",
    "Quick one.", "Sorry, random one.", "Oh, {absent} wanted me to ask.", "Hang on, {other}, one second.",
    "This is for {absent}.", "Sorry, {other}, quick thing.", "Right, while I remember.", "Oh, that reminds me.",
)
N4Q_TAILS = (
    "{absent} asked me and I had no idea.", "I promised {absent} I'd find out.", "{absent} was asking about it yesterday.",
    "It came up when I was texting {absent}.", "{other} and I were wondering earlier.", "{absent} will want to know.",
    "{other} bet me it was the other way round.", "I told {absent} I'd ask.",
)
N4R_TAILS = (
    "{absent} told me the same thing.", "Ask {absent} if you don't believe me.", "{other} was there too.",
    "I asked {absent} last time.", "{other} can back me up.", "I checked with {absent} already.",
)
T_PREFACES = (
    "Okay, {other} and I have completely lost track.", "Right, {other}, stop counting on your fingers.",
    "Hang on, {other}, we're going round in circles.", "Okay, before {other} starts another spreadsheet.",
    "I can never do this in my head, and neither can {other}.", "Right, {other}, let's stop guessing.",
    "Wait, {other}, I want to get this right.", "Okay, {other}, I think we've got everything now.",
    "{other}, this is getting complicated.", "Let's not argue about it, {other}.",
    "Hmm, {other}, I'm not sure any more.", "Okay, before {other} and I fall out over this.",
    "Right, enough back and forth, {other}.", "{other} keeps saying different things.",
)
T_TAILS = (
    "Then {other} can stop worrying.", "{other} doesn't trust my maths.", "Then we can tell {absent}.",
    "{absent} is waiting for an answer.", "Then {other} can book it.", "I'd rather not guess, {other}.",
    "{other} and I can't agree.", "Then we can stop arguing, {other}.",
)


@dataclass
class Elaborator:
    """Grows the cores of one scene into turns of the chosen length (see the module docstring)."""

    rng: random.Random
    length: TurnLength
    topic: list[str]
    activity: str = ""
    used: set[str] = field(default_factory=set)

    @classmethod
    def for_scene(cls, rng: random.Random, length: TurnLength, activity_key: str) -> "Elaborator":
        topic = list(TOPIC[activity_key])
        rng.shuffle(topic)
        return cls(rng, length, topic, activity_key)

    def source(self) -> str | None:
        """Where a fact was read, in a shape and with a source not used yet in the scene."""
        srcs = [x for x in SOURCES[self.activity] if x not in self.used]
        shapes = [x for x in SOURCE_SHAPES if x not in self.used]
        if not srcs or not shapes:
            return None
        src, shape = self.rng.choice(srcs), self.rng.choice(shapes)
        self.used.update((src, shape))
        return shape.replace("{src}", src).replace("{when}", self.rng.choice(SOURCE_WHEN))

    def _take(self, pool) -> str | None:
        if pool is self.topic:  # the scene's own order: one subject, unrolled across the scene
            for s in self.topic:
                if s not in self.used:
                    return s
            return None
        fresh = [s for s in pool if s not in self.used]
        return self.rng.choice(fresh) if fresh else None

    def turn(self, core: str, role: str, subst, extra: tuple = (), lead_rate: float = 0.0,
             second_other: bool = True) -> str:
        """``core`` (already filled in) grown to a drawn length; ``subst`` fills a sentence;
        ``extra``: the scene's own lines for the role (self-talk, remarks of the register);
        ``second_other``: the room has a second person besides {other} ({other2})."""
        if self.length is TurnLength.short:
            return core
        lo, hi = PAPER_T_WORDS if role == "t" else PAPER_TURN_WORDS
        target = self.rng.randint(lo, hi)
        before: list[str] = []
        after: list[str] = []
        leads, slots = _POOLS[role]
        addressed = False  # a sentence of the turn already names someone in passing

        def words() -> int:
            return sum(len(s.split()) for s in (*before, core, *after))

        def chars() -> int:
            return sum(len(s) + 1 for s in (*before, core, *after))

        if leads and self.rng.random() < lead_rate:
            s = self._take(leads)
            if s is not None:
                self.used.add(s)
                before.append(subst(s))
        for slot in slots:  # at most one sentence per slot, in order, until the turn is long enough
            if words() >= target:
                break
            if slot == (SOURCE,):
                src = self.source()
                if src is None:
                    continue
                filled = subst(src)
                if chars() + len(filled) > MAX_TURN_CHARS:
                    break
                after.append(_cap(filled))
                addressed = addressed or "{other}" in src
                continue
            options = [pool for pool in (extra if p is OWN else self.topic if p is TOPIC else p for p in slot) if pool]
            if not options:
                continue
            pool = self.rng.choice(options)
            s = self._take(pool)
            if s is None:
                continue
            vocative = _VOCATIVE.get(role, "{other}")
            # someone else than a name already said in the turn, where the room has one
            who = ("{other2}" if second_other else "") if addressed and vocative == "{other}" else vocative
            if pool is self.topic and who and self.rng.random() < ADDRESS_RATE:
                filled, addressed = subst(self._address(s, who)), True
            else:
                filled = subst(s)
            if chars() + len(filled) > MAX_TURN_CHARS:
                break
            self.used.add(s)
            after.append(_cap(filled))
            addressed = addressed or "{other}" in s or "{name}" in s  # one name in passing is enough
        sentences = [x for part in (*before, _cap(core) if before else core, *after) for x in split_sentences(part)]
        vocative = _VOCATIVE.get(role, "{other}")
        if (vocative and not addressed and (len(sentences) > 1 or _names_nobody(sentences[0]))
                and chars() + 8 <= MAX_TURN_CHARS
                and self.rng.random() < ADDRESS_RATE):
            first = 0 if _names_nobody(sentences[0]) else 1
            i = self.rng.randrange(first, len(sentences))
            sentences[i] = subst(self._address(sentences[i], vocative))
        rate = 0.0 if role == "device" else SELF_JOIN_RATE if role == "self" else JOIN_RATE  # a command stands alone
        return " ".join(self._join(sentences, rate))

    def _address(self, s: str, vocative: str) -> str:
        """A sentence said to someone by name: "Ben, ..." or "..., Ben?"."""
        if not s.endswith((".", "?")):
            return s
        if self.rng.random() < 0.5:
            return vocative + ", " + _decap_first(s)
        return s[:-1] + ", " + vocative + s[-1]

    def _join(self, sentences: list[str], rate: float) -> list[str]:
        """Speech runs clauses together: a statement and the one after it become one
        sentence in about half the turns ("..., and ..."), so turns differ in shape."""
        out: list[str] = []
        joined = False  # at most two clauses to a sentence
        for s in sentences:
            trails = rate >= SELF_JOIN_RATE and out and out[-1].endswith("?")  # self-talk: "where's my ... - oh"
            if (out and not joined and (out[-1].endswith(".") or trails) and not out[-1].endswith("..")
                    and s[:1].isalpha() and self.rng.random() < rate):
                glue = " - " if trails else self.rng.choice(_GLUES)
                out[-1] = out[-1][:-1] + glue + _decap_first(s)
                joined = True
            else:
                out.append(s)
                joined = False
        return out

    def t_frame(self, subst) -> tuple[str, str]:
        """Sentences around T's request, the same in both conditions: (before, after)."""
        if self.length is TurnLength.short:
            return "", ""
        before = [self._take(T_PREFACES) or ""]
        after = [self._take(T_TAILS) or ""] if self.rng.random() < T_TAIL_RATE else []
        if self.rng.random() < T_TOPIC_RATE:
            s = self._take(self.topic)
            if s is not None:
                before.insert(0, s)
        for s in (*before, *after):
            self.used.add(s)
        return " ".join(subst(s) for s in before if s), " ".join(subst(s) for s in after if s)


SOURCE = "source"  # in a slot: where the fact comes from (SOURCES of the scene's activity)
OWN = "own"  # in a slot: the scene's own lines for the role (``extra`` of Elaborator.turn)

# role -> (lead pool, slots): each slot adds at most one sentence, drawn from one of its pools;
# TOPIC stands for the scene's own topic order, OWN for the scene's own lines.
_POOLS: dict[str, tuple[tuple, tuple]] = {
    "opener": ((), ((TOPIC,), (GENERAL_TAILS, TOPIC), (TOPIC,))),
    "fact": (FACT_LEADS, ((SOURCE,), (TOPIC, FACT_REACTIONS))),
    "own-fact": ((), ((OWN_FACT_TAILS, FACT_REACTIONS), (TOPIC,))),
    "followup": ((), ((TOPIC,), (GENERAL_TAILS,), (TOPIC,))),
    "setup": ((), ((TOPIC,), (GENERAL_TAILS,))),
    "leadin": ((), ((TOPIC,),)),
    "mention": ((), ((MENTION_TAILS,), (TOPIC,))),
    "self": ((), ((SELF_TAILS,), (OWN,))),
    "device": ((), ((DEVICE_TAILS,), (TOPIC,))),
    "ask": (SMALL_LEADS, ((SMALL_TAILS,),)),
    "reply": ((), ((REPLY_TAILS,), (REPLY_ASIDES,))),
    "remark": ((), ((OWN, GENERAL_TAILS), (TOPIC,))),
    "n4q": (N4Q_LEADS, ((N4Q_TAILS,),)),
    "n4r": ((), ((N4R_TAILS,), (TOPIC,))),
}


T_TAIL_RATE = 0.55  # the share of T turns with a sentence after the request
T_TOPIC_RATE = 0.15  # the share of T turns that start with a remark on the scene's topic
ADDRESS_RATE = 0.5  # the share of turns with a sentence said to someone by name
# Whom a turn of each role names in passing: its addressee ({name}) when it speaks to one
# person, someone else in the room ({other}) when it speaks to the group, nobody ("") when
# it is self-talk or speaks to a device.
_VOCATIVE = {"ask": "{name}", "reply": "{name}", "self": "", "t": "", "n4q": "", "n4r": "", "device": ""}
SELF_JOIN_RATE = 0.85  # self-talk trails on from one thought to the next
JOIN_RATE = 0.6  # the chance that a statement runs on into the next sentence of its turn
_GLUES = (", and ", " - ", " - ", ", and anyway, ", ", and, well, ", " - ")
_KEEP_FIRST = frozenset({"I", "I'm", "I've", "I'll", "I'd", "Aria", "Aria's", "Alexa", "Hey", "Navigation", "Grandma",
                         "Grandma's", "Grandpa's", "Mum", "Mum's", "Sunday", "Saturday", "Friday", "Monday", "Tuesday",
                         "Wednesday", "Thursday", "Christmas", "Tokyo", "Brighton", "Oxford", "Cambridge", "York",
                         "Bath", "Edinburgh", "Thai", "Greek", "French"})


def _names_nobody(s: str) -> bool:
    """No capitalised word after the first (no name, no "Aria", no wake word): a vocative fits."""
    return not any(w[:1].isupper() and w not in ("I", "I'm", "I've", "I'll", "I'd") for w in s.split()[1:])


def _decap_first(s: str) -> str:
    """A sentence lower-cased at its start to run on after a comma, unless it starts with a
    name (a speaker's, Aria's, a place's), "I" or a day."""
    first = s.split(" ", 1)[0].rstrip(",.?!:;")
    if first in _KEEP_FIRST or first.removesuffix("'s") in _NAMES:
        return s
    return s[:1].lower() + s[1:]


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s
