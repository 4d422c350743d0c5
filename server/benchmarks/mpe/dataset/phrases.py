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


class TurnLength(str, Enum):
    """How long the procedural generator's turns are."""

    short = "short"  # one line per turn (about nine words): small suites for the demo and the tests
    paper = "paper"  # multi-sentence turns sized to the paper's conversation and T durations


MAX_TURN_CHARS = 300  # stays below the speakable-text limit of the script rules

# Words per turn (inclusive range) for the paper length, drawn per turn; T has its own.
PAPER_TURN_WORDS = (16, 38)
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
        "I can pick it up on my way home.",
        "They always get us such nice things, so it's only fair.",
        "Let's keep it a secret until the party.",
        "I'll wrap it, I'm actually good at that.",
        "I think it's a really good choice.",
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
        "I'll bring snacks, loads of snacks.",
        "The car really needs a wash before we go.",
        "I hope the traffic isn't as bad as last time.",
        "We should check the tyres before we set off.",
        "It's a long way, but it'll be worth it.",
        "{absent} said the views on the way are amazing.",
        "Nobody is allowed to fall asleep in the front seat.",
        "I'll download the maps in case there's no signal.",
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
        "Let's take a short break after this round.",
        "Careful, I'm watching all of you.",
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
        "It's going to smell amazing in here.",
        "I've been looking forward to this all week.",
        "{absent} is bringing the wine, apparently.",
        "We should warm the plates, it makes a difference.",
    ),
}

# ------------------------------------------------------------------------------- role pools

FACT_LEADS = (
    "Okay, I had a look at this earlier.", "Right, I've got it up on my phone now.",
    "So, I was looking into this last night.", "Hang on, let me just find it.", "Okay, listen to this.",
    "I wrote it all down somewhere, one second.", "Let me just read this out.", "So here's what I found out.",
    "Right, this is what it says here.", "Okay, I've got the details in front of me.", "I asked about this, actually.",
    "Wait, I know this one.",
)
FACT_TAILS = (
    "I checked it twice, so I'm fairly sure about that.", "That's what it says on the website, anyway.",
    "{other} told me the same thing yesterday.", "I looked it up on the bus on the way here.",
    "It was in the email they sent us last week.", "At least that's what I remember reading.",
    "I wrote it down so we wouldn't forget this time.", "Don't quote me on that, but I'm pretty sure it's right.",
    "That's the most recent thing I could find online.", "I double-checked it this morning before I came.",
    "I saw it on the sign when I walked past earlier.", "That's straight from their own page, by the way.",
    "{absent} confirmed it, so it should be right.", "I've got a screenshot of it if anyone wants to see.",
)
FACT_REACTIONS = (
    "Just so everyone knows before we decide anything.", "Keep that in mind when we make up our minds.",
    "Write that down if you need to, because I won't remember it.", "That's the important bit, really.",
    "I'm just putting that out there.", "That surprised me a bit, to be honest.",
    "I thought it would be a lot worse, actually.", "So bear that in mind, all of you.",
    "That's worth remembering for later.", "I think that's right, anyway, but check if you like.",
    "Make of that what you will.", "That changes things a little bit, doesn't it?",
)
OWN_FACT_TAILS = (  # after what someone says about themselves (what they paid, when they are free)
    "Just so you know where I stand.", "That's me, anyway, for what it's worth.",
    "Sorry, I know that's not a lot of help.", "I wanted to say that before I forget.",
    "That's the honest answer, I'm afraid.", "Just so we're all clear on that.",
    "I can show you on my phone if you like.", "I think that's everything from my side.",
    "I'd rather get that out of the way now.", "Don't make that face, it's true.",
)
GENERAL_TAILS = (
    "At least that's my opinion, for what it's worth.", "Anyway, that's what I think.",
    "I don't know, what do you all reckon?", "I'm just saying, that's all.", "If that works for everyone else, anyway.",
    "We can always change it later if we need to.", "Let's just see how it goes.", "No pressure, though, honestly.",
    "I'm easy either way, to be fair.", "And I mean it this time.", "Honestly, it'll all be fine in the end.",
    "Tell me if I'm wrong about that.", "That's the plan, anyway, more or less.", "I'm just thinking out loud here.",
)
SMALL_LEADS = (
    "Oh, before I forget.", "Sorry, random question.", "Completely unrelated, but anyway.", "Oh, that reminds me.",
    "Hang on, quick thing.", "Sorry, while I think of it.", "Totally off topic, sorry.",
)
SMALL_TAILS = (
    "I meant to ask you earlier, but it went right out of my head.", "No rush, I was just wondering about it.",
    "I keep forgetting to ask you that.", "You mentioned it the other day and I've been curious since.",
    "I was thinking about it on the way over here.", "I'm asking now before I forget again.",
    "Only if it's not a bother, obviously.", "{other} was asking me about it too.",
    "I've been meaning to ask you all week.", "I'd ask {absent}, but they never answer their phone.",
)
REPLY_TAILS = (
    "It's a long story, I'll tell you about it later.", "I've been meaning to tell you that, actually.",
    "Anyway, it's all fine now, don't worry.", "It's been a bit of a week, honestly.", "Thanks for asking, though.",
    "I'll sort the rest of it out tomorrow.", "Remind me if I forget, because I probably will.",
    "Why, did you need something?", "{other} knows the whole story, ask them.",
    "I should have said something earlier, sorry.", "It's really not a big deal, though.",
    "I was going to mention it, actually.",
)
REPLY_ASIDES = (
    "You know what it's like.", "Don't get me started on it.", "I'll show you a picture later.",
    "It's better than it sounds, I promise.", "I was surprised too, to be honest.", "Same as always, really.",
    "I'll tell {absent} you asked.", "That's what I get for leaving it so late.",
)
SELF_TAILS = (
    "It was right here a minute ago, I swear.", "Honestly, what is wrong with me today.",
    "Okay, never mind, it doesn't matter.", "I'll deal with that later, I suppose.", "Concentrate, come on.",
    "Why is everything happening at once today.", "Mental note, don't forget again.",
    "I'm sure it'll turn up somewhere.", "Deep breath, it's fine.", "Right, where was I.",
    "I should really write that down somewhere.", "Later, I'll do it later.", "Not now, not now.",
)
MENTION_TAILS = (
    "It's actually been pretty useful lately.", "I still think it's a little bit creepy, though.",
    "{absent} thought that was absolutely hilarious.", "It's funny how quickly you get used to it.",
    "I'm not complaining, it's just a bit odd.", "We use it for pretty much everything now.",
    "It's practically part of the furniture now.", "I'm still not sure how I feel about it, to be honest.",
    "Anyway, that's a story for another time.", "{other} will back me up on this one.",
    "I should really read the instructions one day.",
)
DEVICE_TAILS = (
    "Sorry, carry on, I just needed to do that.", "That's for later, don't let me forget about it.",
    "Okay, sorry, go on, I'm listening.", "Right, sorry, where were we?", "That's just so I don't forget.",
    "Sorry, that's been bugging me all afternoon.", "Okay, done, sorry about that.", "Right, carry on, everyone.",
)
N4Q_LEADS = (
    "Oh, while I think of it.", "Sorry, one more thing.", "Before I forget.", "Completely different question.",
    "Quick one.", "Sorry, random one.",
)
N4Q_TAILS = (
    "I keep meaning to check and never do.", "Just out of curiosity, really.", "It's been bugging me all day.",
    "I forgot to look it up earlier.", "It just popped into my head.", "I feel like I should really know this.",
    "It's for later, not right now.", "Someone asked me earlier and I had no idea.",
)
N4R_TAILS = (
    "So there's no need to look it up.", "So that's sorted, then.", "I'm pretty sure about that, anyway.",
    "We can move on now.", "So don't worry about it.", "Mystery solved.", "So that's one less thing to think about.",
    "Easy, that one.",
)
T_PREFACES = (
    "Okay, I've completely lost track of all of this.", "Right, I'm getting a bit confused now.",
    "Hang on, we're going round in circles here.", "Okay, let's settle this properly.",
    "I can never do this sort of thing in my head.", "Right, let's stop guessing.",
    "Wait, I want to get this right.", "Okay, so we've got everything now, I think.",
    "This is getting complicated.", "Let's not argue about it any more.", "Right, I think we've said everything.",
    "Hmm, I'm not sure any more.", "Okay, before anyone gets annoyed.", "Right, enough back and forth.",
)
T_TAILS = (
    "Then we can finally decide.", "I just want to be sure.", "Then we can stop talking about it.",
    "That would really help.", "I don't trust my own maths.", "That's all I need to know.", "Then we're done.",
    "Just so we get it right.", "Then we can move on.", "I'd rather not guess.",
)


@dataclass
class Elaborator:
    """Grows the cores of one scene into turns of the chosen length (see the module docstring)."""

    rng: random.Random
    length: TurnLength
    topic: list[str]
    used: set[str] = field(default_factory=set)

    @classmethod
    def for_scene(cls, rng: random.Random, length: TurnLength, activity_key: str) -> "Elaborator":
        topic = list(TOPIC[activity_key])
        rng.shuffle(topic)
        return cls(rng, length, topic)

    def _take(self, pool) -> str | None:
        if pool is self.topic:  # the scene's own order: one subject, unrolled across the scene
            for s in self.topic:
                if s not in self.used:
                    return s
            return None
        fresh = [s for s in pool if s not in self.used]
        return self.rng.choice(fresh) if fresh else None

    def turn(self, core: str, role: str, subst, extra: tuple = (), lead_rate: float = 0.0) -> str:
        """``core`` (already filled in) grown to a drawn length; ``subst`` fills a sentence;
        ``extra``: the scene's own lines for the role (self-talk, remarks of the register)."""
        if self.length is TurnLength.short:
            return core
        lo, hi = PAPER_T_WORDS if role == "t" else PAPER_TURN_WORDS
        target = self.rng.randint(lo, hi)
        before: list[str] = []
        after: list[str] = []
        leads, slots = _POOLS[role]

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
            options = [pool for pool in (extra if p is OWN else self.topic if p is TOPIC else p for p in slot) if pool]
            if not options:
                continue
            s = self._take(self.rng.choice(options))
            if s is None:
                continue
            filled = subst(s)
            if chars() + len(filled) > MAX_TURN_CHARS:
                break
            self.used.add(s)
            after.append(_cap(filled))
        return " ".join([*before, _cap(core) if before else core, *after])

    def t_frame(self, subst) -> tuple[str, str]:
        """Sentences around T's request, the same in both conditions: (before, after)."""
        if self.length is TurnLength.short:
            return "", ""
        before = [self._take(T_PREFACES) or ""]
        after = [self._take(T_TAILS) or ""]
        if self.rng.random() < 0.35:
            s = self._take(self.topic)
            if s is not None:
                before.insert(0, s)
        for s in (*before, *after):
            self.used.add(s)
        return " ".join(subst(s) for s in before if s), " ".join(subst(s) for s in after if s)


OWN = "own"  # in a slot: the scene's own lines for the role (``extra`` of Elaborator.turn)

# role -> (lead pool, slots): each slot adds at most one sentence, drawn from one of its pools;
# TOPIC stands for the scene's own topic order, OWN for the scene's own lines.
_POOLS: dict[str, tuple[tuple, tuple]] = {
    "opener": ((), ((TOPIC,), (GENERAL_TAILS, TOPIC), (TOPIC,))),
    "fact": (FACT_LEADS, ((FACT_TAILS, FACT_REACTIONS), (TOPIC,), (FACT_REACTIONS,))),
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


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s
