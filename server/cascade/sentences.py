"""A decider's streamed reply, read as it comes: the decision, then the answer sentence by sentence. Pure.

The cascade's prompt asks for one JSON object, ``{"decision": "RESPOND" | "SILENT", "answer": "…"}``
(:mod:`.prompt`). :class:`ReplyReader` is fed the text deltas of a streamed reply and hands back, as
soon as each is complete, the answer's sentences (up to ``.``, ``?`` or ``!`` followed by a space or
the end of the answer), so that speech synthesis starts on the first sentence while the model is
still writing the rest. The decision counts once the reply is whole (:meth:`ReplyReader.finish`,
:func:`server.benchmarks.mpe.textref.prompt.parse_reply`); a sentence is spoken early only when the
reply so far already says ``RESPOND``.
"""

from __future__ import annotations

import json
import re

from server.benchmarks.mpe.textref.prompt import DECISIONS

_ANSWER_KEY = re.compile(r'"answer"\s*:\s*"')
_DECISION = re.compile(r'"decision"\s*:\s*"(\w+)"')
_SENTENCE_END = re.compile(r"[.?!](?=\s)")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": " ", "t": " ", "r": " ", "b": "", "f": ""}


class ReplyReader:
    """Feed text deltas (:meth:`feed`); get complete answer sentences back as they close."""

    def __init__(self) -> None:
        self.raw = ""
        self._answer = ""  # the answer string's decoded characters so far
        self._scan = 0  # where in ``raw`` the answer's decoding has got to (None: not started)
        self._in_answer = False
        self._closed = False  # the answer string has ended
        self._said = 0  # characters of ``_answer`` handed out as sentences

    @property
    def decision(self) -> str | None:
        """The decision the reply states so far (``RESPOND``/``SILENT``), or None."""
        m = _DECISION.search(self.raw)
        return m.group(1) if m and m.group(1) in DECISIONS else None

    def feed(self, delta: str) -> list[str]:
        self.raw += delta
        self._decode()
        return self._sentences(final=False)

    def finish(self) -> list[str]:
        """The rest of the answer (the reply has ended)."""
        return self._sentences(final=True)

    def _decode(self) -> None:
        if not self._in_answer:
            m = _ANSWER_KEY.search(self.raw)
            if m is None:
                return
            self._in_answer, self._scan = True, m.end()
        while not self._closed and self._scan < len(self.raw):
            c = self.raw[self._scan]
            if c == "\\":
                if self._scan + 1 >= len(self.raw):
                    return  # the escape's second character has not come yet
                nxt = self.raw[self._scan + 1]
                if nxt == "u":
                    if self._scan + 6 > len(self.raw):
                        return
                    try:
                        self._answer += json.loads(f'"{self.raw[self._scan:self._scan + 6]}"')
                    except ValueError:
                        pass
                    self._scan += 6
                    continue
                self._answer += _ESCAPES.get(nxt, nxt)
                self._scan += 2
                continue
            if c == '"':
                self._closed = True
            else:
                self._answer += c
            self._scan += 1

    def _sentences(self, final: bool) -> list[str]:
        if self.decision != DECISIONS[0]:
            return []
        rest = self._answer[self._said:]
        out: list[str] = []
        start = 0
        for m in _SENTENCE_END.finditer(rest):
            out.append(rest[start:m.end()])
            start = m.end()
        if final or self._closed:
            out.append(rest[start:])
            start = len(rest)
        self._said += start
        return [s.strip() for s in out if s.strip()]
