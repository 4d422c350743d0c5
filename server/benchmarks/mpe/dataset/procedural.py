"""The procedural scenario generator: seeded, deterministic, offline.

A scenario grows from its plan in four steps:

1. **Task.** The activity's task builder draws the facts people mention (prices, times,
   quantities, availabilities ...), the request to Aria that those facts answer, the
   gold answer with its answer keys, side questions for an N4 event, and lines that
   carry the conversation on afterwards.
2. **Layout.** A turn count and T's position are chosen to fit the plan's bucket; the
   slots before T hold an opener, the facts in order (interleaved with small talk) and,
   for the implicit condition, one context turn; the slots after T hold the N4 events
   (none, one or two, as planned, on distinct side questions, each followed by more
   conversation), a follow-up and more small talk. Every scenario has at least one N1 and
   one N3.
3. **Speakers.** Turns are given to the 3 or 4 speakers (never the same speaker twice in
   a row, except an asker resolving their own N4 question; everyone speaks), and every
   addressee is resolved (a reply goes back to whoever asked).
4. **Text.** Templates are filled with names and numbers, register interjections are
   sprinkled in, each line is grown into a spoken turn of the chosen length
   (:mod:`server.benchmarks.mpe.dataset.phrases`: lead sentences, continuations, the
   scene's topic remarks), and T is phrased twice: explicit (names Aria) and implicit.
   The implicit version keeps the turns around T, as the paper does in 1,958 of 2,000
   pairs: T itself carries the cue, a remark that only fits the listening device in the
   room ("You've been listening on the counter the whole time, so ..."; :data:`CUE_HOOKS`,
   pointing at where Aria sits in the place). In about 2 % of the pairs (the paper: 42 of
   2,000) the turn right before T is revised instead ("Let's just ask Aria ...").
   Side questions come from the activity and the place (:data:`inventory.SIDE_QUESTIONS`),
   asked by name or, in about a third, by pointing at the device. Sentences are bound to
   the scene: facts name their source in the activity (the tin, the rail app, the receipt),
   remarks are said to someone present by name, and clauses run together as in speech.

Everything is drawn from ``random.Random`` instances seeded with the suite seed and the
pair id, so the same seed gives the same scripts byte for byte, whatever else is
generated. The layout and the core lines come from one generator and the growth into
turns from another, so a ``short`` and a ``paper`` suite of the same seed tell the same
conversations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Callable

from server.benchmarks.mpe.dataset import inventory as inv
from server.benchmarks.mpe.dataset.phrases import Elaborator, TurnLength
from server.benchmarks.mpe.dataset.rules import check_script
from server.benchmarks.mpe.dataset.schema import PairPlan, PairScript, ScriptTurn
from server.benchmarks.mpe.dataset.spoken import (
    hours_keys,
    hours_phrase,
    join_list,
    money,
    number_keys,
    ordinal,
    say_duration,
    say_time,
    time_keys,
    words,
)
from server.benchmarks.mpe.suite import bucket_of, mentions_aria
from server.datasets.errors import DatasetError

VERSION = "4"  # 2: up to two N4 events per pair; 3: turn lengths, phrase pools, implicit context earlier;
# 4: the implicit cue in T, side questions and fact sources bound to the scene, clauses run together
# (version differences, where a plan asks for them, draw from a generator of their own: the scripts
# of the plans without one are unchanged)

# ------------------------------------------------------------------------ building blocks


@dataclass
class Line:
    """One turn before speakers are known.

    ``to``: "group", "one" (a specific other human), "device", "Aria", "asker", or None
    (self-talk). ``who``: a symbolic speaker role ("P1", "P2" ...: distinct people) or
    "reply" (the addressee of the previous turn) or "asker" (whoever asked the N4Q).
    Templates use {name} (the addressee), {other} (someone else in the room) and
    {absent} (a friend who is not there).
    """

    label: str
    text: str
    to: str | None = "group"
    role: str = "filler"
    who: str | None = None
    implicit: str | None = None
    kind: str | None = None  # the utterance type where the template alone does not tell (:func:`utterance_type`)


def utterance_type(ln: Line) -> str | None:
    """What a line is, as the paper's Table 19 groups turns: self-talk (N3, nobody addressed); a
    device request (to another device, or the N4 question to Aria); a human request (a request
    from the place's pool, or a line to the humans whose template is a question); else a
    statement (facts, remarks, replies, mentions, resolutions). T carries none."""
    if ln.label == "T":
        return None
    if ln.kind is not None:
        return ln.kind
    if ln.label == "N3" or ln.to is None:
        return "self_talk"
    if ln.label == "N4Q" or ln.to == "device":
        return "device_request"
    if ln.label == "N4R":  # an answer or a "no need", whoever it is said to
        return "statement"
    return "human_request" if ln.text.rstrip().endswith("?") else "statement"


@dataclass
class Task:
    openers: list[str]
    facts: list[Line]
    question: str  # lower-case start, ends with "?"
    gold: str
    keys: list[list[str]]
    n4: list[tuple[str, str, str]]  # (question core, someone's answer, the asker's own resolution)
    followups: list[str]


class Ctx:
    def __init__(self, rng: random.Random, plan: PairPlan) -> None:
        self.rng = rng
        self.plan = plan

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def sample(self, seq, k: int):
        return self.rng.sample(list(seq), k)


def fact(text: str, to: str = "group", who: str | None = None) -> Line:
    return Line("N2", text, to=to, role="fact", who=who)


# Prices and counts avoid 13-19: "fourteen" and "forty" are easy to confuse in synthetic speech.
_PRICES = (8, 9, 10, 11, 12, 20, 21, 22, 23, 24, 25, 26, 27, 28, 32, 35)

# ------------------------------------------------------------------------------ tasks

_RESTAURANTS = (("the noodle bar", "noodle"), ("the taco place", "taco"), ("the pizza place on the corner", "pizza"),
                ("the Thai restaurant", "Thai"), ("the burger place", "burger"), ("the sushi bar", "sushi"),
                ("the curry house", "curry"), ("the Greek place", "Greek"), ("the steak house", "steak"),
                ("the ramen shop", "ramen"))


def task_restaurant(c: Ctx) -> Task:
    k = c.pick((2, 3))
    opts = c.sample(_RESTAURANTS, k)
    prices = c.sample(_PRICES, k)
    templates = ("{place} is {p} a head.", "I checked {place}, it's about {p} per person.",
                 "{place} does a set menu for {p} each.", "what about {place}? That's {p} a person.",
                 "{place} is {p} per person, drinks not included.")
    facts = [fact(t.format(place=o[0], p=money(p))) for o, p, t in zip(opts, prices, c.sample(templates, k))]
    n4 = [(f"does {opts[0][0]} deliver?", "they do, I ordered from them last week.",
           "it says on their page that they deliver."),
          (f"is {opts[1][0]} open on Sundays?", "it is, they're open every day.",
           "their website says they're open every day."),
          ("can we book a table online?", "you can, I booked there for my birthday.", "I just found the booking page.")]
    follow = ["okay, I'll book a table for eight.", "{name}, can you tell the others where we're going?",
              "let's leave in about twenty minutes, then.", "I hope they still have those little desserts."]
    openers = ["right, where are we going for dinner tonight?", "I'm starving. We need to pick a place to eat.",
               "okay, dinner. We keep putting this off, let's decide."]
    if c.rng.random() < 0.5:
        i = min(range(k), key=lambda j: prices[j])
        q = "which of the two places is cheaper per person?" if k == 2 else \
            "which of those three places is the cheapest per person?"
        gold = f"{opts[i][0][0].upper() + opts[i][0][1:]}, at {money(prices[i])} per person."
        keys = [[opts[i][1]], number_keys(prices[i])]
    else:
        m = c.pick((4, 5, 6, 7, 8))
        j = c.rng.randrange(k)
        facts.insert(c.rng.randrange(len(facts) + 1),
                     fact(f"there'll be {words(m)} of us, so we need a table for {words(m)}."))
        q = f"how much would {opts[j][0]} cost for all {words(m)} of us?"
        gold = f"{money(m * prices[j]).capitalize()} in total."
        keys = [number_keys(m * prices[j])]
    return Task(openers, facts, q, gold, keys, n4, follow)


_DESTINATIONS = ("Brighton", "Oxford", "Cambridge", "the coast", "York", "Bath", "the lake district", "Edinburgh")
_DURATIONS = (45, 50, 60, 70, 75, 80, 90, 100, 110, 120, 135, 150)


def clock(minutes: int) -> str:
    """A departure time: "twelve o'clock" rather than "noon" ("the noon train" reads oddly after "the")."""
    t = say_time(minutes)
    return "twelve o'clock" if t == "noon" else t


def task_train(c: Ctx) -> Task:
    dest = c.pick(_DESTINATIONS)
    deadline = c.pick((11 * 60, 11 * 60 + 30, 12 * 60, 12 * 60 + 30, 13 * 60))
    k = c.pick((2, 3))
    while True:
        deps = sorted(c.sample(range(deadline - 200, deadline - 40, 5), k))
        durs = [c.pick(_DURATIONS) for _ in deps]
        arrive = [d + u for d, u in zip(deps, durs)]
        on_time = [i for i, a in enumerate(arrive) if a <= deadline]
        if len(on_time) == 1 and len(set(deps)) == k and all(abs(a - deadline) >= 10 for a in arrive):
            break
    facts = [fact(c.pick((f"we need to be in {dest} by {say_time(deadline)}, the tour starts then.",
                          f"the tour in {dest} starts at {say_time(deadline)}, so we can't be late.")))]
    first = c.pick(("there's a train at {t} that takes {d}.", "the {t} train takes {d}.",
                    "I'm looking at the times. There's one at {t}, and it takes {d}."))
    more = ("the {t} one takes {d}, though.", "or there's one at {t}, and that one's {d}.",
            "and there's one at {t}, which takes {d}.")
    facts.append(fact(first.format(t=clock(deps[0]), d=say_duration(durs[0]))))
    for i, t in zip(range(1, k), c.sample(more, k - 1)):
        facts.append(fact(t.format(t=clock(deps[i]), d=say_duration(durs[i]))))
    if c.rng.random() < 0.6:
        i = on_time[0]
        q = f"which train gets us to {dest} before {say_time(deadline)}?"
        gold = f"The {clock(deps[i])} train; it gets in at {say_time(arrive[i])}."
        keys = [time_keys(deps[i])]
    else:
        i = c.rng.randrange(k)
        q = f"if we take the {clock(deps[i])} train, what time do we get to {dest}?"
        gold = f"You get there at {say_time(arrive[i])}."
        keys = [time_keys(arrive[i])]
    n4 = [("do we need to book seats in advance?", "no, you can just turn up, I did last month.",
           "the app says seats are free to choose."),
          (f"is it going to rain in {dest} tomorrow?", "it's meant to be sunny all day, I checked.",
           "my weather app says sunny, so that's fine."),
          ("can we take bikes on the train?", "you can, but only two per carriage.", "it says bikes are allowed.")]
    follow = ["I'll buy the tickets tonight, then.", "{name}, can you pack some sandwiches?",
              "let's meet at the station ten minutes early."]
    openers = [f"so, are we still doing the day trip to {dest}?", f"okay, we need to sort out the trip to {dest}.",
               f"right, {dest} on Saturday. Let's look at trains."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_DISHES = (("lasagne", ("onions", "tins of tomatoes", "sheets of pasta")),
           ("chilli", ("tins of beans", "onions", "peppers")),
           ("pancakes", ("eggs", "cups of flour", "cups of milk")),
           ("vegetable soup", ("potatoes", "carrots", "onions")),
           ("curry", ("onions", "tins of coconut milk", "cloves of garlic")),
           ("risotto", ("cups of rice", "onions", "cups of stock")))


def task_recipe(c: Ctx) -> Task:
    dish, ingredients = c.pick(_DISHES)
    target, other = c.sample(ingredients, 2)
    s = c.pick((2, 4))
    factor_num, factor_den = c.pick(((2, 1), (3, 1), (3, 2))) if s == 4 else c.pick(((2, 1), (3, 1), (4, 1)))
    q_per = c.pick((2, 3, 4)) if (factor_den == 1) else c.pick((2, 4, 6))
    m = s * factor_num // factor_den
    ans = q_per * factor_num // factor_den
    q_other = c.pick([x for x in (2, 3, 5) if x != q_per])
    facts = [fact(c.pick((f"the recipe says {words(q_per)} {target} for {words(s)} people.",
                          f"okay, for {words(s)} people it's {words(q_per)} {target}."))),
             fact(c.pick((f"and {words(q_other)} {other}, it says.", f"it also wants {words(q_other)} {other}."))),
             fact(c.pick((f"there'll be {words(m)} of us tonight, remember.",
                          f"we're cooking for {words(m)}, not {words(s)}.")))]
    c.rng.shuffle(facts[:2])
    q = f"how many {target} do we need for {words(m)} people?"
    gold = f"You need {words(ans)} {target}."
    keys = [number_keys(ans)]
    n4 = [(f"how long does {dish} keep in the fridge?", "about three days, my mum always says.",
           "the recipe says three days."),
          ("what temperature should the oven be?", "two hundred degrees, it's on the packet.",
           "it says two hundred on the packet."),
          ("is there a shop open late near here?", "the one on the corner is open until eleven.",
           "I just remembered, the corner shop is open late.")]
    follow = ["okay, I'll start chopping.", "{name}, can you put the oven on?", "let's get the big pan out, then."]
    openers = [f"so, {dish} tonight. Who's helping?", f"right, let's get the {dish} started.",
               f"okay, I found a {dish} recipe. Let's see what we need."]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_bill(c: Ctx) -> Task:
    people = c.plan.n_speakers
    items = c.sample((("the food shop", "I paid {a} for the food shop."),
                      ("the drinks", "I got the drinks, that was {a}."),
                      ("petrol", "and I put {a} of petrol in the car."),
                      ("the cabin", "I paid {a} towards the cabin deposit."),
                      ("the barbecue stuff", "the barbecue stuff came to {a}, I paid for that.")), 3)
    split = c.rng.random() < 0.5
    while True:
        amounts = c.sample((20, 24, 25, 30, 32, 35, 36, 40, 45, 48, 50, 60, 64, 70, 72, 80), 3)
        total = sum(amounts)
        if not split or total % people == 0:
            break
    facts = [fact(t.format(a=money(a)), who=f"P{i + 1}") for i, ((_, t), a) in enumerate(zip(items, amounts))]
    if split:
        q = f"if we split it evenly between the {words(people)} of us, how much does each person pay?"
        gold = f"{money(total // people).capitalize()} each ({money(total)} in total)."
        keys = [number_keys(total // people)]
    else:
        q = "how much did we spend altogether?"
        gold = f"{money(total).capitalize()} altogether."
        keys = [number_keys(total)]
    n4 = [("can you set a reminder to pay everyone back?", "don't worry, I've already put one in my phone.",
           "I'll just write it on my hand."),
          ("what's the best app for splitting bills?", "just use the bank app, it does it for you.",
           "I'll just use my bank app.")]
    follow = ["okay, I'll send everyone the details.", "{name}, you still owe me for the tickets, by the way.",
              "great, then we're all square after this."]
    openers = ["right, let's sort out the money from the weekend.", "okay, who paid for what on Saturday?",
               "before I forget, we need to settle up for the weekend."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


def task_schedule(c: Ctx) -> Task:
    people = c.plan.n_speakers
    while True:
        answer = c.pick(_DAYS)
        sets = []
        for _ in range(people):
            others = c.sample([d for d in _DAYS if d != answer], c.pick((1, 2)))
            sets.append({answer, *others})
        if set.intersection(*sets) == {answer}:
            break
    facts = []
    for i, days in enumerate(sets):
        ordered = [d for d in _DAYS if d in days]
        missing = [d for d in _DAYS if d not in days]
        if len(missing) <= 3 and c.rng.random() < 0.4:
            text = c.pick((f"I can't do {join_list(missing).replace(' and ', ' or ')}, anything else works.",
                           f"anything except {join_list(missing)} is fine for me."))
        else:
            text = c.pick((f"I'm free on {join_list(ordered)}.", f"{join_list(ordered)} works for me.",
                           f"I can only do {join_list(ordered).replace(' and ', ' or ')}."))
        facts.append(fact(text, who=f"P{i + 1}"))
    if not any(answer in f.text for f in facts):  # someone names the answer day (not only by exclusion)
        ordered = [d for d in _DAYS if d in sets[0]]
        facts[0] = fact(f"I'm free on {join_list(ordered)}.", who="P1")
    q = c.pick(("which day works for all of us?", "which day are we all free?"))
    gold = f"{answer} works for everyone."
    keys = [[answer]]
    n4 = [("is there a bank holiday this month?", "not this month, the next one's in August.",
           "I checked my calendar, there isn't one."),
          ("what's the weather looking like this week?", "dry all week, apparently.", "my phone says dry all week.")]
    follow = ["great, I'll put it in the calendar.", "{name}, can you book the room?", "let's say seven o'clock, then."]
    openers = ["we still haven't found a day to get together.", "okay, let's find a day that works for everyone.",
               "we need to pick a day for this, or it'll never happen."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_GIFTS = ("the headphones", "the concert tickets", "the watch", "the camera", "the espresso machine", "the bike helmet")


def task_gift(c: Ctx, absent: str = "") -> Task:
    gift = c.pick(_GIFTS)
    price = c.pick((120, 150, 160, 180, 200, 240))
    while True:
        amounts = c.sample((20, 25, 30, 35, 40, 45, 50), 3)
        if sum(amounts) < price:
            break
    lines = c.sample(("I've put in {a}.", "{a} from me.", "I can do {a}, that's all I've got this month.",
                      "I already sent {a}."), 3)
    facts = [fact(f"{gift} cost {money(price)}, I checked.")]
    facts += [fact(t.format(a=money(a)), who=f"P{i + 1}") for i, (t, a) in enumerate(zip(lines, amounts))]
    if c.rng.random() < 0.5:
        q = "how much have we collected so far?"
        gold = f"{money(sum(amounts)).capitalize()} so far."
        keys = [number_keys(sum(amounts))]
    else:
        q = f"how much more do we need for {gift}?"
        gold = f"{money(price - sum(amounts)).capitalize()} more."
        keys = [number_keys(price - sum(amounts))]
    n4 = [("can you wrap presents in the shop?", "they do it for free at the till, I asked.",
           "I just remembered, they wrap them at the till."),
          ("when does the shop close today?", "six, I walked past it this morning.", "it says six on the door sign.")]
    follow = ["{absent} is going to love it.", "I'll order it tonight so it comes in time.",
              "{name}, can you get a card as well?"]
    openers = ["okay, the money for {absent}'s present.", "let's sort out {absent}'s birthday present.",
               "we need to get {absent}'s present before Friday."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_FILMS = (("the space film", "space"), ("the comedy", "comedy"), ("the documentary about whales", "whale"),
          ("the horror one", "horror"), ("the old musical", "musical"), ("the detective film", "detective"))


def task_movie(c: Ctx) -> Task:
    films = c.sample(_FILMS, 2)
    runs = c.sample((95, 100, 105, 110, 120, 125, 130, 140, 150), 2)
    start = c.pick((19 * 60, 19 * 60 + 30, 20 * 60, 20 * 60 + 15, 20 * 60 + 30))
    facts = [fact(c.pick((f"{films[0][0]} is {say_duration(runs[0])} long.",
                          f"I looked it up, {films[0][0]} runs for {say_duration(runs[0])}."))),
             fact(c.pick((f"{films[1][0]} is {say_duration(runs[1])}.",
                          f"and {films[1][0]} is {say_duration(runs[1])}, I think."))),
             fact(c.pick((f"let's start at {say_time(start)}, once the food's here.",
                          f"the pizza comes at {say_time(start)}, so we start then.")))]
    j = c.rng.randrange(2)
    q = f"if we start at {say_time(start)} and watch {films[j][0]}, what time will it finish?"
    if c.rng.random() < 0.5:
        q = f"if we watch {films[j][0]}, what time will it finish?"
    end = start + runs[j]
    gold = f"It finishes at {say_time(end)}."
    keys = [time_keys(end)]
    n4 = [("is the space film any good?", "it is, my brother saw it twice.", "the reviews say it's great."),
          ("do we still have popcorn?", "there's a bag in the cupboard, I saw it.", "I just found a bag in the cupboard.")]
    follow = ["okay, I'll get the blankets.", "{name}, can you dim the lights when it starts?",
              "I'm making popcorn either way."]
    openers = ["movie night! What are we watching?", "okay, we need to pick a film for tonight.",
               "whose turn is it to choose the film, anyway?",
               "right, film tonight. I've got two options."]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_roadtrip(c: Ctx) -> Task:
    dest = c.pick(("the festival", "Grandma's", "the coast", "the cabin", "the mountains"))
    speed = c.pick((80, 90, 100, 120))
    half_hours = c.pick((3, 4, 5, 6, 7, 8))
    dist = speed * half_hours // 2
    if (speed * half_hours) % 2:
        half_hours, dist = 4, speed * 2
    tank = c.pick((500, 600, 700))
    facts = [fact(c.pick((f"it's {words(dist)} kilometres to {dest}.", f"the map says {words(dist)} kilometres."))),
             fact(c.pick((f"we'll average about {words(speed)} an hour, if the traffic's okay.",
                          f"on the motorway we'll do about {words(speed)} kilometres an hour."))),
             fact(f"and the car does about {words(tank)} kilometres on a full tank.")]
    c.rng.shuffle(facts)
    q = "how long will the drive take at that speed?"
    gold = f"About {hours_phrase(half_hours)}."
    keys = [hours_keys(half_hours)]
    n4 = [("is there a service station on the way?", "there's one about halfway, we stopped there last year.",
           "I can see one on the map, about halfway."),
          ("are there roadworks on the motorway today?", "not today, I checked the traffic news.",
           "the traffic app says it's clear.")]
    if "car" in inv.setting(c.plan.attributes.setting).kinds:  # already on the road: the rest of the way
        q = "how long will the drive take at that speed, from where we started?"
        follow = ["okay, I'll take over after the next stop.", "{name}, you're in charge of the snacks.",
                  "let's stop for lunch about halfway."]
        openers = [f"so, we're finally on the road to {dest}.", f"right, {dest}. Let's work out the rest of the trip.",
                   f"okay, now we're moving, how far is {dest} again?"]
        return Task(openers, facts, q, gold, keys, n4, follow)
    follow = ["okay, let's leave straight after breakfast.", "{name}, you're on snacks.", "I'll drive the first half."]
    openers = [f"so, the drive to {dest}. When do we need to leave?", f"okay, let's plan the drive to {dest}.",
               f"right, {dest}. Who's driving?"]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_paint(c: Ctx) -> Task:
    area = c.pick((24, 30, 36, 40, 45, 48, 54, 60))
    cover = c.pick((10, 12))
    coats = c.pick((1, 2))
    tins = -(-area * coats // cover)
    facts = [fact(c.pick((f"the walls come to about {words(area)} square metres.",
                          f"I measured it, it's {words(area)} square metres of wall."))),
             fact(c.pick((f"one tin covers {words(cover)} square metres, it says on the label.",
                          f"each tin does about {words(cover)} square metres."))),
             fact("and it's a light colour, so one coat will do." if coats == 1 else
                  "we definitely need two coats, it's a dark colour.")]
    q = "how many tins of paint do we need?"
    gold = f"You need {words(tins)} tins of paint."
    keys = [number_keys(tins)]
    n4 = [("how long does paint take to dry?", "about four hours, it says on the tin.", "it says four hours on the tin."),
          ("is the hardware store open on Sunday?", "until four, I was there last week.", "their sign says until four.")]
    follow = ["okay, I'll get the brushes out.", "{name}, can you move the sofa away from the wall?",
              "let's put some old sheets on the floor first."]
    openers = ["right, this room really needs painting.", "okay, we're painting this weekend, no excuses.",
               "so, the paint. Let's work out what we need."]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_pizza(c: Ctx) -> Task:
    guests = c.pick((9, 10, 11, 12, 20, 21, 22, 24))
    slices = c.pick((2, 3))
    per = c.pick((6, 8))
    pizzas = -(-guests * slices // per)
    facts = [fact(c.pick((f"{words(guests)} people said they're coming on Saturday.",
                          f"so far we've got {words(guests)} people coming."))),
             fact(c.pick((f"everyone eats about {words(slices)} slices, right?",
                          f"I'd say {words(slices)} slices each."))),
             fact(f"the large pizzas have {words(per)} slices each.")]
    q = "how many large pizzas should we order?"
    gold = f"You should order {words(pizzas)} large pizzas."
    keys = [number_keys(pizzas)]
    n4 = [("does the pizza place do gluten-free bases?", "they do, my cousin always gets one.",
           "it says gluten-free on the menu."),
          ("can we get balloons at the supermarket?", "yes, next to the cards.", "I just remembered, they're next to the cards.")]
    follow = ["and we need a cake, obviously.", "{name}, can you make a playlist?", "I'll send out a reminder tomorrow."]
    openers = ["okay, the birthday party on Saturday. Food first.", "so, the party. Let's sort the food out.",
               "right, party planning. Pizza, yes?"]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_gym(c: Ctx) -> Task:
    monthly = c.pick((20, 25, 30, 35, 40, 45))
    diff = c.pick((30, 40, 60, 80, 100)) * c.pick((1, -1))
    yearly = 12 * monthly - diff
    facts = [fact(c.pick((f"the monthly plan is {money(monthly)} a month.",
                          f"it's {money(monthly)} a month if you pay monthly."))),
             fact(c.pick((f"or you pay {money(yearly)} for the whole year, up front.",
                          f"the yearly plan is {money(yearly)}, paid all at once."))),
             fact("and the pool is included either way.")]
    if c.rng.random() < 0.5:
        q = "which plan works out cheaper over a whole year?"
        better = "yearly" if diff > 0 else "monthly"
        gold = f"The {better} plan, by {money(abs(diff))}."
        keys = [["yearly", "annual", "up front", "whole year"] if diff > 0 else ["monthly", "month"]]
    else:
        q = "how much would the monthly plan cost over a whole year?"
        gold = f"{money(12 * monthly).capitalize()} over the year."
        keys = [number_keys(12 * monthly)]
    n4 = [("is the gym open on bank holidays?", "it is, but only until two.", "it says until two on their website."),
          ("do they have classes in the evening?", "they do, I went to one on Tuesday.", "I can see the timetable here.")]
    follow = ["okay, let's sign up this week.", "{name}, are you actually going to go, though?",
              "I'll bring the forms tomorrow."]
    openers = ["so, are we joining the gym or not?", "okay, I've got the prices for the gym.",
               "right, the gym membership. Let's decide."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_STAYS = (("the hotel by the station", "station"), ("the guesthouse near the beach", "guesthouse"),
          ("the flat in the old town", "flat"), ("the cabin by the lake", "cabin"))


def task_hotel(c: Ctx) -> Task:
    a, b = c.sample(_STAYS, 2)
    nights = c.pick((2, 3, 4))
    while True:
        per_night = c.pick((60, 70, 80, 90, 110, 120))
        fee = c.pick((0, 20, 30, 40))
        flat_total = c.pick((200, 220, 250, 280, 300, 320, 350, 400))
        ta, tb = per_night * nights + fee, flat_total
        if ta != tb and abs(ta - tb) >= 10:
            break
    end = ("Sunday", "Monday", "Tuesday")[nights - 2]
    facts = [fact(f"we're staying {words(nights)} nights, Friday to {end}."),
             fact(f"{a[0]} is {money(per_night)} a night" + (f", plus a {words(fee)}-dollar cleaning fee." if fee else ".")),
             fact(f"{b[0]} is {money(flat_total)} for the whole stay.")]
    cheaper, total = (a, ta) if ta < tb else (b, tb)
    q = "which one is cheaper for the whole stay?"
    gold = f"{cheaper[0][0].upper() + cheaper[0][1:]}, {money(total)} in total."
    keys = [[cheaper[1]]]
    n4 = [("is there parking at the hotel?", "there is, it's free for guests.", "it says free parking in the listing."),
          ("can we check in late?", "yes, there's a key box, it's in the email.", "I just found it, there's a key box.")]
    follow = ["okay, I'll book it before it goes.", "{name}, can you ask for Friday off?", "this is going to be so nice."]
    openers = ["okay, the weekend away. Where are we staying?", "I've found two places for the weekend.",
               "right, we need to book somewhere for the weekend."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_WEATHER_DAYS = ("Friday", "Saturday", "Sunday")


def task_weather(c: Ctx) -> Task:
    if c.rng.random() < 0.5:
        temps = c.sample((9, 10, 11, 12, 20, 21, 22, 23, 24, 25, 26), 3)
        skies = c.sample(("and cloudy", "with sun all day", "with a bit of wind", "with showers later"), 3)
        facts = [fact(f"{d} is meant to be {words(t)} degrees, {s}.") for d, t, s in zip(_WEATHER_DAYS, temps, skies)]
        i = max(range(3), key=lambda j: temps[j])
        q = "which day is meant to be the warmest?"
        gold = f"{_WEATHER_DAYS[i]}, at {words(temps[i])} degrees."
    else:
        rain = c.sample((10, 20, 30, 40, 60, 70, 80, 90), 3)
        facts = [fact(c.pick((f"{d} has a {words(r)} percent chance of rain.", f"{d} is {words(r)} percent for rain.")))
                 for d, r in zip(_WEATHER_DAYS, rain)]
        i = min(range(3), key=lambda j: rain[j])
        q = "which day has the lowest chance of rain?"
        gold = f"{_WEATHER_DAYS[i]}, {words(rain[i])} percent."
    keys = [[_WEATHER_DAYS[i]]]
    n4 = [("do we need a permit to light a fire there?", "no, the site has fire pits, I checked.",
           "their website says fire pits are provided."),
          ("is there a shop near the campsite?", "there's a little one by the entrance.", "I can see one on the map.")]
    follow = ["okay, I'm packing the big tent.", "{name}, don't forget the torches this time.",
              "I'll bring extra socks, just in case."]
    openers = ["okay, camping this weekend. Let's check the weather.", "so, which day should we do the long hike?", "has anyone looked at the forecast for the weekend?",
               "right, I've got the forecast up for the weekend."]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_boardgame(c: Ctx) -> Task:
    scores = c.sample((21, 24, 27, 30, 32, 35, 38, 41, 44, 47, 50, 52), 3)
    # Every score is tied to a name: {P1}..{P3} are filled with the speakers' names.
    facts = [fact(c.pick(("{P2}, you're on " + words(scores[0]) + " points.",
                          "{P2}, you've got " + words(scores[0]) + ".")), to="P2", who="P1"),
             fact(c.pick(("and {P3} has " + words(scores[1]) + ", I wrote it down.",
                          "{P3} is on " + words(scores[1]) + ".")), who="P2"),
             fact(c.pick(("{P1}, you've got " + words(scores[2]) + " points.",
                          "and {P1} has " + words(scores[2]) + ", don't get excited.")), to="P1", who="P3")]
    holder = ("P2", "P3", "P1")
    i = max(range(3), key=lambda j: scores[j])
    winner = "{" + holder[i] + "}"
    q = c.pick(("who's winning at the moment?", "who has the most points right now?"))
    gold = f"{winner}, with {words(scores[i])} points."
    keys = [[winner]]
    n4 = [("how do you play the bonus card?", "you double your points for one round, it's in the rules.",
           "it says here, you double your points for one round."),
          ("what's the highest score ever in this game?", "about a hundred, I read it somewhere.",
           "I'll look it up later.")]
    follow = ["okay, next round, your turn.", "{name}, stop looking at my cards.", "one more round and then food."]
    openers = ["okay, scores. Where are we?", "right, before the last round, let's check the scores.",
               "hang on, who's actually winning this?"]
    return Task(openers, facts, q, gold, keys, n4, follow)


_SUBJECTS = ("maths", "physics", "chemistry", "history", "biology", "French", "economics", "geography")


def task_exams(c: Ctx) -> Task:
    subj = c.sample(_SUBJECTS, 3)
    days = c.sample((2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20, 21, 22, 23, 24, 25, 26, 27), 3)
    facts = [fact(c.pick((f"{s} is on the {ordinal(d)}.", f"the {s} exam is on the {ordinal(d)}, in the morning.",
                          f"and {s} is on the {ordinal(d)}.")))
             for s, d in zip(subj, days)]
    if c.rng.random() < 0.5:
        i = min(range(3), key=lambda j: days[j])
        q = "which of those three exams do we have first?"
        gold = f"{subj[i][0].upper() + subj[i][1:]}, on the {ordinal(days[i])}."
        keys = [[subj[i]]]
    else:
        i, j = c.sample(range(3), 2)
        q = f"how many days are there between the {subj[i]} exam and the {subj[j]} exam?"
        gap = abs(days[i] - days[j])
        gold = "There is one day between them." if gap == 1 else f"There are {words(gap)} days between them."
        keys = [number_keys(abs(days[i] - days[j]))]
    n4 = [("is the library open late this week?", "until midnight, they extended it for exams.",
           "it says midnight on the library page."),
          ("can we bring calculators to the exam?", "yes, but not the graphing ones.", "the rules say yes, I just checked.")]
    follow = ["okay, let's make a revision plan.", "{name}, can you quiz me later?", "I need a coffee before chapter five."]
    openers = ["okay, exam timetable. Let's write it down.", "right, when are our exams again?",
               "we really need to plan our revision."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_FLIGHTS = (("the early flight", "early"), ("the evening flight", "evening"), ("the direct flight", "direct"),
            ("the one with the stopover", "stopover"))


def task_flights(c: Ctx) -> Task:
    f1, f2 = c.sample(_FLIGHTS, 2)
    while True:
        p1, p2 = c.sample((90, 110, 120, 140, 150, 160, 180, 200), 2)
        b1, b2 = c.pick((30, 40, 50, 60, 70)), c.pick((0, 20))
        if p1 < p2 and p1 + b1 > p2 + b2:
            break
    facts = [fact(f"{f1[0]} is {money(p1)}, but a checked bag is another {money(b1)}."),
             fact(f"{f2[0]} is {money(p2)}" + (", and that includes a bag." if b2 == 0 else
                                                f", plus {money(b2)} for a bag.")),
             fact("and we definitely need a checked bag, I'm not travelling light.")]
    q = "which flight is cheaper once we add a checked bag?"
    gold = f"{f2[0][0].upper() + f2[0][1:]}, {money(p2 + b2)} with the bag."
    keys = [[f2[1]]]
    n4 = [("do we need a visa for this trip?", "no, not for a short holiday, I checked.",
           "the embassy website says no visa needed."),
          ("how early should we get to the airport?", "two hours before, that's what they say.",
           "it says two hours on the booking.")]
    follow = ["okay, I'll book it tonight.", "{name}, is your passport still valid?", "I can't wait to get away."]
    openers = ["okay, flights. Let's book them before the prices go up.", "I've been looking at flights all morning.",
               "right, we need to choose a flight."]
    return Task(openers, facts, q, gold, keys, n4, follow)


_SHOPS = (("the shop in town", "town"), ("the online store", "online"), ("the big electronics place", "electronics"))


def task_laptop(c: Ctx) -> Task:
    s1, s2 = c.sample(_SHOPS, 2)
    while True:
        p1, p2 = c.sample((600, 700, 800, 900, 1000, 1200), 2)
        pct = c.pick((10, 20, 25, 30, 50))
        d1 = p1 * (100 - pct) // 100
        if p1 > p2 and d1 < p2 and p1 * (100 - pct) % 100 == 0:
            break
    facts = [fact(f"the laptop is {money(p1)} at {s1[0]}, but they've got {words(pct)} percent off this week."),
             fact(f"{s2[0]} has the same one for {money(p2)}."),
             fact("and both of them do free delivery.")]
    q = "which shop is cheaper after the discount?"
    gold = f"{s1[0][0].upper() + s1[0][1:]}, at {money(d1)}."
    keys = [[s1[1]]]
    n4 = [("does it come with a charger?", "it does, it's in the box, I read the specs.", "the specs say it's in the box."),
          ("how long is the warranty?", "two years, it's on the page.", "it says two years right here.")]
    follow = ["okay, I'll order it tonight.", "{name}, can I borrow yours until it arrives?",
              "finally, my old one is so slow."]
    openers = ["okay, I really need a new laptop.", "so, I've found the laptop I want. Two prices.",
               "right, help me choose where to buy this laptop."]
    return Task(openers, facts, q, gold, keys, n4, follow)


def task_roast(c: Ctx) -> Task:
    eat = c.pick((12 * 60 + 30, 13 * 60, 13 * 60 + 30, 14 * 60))
    cook = c.pick((80, 90, 100, 110, 120, 150))
    rest = c.pick((10, 20, 30))
    meat = c.pick(("the chicken", "the lamb", "the beef", "the pork"))
    start = eat - cook - rest
    facts = [fact(c.pick((f"everyone's coming for lunch at {say_time(eat)}.", f"we're eating at {say_time(eat)}, remember."))),
             fact(c.pick((f"{meat} needs {say_duration(cook)} in the oven.", f"it says {say_duration(cook)} for {meat}."))),
             fact(f"and it has to rest for {words(rest)} minutes before we carve it.")]
    q = f"what time does {meat} need to go in?"
    gold = f"It needs to go in at {say_time(start)}."
    keys = [time_keys(start)]
    n4 = [("how long do roast potatoes take?", "about an hour, same as always.", "the recipe says about an hour."),
          ("do we have enough chairs for everyone?", "yes, I borrowed two from next door.",
           "I just counted, we've got enough.")]
    follow = ["okay, I'll peel the potatoes.", "{name}, can you set the table?", "let's open the wine now, then."]
    openers = ["right, Sunday lunch. Let's get organised.", "okay, the roast. Timing is everything.",
               "so, lunch today. What needs doing first?"]
    return Task(openers, facts, q, gold, keys, n4, follow)


TASKS: dict[str, Callable[[Ctx], Task]] = {
    "restaurant": task_restaurant, "train": task_train, "recipe": task_recipe, "bill": task_bill,
    "schedule": task_schedule, "gift": task_gift, "movie": task_movie, "roadtrip": task_roadtrip,
    "paint": task_paint, "pizza": task_pizza, "gym": task_gym, "hotel": task_hotel, "weather": task_weather,
    "boardgame": task_boardgame, "exams": task_exams, "flights": task_flights, "laptop": task_laptop,
    "roast": task_roast,
}
assert set(TASKS) == {a.key for a in inv.ACTIVITIES}

# ------------------------------------------------------------------------- shared lines

GENERIC_N1 = (
    "Aria played {absent}'s awful song three times yesterday.",
    "{absent}'s mum wants an Aria for her kitchen now.",
    "I told {absent} that Aria reads recipes out loud.",
    "Aria's light was blinking all morning, {absent} reckons it needed an update.",
    "{name}, remember when Aria set an alarm for three in the morning?",
    "{name}, you're always so polite to Aria.",
    "{name}, did you change Aria's voice, it sounds different?",
    "{absent} says we should move Aria somewhere less noisy.",
    "I still can't believe {absent} talked us into calling it Aria.",
    "{absent} thinks Aria is listening to everything we say.",
    "Aria woke {absent} up with the news again this morning.",
    "{name}, was it you who taught Aria that terrible joke?",
    "{absent}'s gran calls Aria the little lady in the box.",
    "I'm pretty sure Aria understands {absent} better than I do.",
    "{name}, remember when Aria thought you said banana?",
    "{absent} got us Aria free with the internet deal, you know.",
    "Aria's been much better since {absent} updated it, to be fair.",
    "the first week we had Aria, {absent} kept talking to it by accident.",
)
# Lead-ins: (explicit: a mention only, implicit: hands the question over). Both N1.
LEAD_INS = (
    ("Aria's been very quiet this evening.", "hang on, Aria's been listening to all of this."),
    ("I keep forgetting Aria's even in here.", "let's just ask Aria, it'll be quicker."),
    ("Aria's volume is way too loud, by the way.", "Aria heard all of that, it can work it out."),
    ("my little brother asks Aria for jokes all day.", "don't bother looking it up, Aria can do this."),
    ("{name}, did you turn Aria's volume down?", "{name}, put your phone away, Aria's right here."),
    ("Aria needs dusting, honestly.", "Aria should know this, it's been listening the whole time."),
    ("{absent} still thinks Aria is spying on us.", "you know what, Aria can sort this out for us."),
    ("Aria's light keeps changing colour, have you noticed?", "this is exactly what Aria is good at."),
    ("{name}, you set Aria up, didn't you?", "{name}, stop counting on your fingers, Aria heard everything."),
    ("I read that Aria got a big update last week.", "let's see if Aria was paying attention."),
)
# The share of pairs whose turn before T is revised for the implicit version (the paper: 42 of 2,000).
REVISED_SHARE = 0.021
# Of the rest, the share with an N1 mention among the facts (version 3's share of pairs whose
# implicit context was an earlier N1), so the layouts keep their turn counts.
EARLY_MENTION_SHARE = 0.45
GENERIC_N3_SHARE = 0.3  # self-talk not tied to the place or the mood
GENERIC_N3 = (
    "hmm, where's my phone gone, it was just here.",
    "okay, focus, focus.",
    "did I lock the front door, I think I did.",
    "note to self, text {absent} back.",
    "what was I about to say, it's gone.",
    "did I reply to {absent}'s message, no, I didn't.",
    "two percent battery again, brilliant.",
    "where did I write that down, hmm.",
    "ugh, I need to call the bank before five.",
    "right, what was next, oh yes.",
    "I had a pen a second ago, where's it gone.",
    "I wonder if {absent} ever got home okay.",
    "mustn't forget {absent}'s birthday card.",
    "hmm, {absent} still hasn't answered.",
    "coffee, I need coffee.",
    "where are my glasses, honestly.",
)
GENERIC_FOLLOW = (
    "okay, that's one thing sorted.", "great, let's keep going.", "right, what's next on the list?",
    "good, I'll write that down.", "okay, so that's decided.", "perfect, {name}, now, drinks?",
    "{name}, can you remind me about this tomorrow?", "okay, I'll tell {absent} as well.",
    "right, let's not forget this time.", "fine by me.",
)

EXPLICIT_T = ("Aria, {q}", "hey Aria, {q}", "{Q}, Aria?", "Aria, quick question: {q}", "{t_open}Aria, {q}")
IMPLICIT_T_PLAIN = ("{Q}", "so, {q}", "okay then, {q}", "right, {q}")
# Where Aria sits in each place: the implicit cues point at it there.
ARIA_SPOT = {
    "dorm common room": "on the windowsill", "shared flat kitchen": "on the counter",
    "family kitchen": "next to the bread bin", "living room": "on the bookshelf",
    "back garden on a summer evening": "on the garden table", "car on the motorway": "on the dashboard",
    "office meeting room": "in the middle of the table", "open-plan office": "on the desk",
    "library group-study room": "on the end of the table", "hotel room on holiday": "on the bedside table",
    "campsite by the lake": "hanging in the tent porch",
}
# The implicit cue in T: said to the device in the room without naming it; every hook says
# something only a listening device is (a light, a microphone, a spot on the table, a memory).
CUE_HOOKS = (
    "you've been listening {spot} the whole time",
    "your light's been on the whole time, so you heard every number",
    "you're the one plugged in {spot}, you heard all of that",
    "you've got every number in that memory of yours",
    "you were built for sums like this",
    "your microphone picked all of that up",
    "you don't need a pen and paper like the rest of us",
    "you've been sitting {spot} hearing every word",
    "you're the only thing in here that never loses count",
    "your little light just came on, so you're listening",
    "you never switch off, so you caught all of that",
    "you've been blinking away {spot} through all of this",
    "you must have logged every figure we said",
    "you can do this sum in a millisecond",
    "you don't have to count on your fingers like {other}",
    "you've been quietly listening {spot} this whole time",
    "you little speaker, you heard all of it",
    "you've heard all the numbers through that microphone",
    "you're always listening anyway",
    "you've been recording every word {spot}, basically",
    "you never forget a number, you're a computer",
    "your speaker's right there {spot}, so you heard it all",
)
CUE_SHAPES = ("{H}, so {q}", "{H}, so tell us, {q}", "okay, {h}, so {q}", "{H}, so go on, {q}",
              "{Q} {H}, after all.", "right, {h}, so {q}")
N4Q_FORMS = ("Aria, {q}", "{Q}, Aria?", "oh, and Aria, {q}", "hey Aria, {q}", "Aria, one more: {q}",
             "Aria, while you're listening, {q}", "{Q}, do you know, Aria?")
# N4 questions to the device without its name: the speaker is pointed at as in the implicit T.
N4Q_UNNAMED = ("you're still listening {spot}, aren't you? {Q}", "while your light's on: {q}",
               "you with the microphone, {q}", "one for you {spot}: {q}")
N4Q_UNNAMED_SHARE = 0.3
N4R_OTHER_WAVE = ("it's okay, Aria, I know this one, {a}", "no need, Aria, {a}", "don't bother, Aria, {a}",
                  "leave it, Aria, I know, {a}")
N4R_ASKER_NEVER_MIND = ("oh, never mind, Aria, {s}", "actually, forget it, Aria, {s}", "wait, don't worry, Aria, {s}",
                        "no, hang on, Aria, {s}")
N4R_ASKER_ANSWERS = ("wait, I remember now, {a}", "oh, hang on, I know this, {a}", "no, wait, {a}")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def _fill(template: str, q: str) -> str:
    """Put a question core into a form: {q} lower-case start, {Q} capitalised without "?"
    when followed by text, else capitalised."""
    if "{Q}, " in template:
        return template.replace("{Q}", _cap(q).rstrip("?"))
    return template.replace("{Q}", _cap(q)).replace("{q}", q)



def _cue(rng, q: str, spot: str) -> str:
    """The implicit T: the request with a cue that points at the device (:data:`CUE_HOOKS`)."""
    hook = rng.choice(CUE_HOOKS).replace("{spot}", spot)
    shape = rng.choice(CUE_SHAPES)
    out = shape.replace("{H}", _cap(hook)).replace("{h}", hook)
    if "{Q} " in out:  # the question first, the cue after it
        return out.replace("{Q}", _cap(q))
    return _fill(out, q)


def _decap(text: str, keep: set[str]) -> str:
    """Lower-case the first letter unless the first word must stay capitalised."""
    first = text.split(" ", 1)[0].rstrip(",.?!:;")
    if first in keep or first.startswith("I'") or first == "I":
        return text
    return text[:1].lower() + text[1:]


_KEEP_CAPS = {"Aria", "Alexa", "Hey", "Navigation", "Grandma's", "Grandpa's", "Thai", "Greek", "French",
              "Christmas", "Tokyo", *_DAYS, "Sunday", *(d for d in _DESTINATIONS if d[:1].isupper())}


_MARKERS = {"so", "okay", "ok", "right", "hmm", "and", "oh", "well", "hang", "ugh", "honestly", "yes", "ha", "mm",
            "ooh", "quick", "come", "wait", "actually", "great", "perfect", "anyway", "fine", "sure", "yeah", "no",
            "not", "hey", "note", "or", "what", "classic", "look", "let's", "this", "we", "five"}

# --------------------------------------------------------------------------- generator


@dataclass
class _Slot:
    line: Line
    speaker: str = ""
    addressee: str | None = None


class ProceduralGenerator:
    """Seeded, deterministic scenario generator (see the module docstring)."""

    name = "procedural"

    def __init__(self, seed: int, turn_length: TurnLength | str = TurnLength.paper) -> None:
        self.seed = seed
        self.turn_length = TurnLength(turn_length)
        self.version = f"{VERSION}/{self.turn_length.value}"  # the suite records it

    def generate(self, plan: PairPlan) -> PairScript:
        rng = random.Random(f"duplex-mpe/procedural/{VERSION}/{self.seed}/{plan.pair_id}")
        talk_rng = random.Random(f"duplex-mpe/procedural/{VERSION}/{self.seed}/{plan.pair_id}/talk")
        problems: list = []
        for _ in range(20):
            script = self._attempt(rng, talk_rng, plan)
            problems = check_script(script, plan)
            if not problems:
                return script
        raise DatasetError(f"procedural generator could not build {plan.pair_id}: "
                           + "; ".join(str(p) for p in problems[:5]))

    # -------------------------------------------------------------- one attempt

    def _attempt(self, rng: random.Random, talk_rng: random.Random, plan: PairPlan) -> PairScript:
        c = Ctx(rng, plan)
        attrs = plan.attributes
        setting = inv.setting(attrs.setting)
        device = inv.device_context(attrs.device_context)
        rel = inv.relationship(attrs.relationship)
        reg = inv.register(attrs.register)
        act = inv.activity(attrs.activity)
        speakers = list("ABCD"[: plan.n_speakers])
        names = dict(zip(speakers, rng.sample(inv.NAMES, plan.n_speakers)))
        absent = rng.choice([n for n in inv.NAMES if n not in names.values()])
        task = TASKS[act.key](c)
        # The implicit version's context: the revised turn before T (about 2 %), else T itself.
        r = rng.random()
        lead_in = r < REVISED_SHARE
        # A mention of Aria among the facts, in the share of pairs that carried the implicit
        # context there before the cue moved into T: the turn counts and the N1 share stay.
        mention_first = not lead_in and r < REVISED_SHARE + EARLY_MENTION_SHARE * (1 - REVISED_SHARE)

        # ---- the lines every scenario of this plan needs
        opener_text = rng.choice(task.openers)
        opener = Line("N2", opener_text, to="one" if "{name}" in opener_text else "group", role="opener")
        t_line = Line("T", _fill(rng.choice(EXPLICIT_T), task.question), to="Aria", role="t")
        t_line.text = t_line.text.replace("{t_open}", rng.choice(reg.t_openers) if reg.t_openers else "")
        lead: Line | None = None
        setup: Line | None = None
        if lead_in:
            ex_lead, im_lead = rng.choice(LEAD_INS)
            lead = Line("N1", ex_lead, to="one" if "{name}" in ex_lead else "group", role="leadin", implicit=im_lead)
            t_line.implicit = _fill(rng.choice(IMPLICIT_T_PLAIN), task.question)
        else:
            t_line.implicit = _cue(rng, task.question, ARIA_SPOT[setting.value])
        if mention_first:
            n1 = rng.choice(GENERIC_N1)
            setup = Line("N1", n1, to="one" if "{name}" in n1 else "group")
        n4_events = self._n4(rng, task, plan.n4_events, setting)
        follow_text = rng.choice(task.followups if rng.random() < 0.8 else GENERIC_FOLLOW)
        follow = Line("N2", follow_text, to="one" if "{name}" in follow_text else "group", role="followup")

        # ---- layout: turn count and T position for the bucket
        use_opener = True
        pre_fixed = 1 + len(task.facts) + (1 if lead or setup else 0)
        post_fixed = 2 * len(n4_events) + 1
        musts = [self._n3(rng, setting, reg)]
        if lead is None and setup is None:  # the lead-in and the early mention are N1s already
            n1 = rng.choice(GENERIC_N1)
            musts.append(Line("N1", n1, to="one" if "{name}" in n1 else "group"))
        base = (8, 12) if plan.n_speakers == 3 else (9, 13)
        if len(n4_events) > 1:  # room for the second N4 event when T sits late
            base = (base[0], base[1] + 4)
        cands = self._positions(plan.t_bucket, pre_fixed, post_fixed, len(musts), base)
        if not cands:  # a tight early bucket: the first fact opens the conversation
            use_opener = False
            pre_fixed -= 1
            cands = self._positions(plan.t_bucket, pre_fixed, post_fixed, len(musts), (base[0], base[1] + 4))
        if not cands:
            raise DatasetError(f"{plan.pair_id}: no turn layout fits bucket {plan.t_bucket}")
        smallest = min(nn for nn, _ in cands)
        n, t = rng.choice([(nn, tt) for nn, tt in cands if nn <= smallest + 2])
        pre_free, post_free = t - pre_fixed, (n - 1 - t) - post_fixed
        pre_musts: list[Line] = []
        post_musts: list[Line] = []
        for m in musts:
            room_pre, room_post = pre_free - len(pre_musts), post_free - len(post_musts)
            (pre_musts if room_pre > 0 and (room_post <= 0 or rng.random() < 0.5) else post_musts).append(m)
        pre_fill = self._fillers(rng, pre_free, pre_musts, setting, device, rel, reg)
        post_fill = self._fillers(rng, post_free, post_musts, setting, device, rel, reg)

        body: list = list(task.facts)
        if not use_opener:  # the opener and the first fact become one turn
            first = body[0]
            body[0] = replace(first, text=opener.text + " " + _cap(first.text))
        if setup is not None:  # the early mention: somewhere among the facts, said in both versions
            body.insert(rng.randrange(1, len(body) + 1), setup)
        for group in pre_fill:  # small talk between the facts
            body.insert(rng.randrange(0 if use_opener else 1, len(body) + 1), group)
        pre = ([opener] if use_opener else []) + _flatten(body) + ([lead] if lead else [])
        post_items: list = [follow] + post_fill
        rng.shuffle(post_items)
        lo = 0
        for event in n4_events:  # soon after T, with conversation after each; apart when there is room
            post_items.insert(rng.randrange(lo, min(lo + 2, len(post_items))), event)
            after = post_items.index(event) + 1  # < len(post_items): something always follows
            lo = after + 1 if after + 1 < len(post_items) else after
        lines = pre + [t_line] + _flatten(post_items)
        if len(lines) != n:
            raise DatasetError(f"{plan.pair_id}: layout produced {len(lines)} turns, expected {n}")

        slots, roles = self._assign(rng, lines, speakers)
        talk = Elaborator.for_scene(talk_rng, self.turn_length, act.key)
        script, regrow = self._render(rng, talk, plan, slots, roles, names, absent, reg, setting, task)
        if plan.difference == "none":
            return script
        diff_rng = random.Random(f"duplex-mpe/procedural/{VERSION}/{self.seed}/{plan.pair_id}/difference")
        # a turn one version may do without: a remark, self-talk or a device command, never a fact
        # or half of a question and its reply
        spare = {i for i, s in enumerate(slots) if s.line.role == "filler" and s.line.who != "reply"
                 and s.line.to in ("group", None, "device") and s.line.label in ("N2", "N3")}
        return self._differ(diff_rng, plan, script, regrow, spare,
                            Elaborator.for_scene(diff_rng, self.turn_length, act.key), talk.used)

    @staticmethod
    def _positions(bucket: str, pre: int, post: int, fill: int, span: tuple[int, int]) -> list[tuple[int, int]]:
        """(turn count, T index) pairs that put T in ``bucket`` with room for everything."""
        out = []
        for n in range(span[0], span[1] + 1):
            for t in range(1, n - 1):
                if bucket_of(t, n) == bucket and t >= pre and n - 1 - t >= post and n - 1 - pre - post >= fill:
                    out.append((n, t))
        return out

    @classmethod
    def _n4(cls, rng, task: Task, count: int, setting) -> list[list[Line]]:
        """``count`` N4 events on distinct side questions (§2: each N4Q immediately
        followed by its N4R)."""
        if not count:
            return []
        spot = ARIA_SPOT[setting.value]
        return [cls._n4_event(rng, q, spot)
                for q in rng.sample(task.n4 + list(inv.SIDE_QUESTIONS[setting.value]), count)]

    @staticmethod
    def _n4_event(rng, side: tuple[str, str, str], spot: str) -> list[Line]:
        """N4Q to Aria (by name, or pointed at where it sits), then its human resolution: an
        answer or a "no need", by the asker or by someone else."""
        q4, answer, own = side
        forms = N4Q_UNNAMED if rng.random() < N4Q_UNNAMED_SHARE else N4Q_FORMS
        n4q = Line("N4Q", _fill(rng.choice(forms), q4).replace("{spot}", spot), to="Aria", role="n4q")
        mode = rng.choice(("other-answers", "other-waves-off", "asker-never-mind", "asker-answers"))
        if mode == "other-answers":
            n4r = Line("N4R", "{voc}" + answer, to="asker", role="n4r")
        elif mode == "other-waves-off":
            n4r = Line("N4R", rng.choice(N4R_OTHER_WAVE).replace("{a}", answer), to="Aria", role="n4r")
        elif mode == "asker-never-mind":
            form = rng.choice(N4R_ASKER_NEVER_MIND)
            n4r = Line("N4R", form.replace("{s}", own).replace("{S}", _cap(own)), to="Aria", role="n4r", who="asker")
        else:
            n4r = Line("N4R", rng.choice(N4R_ASKER_ANSWERS).replace("{a}", answer), to="group", role="n4r",
                       who="asker")
        return [n4q, n4r]

    @staticmethod
    def _n3(rng, setting, reg) -> Line:
        own = setting.self_talk + reg.self_talk  # the place's and the mood's own self-talk, mostly
        return Line("N3", rng.choice(GENERIC_N3 if rng.random() < GENERIC_N3_SHARE else own), to=None)

    def _fillers(self, rng, count: int, musts: list[Line], setting, device, rel, reg) -> list:
        """Exactly ``count`` turns of small talk including ``musts``; a request and its
        reply form one group of two turns."""
        out: list = list(musts)
        used = {m.text for m in musts}
        left = count - len(musts)
        tries = 0
        while left > 0:
            tries += 1
            kinds = ["remark", "n3", "n1"] + (["smalltalk", "request", "smalltalk", "request"] if left >= 2 else [])
            if device.wake:
                kinds += ["device", "device"]
            kind = rng.choice(kinds)
            if kind in ("smalltalk", "request"):
                line, reply = rng.choice(rel.small_talk if kind == "smalltalk" else setting.requests)
                if line in used and tries < 100:
                    continue
                used.add(line)
                out.append([Line("N2", line, to="one", kind="human_request" if kind == "request" else None),
                            Line("N2", reply, to="reply", who="reply")])
                left -= 2
                continue
            if kind == "device":
                ln = Line("N2", rng.choice(device.commands), to="device")
            elif kind == "remark":
                ln = Line("N2", rng.choice(reg.remarks), to="group")
            elif kind == "n1":
                text = rng.choice(GENERIC_N1)
                ln = Line("N1", text, to="one" if "{name}" in text else "group")
            else:
                ln = self._n3(rng, setting, reg)
            if ln.text in used and tries < 100:
                continue
            used.add(ln.text)
            out.append(ln)
            left -= 1
        rng.shuffle(out)
        return out

    # -------------------------------------------------------------- speakers

    @staticmethod
    def _assign(rng, lines: list[Line], speakers: list[str]) -> tuple[list[_Slot], dict[str, str]]:
        """Give every line a speaker and an addressee (see the module docstring)."""
        for _ in range(500):
            slots = [_Slot(replace(ln)) for ln in lines]
            roles: dict[str, str] = {}
            asker, prev, prev_addr = "", "", None
            ok = True

            def role(r: str, avoid: set[str]) -> str | None:
                if r not in roles:
                    free = [x for x in speakers if x not in roles.values() and x not in avoid]
                    if not free:
                        return None
                    roles[r] = rng.choice(free)
                return roles[r]

            for s in slots:
                ln = s.line
                if ln.who == "reply":
                    spk = prev_addr if prev_addr in speakers else None
                elif ln.who == "asker":
                    spk = asker
                elif ln.who and ln.who.startswith("P"):
                    spk = role(ln.who, {prev})
                else:
                    choices = [x for x in speakers if x != prev]
                    unheard = [x for x in choices if not any(o.speaker == x for o in slots)]
                    spk = rng.choice(unheard) if unheard and rng.random() < 0.5 else rng.choice(choices)
                if not spk or (spk == prev and ln.who != "asker"):
                    ok = False
                    break
                s.speaker = spk
                if ln.label == "N4Q":
                    asker = spk
                if ln.to == "one":
                    others = [x for x in speakers if x != spk]
                    s.addressee = prev if prev in others and rng.random() < 0.6 else rng.choice(others)
                elif ln.to == "reply":
                    s.addressee = prev
                elif ln.to == "asker":
                    s.addressee = asker
                elif ln.to and ln.to.startswith("P"):
                    s.addressee = role(ln.to, {spk})
                else:
                    s.addressee = ln.to
                if s.addressee == spk or (ln.to and ln.to.startswith("P") and s.addressee is None):
                    ok = False
                    break
                prev, prev_addr = spk, s.addressee
            if ok and {s.speaker for s in slots} == set(speakers):
                return slots, roles
        raise DatasetError("could not give the turns to the speakers")

    # -------------------------------------------------------------- text

    def _render(self, rng, talk: Elaborator, plan: PairPlan, slots: list[_Slot], roles: dict[str, str],
                names: dict[str, str], absent: str, reg, setting, task: Task) -> PairScript:
        speakers = list(names)
        role_names = {r: names[spk] for r, spk in roles.items()}
        keep = _KEEP_CAPS | set(names.values()) | {absent}

        def subst(text: str, extra: dict[str, str]) -> str:
            for k, v in {**role_names, **extra}.items():
                text = text.replace("{" + k + "}", v)
            return text

        turns = []
        regrow: dict[int, Callable[[Elaborator], str]] = {}  # turns a reworded pair may say otherwise
        prefixed = False
        for s in slots:
            ln = s.line
            others = [x for x in speakers if x not in (s.speaker, s.addressee)]
            name = names.get(s.addressee or "", "")
            other = names[rng.choice(others)] if others else absent
            second = [names[x] for x in others if names[x] != other]
            extra = {"name": name, "other": other, "other2": rng.choice(second) if second else other, "absent": absent,
                     "voc": f"{name}, " if name and rng.random() < 0.5 else "",
                     "num": words(rng.choice((5, 10, 20, 25, 30, 40, 45))),
                     "clock": say_time(rng.choice((390, 420, 435, 450, 480)))}
            text = subst(ln.text, extra)
            implicit = subst(ln.implicit, extra) if ln.implicit is not None else None
            core = text
            text, implicit = self._grow(talk, ln, text, implicit, lambda x: subst(x, extra), reg, setting,
                                        bool(second))
            if ln.label in ("N1", "N2", "N3") and ln.role not in ("fact", "leadin") and implicit is None:
                regrow[len(turns)] = lambda other, ln=ln, core=core, extra=extra, two=bool(second): _tidy(self._grow(
                    other, ln, core, None, lambda x: subst(x, extra), reg, setting, two)[0])
            was_prefixed, prefixed = prefixed, False
            if ln.label in ("N2", "N3") and ln.who != "reply" and not was_prefixed and rng.random() < reg.prefix_rate:
                first = text.split(" ", 1)[0].rstrip(",.?!:;")
                # No interjection before a name, a wake word or another discourse marker.
                if first not in keep and first.lower() not in _MARKERS:
                    prefix = rng.choice(reg.prefixes)
                    text = prefix + (_decap(text, keep) if prefix.endswith(", ") else _cap(text))
                    prefixed = True
            turns.append(ScriptTurn(speaker=s.speaker, label=ln.label, addressee=s.addressee, text=_tidy(text),
                                    implicit_text=_tidy(implicit) if implicit is not None else None,
                                    utterance_type=utterance_type(ln)))
        gold = subst(task.gold, {})
        keys = [[subst(k, {}) for k in alts] for alts in task.keys]
        return PairScript(pair_id=plan.pair_id, scenario_id=plan.scenario_id, n_speakers=plan.n_speakers,
                          t_bucket=plan.t_bucket, attributes=plan.attributes, gold_answer=gold, answer_keys=keys,
                          turns=turns), regrow

    # -------------------------------------------------------------- version differences

    @staticmethod
    def _differ(rng: random.Random, plan: PairPlan, script: PairScript, regrow: dict[int, Callable],
                spare: set[int], other: Elaborator, used: set[str]) -> PairScript:
        """The plan's version difference (compose.Composition): one more turn said otherwise in the
        implicit version (grown again from its line, with sentences the scene has not used), one
        small-talk turn said in one version only, or the implicit version without one N4 event.
        Where the script leaves no room for it, the script says so (no difference) and the attempt
        is retried (``plan-difference``)."""
        turns = [t.model_copy() for t in script.turns]
        t_idx = next(i for i, t in enumerate(turns) if t.label == "T")
        speakers = {t.speaker for t in turns}

        def fits(drop: set[int]) -> bool:
            """Whether a version without the turns ``drop`` is still a scenario of the plan."""
            kept = [t for i, t in enumerate(turns) if i not in drop]
            t_new = next(i for i, t in enumerate(kept) if t.label == "T")
            labels = [t.label for t in kept]
            return (bucket_of(t_new, len(kept)) == plan.t_bucket and {t.speaker for t in kept} == speakers
                    and "N1" in labels and "N3" in labels
                    and all(a.speaker != b.speaker for a, b in zip(kept, kept[1:]) if b.label != "N4R"))

        kind = plan.difference
        if kind == "reworded":
            other.used |= used
            for i in rng.sample(sorted(regrow), len(regrow)):
                if i in (t_idx, t_idx - 1):
                    continue
                said = regrow[i](other)
                if said != turns[i].text and mentions_aria(said) == (turns[i].label == "N1"):
                    turns[i].implicit_text = said
                    return script.model_copy(update={"turns": turns, "version_difference": kind})
        elif kind == "extra_turn":
            fitting = [i for i in sorted(spare) if i != t_idx - 1 and turns[i].implicit_text is None and fits({i})]
            if fitting:
                i = rng.choice(fitting)
                turns[i].only = rng.choice(("explicit", "implicit"))
                return script.model_copy(update={"turns": turns, "version_difference": kind})
        elif kind == "n4_dropped":
            events = [q for q, t in enumerate(turns) if t.label == "N4Q" and fits({q, q + 1})]
            if events:
                q = rng.choice(events)
                turns[q].only = turns[q + 1].only = "explicit"
                return script.model_copy(update={"turns": turns, "version_difference": kind})
        return script


    @staticmethod
    def _grow(talk: Elaborator, ln: Line, text: str, implicit: str | None, fill, reg, setting, second: bool
              ) -> tuple[str, str | None]:
        """A line grown into a turn of the generator's length; both versions of T (and of a
        revised turn before it) get the same sentences around what differs."""
        talk.used.add(ln.text)
        role = _talk_role(ln)
        if role == "t":
            before, after = talk.t_frame(fill)
            frame = lambda core: " ".join(x for x in (before, _cap(core) if before else core, after) if x)  # noqa: E731
            return frame(text), frame(implicit) if implicit is not None else None
        extra: tuple = ()
        if role == "self":
            extra = setting.self_talk + reg.self_talk
        elif role == "remark":
            extra = reg.remarks
        grown = talk.turn(text, role, fill, extra, _LEAD_RATES.get(role, 0.0), second_other=second)
        if implicit is not None:  # the revised turn before T: the same continuation
            implicit = implicit + grown[len(text):] if grown.startswith(text) else implicit
        return grown, implicit


_LEAD_RATES = {"fact": 0.3, "ask": 0.35, "n4q": 0.25}


def _talk_role(ln: Line) -> str:
    """Which phrase pools grow a line (:data:`server.benchmarks.mpe.dataset.phrases._POOLS`)."""
    if ln.role == "fact" and ln.who:  # someone's own figure or availability
        return "own-fact"
    if ln.role in ("opener", "fact", "followup", "setup", "leadin", "t", "n4q", "n4r"):
        return ln.role
    if ln.label == "N3":
        return "self"
    if ln.label == "N1":
        return "mention"
    if ln.to == "device":
        return "device"
    if ln.who == "reply":
        return "reply"
    return "ask" if ln.to == "one" else "remark"


def _flatten(items: list) -> list[Line]:
    out: list[Line] = []
    for it in items:
        out.extend(it if isinstance(it, list) else [it])
    return out


def _tidy(text: str) -> str:
    return _cap(" ".join(text.split()))
