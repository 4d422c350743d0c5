"""Hypothesis strategies shared by the fuzzing tests (tests/test_fuzz.py, tests/test_fuzz_api.py):
hostile text, JSON values with everything JSON and Python's ``json`` let through (NaN, 1e999, huge
integers, deep nesting, NUL, lone surrogates, line separators), mutations of valid JSON documents
and byte-level mangling of files, and the one settings profile every fuzzing test uses.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

#: every fuzzing test: a fixed example count (given per test), reproducible (derandomized: the same
#: examples on every run of the same code and command -- Hypothesis also mixes in constants of the
#: project's modules imported so far, so one file run alone draws other examples than the whole
#: suite), no example database (nothing replayed from earlier runs), no deadline (a 2-core CI
#: machine under load must not turn a slow example into a failure)
FUZZ = dict(deadline=None, derandomize=True, database=None, print_blob=False)


def fuzz(max_examples: int, **kw: Any):
    """The settings of one fuzzing test: ``max_examples`` examples, reproducible."""
    return settings(max_examples=max_examples, **FUZZ, **kw)


#: what no answer of the server (a response body, an error message on a socket) may carry: a
#: traceback, SQL or a database driver's words (server paths are checked against each test's directories)
LEAKS = re.compile(r"Traceback|File \"|sqlalchemy|psycopg|sqlite3|\bSELECT\b|\bINSERT INTO\b|\bFROM \w+ WHERE\b",
                   re.IGNORECASE)


# --- text ---------------------------------------------------------------------------------------

#: characters that broke (or could break) something: NUL (PostgreSQL text), lone surrogates (not
#: UTF-8), the separators ``str.splitlines`` splits on besides ``\n``, a BOM, a replacement character
ODD_CHARS = ["\x00", "\ud800", "\udfff", "\ud83d", "\u2028", "\u2029", "\x85", "\x1c", "\x1e", "\x0b", "\x0c",
             "\r", "\n", "\t", "\ufeff", "\ufffd", "\u202e", "é", "😀", "\\", "/", "..", "'", '"', "%00", "%2e"]

any_char = st.characters(exclude_categories=())  # every code point, surrogates included
odd_text = st.one_of(
    st.text(any_char, max_size=12),
    st.sampled_from(ODD_CHARS),
    st.lists(st.sampled_from(ODD_CHARS) | st.text(max_size=3), max_size=5).map("".join),
)
#: text a suite may legitimately hold: any Unicode scalar value but NUL (no lone surrogates)
clean_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=12)


# --- JSON ---------------------------------------------------------------------------------------

#: number and nesting tokens that no Python value dumps to: integers of more digits than ``int()``
#: takes (4300), numbers ``float()`` turns into infinity, nesting deeper than the recursion limit
RAW_TOKENS = ["9" * 5000, "-" + "9" * 4400, "1e999", "-1e999", "1" + "0" * 400, "[" * 3000 + "]" * 3000,
              "{\"a\":" * 2000 + "0" + "}" * 2000, "[" * 400 + "]" * 400]
_RAW = "\u0001raw{}\u0001"  # placeholder string, replaced by RAW_TOKENS[i] in dumps()

EDGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, -(10**30)]
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(EDGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True), odd_text,
    st.sampled_from(range(len(RAW_TOKENS))).map(_RAW.format),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(odd_text, inner, max_size=4),
    max_leaves=8,
)


def raw(token: str) -> str:
    """The placeholder that :func:`dumps` writes as ``token`` (one of :data:`RAW_TOKENS`)."""
    return _RAW.format(RAW_TOKENS.index(token))


def has_raw(value: Any) -> bool:
    """Whether :func:`dumps` writes a raw token of :data:`RAW_TOKENS` somewhere in ``value``."""
    return "\\u0001raw" in json.dumps(value)


def dumps(value: Any, *, ascii_only: bool = True) -> str:
    """``value`` as JSON text, with Python's extensions (NaN, Infinity) and each raw placeholder
    replaced by its token of :data:`RAW_TOKENS`."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    for i, token in enumerate(RAW_TOKENS):
        text = text.replace(json.dumps(_RAW.format(i), ensure_ascii=ascii_only), token)
    return text


def encode(text: str) -> bytes:
    """Text as file bytes; lone surrogates become the 3-byte sequences strict UTF-8 refuses."""
    return text.encode("utf-8", "surrogatepass")


def _spots(obj: Any, path: tuple = ()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _spots(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _spots(v, path + (i,))


def _at(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def _retyped(v: Any) -> list[Any]:
    out: list[Any] = [[v], {"v": v}, None, "", 0, -1, True]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        out += [str(v), float(v) if math.isfinite(v) else 0, -v, v * 10**12, float("nan"), float("inf")]
    if isinstance(v, str):
        out += [v * 300, v + "\x00", v + "\ud800", v + "\u2028", " " + v, v.upper()]
    if isinstance(v, (list, dict)):
        out += [[], {}, v if isinstance(v, str) else json.dumps(v)]
    return out


@st.composite
def mutated(draw, doc: Any, max_ops: int = 3) -> Any:
    """``doc`` (a JSON document) after 1 to ``max_ops`` mutations anywhere in it: a value replaced by
    any JSON value or by one of another type, a key or item deleted, one inserted, a value wrapped."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, max_ops))):
        path = draw(st.sampled_from(list(_spots(doc))))
        op = draw(st.sampled_from(("replace", "retype", "retype", "delete", "insert")))
        if not path:  # the document itself
            if op in ("replace", "retype"):
                doc = draw(json_values) if op == "replace" else draw(st.sampled_from(_retyped(doc)))
            continue
        parent, key = _at(doc, path[:-1]), path[-1]
        if op == "replace":
            parent[key] = draw(json_values)
        elif op == "retype":
            parent[key] = draw(st.sampled_from(_retyped(parent[key])))
        elif op == "delete":
            del parent[key]
        else:
            target = parent[key]
            if isinstance(target, dict):
                target[draw(odd_text | st.sampled_from(sorted(map(str, target)) or ["x"]))] = draw(json_values)
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), draw(json_values | st.sampled_from(target or [0])))
            else:
                parent[key] = [target, draw(json_values)]
    return doc


BYTE_SNIPPETS = [b"\x00", b"\xff", b"\xff\xfe", b"\xef\xbb\xbf", b"\n", b"\r\n", "\u2028".encode(), b"\x85",
                 b"\xed\xa0\x80", b"\xc3", b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"NaN", b"1e999",
                 b"9" * 5000, b"[" * 3000]


@st.composite
def mangled(draw, data: bytes, head: int = 64) -> bytes:
    """``data`` after 1 to 4 byte-level edits (flips, inserts, deletions, truncation, duplication),
    half of them within its first ``head`` bytes (where headers are)."""
    b = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(("flip", "set", "insert", "delete", "truncate", "dup")))
        pos = draw(st.integers(0, min(head, len(b))) | st.integers(0, len(b)))
        if op in ("flip", "set") and b:
            i = min(pos, len(b) - 1)
            b[i] = b[i] ^ (1 << draw(st.integers(0, 7))) if op == "flip" else draw(st.integers(0, 255))
        elif op == "insert":
            b[pos:pos] = draw(st.binary(min_size=1, max_size=8) | st.sampled_from(BYTE_SNIPPETS))
        elif op == "delete":
            del b[pos:pos + draw(st.integers(1, 32))]
        elif op == "truncate":
            del b[pos:]
        elif op == "dup":
            b[pos:pos] = b[pos:pos + draw(st.integers(1, 64))]
    return bytes(b)


# --- what stored data must be -------------------------------------------------------------------


def unstorable(value: Any, where: str = "") -> str | None:
    """Where ``value`` holds something a database or a UTF-8 JSON document cannot: a NUL, a lone
    surrogate, a non-finite number, a non-JSON type; None when it is storable as JSON."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{where}: NUL"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where}: lone surrogate"
        return None
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: {value}"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where}: key {k!r}"
            bad = unstorable(k, f"{where}.key") or unstorable(v, f"{where}.{k}")
            if bad:
                return bad
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            bad = unstorable(v, f"{where}[{i}]")
            if bad:
                return bad
        return None
    return f"{where}: {type(value).__name__}"


def assert_storable(value: Any) -> None:
    """``value`` is storable (:func:`unstorable`) and serialises as strict JSON in strict UTF-8."""
    bad = unstorable(value)
    assert bad is None, bad
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
