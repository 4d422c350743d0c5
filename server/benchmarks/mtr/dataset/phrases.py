"""Spoken lines of the procedural generator besides the topic bank: how users ask, open
and continue, barge in and pause; how the assistant opens and closes a reply; what a third
party says in the room or a TV/radio announces; the listener backchannels.

Templates take the facet's embedded question (``{ask}``: "how volcanoes form"; ``{Ask}``
capitalised), the topic's title (``{title}``, ``{Title}``), the previous round's embedded question
(``{prev}``) or the next facet's (``{next}``). Where a template bank is drawn from within a
dialogue, a dialogue uses each template at most once until the bank runs out, so stock wording
does not repeat within a dialogue.
"""

from __future__ import annotations

import random

#: round 1: how the user brings up the topic
INTROS = (
    "I've been curious about {title} lately.",
    "I want to learn a bit more about {title}.",
    "Can we talk about {title} for a minute?",
    "I was reading something about {title} earlier.",
    "My friend and I were just arguing about {title}.",
    "I've got a few questions about {title}.",
    "So, I'm trying to understand {title} better.",
    "Quick question about {title}.",
)

#: a later round that turns to another topic (the first one's facets all covered)
TOPIC_CHANGES = (
    "Okay, something completely different: {title}.",
    "Can I change the subject to {title}?",
    "Totally unrelated, but I was thinking about {title} the other day.",
    "Let's switch to {title} for a bit.",
    "That reminds me, I wanted to ask you about {title} too.",
    "New topic, if that's alright: {title}.",
    "While I have you, I'm curious about {title} as well.",
    "Oh, before I forget, I meant to ask about {title}.",
    "Different thing now: {title}.",
    "Can we move on to {title}?",
    "Something else I've been meaning to ask about is {title}.",
    "Okay, next thing on my mind is {title}.",
    "Next up, {title}?",
    "Right, on a completely different note, {title}.",
    "Random one: {title}.",
    "Here's something else: {title}.",
    "Mind if we talk about {title} now?",
    "Can we do {title} next?",
    "I've got another one for you, about {title}.",
    "Now, {title}.",
    "So, totally different subject, {title}.",
    "And now for something else, {title}.",
    "Okay, let's try {title}.",
    "Oh, and I wanted to ask about {title}.",
)

#: later rounds: a short reaction to the previous answer, said in the same breath as the question
#: that follows ("Huh, can you tell me ...?")
REACTIONS = (
    "Interesting,", "Huh,", "Oh, nice,", "Wow,", "Okay,", "Right,", "Ah, okay,", "Makes sense,", "Got it,",
    "Oh, really,", "No way,", "Hm,", "Fair enough,", "Neat,", "Oh wow,", "Ha, okay,", "Mm, okay,", "I see,",
    "Cool,", "Okay, and", "Right, and", "Good to know,", "Oh, okay,", "Huh, okay, and",
)
#: later rounds: a reaction that picks up the previous answer (``{prev}``: its embedded question);
#: only for how / why / what / where / who / which / when questions
ECHOES = (
    "So that's {prev}.",
    "Ah, so that's {prev}.",
    "Okay, I get {prev} now.",
    "Huh, so that's {prev}.",
    "Right, that explains {prev}.",
    "I never really knew {prev}.",
    "Okay, now I see {prev}.",
)
#: the embedded questions an echo reads well with
ECHO_WORDS = ("how", "why", "what", "where", "who", "which", "when")
#: the user takes up the assistant's offer of the facet (``{ask}``)
UPTAKES = (
    "Yes, go on, tell me {ask}.",
    "Sure, I'd like to hear {ask}.",
    "Yeah, do tell me {ask}.",
    "Go on then, {ask}?",
    "Yes please, {ask}?",
)

#: a new question about a facet
ASKS = (
    "Can you tell me {ask}?",
    "Do you know {ask}?",
    "I'd like to know {ask}.",
    "Could you explain {ask}?",
    "Any idea {ask}?",
    "I've always wondered {ask}.",
    "And do you happen to know {ask}?",
    "Could you tell me {ask}?",
    "What I really want to know is {ask}.",
    "Tell me {ask}.",
    "I'm wondering {ask}.",
    "Do you have any idea {ask}?",
)

#: coming back to the facet of the previous round, which a third party talked over
#: (``{who}``: how the user names that person)
RECAPS = (
    "Sorry, {who} was talking to me, can you say again {ask}?",
    "Sorry, I missed some of that, can you go over {ask} again?",
    "Hang on, I got distracted there, could you repeat {ask}?",
    "Sorry about that, {who} needed me, can you tell me again {ask}?",
    "I didn't catch all of that with {who} talking, can you say again {ask}?",
)
#: how the user names the person talking in a background round
RECAP_WHO = ("my sister", "my flatmate", "my husband", "my wife", "my son", "my daughter", "my dad", "my mum",
             "my partner", "my brother")

#: pause handling: the question is broken off mid-way through its embedded question (``{ask}``:
#: its first words, at least one), and the rest of it (at least :data:`PAUSE_MIN_REST` words)
#: comes after the pause, with the ending given here
PAUSE_LEADS = (
    ("I was wondering {ask}", "."), ("Could you tell me, um, {ask}", "?"), ("Do you know {ask}", "?"),
    ("Can you explain {ask}", "?"), ("What I'd like to know is, uh, {ask}", "."),
    ("So, I've been wondering {ask}", "."), ("Can you tell me {ask}", "?"), ("Any idea {ask}", "?"),
    ("Do you happen to know, um, {ask}", "?"), ("I'd love to know {ask}", "."),
    ("I've always wanted to know {ask}", "."), ("Could you explain, um, {ask}", "?"),
    ("Tell me, uh, {ask}", "."), ("I'm curious {ask}", "."), ("Would you know {ask}", "?"),
    ("Do you have any idea {ask}", "?"), ("So, um, {ask}", "?"), ("I keep wondering {ask}", "."),
)
PAUSE_RECAP_LEADS = (("Sorry, I missed that. Can you go over {ask}", " again?"),
                     ("Could you remind me, um, {ask}", "?"), ("Sorry, what did you say about {ask}", "?"))
PAUSE_MIN_REST = 2
#: a short rest of the question (at most :data:`PAUSE_SHORT_REST` words) picks up after a hesitation
#: ("Do you know where coffee" ... "um, comes from?")
PAUSE_RESUMES = ("um,", "uh,", "er,", "erm,", "you know,", "mm,")
PAUSE_SHORT_REST = 5

#: interruption: how a barge-in opens (each dialogue draws them without repeats), said in one breath
#: with what it asks
BARGE_OPENINGS = (
    "Actually, wait,", "Sorry, hold on,", "Wait, wait,", "Hang on a second,", "Oh, sorry to cut in, but",
    "Hmm, hold on,", "No, no, sorry,", "Let me stop you there,", "One sec,", "Ooh, actually,",
    "Mm, sorry,", "Wait, I just thought,", "Ah, before I forget,", "Sorry, I should have asked,", "Oh, that reminds me,",
    "Let me jump in,", "Hmm, actually,", "Okay, stop, stop,", "Sorry, sorry,", "Just a moment,", "Oh, hang on,",
    "Excuse me, sorry,", "Right, hold that thought,", "Um, sorry,", "Hold it,", "Before you go on,",
    "Quick interruption,", "Sorry to butt in, but", "Oh wait,", "Pardon me,", "Listen, sorry,", "Hey, sorry,",
)
#: a changed request about another facet (``{ask}``)
BARGE_SWITCH = (
    "can you tell me {ask} instead?",
    "I'd rather know {ask}.",
    "never mind that, do you know {ask}?",
    "before that, tell me {ask}.",
    "new question, {ask}?",
    "could you explain {ask} instead?",
    "I need to know {ask}.",
    "skip that and tell me {ask}.",
)
#: a request to cut the current answer (about ``{ask}``) short
BARGE_SHORT = (
    "one sentence on {ask}?",
    "just the gist of {ask}.",
    "sum up {ask} in a line?",
    "in one sentence, {ask}?",
    "just the headline on {ask}.",
    "the short version of {ask}?",
    "short version, please.",
    "just the headline.",
    "what's the bottom line?",
    "just the gist on {ask}, please.",
    "can you cut to the chase on {ask}?",
    "the quick answer on {ask}?",
    "in a nutshell?",
    "keep it short, please.",
    "the short answer, please.",
    "just the main point.",
    "give me the gist.",
    "sum it up for me?",
    "the main point of {ask}?",
    "quickly, {ask}?",
    "give me {ask} in brief.",
    "the one-line version of {ask}?",
    "just the key fact on {ask}.",
    "briefly, {ask}?",
    "{ask} in a few words?",
    "the gist of {ask}, quickly?",
)
#: how the answer to a changed request opens: an acknowledgement said into its first sentence
#: (ending in a comma), or a sentence of its own naming the new facet
SWITCH_OPENERS = ("Sure,", "No problem,", "Of course,", "Okay,", "Sure thing,", "Alright,", "Right,",
                  "Okay, so", "Oh, sure,", "Yeah, so")
SHORT_OPENERS = ("Sure, in short:", "Okay, the main point:", "Sure, in one sentence:", "The short version:",
                 "In a nutshell:", "Briefly:", "Okay, quickly:", "The gist is this:")

#: the assistant's reply: an optional opening sentence naming what was asked, the answer's two
#: sentences (the first said after a short acknowledgement, the second joined on by a connective:
#: :data:`FACT_LEADS`, :data:`FACT_LINKS`), and an optional closing sentence
OPENERS = ("Ah, {ask}.", "Oh, {ask}.", "Hm, {ask}.", "Ooh, {ask}.", "Good question, {ask}.", "Hmm, {ask}.")
#: said into the answer's first sentence ("Sure, volcanoes form where ...")
FACT_LEADS = ("Sure,", "Right,", "Okay,", "Mm,", "Yes,", "Well,", "So,", "Yeah,", "Alright,", "Okay, so",
              "Right, so", "Well, basically,", "So basically,", "Sure, so", "Well, so", "Yes, well,", "Yes, so", "Okay, well,",
              "Mm, so", "Yeah, basically,")
#: how the answer's second sentence is joined on
FACT_LINKS = ("And", "Also,", "Plus,", "And actually,", "Oh, and", "On top of that,", "And also,", "What's more,",
              "And then,", "Also, by the way,", "And funnily enough,", "Oh, and also,", "And on top of that,", "Plus, actually,")
RECAP_OPENERS = ("Of course, here's {ask} again.", "Sure, no problem, {ask} again.", "Happy to go over {ask} again.",
                 "Sure, here's {ask} once more.", "No problem, {ask} again then.")
#: closing sentences bound to what was asked (``{ask}``; for how / why / what ... questions only,
#: :data:`ECHO_WORDS`) or to the topic (``{title}``)
ASK_CLOSERS = (
    "That's the gist of {ask}, anyway.",
    "That's {ask} in a nutshell.",
    "There's more to {ask} than people expect.",
)
TOPIC_CLOSERS = (
    "It's one of the surprising things about {title}.",
    "There's plenty more about {title} if you want.",
    "I find that one of the best parts of {title}.",
    "It's a big part of what makes {title} interesting.",
    "People are often surprised by that about {title}.",
    "That's one of my favourite things about {title}.",
    "It's a good thing to know about {title}.",
    "Ask me anything else about {title} too.",
)
#: closing sentences offering the next facet (``{next}``; only where one is left)
OFFERS = (
    "I can also tell you {next}.",
    "If you're curious, I could explain {next}.",
    "We could look at {next} too.",
    "Also worth knowing is {next}.",
)

#: background speech: someone else in the room talking to somebody else (before an address, below)
SAID = (
    "Did you remember to take the chicken out of the freezer?",
    "Can you grab my keys from the kitchen table?",
    "Mom called, she said she'll be home late tonight.",
    "Don't forget we have the dentist at four tomorrow.",
    "Is the dog fed, he keeps staring at me?",
    "Can you turn the heating up a little, it's freezing in here?",
    "I'm heading to the store, do we need milk?",
    "Have you seen my blue jacket anywhere?",
    "The plumber is coming on Thursday morning, by the way.",
    "Could you move your car, I need to get out?",
    "Dinner's almost ready, can you set the table?",
    "Did anyone water the tomatoes today?",
    "I think the washing machine just finished.",
    "Tell your brother the match starts at seven.",
    "Where did you put the scissors?",
    "Are we still going to Sarah's on Saturday?",
    "Can you help me carry these boxes upstairs later?",
    "I left my charger in your room, can I grab it?",
    "The kids need picking up at half past three.",
    "Did you pay the electricity bill this month?",
    "Let's order pizza tonight, I'm too tired to cook.",
    "Your package arrived, I put it by the door.",
    "Could you keep it down a bit, I'm on a call?",
    "Which train are you taking tomorrow morning?",
    "We're out of coffee again, can you add it to the list?",
    "I found your glasses, they were on the couch.",
    "Grandma wants to know if we're coming on Sunday.",
    "Can you check if the back door is locked?",
    "The neighbors invited us to a barbecue next weekend.",
    "I'm putting the kettle on, do you want tea?",
    "Have you seen the remote, it was here a minute ago?",
    "The bins go out tonight, don't forget.",
    "Can you call the garage back about the car?",
    "I'm borrowing your umbrella, it's pouring out there.",
    "What time is your train on Friday?",
    "There's post for you on the stairs.",
    "Did you finish the milk, there's none left?",
    "I've put your shirts in the wardrobe.",
    "Can you feed the cat before you go out?",
    "Your phone's been buzzing in the hall.",
    "We need to book the car in for its service.",
    "Is it okay if Tom comes round for dinner?",
    "The Wi-Fi's down again, can you restart the router?",
    "I'm going for a run, back in half an hour.",
    "Have you got any change for the parking meter?",
    "Can you remind me to ring the bank tomorrow?",
    "The oven's still on, by the way.",
    "Did you lock the shed last night?",
    "I'm making a shopping list, do you want anything?",
    "Can you pass me that pen?",
    "The lady next door dropped off some apples.",
    "What do you fancy for lunch?",
    "I can't find the spare key anywhere.",
    "Could you help me open this jar?",
    "Your mum's on the phone, she wants a quick word.",
    "Did you book the table for Saturday?",
    "The washing's still out and it's starting to rain.",
    "Can you check the kids have brushed their teeth?",
    "I've left the car keys on the hook.",
    "Is there any more of that soup?",
)

#: the user's name as the person in the room calls them (one per dialogue)
NAMES = ("Sam", "Jo", "Alex", "Chris")
#: how the person in the room addresses the user besides by name ("" = not at all)
ADDRESSES = ("", "Love, ", "Sorry, ", "Oh, ", "Hey, ", "Listen, ", "Um, ", "Sorry, love, ")
_ADDRESSES = (*ADDRESSES, *(f"{n}, " for n in NAMES))
#: words that keep their capital after an address
_KEEP_CAPITAL = ("I", "I'm", "I've", "Mom", "Grandma", "Tom")


def addressed(address: str, line: str) -> str:
    """``line`` said after ``address`` ("Sam, "; "" = none), its first word in lower case unless it
    keeps its capital."""
    if not address:
        return line
    first = line.split()[0].rstrip(",")
    return address + (line if first in _KEEP_CAPITAL else line[:1].lower() + line[1:])


#: background speech lines of a third party: every line with every address ; a dialogue keeps to one name
THIRD_PARTY = tuple(addressed(a, line) for line in SAID for a in _ADDRESSES)

#: background speech: a TV or radio in the room. A broadcast is one of these templates with its
#: slots filled (the places, roads, teams and figures a station reads out change from one bulletin
#: to the next): {place}, {road}, {n} (a junction), {high} and {low} (temperatures), {team}, {score}, {day}, {time}
BROADCAST_TEMPLATES = (
    "And now the weather: {sky} in {place} this afternoon, with highs near {high} degrees.",
    "Traffic update: expect delays on the {road} near junction {n}.",
    "In sports tonight, {team} beat {rival} {score} in extra time.",
    "Scattered showers are expected over {place} {time}, clearing by {day}.",
    "Officials say the {line} will reopen on {day} morning after {k} weeks of repairs.",
    "Temperatures will drop to {low} below freezing in {place} {time}.",
    "Here's the forecast for {place}: {sky}, with highs of {high}.",
    "There are queues of up to {k} miles on the {road} ahead of {day}'s match.",
    "It's {tie} at halftime, and {team} need a goal against {rival}.",
    "Breaking news: the council in {place} has approved plans for a new {thing}.",
    "Coming up after the break, our guest chef shares {k} easy {dish} recipes for {day}.",
    "Don't miss our {day} sale, with up to {part} off all {goods}.",
)
_SLOTS = {
    "sky": ("sunny skies", "cloudy skies", "light rain", "bright spells", "patchy drizzle"),
    "place": ("the north", "the city", "the hills", "the coast", "the valley", "the east", "the south-west"),
    "n": ("three", "five", "eight", "eleven", "twelve", "fourteen", "seventeen", "twenty", "twenty-two"),
    "high": ("twelve", "fifteen", "eighteen", "twenty", "twenty-two", "twenty-four"),
    "low": ("two", "three", "four", "five", "six"),
    "k": ("three", "four", "five"),
    "road": ("northbound motorway", "ring road", "bypass", "coast road", "eastbound motorway"),
    "team": ("the home side", "the visitors", "United", "the Rovers", "City"),
    "score": ("two to one", "three to two", "one nil", "four to three"),
    "rival": ("Athletic", "the Wanderers", "County", "Albion"),
    "tie": ("one all", "nil nil", "two all"),
    "dish": ("summer", "pasta", "soup", "curry", "baking"),
    "part": ("half", "a third", "a quarter"),
    "time": ("tonight", "overnight", "this evening", "later today"),
    "day": ("Monday", "Tuesday", "Friday", "Saturday", "Sunday"),
    "line": ("northern line", "coastal line", "airport line", "old bridge", "tram line"),
    "thing": ("bridge", "library", "cycle path", "swimming pool", "market hall"),
    "goods": ("garden furniture", "sofas", "kitchenware", "bikes", "televisions"),
}


def _expand(template: str) -> tuple[str, ...]:
    out = [template]
    for slot, fills in _SLOTS.items():
        if "{" + slot + "}" in template:
            out = [t.replace("{" + slot + "}", f) for t in out for f in fills]
    return tuple(out)


BROADCASTS = tuple(b for t in BROADCAST_TEMPLATES for b in _expand(t))


def broadcast(template: str, rng: random.Random) -> str:
    """``template`` (one of :data:`BROADCAST_TEMPLATES`) with each slot filled by ``rng`` (one of
    :data:`BROADCASTS`)."""
    for slot, fills in _SLOTS.items():
        template = template.replace("{" + slot + "}", rng.choice(fills))
    return template

#: listener backchannels (spoken by the user while the assistant answers)
BACKCHANNELS = ("Mm-hmm.", "Right.", "Yeah.", "Okay.", "I see.", "Uh-huh.")
