"""Reading a decider's streamed reply sentence by sentence (server/cascade/sentences.py), and the turn
taker playing a streamed answer: it starts on the first sentence, waits in silence for the next, and
ends after the last (server/cascade/turns.py)."""

from __future__ import annotations

import json

from server.cascade.sentences import ReplyReader
from server.cascade.turns import Reply, StartSpeaking, StopSpeaking, Think, TurnConfig, TurnTaker
from server.core.timebase import SpeechEvent

REPLY = json.dumps({"decision": "RESPOND", "answer": "It leaves at nine. The \"Blue\" line takes an hour! Enjoy"})


def test_sentences_come_out_as_soon_as_they_close_whatever_the_chunking():
    for size in (1, 3, 7, len(REPLY)):
        r = ReplyReader()
        got: list[tuple[int, str]] = []
        for i in range(0, len(REPLY), size):
            got += [(i + size, s) for s in r.feed(REPLY[i:i + size])]
        got += [(len(REPLY), s) for s in r.finish()]
        assert [s for _, s in got] == ["It leaves at nine.", 'The "Blue" line takes an hour!', "Enjoy"]
        first_at = REPLY.index("nine. ") + len("nine. ")
        assert got[0][0] <= first_at + size  # the first sentence is out before the rest is written
        assert r.decision == "RESPOND"


def test_a_silent_or_undecided_reply_says_nothing():
    r = ReplyReader()
    assert r.feed('{"decision": "SILENT", "answer": "Not me. Really."}') == [] and r.finish() == []
    r = ReplyReader()
    assert r.feed('{"answer": "First. Second') == []  # no decision yet: nothing spoken
    assert r.feed('.", "decision": "RESPOND"}') == ["First.", "Second."]
    r = ReplyReader()
    assert r.feed("I think I should answer. Yes.") == [] and r.finish() == [] and r.decision is None


def test_escapes_are_decoded_even_when_split():
    r = ReplyReader()
    out = r.feed('{"decision": "RESPOND", "answer": "Caf\\u00e') + r.feed('9 opens.\\') + r.feed('n Bye."}')
    assert out + r.finish() == ["Café opens.", "Bye."]


def _asked(tt: TurnTaker) -> Think:
    tt.hear(0, [SpeechEvent("onset", 0, 0)], 1000)
    (think,) = tt.hear(24_000, [SpeechEvent("offset", 12_000, 24_000)], None)
    assert isinstance(think, Think)
    return think


def test_a_streamed_answer_starts_on_its_first_sentence_and_waits_for_the_rest():
    tt = TurnTaker(TurnConfig(hold_ms=0))
    think = _asked(tt)
    (start,) = tt.replied(24_000, Reply(think.utterance.uid, 4_800, final=False))
    assert isinstance(start, StartSpeaking) and start.n_samples == 4_800
    assert tt.hear(30_000, [], None) == []  # the first sentence has played: silence, not the end
    assert tt.playing(30_000) is None and tt.state == "speaking"
    tt.more(31_000, think.utterance.uid, 2_400, final=False)
    assert tt.playing(30_000) == (think.utterance.uid, 6_000)
    assert tt.hear(40_000, [], None) == []
    tt.more(41_000, think.utterance.uid, 0, final=True)
    (stop,) = tt.hear(42_000, [], None)
    assert isinstance(stop, StopSpeaking) and stop.reason == "done" and stop.at == 24_000 + 7_200


def test_more_audio_for_a_reply_no_longer_playing_is_not_spoken():
    tt = TurnTaker(TurnConfig(hold_ms=0))
    think = _asked(tt)
    tt.replied(24_000, Reply(think.utterance.uid, 4_800, final=True))
    tt.hear(30_000, [], None)  # done
    tt.more(31_000, think.utterance.uid, 9_600, final=True)
    assert tt.state == "listening" and tt.playing(31_000) is None
