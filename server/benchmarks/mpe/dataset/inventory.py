"""Scene attribute inventories: where, what, who, which other devices, in what tone.

Each value is the text that appears in a scenario's ``attributes``. Compatibility is kept
simple and explicit: settings have kinds, activities and device contexts name the kinds
they fit, and some settings restrict the relationships that meet there.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Setting:
    value: str
    kinds: frozenset[str]
    relationships: tuple[str, ...] | None = None  # None: any
    # Self-talk and small requests that belong to the place (templates: {name} = addressee).
    self_talk: tuple[str, ...] = ()
    requests: tuple[tuple[str, str], ...] = ()  # (request to {name}, {name}'s reply)


@dataclass(frozen=True)
class DeviceContext:
    value: str
    wake: str | None  # None: no other assistant in the room
    kinds: frozenset[str] | None  # None: fits every setting
    commands: tuple[str, ...] = ()
    not_kinds: frozenset[str] = frozenset()  # setting kinds it never fits (no TV in the garden)


@dataclass(frozen=True)
class Relationship:
    value: str
    small_talk: tuple[tuple[str, str], ...]  # (line to {name}, {name}'s reply)


@dataclass(frozen=True)
class Register:
    value: str
    prefixes: tuple[str, ...]  # interjections put in front of some lines
    self_talk: tuple[str, ...]
    remarks: tuple[str, ...]  # to the group
    prefix_rate: float = 0.25
    t_openers: tuple[str, ...] = field(default=())  # before "Aria, ..." in the explicit T


SETTINGS: tuple[Setting, ...] = (
    Setting("dorm common room", frozenset({"home", "study"}),
            ("classmates", "flatmates", "old friends", "teammates"),
            ("Who keeps leaving their dishes in here?", "Okay, where did I leave my lanyard?",
             "I should really do my laundry tonight.",
             'Who ate my yoghurt? That had my name on it.',
             'I have so much reading to do.'),
            (("{name}, can you turn the heater up a bit?", "Sure, it's freezing in here."),
             ("{name}, is that your jacket on the sofa?", "Oh, yes, sorry, I'll move it."),
             ('{name}, is anyone using the washing machine?', "I think it's free now."),
             ('{name}, have you seen the TV remote?', "It's down the side of the sofa."))),
    Setting("shared flat kitchen", frozenset({"kitchen", "home"}), None,
            ("Right, where's the bottle opener gone?", "This kettle takes forever.",
             "I'm sure we had more bread than this.",
             'Did anyone buy washing-up liquid? Apparently not.',
             'Why is the tap dripping again?'),
            (("{name}, can you pass me a glass?", "Here you go."),
             ("{name}, is there any milk left?", "A little bit, I think. Check the door."),
             ('{name}, can you put the kettle on?', 'Already on it.'),
             ('{name}, whose are these dishes?', "Mine, sorry, I'll do them later."))),
    Setting("family kitchen", frozenset({"kitchen", "home"}), ("family", "cousins"),
            ("Now where did I put the big spoon?", "The fridge is making that noise again.",
             "I really need to clean out this drawer.",
             'Where have all the tea towels gone?',
             "I'm sure I bought eggs yesterday."),
            (("{name}, can you grab the plates from the top shelf?", "Yep, got them."),
             ("{name}, could you open the window a bit?", "Sure, it is getting warm in here."),
             ('{name}, can you take the bins out after this?', "Fine, but it's your turn tomorrow."),
             ('{name}, where did you put the car keys?', 'On the hook by the door.'))),
    Setting("living room", frozenset({"home"}), None,
            ("Where's the remote gone this time?", "These cushions are so flat.",
             "I think I left my glasses upstairs.",
             'This sofa is far too comfortable.',
             'I should really hoover in here.'),
            (("{name}, can you close the curtains?", "Yeah, one second."),
             ("{name}, do you want a blanket?", "No, I'm fine, thanks."),
             ('{name}, can you pass me that cushion?', 'Here, catch.'),
             ('{name}, is the heating on?', "It's on, it just takes a while."))),
    Setting("back garden on a summer evening", frozenset({"home", "outdoor"}), None,
            ("These mosquitoes are eating me alive.", "I should really water those tomatoes.",
             "It's getting a bit chilly now.",
             'The grass really needs cutting.',
             'Is that a hedgehog over there?'),
            (("{name}, can you light the candle on the table?", "Sure, where are the matches?"),
             ("{name}, pass me the crisps, please.", "Here, there's not many left."),
             ('{name}, do you want another drink?', 'Go on then, just a small one.'),
             ('{name}, can you turn the fairy lights on?', 'Sure, the switch is by the door.'))),
    Setting("car on the motorway", frozenset({"car"}), None,
            ("This traffic is unbelievable.", "I think we need petrol soon.",
             "Why is there always roadworks on this stretch?",
             'Did I leave the lights on at home?',
             "My leg's gone to sleep."),
            (("{name}, can you turn the heating down?", "Yeah, it's way too hot in here."),
             ("{name}, could you pass me my sunglasses?", "Here. They were under the seat."),
             ('{name}, can you put some music on?', 'Sure, anything but jazz.'),
             ('{name}, did you see that exit?', 'No, sorry, I was looking at my phone.'))),
    Setting("office meeting room", frozenset({"office"}), ("colleagues", "teammates"),
            ("Why does this projector take so long?", "I need another coffee after this.",
             "Where did I save that spreadsheet?",
             'This chair is so uncomfortable.',
             'Who booked this room for two hours?'),
            (("{name}, can you share your screen?", "Sure, give me a second."),
             ("{name}, could you take notes today?", "Yes, no problem."),
             ('{name}, is the next room free after this?', 'I think so, until three.'),
             ('{name}, can you close the door?', "Sure, it's loud out there."))),
    Setting("open-plan office", frozenset({"office"}), ("colleagues", "teammates"),
            ("My laptop battery is already at ten percent.", "Who took my stapler again?",
             "I still have twenty emails to answer.",
             "I'm sure that meeting was moved to tomorrow.",
             'Why is it always so cold in here?'),
            (("{name}, are you using this chair?", "No, take it."),
             ("{name}, can you pass me a pen?", "Here, the blue one works."),
             ('{name}, is the printer working again?', 'Only the one by the window.'),
             ('{name}, do you want a tea?', 'Yes please, milk, no sugar.'))),
    Setting("library group-study room", frozenset({"study"}), ("classmates", "old friends", "cousins"),
            ("I've read this paragraph three times now.", "My highlighter is running out.",
             "Okay, chapter four, where was I?",
             'Why did I choose this course?',
             "I'll just read one more page."),
            (("{name}, can I borrow your charger?", "Sure, it's in my bag."),
             ("{name}, can you keep your voice down a bit?", "Sorry, sorry."),
             ('{name}, what page are you on?', "Forty-two. I'm so behind."),
             ('{name}, can you pass me the textbook?', "Here, don't lose my bookmark."))),
    Setting("hotel room on holiday", frozenset({"travel", "home"}), None,
            ("Where did I put the room key?", "This air conditioning is freezing.",
             "I think I packed way too many shoes.",
             'I should send a postcard to Grandma.',
             'This pillow is like a rock.'),
            (("{name}, can you plug my phone in?", "Sure, next to the bed?"),
             ("{name}, is the balcony door locked?", "Yes, I checked it earlier."),
             ('{name}, what time is breakfast?', 'Until ten, I think.'),
             ('{name}, have you seen my sunglasses?', "They're on your head."))),
    Setting("campsite by the lake", frozenset({"outdoor", "travel"}), None,
            ("I think the tent is leaking a little.", "Where did I put the torch?",
             "These marshmallows are nearly gone.",
             'My sleeping bag is still damp.',
             'I think something just moved in the bushes.'),
            (("{name}, can you throw another log on the fire?", "Sure, this one's a bit damp though."),
             ("{name}, pass me the bug spray.", "Here, don't use it all."),
             ('{name}, is there any hot water left?', "A little, the kettle's still warm."),
             ('{name}, can you hold the torch for a second?', 'Sure, point it where?'))),
)

#: Side questions each place raises, for N4 events: (question core, someone's answer, the
#: asker's own resolution). The answer has a source in the place itself.
SIDE_QUESTIONS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "dorm common room": (
        ("what time does the laundry room lock tonight?", "eleven, it's on the notice by the door.",
         "it's on the notice by the door, eleven."),
        ("when is the fire alarm test this week?", "Wednesday morning, the warden emailed.", "I've got the email, Wednesday."),
        ("how long does the dryer take on the hot setting?", "about an hour, mine took an hour.", "I'll just set it for an hour."),
        ("is the common room booked on Friday?", "no, the sheet on the door is empty.", "I'll check the sheet on the door."),
        ("what's the wifi password for guests?", "it's on the card by the kettle.", "oh, it's on the card by the kettle."),
    ),
    "shared flat kitchen": (
        ("when is the recycling collected?", "Thursday mornings, the bins go out Wednesday night.",
         "it's on the fridge calendar, Thursday."),
        ("how long does cooked rice keep in the fridge?", "a day, two at most.", "I'll just eat it tomorrow."),
        ("can the frying pan go in the dishwasher?", "no, it ruins the coating.", "it says hand wash on the bottom."),
        ("how do you descale a kettle?", "vinegar and water, let it sit an hour.", "I'll look it up later."),
        ("when does the corner shop close tonight?", "ten, I was just in there.", "I'll just go now, then."),
    ),
    "family kitchen": (
        ("how long do hard-boiled eggs keep?", "about a week in the fridge.", "Grandma's book says a week."),
        ("what temperature should the fridge be at?", "about four degrees, it's on the dial.", "the dial says four."),
        ("when is the dishwasher tablet delivery coming?", "tomorrow, the text said before noon.", "I've got the text, tomorrow."),
        ("can you freeze leftover gravy?", "yes, in the little tubs, Mum always does.", "I'll just freeze it and see."),
        ("what's the number for the plumber who fixed the sink?", "it's on the magnet on the fridge.",
         "oh, it's on the fridge magnet."),
    ),
    "living room": (
        ("when does the football start tonight?", "quarter to eight, it's in the TV guide.", "it's in the TV guide, I'll look."),
        ("how do you clean a velvet sofa?", "just a brush and a damp cloth.", "the label on the cushion says brush only."),
        ("what's the name of the actor in that advert?", "no idea, but it's driving me mad too.", "it'll come to me."),
        ("when do the clocks go forward?", "last Sunday in March, every year.", "it's the end of March, I remember now."),
        ("how much is the TV licence now?", "about a hundred and seventy, the letter came last week.",
         "the letter's on the side, I'll check."),
    ),
    "back garden on a summer evening": (
        ("what time is sunset tonight?", "about nine, it's getting dark after nine.", "it's about nine, I looked at the sky app."),
        ("are these tomatoes ready to pick?", "not yet, they need to go properly red.", "they're still green, so no."),
        ("is there a hosepipe ban at the moment?", "not here, the water company said no.", "the letter said no ban."),
        ("what's that bird singing in the hedge?", "a blackbird, it's there every evening.", "it's the blackbird again."),
        ("how often should you water the lawn in summer?", "twice a week, in the evening.", "I'll just do it twice a week."),
    ),
    "car on the motorway": (
        ("how far is the next service station?", "twenty miles, it was on the last sign.", "the sign said twenty miles."),
        ("what's the speed limit through the roadworks?", "fifty, there's cameras all the way.", "it's fifty, I just saw the sign."),
        ("is there traffic at the next junction?", "it looks clear on the map.", "the map's showing green, it's fine."),
        ("which lane do we need for the turn-off?", "the left one, in about two miles.", "left lane, I can see the sign now."),
        ("how much is the toll on the bridge?", "a few pounds, there's a card machine.", "they take cards, it's fine."),
    ),
    "office meeting room": (
        ("who's got the room after us?", "the design team, at three.", "the screen outside says design, at three."),
        ("how do you get the projector to switch inputs?", "the button on the left of the remote.", "oh, the left button, got it."),
        ("is the all-hands still on Thursday?", "yes, the invite hasn't changed.", "the invite still says Thursday."),
        ("when's the deadline for the expense claims?", "the twenty-fifth, finance sent a reminder.", "finance emailed, the twenty-fifth."),
        ("can we book this room for the whole afternoon tomorrow?", "it's free after one, I looked.",
         "the booking system shows it free after one."),
    ),
    "open-plan office": (
        ("when is the printer getting fixed?", "someone's coming tomorrow morning.", "the note on it says tomorrow."),
        ("is the canteen open late today?", "until seven on Thursdays.", "the board says until seven."),
        ("how do I book a desk for next week?", "through the app, the floor plan tab.", "I found it, the floor plan tab."),
        ("who do I ask about a new monitor?", "the IT desk, just raise a ticket.", "I'll just raise a ticket."),
        ("what's the guest wifi password today?", "it's on the screen at reception.", "reception has it on the screen."),
    ),
    "library group-study room": (
        ("what time does the library close tonight?", "ten, it's on the door.", "the sign on the door says ten."),
        ("how long can we keep this room?", "two hours, then we have to rebook.", "the booking says two hours."),
        ("can we print in colour here?", "only on the second floor.", "the sign says second floor."),
        ("how many books can I take out at once?", "twelve on a student card.", "my card says twelve."),
        ("is the cafe downstairs still open?", "until six, they close early on Fridays.", "it closes at six, I remember now."),
    ),
    "hotel room on holiday": (
        ("what time is checkout on the last day?", "eleven, it's on the key card holder.", "the key card holder says eleven."),
        ("does the pool have towels or do we bring ours?", "they give you towels at the pool.", "the folder says they give towels."),
        ("is breakfast included in our rate?", "yes, until ten, downstairs.", "the booking says breakfast included."),
        ("how do you say thank you in the local language?", "the phrasebook's on the bed, page one.", "I'll check the phrasebook."),
        ("can we get a late checkout?", "ask at reception, they usually say yes.", "I'll just ask at reception."),
    ),
    "campsite by the lake": (
        ("what time does the campsite shop shut?", "six, it says on the hut.", "the hut says six."),
        ("can you swim in the lake here?", "only by the jetty, there's a sign.", "there's a sign by the jetty, it's fine."),
        ("when do they collect the campsite rubbish?", "every morning, from the bins by the gate.", "the bins by the gate, every morning."),
        ("is the tap water here safe to drink?", "yes, the warden said this morning.", "the warden said it's fine."),
        ("how cold does it get here at night?", "about five degrees, we'll need the thick bags.", "the warden said five degrees."),
    ),
}

DEVICE_CONTEXTS: tuple[DeviceContext, ...] = (
    DeviceContext("no other devices", None, None),
    DeviceContext("another smart speaker (Alexa) in the room", "Alexa",
                  frozenset({"home", "kitchen", "office", "study", "travel", "outdoor"}),
                  ("Alexa, set a timer for {num} minutes.", "Alexa, add milk to the shopping list.",
                   "Alexa, play some quiet jazz.", "Alexa, what's the weather tomorrow?",
                   "Alexa, turn the volume down.", "Alexa, what time is it?", "Alexa, stop.",
                   "Alexa, add batteries to the shopping list.")),
    DeviceContext("a phone with Siri on the table", "Hey Siri", None,
                  ("Hey Siri, set an alarm for {clock}.", "Hey Siri, remind me to call the dentist at five.",
                   "Hey Siri, what's the time in Tokyo?", "Hey Siri, turn on do not disturb.",
                   "Hey Siri, how many days until Christmas?", "Hey Siri, set a timer for {num} minutes.",
                   "Hey Siri, call Mum.", "Hey Siri, what's my battery level?")),
    DeviceContext("a smart TV with Google voice control", "Hey Google",
                  frozenset({"home"}),
                  ("Hey Google, pause the TV.", "Hey Google, turn the volume down.",
                   "Hey Google, put the news on.", "Hey Google, switch off the TV.",
                   "Hey Google, record the match tonight.", "Hey Google, open the film app."),
                  frozenset({"outdoor", "travel"})),
    DeviceContext("the car's navigation assistant", "Navigation", frozenset({"car"}),
                  ("Navigation, find the nearest petrol station.", "Navigation, avoid toll roads.",
                   "Navigation, how long until we arrive?", "Navigation, show me the traffic ahead.",
                   "Navigation, find a car park near the centre.", "Navigation, cancel the route.")),
    DeviceContext("a smartwatch with Google Assistant", "Hey Google", None,
                  ("Hey Google, start a {num} minute timer.", "Hey Google, how many steps have I done today?",
                   "Hey Google, remind me to buy batteries.",
                   "Hey Google, remind me to text {absent} later.", "Hey Google, how far have I walked today?", "Hey Google, what's my heart rate?",
                   "Hey Google, set an alarm for {clock}.")),
)

RELATIONSHIPS: tuple[Relationship, ...] = (
    Relationship("classmates", (
        ("{name}, did you finish the lab report?", "Almost. I just need to do the graphs."),
        ("{name}, are you going to the lecture tomorrow?", "Probably, if I wake up in time."),
        ("{name}, can you send me your notes from Monday?", "Sure, I'll send them tonight."),
        ('{name}, did you understand the last lecture at all?', "Not really. Let's go through it together."),
        ('{name}, is the essay due on Monday or Tuesday?', 'Monday, at midnight.'))),
    Relationship("flatmates", (
        ("{name}, whose turn is it to take the bins out?", "Yours, I did it last week."),
        ("{name}, did you pay the internet bill?", "Yes, yesterday. You owe me for it."),
        ("{name}, your parcel came this morning, by the way.", "Oh, great, thanks."),
        ('{name}, are your friends still coming over on Friday?', 'Yes, just three of them.'),
        ('{name}, did you fix the shower door?', "Sort of. Don't slam it."))),
    Relationship("family", (
        ("{name}, did you call Grandma back?", "Not yet, I'll do it after dinner."),
        ("{name}, have you done your homework?", "Most of it. Only maths left."),
        ("{name}, remember we're at your aunt's on Saturday.", "I know, I know."),
        ('{name}, did you feed the cat?', "Yes, twice, she's just greedy."),
        ('{name}, have you seen my reading glasses?', "They're on the table by the door."))),
    Relationship("colleagues", (
        ("{name}, did you get my email about the budget?", "I did, I'll reply this afternoon."),
        ("{name}, are you in the office on Friday?", "No, I'm working from home."),
        ("{name}, how did the client call go?", "Better than expected, actually."),
        ('{name}, are you going to the leaving drinks?', "Maybe for one, I've got an early start."),
        ('{name}, did you finish the slides for Monday?', 'Almost, just the last two.'))),
    Relationship("old friends", (
        ("{name}, how's the new job going?", "Good, busy, but good."),
        ("{name}, did you ever get that bike fixed?", "Finally, yes. Cost me a fortune."),
        ("{name}, we should do this more often, honestly.", "We say that every time."),
        ('{name}, have you heard from Sophie lately?', "She's moving back in the summer, apparently."),
        ('{name}, do you still play the guitar?', "Only when nobody's listening."))),
    Relationship("neighbours", (
        ("{name}, did the plumber ever come round to yours?", "He did, on Tuesday. All fixed."),
        ("{name}, your roses look amazing this year.", "Thanks, it's all the rain."),
        ("{name}, are you still away next week?", "Yes, from Monday. Can you water the plants?"),
        ('{name}, did you get a parking letter from the council too?', 'Yes, this morning. Ridiculous.'),
        ("{name}, how's the new puppy?", 'Chewing everything. Even the door.'))),
    Relationship("teammates", (
        ("{name}, are you coming to training on Thursday?", "Yes, I'll be there."),
        ("{name}, how's the knee?", "Better. Still a bit sore."),
        ("{name}, did you wash the kit?", "It's in the machine right now."),
        ('{name}, did you see the score on Saturday?', "Don't, I'm still upset about it."),
        ('{name}, can you give me a lift to the away game?', "Sure, I'll pick you up at nine."))),
    Relationship("cousins", (
        ("{name}, how's your mum doing?", "She's good, she says hi."),
        ("{name}, are you coming to the wedding in June?", "Of course, I already got a suit."),
        ("{name}, do you still have Grandpa's old camera?", "Yes, it's in a box somewhere."),
        ('{name}, did you get the photos from the reunion?', 'Yes, you look great in all of them.'),
        ('{name}, is your brother still in Canada?', "Until Christmas, then he's back."))),
)

REGISTERS: tuple[Register, ...] = (
    Register("relaxed and joking", ("Ha, ", "Okay, honestly, ", "Oh, come on, ", "Classic, "),
             ("I'm a genius, clearly.", "Note to self: never play cards with this lot.", "Ha, I crack myself up.",
              "Right, where's my drink gone, someone's nicked it.", "Oh, I'm hilarious today.",
              "Must tell {absent} that one.", "Ha, {absent} would have loved that.", "Heh, good one, me.",
              "I deserve a medal for this."),
             ("This is the most organised we've ever been, honestly.", "Look at us, making actual plans.",
              "Someone write this down, it's a historic moment.", "We should charge people to watch us plan things."),
             0.3, ("Okay, ", "Right then, ")),
    Register("hurried", ("Quick, ", "Come on, ", "Okay, fast, "),
             ("Where are my keys, where are my keys.", "We are so late, {absent} will kill us.", "Five minutes. I can do this.",
              "Come on, come on, think.", "Bag, phone, wallet, okay.", "Ugh, no time for this.",
              "Text {absent}, say we're late.", "Where's the charger, where's the charger.", "Go, go, go."),
             ("We really need to decide in the next five minutes.", "Let's be quick, we don't have long.",
              "Can we speed this up a bit?", "We've got ten minutes, tops."),
             0.3, ("Quick, ", "Okay, quickly, ")),
    Register("formal", ("Right, ", "Well, ", "If I may, "),
             ("Let me just check my notes.", "I believe that was the last item.", "Now, where was the second page.",
              "Hm, that figure seems low.", "I'll circulate that afterwards, I suppose.", "Item three, yes.",
              "I must copy {absent} in on this.", "Hm, let me make a note.", "Yes, that tallies."),
             ("Shall we try to settle this now?", "I suggest we keep this brief.",
              "Let's make sure we're all in agreement.", "I'd like to get this finalised today."),
             0.2, ("Right, ", "")),
    Register("tired", ("Ugh, ", "Honestly, ", "Mm, "),
             ("I could sleep for a week.", "Why is everything so hard today.", "One more coffee and I'll be fine.",
              "Eyes open, come on.", "Mm, bed, I want my bed.", "Why did I stay up so late.",
              "Never letting {absent} keep me up again.", "Yawn, sorry, sorry.", "Tea, I need tea."),
             ("Can we just decide and go to bed?", "I'm too tired to think about this.",
              "Whatever you all decide is fine with me.", "Let's not make this complicated."),
             0.3, ("Okay, ", "")),
    Register("excited", ("Oh, ", "Ooh, ", "Yes, "),
             ("This is going to be so good, {absent} will be jealous.", "I can't wait, honestly.", "Okay, okay, stay calm, {absent} would laugh at me.",
              "Eek, this is actually happening.", "Oh, I need to tell everyone about this.", "Breathe, breathe.",
              "Wait till {absent} hears about this.", "Eee, {absent} is going to scream.", "Oh, this is the best."),
             ("This is going to be the best weekend ever.", "I'm so glad we're finally doing this.",
              "I've been looking forward to this all week.", "We have to take loads of photos."),
             0.3, ("Ooh, ", "Okay, ")),
    Register("matter-of-fact", ("So, ", "Okay, ", "Right, "),
             ("Fine. Next thing.", "That's one thing sorted, at least.", "Okay, tick that off.",
              "Right, what's after that.", "Done, that's done.", "Okay, noted.",
              "Remind {absent} about the rest.", "Next, then.", "Good, moving on."),
             ("Let's just go through it step by step.", "Let's get the facts straight first.",
              "One thing at a time.", "Let's finish this before we start on anything else."),
             0.15, ("", "Okay, ")),
)

#: Speaker names: two syllables or fewer, easy for the voices, none close to "Aria".
NAMES: tuple[str, ...] = (
    "Ben", "Maya", "Sam", "Leo", "Nina", "Omar", "Priya", "Tom", "Lucy", "Jake", "Chloe", "Dan",
    "Ella", "Raj", "Zoe", "Max", "Kate", "Josh", "Mia", "Ethan", "Grace", "Luke", "Hannah", "Noah",
    "Ruby", "Adam", "Jess", "Kai", "Isla", "Owen", "Yusuf", "Lily", "Finn", "Amy", "Theo", "Alice",
    "Hugo", "Megan", "Felix", "Rosa",
)


def setting(value: str) -> Setting:
    return next(s for s in SETTINGS if s.value == value)


def device_context(value: str) -> DeviceContext:
    return next(d for d in DEVICE_CONTEXTS if d.value == value)


def relationship(value: str) -> Relationship:
    return next(r for r in RELATIONSHIPS if r.value == value)


def register(value: str) -> Register:
    return next(r for r in REGISTERS if r.value == value)


def devices_for(s: Setting) -> list[DeviceContext]:
    return [d for d in DEVICE_CONTEXTS if (d.kinds is None or d.kinds & s.kinds) and not d.not_kinds & s.kinds]


def relationships_for(s: Setting, a: "Activity | None" = None) -> list[Relationship]:
    return [r for r in RELATIONSHIPS
            if (s.relationships is None or r.value in s.relationships)
            and (a is None or a.relationships is None or r.value in a.relationships)]


@dataclass(frozen=True)
class Activity:
    key: str  # the procedural task that goes with it
    value: str
    kinds: frozenset[str] | None  # setting kinds it fits; None: every setting
    relationships: tuple[str, ...] | None = None  # None: any


_HOUSEHOLD = ("family", "flatmates", "old friends", "cousins", "neighbours")
_ANY = None
ACTIVITIES: tuple[Activity, ...] = (
    Activity("restaurant", "choosing a restaurant for dinner", _ANY),
    Activity("train", "planning a day trip by train", frozenset({"home", "kitchen", "office", "study", "travel", "outdoor"})),
    Activity("recipe", "cooking dinner together", frozenset({"kitchen"}), _HOUSEHOLD + ("classmates", "teammates")),
    Activity("bill", "splitting the cost of the weekend shopping", _ANY),
    Activity("schedule", "finding a day for a get-together", _ANY),
    Activity("gift", "collecting money for a birthday present", _ANY),
    Activity("movie", "planning a movie night", frozenset({"home"}), _HOUSEHOLD + ("classmates", "teammates")),
    Activity("roadtrip", "planning a long drive", frozenset({"car", "home", "kitchen", "outdoor", "travel"})),
    Activity("paint", "redecorating a room", frozenset({"home", "kitchen"}), _HOUSEHOLD),
    Activity("pizza", "planning a birthday party", frozenset({"home", "kitchen", "outdoor", "study"})),
    Activity("gym", "choosing a gym membership", _ANY),
    Activity("hotel", "booking a weekend away", _ANY),
    Activity("weather", "packing for a camping weekend", frozenset({"home", "kitchen", "outdoor", "travel", "car"})),
    Activity("boardgame", "playing a board game", frozenset({"home", "study", "travel", "outdoor"})),
    Activity("exams", "revising for exams", frozenset({"study", "home"}),
             ("classmates", "flatmates", "old friends", "cousins", "family")),
    Activity("flights", "booking flights for a holiday", _ANY),
    Activity("laptop", "shopping for a new laptop", _ANY),
    Activity("roast", "making Sunday lunch", frozenset({"kitchen"}), _HOUSEHOLD),
)


def activity(value: str) -> Activity:
    return next(a for a in ACTIVITIES if a.value == value)


def settings_for(a: Activity) -> list[Setting]:
    return [s for s in SETTINGS if a.kinds is None or a.kinds & s.kinds]
