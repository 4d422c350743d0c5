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
)

#: later rounds: a short reaction to the previous answer (a sound, not a sentence that says anything)
REACTIONS = (
    "Interesting.", "Huh.", "Oh, nice.", "Wow.", "Okay.", "Right.", "Ah, okay.", "Makes sense.", "Got it.",
    "Oh, really?", "No way.", "Hm.", "Fair enough.", "Neat.", "Oh wow.", "Ha, okay.", "Mm, okay.", "I see.",
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
    "Sorry, {who} was talking to me. Can you say again {ask}?",
    "Sorry, I missed some of that. Can you go over {ask} again?",
    "Hang on, I got distracted there. Could you repeat {ask}?",
    "Sorry about that, {who} needed me. Can you tell me again {ask}?",
    "I didn't catch all of that with {who} talking. Can you say again {ask}?",
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
)
PAUSE_RECAP_LEADS = (("Sorry, I missed that. Can you go over {ask}", " again?"),
                     ("Could you remind me, um, {ask}", "?"), ("Sorry, what did you say about {ask}", "?"))
PAUSE_MIN_REST = 2

#: interruption: how a barge-in opens (each dialogue draws them without repeats), then what it asks
BARGE_OPENINGS = (
    "Actually, wait.", "Sorry, hold on.", "Wait, wait.", "Hang on a second.", "Oh, sorry to cut in.",
    "Hmm, hold on.", "No, no, sorry.", "Can I stop you there?", "One sec.", "Ooh, actually,",
    "Mm, sorry,", "Wait, I just thought of something.", "Ah, before I forget,", "Sorry, I should have asked.",
    "Oh, that reminds me.", "Let me jump in.", "Hmm, actually,", "Okay, stop, stop.", "Sorry, sorry.",
    "Just a moment.", "Oh, hang on.", "Excuse me, sorry.", "Right, hold that thought.", "Um, sorry.",
    "Hold it.", "Before you go on,", "Quick interruption.", "Sorry, can I butt in?", "Oh wait.",
    "Pardon me.", "Listen, sorry.", "Hey, sorry.",
)
#: a changed request about another facet (``{ask}``)
BARGE_SWITCH = (
    "can you tell me {ask} instead?",
    "I'd rather know {ask}.",
    "never mind that. Do you know {ask}?",
    "before that, tell me {ask}.",
    "new question: {ask}?",
    "could you explain {ask} instead?",
    "I need to know {ask}.",
    "skip that and tell me {ask}.",
)
#: a request to cut the current answer (about ``{ask}``) short
BARGE_SHORT = (
    "that's a lot. Can you give me the short version of {ask}?",
    "one sentence on {ask}, please?",
    "just the main point, please.",
    "what's the one thing to remember?",
    "I only need the gist of {ask}.",
    "can you sum up {ask} in a line?",
    "just the headline.",
    "short version, please.",
    "can you cut to the chase?",
    "too much detail for me. Bottom line?",
    "give me the quick answer.",
    "in one sentence, {ask}?",
)
SWITCH_OPENERS = ("Sure.", "No problem.", "Of course.", "Okay, {ask}.", "Sure thing.", "Alright.", "Right, {ask}.",
                  "", "", "")
SHORT_OPENERS = ("Sure, in short:", "Okay, the main point:", "Sure. In one sentence:", "The short version:",
                 "In a nutshell:", "Briefly:", "Okay, quickly:", "The gist is this:")

#: the assistant's reply: an optional opening, two sentences of the answer, an optional close
OPENERS = ("Sure.", "Right.", "Okay.", "Ah, {ask}.", "Oh, {ask}.", "Hm, {ask}.", "Mm.", "Yes.", "So, {ask}.")
RECAP_OPENERS = ("Of course.", "Sure, no problem.", "Happy to go over it again.", "Sure, here it is again.",
                 "No problem, again then.")
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
    "Hey, did you remember to take the chicken out of the freezer?",
    "Can you grab my keys from the kitchen table?",
    "Mom called, she said she'll be home late tonight.",
    "Don't forget we have the dentist at four tomorrow.",
    "Is the dog fed? He keeps staring at me.",
    "Can you turn the heating up a little? It's freezing in here.",
    "I'm heading to the store, do we need milk?",
    "Have you seen my blue jacket anywhere?",
    "The plumber is coming on Thursday morning, by the way.",
    "Could you move your car? I need to get out.",
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
    "Could you keep it down a bit? I'm on a call.",
    "Which train are you taking tomorrow morning?",
    "We're out of coffee again, can you add it to the list?",
    "I found your glasses, they were on the couch.",
    "Grandma wants to know if we're coming on Sunday.",
    "Can you check if the back door is locked?",
    "The neighbors invited us to a barbecue next weekend.",
    "Do you want tea? I'm putting the kettle on.",
)

#: the user's name as the person in the room calls them (one per dialogue)
NAMES = ("Sam", "Jo", "Alex", "Chris")
#: how the person in the room addresses the user besides by name ("" = not at all)
ADDRESSES = ("", "Love, ", "Sorry, ", "Oh, ")
_ADDRESSES = (*ADDRESSES, *(f"{n}, " for n in NAMES))
#: words that keep their capital after an address
_KEEP_CAPITAL = ("I", "I'm", "I've", "Mom", "Grandma")


def addressed(address: str, line: str) -> str:
    """``line`` said after ``address`` ("Sam, "; "" = none), its first word in lower case unless it
    keeps its capital."""
    if not address:
        return line
    first = line.split()[0].rstrip(",")
    return address + (line if first in _KEEP_CAPITAL else line[:1].lower() + line[1:])


#: background speech lines of a third party: every line with every address (an address is not
#: added to a line that already opens with one); a dialogue keeps to one name
THIRD_PARTY = tuple(addressed(a, line) for line in SAID for a in (_ADDRESSES if not line.startswith("Hey,") else ("",)))

#: background speech: a TV or radio in the room
BROADCASTS = (
    "And now the weather: sunny skies this afternoon, with highs near twenty-four degrees.",
    "Traffic update: expect delays on the northbound motorway near junction twelve.",
    "Coming up after the break, our guest chef shares three easy summer recipes.",
    "In sports tonight, the home side won two to one in extra time.",
    "This is Radio City, your number one station for the latest hits.",
    "Stocks closed slightly higher today, led by gains in technology shares.",
    "Don't miss our weekend sale, with up to half off all garden furniture.",
    "Scattered showers are expected overnight, clearing by tomorrow morning.",
    "Breaking news: the city council has approved plans for a new bridge.",
    "Stay tuned for the evening news, right after this short message.",
    "The match is tied at halftime, and the crowd is on its feet.",
    "Call now and get a second blender absolutely free.",
    "Tomorrow will be windy along the coast, so hold on to your hats.",
    "Our next song is a classic from the eighties, so turn it up.",
    "Officials say the northern line will reopen on Monday morning.",
    "Welcome back to the quiz show, where tonight's prize is a trip to Rome.",
    "Temperatures will drop below freezing in the hills tonight.",
    "A reminder that the museum is free to visit this Sunday.",
    "That was the latest single from the band, now climbing the charts.",
    "In tonight's episode, the detective finally finds the missing letter.",
    "Heavy traffic is reported around the stadium ahead of tonight's concert.",
    "The airport reports delays of up to an hour because of fog.",
    "Here's the forecast for the weekend: dry and mild, with a light breeze.",
    "And that's the goal that sends them through to the final.",
)

#: listener backchannels (spoken by the user while the assistant answers)
BACKCHANNELS = ("Mm-hmm.", "Right.", "Yeah.", "Okay.", "I see.", "Uh-huh.")
