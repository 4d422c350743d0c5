"""Spoken lines of the procedural generator besides the topic bank: how users ask, open
and continue, barge in and pause; how the assistant opens and closes a reply; what a third
party says in the room or a TV/radio announces; the listener backchannels.

Every template takes the facet's embedded question (``{ask}``: "how volcanoes form") or the
topic's title (``{title}``).
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

#: later rounds: a reaction to the previous answer before the next question ("" = none)
CONTINUITY = (
    "", "", "Interesting.", "Okay, thanks.", "Got it.", "That makes sense.", "Huh, I didn't know that.",
    "Cool.", "Alright.", "Nice.", "Okay.", "Thanks, that helps.", "Oh, wow.", "Right, okay.",
    "One more thing about {title}.", "Sticking with {title} for a moment.",
)

#: a new question about a facet
ASKS = (
    "Can you tell me {ask}?",
    "Do you know {ask}?",
    "I'd like to know {ask}.",
    "Could you explain {ask}?",
    "Any idea {ask}?",
    "I've always wondered {ask}.",
    "Next question: can you tell me {ask}?",
    "And do you happen to know {ask}?",
    "Could you tell me {ask}?",
)

#: coming back to a facet already covered
RECAPS = (
    "Can you remind me {ask}?",
    "Sorry, can you go over {ask} again?",
    "Wait, what did you say earlier about {ask}?",
    "I already forgot. Could you tell me again {ask}?",
)

#: pause handling: the utterance broken off mid-sentence, then its continuation
PAUSE_SPLITS = (
    ("I was wondering if you could", "tell me {ask}."),
    ("Could you, um,", "explain {ask}?"),
    ("I'd really like to know", "{ask}."),
    ("So what I want to ask is", "{ask}."),
    ("Do you happen to know", "{ask}?"),
    ("Can you tell me, uh,", "{ask}?"),
    ("And I was also thinking, could you", "tell me {ask}?"),
)
PAUSE_RECAP_SPLITS = (
    ("Could you remind me", "{ask}?"),
    ("Sorry, can you go over", "{ask} again?"),
    ("I forgot, um, what you said about", "{ask}."),
)

#: interruption: a changed request about another facet, and a request to cut it short
BARGE_SWITCH = (
    "Actually, wait — can you tell me {ask} instead?",
    "Sorry, hold on. I'd rather know {ask}.",
    "Actually, wait, never mind that. Do you know {ask}?",
    "Wait, wait. Before that, tell me {ask}.",
    "Hang on, let me change my question. I want to know {ask}.",
    "Actually, stop there. Could you explain {ask}?",
)
BARGE_SHORT = (
    "Actually, wait — that's a lot. Can you give me the short version?",
    "Hold on, can you keep it to one sentence?",
    "Sorry, wait. Just the main point, please.",
    "Actually, wait — I'm in a hurry. What's the one thing to remember?",
)
SWITCH_OPENERS = ("Sure.", "No problem.", "Of course.", "Okay, switching to that.", "Sure thing.")
SHORT_OPENERS = ("Sure, in short:", "Okay, the main point:", "Sure. In one sentence:", "The short version:")

#: the assistant's reply: an optional opening, two sentences of the answer, an optional close
OPENERS = ("Sure.", "Good question.", "Happy to explain.", "Of course.", "Great question.", "Okay, so.",
           "Right.", "Well, it's interesting.")
RECAP_OPENERS = ("Of course.", "Sure, no problem.", "Happy to go over it again.", "Sure, here it is again.")
CLOSERS = (
    "That's the short version, but there's a lot more to it if you're curious.",
    "Let me know if you'd like more detail on any part of that.",
    "I can go deeper into that if you like.",
    "It's one of the more surprising things about {title}.",
    "Happy to keep going on {title} if you want.",
    "People are often surprised when they first hear that.",
    "That's the part most people find the most interesting.",
    "There's plenty more to say, so just ask if you want the details.",
    "So it's a bit more complicated than it first seems.",
    "Hopefully that gives you a clear picture of it.",
)

#: background speech: someone else in the room talking to somebody else
THIRD_PARTY = (
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
