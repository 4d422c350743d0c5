"""Property-based fuzzing (Hypothesis) of every parser of outside input that needs no server: the
wire codec (docs/protocol.md §5), the bridge's and the server's JSON messages (§4), the suite
loaders and validators of both benchmarks (DESIGN §2, §12.1) and the episode-bundle reader (§7).

Each property: whatever the input, the parser gives a usable value -- for what the server stores,
a storable one (no NUL, no lone surrogate, strict JSON, strict UTF-8) -- or the project's
documented error with its stable code, never another exception. Bounded and reproducible for CI
(tests/support/fuzz.py: a fixed example count per test, derandomized, no example database). The
REST routes are fuzzed over real HTTP in tests/test_fuzz_api.py; docs/guarantees.md lists both.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from clients.codec import (
    FLAG_SILENT,
    HEADER_SIZE,
    KIND_ASSISTANT,
    KIND_CONTEXT,
    KIND_ROOM,
    KINDS,
    MAX_SEQ,
    decode_frame,
    encode_frame,
    frame_samples,
)
from clients.errors import CLOSE_CODES, ProtocolError
from clients.messages import MAX_TEXT_MESSAGE, parse_bridge_message, parse_server_message
from server.benchmarks.mpe import suite as mpe
from server.benchmarks.mtr import suite as mtr
from server.core.detector import DETECTOR_VERSION
from server.engine.registry import UnknownBenchmark, benchmark_name_of_suite, get_benchmark
from server.engine.suitedir import SCENARIOS_FILE, SUITE_FILE, SuiteError, lines_to_bytes, meta_to_bytes
from server.scoring.errors import BadBundle
from server.scoring.loading import load_bundle
from server.scoring.runner import bundle_jobs
from tests.support.fuzz import (
    assert_storable,
    clean_text,
    dumps,
    encode,
    fuzz,
    has_raw,
    json_values,
    mangled,
    mutated,
    odd_text,
    raw,
)

RATES = (24_000, 16_000)
FRAME_CODES = {"bad_frame", "unsupported_version"}
TEXT_CODES = {"message_too_big", "bad_json", "bad_message", "unknown_type", "unsupported_version"}


# --- 1. the frame codec (docs/protocol.md §5) ---------------------------------------------------

u8, u16, u32 = st.integers(0, 255), st.integers(0, 2**16 - 1), st.integers(0, MAX_SEQ)
#: a header of any field values, mostly near the valid ones, then a payload of a length near a
#: frame's (exact, one sample off, one byte off, empty) or of any length
headers = st.tuples(st.sampled_from([1, 1, 1, 0, 2, 255]) | u8, st.sampled_from(KINDS) | u8,
                    st.sampled_from([0, FLAG_SILENT, 2, 0x8000, 0xFFFF]) | u16, u32)
frame_messages = st.one_of(
    st.binary(max_size=4000),
    st.builds(lambda h, n, fill: struct.pack("<BBHI", *h) + bytes([fill]) * n, headers,
              st.sampled_from([0, 1, 2, 2559, 2560, 2561, 3838, 3839, 3840, 3841, 3842, 7680]) | st.integers(0, 4000),
              u8),
)
allowed_kinds = st.sampled_from([None, KIND_ASSISTANT, (KIND_ROOM, KIND_CONTEXT), KINDS])


@fuzz(1000)
@given(data=frame_messages, rate=st.sampled_from(RATES), kind=allowed_kinds)
@example(data=b"\x01\x02\x01\x00" + b"\x00" * 4 + b"\x00", rate=24_000, kind=KIND_ASSISTANT)  # SILENT + payload
def test_decode_frame_takes_any_bytes(data, rate, kind):
    """Any binary message decodes to one frame of the connection's size, or is refused with
    ``bad_frame`` / ``unsupported_version`` (the version byte is checked first)."""
    n = frame_samples(rate)
    try:
        frame = decode_frame(data, n_samples=n, kind=kind)
    except ProtocolError as exc:
        assert exc.code in FRAME_CODES and exc.code in CLOSE_CODES, exc.code
        if len(data) >= HEADER_SIZE:
            assert (exc.code == "unsupported_version") == (data[0] != 1), (exc.code, data[:8])
        return
    version, k, flags, seq = struct.unpack_from("<BBHI", data)
    assert version == 1 and k in KINDS and (kind is None or k in ((kind,) if isinstance(kind, int) else kind))
    assert (frame.kind, frame.seq, frame.flags) == (k, seq, flags) and flags in (0, FLAG_SILENT)
    assert frame.pcm.dtype == np.int16 and frame.pcm.shape == (n,)
    assert len(data) == (HEADER_SIZE if frame.silent else HEADER_SIZE + 2 * n)


@fuzz(300)
@given(rate=st.sampled_from(RATES), kind=st.sampled_from(KINDS), seq=u32, data=st.data())
def test_encode_decode_round_trips(rate, kind, seq, data):
    """Every frame the codec encodes decodes to itself; an all-zero frame travels as SILENT."""
    n = frame_samples(rate)
    pcm = data.draw(st.none() | st.just(np.zeros(n, np.int16)) | hnp.arrays(np.int16, n), label="pcm")
    wire = encode_frame(kind, seq, pcm)
    frame = decode_frame(wire, n_samples=n, kind=kind)
    assert (frame.kind, frame.seq) == (kind, seq)
    silent = pcm is None or not pcm.any()
    assert frame.silent == silent and len(wire) == (HEADER_SIZE if silent else HEADER_SIZE + 2 * n)
    np.testing.assert_array_equal(frame.pcm, np.zeros(n, np.int16) if pcm is None else pcm)


# --- 2. JSON messages (docs/protocol.md §4) -----------------------------------------------------


def parsed_or_refused(parse, raw):
    """(the parsed message, None), or (None, the documented code it was refused with); the error's
    message is storable, for it is stored with the attempt and sent to the bridge."""
    try:
        return parse(raw), None
    except ProtocolError as exc:
        assert exc.code in TEXT_CODES and exc.code in CLOSE_CODES, exc.code
        assert_storable(str(exc))
        return None, exc.code


def check_bridge(raw):
    """parse_bridge_message: a documented code, or a message whose every field is storable."""
    msg, code = parsed_or_refused(parse_bridge_message, raw)
    if msg is not None:
        assert_storable(msg.model_dump())
        assert_storable(json.loads(msg.dumps().encode("utf-8")))  # what the SDK's own dumps() writes
    return code


JSON_TOKENS = ['{', '}', '[', ']', ',', ':', ' ', '"type"', '"hello"', '"text"', '"stats"', '"error"', '"data"',
               '"protocol"', '"model"', '"name"', '"seq"', '"code"', '"x"', '1', '-0', '1e999', 'NaN', '-Infinity',
               'true', 'null', '"\\u0000"', '"\\ud800"', '"\\udc00\\ud800"', '9' * 5000, '\u2028', '\x00']


@fuzz(500)
@given(raw=st.one_of(st.text(st.characters(exclude_categories=()), max_size=200),
                     st.lists(st.sampled_from(JSON_TOKENS), max_size=30).map("".join),
                     st.binary(max_size=200),
                     st.sampled_from(["x" * (MAX_TEXT_MESSAGE + 1), "\u00e9" * (MAX_TEXT_MESSAGE // 2 + 1),
                                      "[" * 100_000, '{"type":"stats","data":' + "[" * 3000 + "]" * 3000 + "}"])))
def test_bridge_messages_from_any_text(raw):
    """Any text (or bytes) a bridge sends parses or gets a documented code (protocol.md §9)."""
    check_bridge(raw)
    parsed_or_refused(parse_server_message, raw)  # the SDK's side: the same codes


TYPED = st.fixed_dictionaries({"type": st.sampled_from(["hello", "text", "stats", "error"]) | odd_text},
                              optional={"protocol": json_values, "model": json_values, "seq": json_values,
                                        "text": json_values, "data": json_values, "code": json_values,
                                        "message": json_values}) | st.dictionaries(odd_text, json_values, max_size=4)


@fuzz(500)
@given(doc=json_values | TYPED, ascii_only=st.booleans())
def test_bridge_messages_from_any_json(doc, ascii_only):
    """Any JSON value, with or without a known ``type``, parses or gets a documented code."""
    check_bridge(dumps(doc, ascii_only=ascii_only))


VALID_BRIDGE = [
    {"type": "hello", "protocol": 1, "model": {"name": "m-1", "revision": "r"}, "sample_rate": 16000,
     "clocks": ["lockstep", "realtime"], "accepts_context": True},
    {"type": "hello", "protocol": 1, "model": {"name": "m"}},
    {"type": "text", "seq": 12, "text": "It's nine."},
    {"type": "stats", "data": {"latency_ms": 41.5, "gpu": "H100", "nested": {"a": [1, 2, {"b": None}]}}},
    {"type": "error", "code": "model_oom", "message": "out of memory"},
]


@fuzz(800)
@given(doc=st.sampled_from(VALID_BRIDGE).flatmap(mutated), ascii_only=st.booleans())
@example(doc={"type": "stats", "data": {"\ud800k\x00": [float("nan"), "\x00\udfff"]}}, ascii_only=True)
@example(doc={"type": "hello", "protocol": 2, "model": 5}, ascii_only=True)
# the regression: stats nested 400 deep were stored, and no page could serve them again
@example(doc={"type": "stats", "data": {"a": raw("[" * 400 + "]" * 400)}}, ascii_only=True)
def test_mutated_bridge_messages(doc, ascii_only):
    """Valid bridge messages with fields deleted, added, retyped or replaced by any JSON value:
    a documented code, or a message with everything it keeps storable (NUL and lone surrogates
    replaced, non-finite numbers null: protocol.md §4); a hello of another integer protocol is
    ``unsupported_version`` whatever the rest says."""
    raw = dumps(doc, ascii_only=ascii_only)
    other_protocol = (isinstance(doc, dict) and doc.get("type") == "hello" and type(doc.get("protocol")) is int
                      and doc["protocol"] != 1 and len(encode(raw)) <= MAX_TEXT_MESSAGE and not has_raw(doc))
    code = check_bridge(raw)
    assert not other_protocol or code == "unsupported_version", code


VALID_SERVER = [
    {"type": "welcome", "bridge_id": "4f1c", "protocol": 1},
    {"type": "status", "matching_runs": 1, "queued_episodes": 2, "reason": "queued", "hint": "one starts now"},
    {"type": "episode.start", "episode_id": "9b0c", "clock": "lockstep", "sample_rate": 24000, "frame_samples": 1920,
     "max_inflight": 1, "reference": {"scenario_id": "s1", "condition": "explicit"}, "instructions": "Be Aria.",
     "context_frames": 3},
    {"type": "episode.end", "episode_id": "9b0c", "reason": "completed"},
    {"type": "error", "code": "bad_seq", "message": "expected 3"},
]


@fuzz(400)
@given(doc=st.sampled_from(VALID_SERVER).flatmap(mutated))
def test_mutated_server_messages(doc):
    """The SDK's parser of server messages: a documented code or a message, whatever is mutated
    (fields it does not know are dropped: protocol.md §4)."""
    msg, _ = parsed_or_refused(parse_server_message, dumps(doc))
    if msg is not None:
        assert set(msg.model_dump()) <= set(type(msg).model_fields)


# --- 3. suite loaders and validators (DESIGN §2, §12.1) -----------------------------------------

CLIPS = {"clips/short.wav": 0.5, "clips/one.wav": 1.0, "clips/long.wav": 6.0}


def _clip(rel: str, text: str = "words") -> dict:
    return {"text": text, "clip": rel, "duration_s": CLIPS[rel]}


def mpe_suite() -> tuple[dict, list[dict]]:
    """A valid Duplex-MPE suite: one pair, T in the middle, one N4 event."""
    turns = [("A", "N2", "Ben, pass the salt?"), ("B", "T", "Aria, what time is it?"), ("C", "N4Q", "Aria, weather?"),
             ("A", "N4R", "Sunny, I checked."), ("B", "N3", "Hmm.")]
    lines = [{"scenario_id": "s1", "pair_id": "p1", "condition": cond, "n_speakers": 3, "t_bucket": "middle",
              "attributes": {"setting": "kitchen"}, "gold_answer": "nine", "answer_keys": [["nine", "9"]],
              "turns": [{"idx": i, "speaker": s, "label": lab, "text": t, "clip": "clips/one.wav", "duration_s": 1.0,
                         "addressee": "Aria" if lab in ("T", "N4Q") else None} for i, (s, lab, t) in enumerate(turns)]}
             for cond in ("explicit", "implicit")]
    meta = {"benchmark": "duplex-mpe", "name": "fuzz", "version": "1", "generator": "hand", "seed": 7,
            "voices": {"A": "piper:joe@1.0", "B": "piper:joe@1.1", "C": "piper:joe@1.2"},
            "preamble": {"text": "You are Aria.", "clip": "clips/short.wav", "duration_s": 0.5}}
    return meta, lines


def mtr_suite() -> tuple[dict, list[dict]]:
    """A valid MTR-DuplexBench suite: one dialogue, a round of every feature."""
    one, long_ = _clip("clips/one.wav"), _clip("clips/long.wav")
    rounds = [
        {"round": 1, "feature": "smooth", "user": one, "assistant": long_},
        {"round": 2, "feature": "interruption", "user": one, "assistant": long_,
         "barge_in": {**one, "after_onset_s": 1.5, "response": one}},
        {"round": 3, "feature": "pause", "user": one, "assistant": long_,
         "pause": {"length_s": 1.0, "continuation": one}},
        {"round": 4, "feature": "background", "user": one, "assistant": long_,
         "background": {**one, "kind": "broadcast", "after_onset_s": 1.0}},
        {"round": 5, "feature": "backchannel", "user": one, "assistant": long_,
         "backchannels": [{**_clip("clips/short.wav", "mm-hmm"), "after_onset_s": 1.0}]},
    ]
    meta = {"benchmark": "mtr-duplexbench", "name": "fuzz-mtr", "version": "1", "generator": "hand", "seed": 3,
            "voices": {"user": "a", "assistant": "b", "third": "c", "broadcast": "d"}}
    return meta, [{"dialogue_id": "d1", "set": "S+I+P+B", "topic": "travel", "rounds": rounds}]


BASES = {"mpe": (mpe_suite, mpe.Suite, mpe.validate_suite), "mtr": (mtr_suite, mtr.Suite, mtr.validate_suite)}
PROBLEM_LINE = re.compile(rf"^({re.escape(SUITE_FILE)}|{re.escape(SCENARIOS_FILE)})(:\d+)?: ")


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory) -> Path:
    """One suite directory with the clips of both base suites; each example rewrites its manifest."""
    root = tmp_path_factory.mktemp("fuzz-suite")
    for rel, seconds in CLIPS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(str(root / rel), np.zeros(int(seconds * 24_000), np.int16), 24_000, subtype="PCM_16")
    return root


def write_manifest(root: Path, suite_json: bytes, scenarios: bytes) -> None:
    (root / SUITE_FILE).write_bytes(suite_json)
    (root / SCENARIOS_FILE).write_bytes(scenarios)


def manifest_bytes(meta, lines, ascii_only: bool = True) -> tuple[bytes, bytes]:
    return (encode(dumps(meta, ascii_only=ascii_only)),
            encode("".join(dumps(line, ascii_only=ascii_only) + "\n" for line in lines)))


def load_or_refuse(root: Path, which: str):
    """Load and validate ``root`` as the server does when a run is created (the benchmark that
    suite.json names, then its loader and validator), and as ``which``'s own loader does: a
    SuiteError naming the file (scenarios.jsonl: and the line), or a suite whose problems each name
    their file (and line), and which is storable: written back and read again, it is the same."""
    try:
        bench = get_benchmark(benchmark_name_of_suite(root))
    except UnknownBenchmark:  # a documented error of the registry (400 when a run is created)
        bench = None
    suites = [(BASES[which][1].load, BASES[which][2])]
    if bench is not None:
        suites.append((lambda p: bench.load_suite(p), bench.problems))
    for load, problems in suites:
        try:
            suite = load(root)
        except SuiteError as exc:
            msg = str(exc)
            assert SUITE_FILE in msg or SCENARIOS_FILE in msg, msg
            if SCENARIOS_FILE in msg and "not UTF-8" not in msg:
                assert re.search(rf"{re.escape(SCENARIOS_FILE)}:\d+", msg), msg
            continue
        for line in problems(suite):
            assert PROBLEM_LINE.match(line), line
        assert_round_trip(suite, root)


def assert_round_trip(suite, root: Path) -> None:
    meta, items = suite.meta, suite.scenarios
    assert_storable(meta.model_dump(mode="json"))
    for item in items:
        assert_storable(item.model_dump(mode="json"))
    suite.content_hash()
    again = root.parent / (root.name + "-again")
    again.mkdir(exist_ok=True)
    write_manifest(again, meta_to_bytes(meta), lines_to_bytes(items))
    back = type(suite).load(again)
    assert back.meta.model_dump(mode="json") == meta.model_dump(mode="json")
    assert [x.model_dump(mode="json") for x in back.scenarios] == [x.model_dump(mode="json") for x in items]


@pytest.mark.parametrize("which", ["mpe", "mtr"])
def test_the_base_suites_are_valid(suite_dir, which):
    make, cls, validate = BASES[which]
    write_manifest(suite_dir, *manifest_bytes(*make()))
    assert validate(cls.load(suite_dir)) == []


@pytest.mark.parametrize("which", ["mpe", "mtr"])
@fuzz(250)
@given(data=st.data(), ascii_only=st.booleans())
def test_mutated_suite_manifests(suite_dir, which, data, ascii_only):
    """suite.json and scenarios.jsonl with fields deleted, added, retyped or replaced by any JSON
    value (NaN, 1e999, huge integers, deep nesting, NUL, lone surrogates, line separators)."""
    meta, lines = BASES[which][0]()
    if data.draw(st.booleans(), label="mutate suite.json"):
        meta = data.draw(mutated(meta), label="suite.json")
    else:
        i = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[i] = data.draw(mutated(lines[i]), label="scenarios.jsonl line")
    write_manifest(suite_dir, *manifest_bytes(meta, lines, ascii_only))
    load_or_refuse(suite_dir, which)


@pytest.mark.parametrize("which", ["mpe", "mtr"])
@fuzz(150)
@given(data=st.data())
def test_mangled_suite_files(suite_dir, which, data):
    """The manifests' bytes flipped, cut, spliced with odd bytes (invalid UTF-8, a BOM, NUL, U+2028)."""
    meta_b, lines_b = manifest_bytes(*BASES[which][0]())
    if data.draw(st.booleans(), label="mangle suite.json"):
        meta_b = data.draw(mangled(meta_b), label="suite.json")
    else:
        lines_b = data.draw(mangled(lines_b, head=len(lines_b)), label="scenarios.jsonl")
    write_manifest(suite_dir, meta_b, lines_b)
    load_or_refuse(suite_dir, which)


def _with(doc: dict, path: tuple, value) -> dict:
    doc = json.loads(json.dumps(doc))
    target = doc
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return doc


#: the minimal manifests the fuzzing found, each a traceback (not a SuiteError) or a suite that
#: could not be stored (a 500 when a run was created on PostgreSQL) before; now the SuiteError
SUITE_REGRESSIONS = [
    ("scenarios", "9" * 5000, "an integer of 5000 digits is too long"),  # ValueError from int()
    ("suite", "[" * 5000 + "]" * 5000, "nested too deeply"),  # RecursionError
    ("scenarios", {"scenario_id": "s1\x00"}, "a NUL character in a string"),
    ("suite", {"name": "\ud800"}, "an unpaired surrogate in a string"),
    ("scenarios", {"turns": [{"duration_s": float("nan")}]}, "NaN is not a JSON number"),  # passed validation
    ("scenarios", {"turns": [{"duration_s": raw("1e999")}]}, "the number 1e999 is too large"),
    ("scenarios", {"turns": [{"clip": "clips/" + "a" * 300 + ".wav"}]}, "File name too long"),  # OSError
]


@pytest.mark.parametrize("where, change, message", SUITE_REGRESSIONS)
def test_suite_regressions(suite_dir, where, change, message):
    meta, lines = mpe_suite()
    if isinstance(change, dict):
        ((key, value),) = change.items()
        if isinstance(value, list):  # the first turn's field
            ((field, v),) = value[0].items()
            lines[0] = _with(lines[0], ("turns", 0, field), v)
        elif where == "suite":
            meta = _with(meta, (key,), value)
        else:
            lines[0] = _with(lines[0], (key,), value)
        meta_b, lines_b = manifest_bytes(meta, lines)
    else:
        meta_b, lines_b = manifest_bytes(meta, lines)
        if where == "suite":
            meta_b = change.encode()
        else:
            lines_b = change.encode() + b"\n" + lines_b
    write_manifest(suite_dir, meta_b, lines_b)
    with pytest.raises(SuiteError) as info:
        suite = mpe.Suite.load(suite_dir)
        raise SuiteError("; ".join(mpe.validate_suite(suite)))
    assert message in str(info.value)
    load_or_refuse(suite_dir, "mpe")


@pytest.mark.parametrize("which", ["mpe", "mtr"])
@fuzz(80)
@given(data=st.data())
@example(data=None)  # the regression: U+2028 in a text, written by the project's own writer
def test_suites_with_any_text_round_trip(suite_dir, which, data):
    """A valid suite whose texts and names are any Unicode (no NUL, no lone surrogate), written by
    the suite writer, loads back as the same suite, every line on its own line number."""
    make, cls, validate = BASES[which]
    meta, lines = make()
    texts = (lambda label: "a\u2028b\x85c\u2029d\x1ce") if data is None else \
        (lambda label: data.draw(clean_text, label=label))
    meta["name"] = texts("name")
    for line in lines:
        for turn in line.get("turns", []):
            turn["text"] = texts("turn text")
        for rnd in line.get("rounds", []):
            rnd["user"] = {**rnd["user"], "text": texts("user text")}
        if "gold_answer" in line:
            line["gold_answer"] = texts("gold answer")
        if "topic" in line:
            line["topic"] = texts("topic")
    if which == "mpe":  # both conditions of a pair share the gold answer (§2)
        lines[1]["gold_answer"] = lines[0]["gold_answer"]
    write_manifest(suite_dir, *manifest_bytes(meta, lines))
    suite = cls.load(suite_dir)  # then written back as the generators and `mpe dataset` write suites
    write_manifest(suite_dir, meta_to_bytes(suite.meta), lines_to_bytes(suite.scenarios))
    back = cls.load(suite_dir)
    assert back.lines == list(range(1, len(lines) + 1))
    assert [x.model_dump(mode="json") for x in back.scenarios] == [x.model_dump(mode="json") for x in suite.scenarios]
    blank = ("[text-present]", "[gold-answer]")  # whitespace-only texts are the validator's business
    assert [p for p in validate(back) if not p.endswith(blank)] == []


# --- 4. the episode-bundle reader (DESIGN §7) ---------------------------------------------------


def bundle_doc() -> dict:
    """A Duplex-MPE episode.json as `mpe export` writes it (the fields scoring reads)."""
    events = [{"t": 0, "t_s": 0.0, "type": "preamble.start", "data": {}},
              {"t": 12_000, "t_s": 0.5, "type": "preamble.end", "data": {}},
              {"t": 24_000, "t_s": 1.0, "type": "clip.start", "data": {"idx": 0, "label": "T"}},
              {"t": 48_000, "t_s": 2.0, "type": "clip.end", "data": {"idx": 0, "label": "T"}},
              {"t": 60_000, "t_s": 2.5, "type": "episode.end", "data": {}}]
    return {"bundle_version": 1, "episode_id": "ep1", "attempt_id": "at1", "attempt": 1, "status": "completed",
            "benchmark": "duplex-mpe", "scenario_id": "s1", "pair_id": "p1", "condition": "explicit",
            "model": {"name": "m", "revision": ""}, "clock": "lockstep", "gold_answer": "nine",
            "answer_keys": [["nine"]], "turns": [{"idx": 0, "speaker": "A", "label": "T", "text": "Aria?"}],
            "end_sample": 60_000, "events": events,
            "live_segments": [{"start": 30_000, "end": 40_000, "detector": DETECTOR_VERSION}],
            "stats": {"detector": DETECTOR_VERSION, "server": {"late_frames": 0}}}


FRAMES_CSV = b"direction,seq,slot,sent_us,arrived_us,silent\nroom,0,0,10,,1\nassistant,0,0,,900,1\n"


def wav(n: int = 4800, rate: int = 24_000, channels: int = 1) -> bytes:
    import io

    buf = io.BytesIO()
    sf.write(buf, np.zeros((n, channels), np.int16), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-bundle")


def write_bundle(d: Path, doc: bytes, assistant: bytes, frames: bytes, segments: bytes | None) -> None:
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "episode.json").write_bytes(doc)
    (d / "assistant.wav").write_bytes(assistant)
    (d / "room.wav").write_bytes(assistant)
    (d / "frames.csv").write_bytes(frames)
    if segments is not None:
        (d / "segments.json").write_bytes(segments)


def read_or_refuse(d: Path) -> None:
    """Scoring's reading of a bundle: `mpe score DIR` lists it (bundle_jobs), loads it (load_bundle)
    and reads its events; each a usable value or BadBundle."""
    for step in (lambda: bundle_jobs([d]), lambda: load_bundle(d)):
        try:
            out = step()
        except BadBundle as exc:
            assert exc.code == "bad_bundle"
            continue
        if isinstance(out, list):
            assert all(isinstance(j.episode_id, str) for j in out)
            continue
        assert out.assistant.dtype == np.int16 and out.assistant.ndim == 1
        assert out.segments is None or all(type(s) is int and type(e) is int for s, e in out.segments)
        try:
            events = out.events
        except BadBundle:
            continue
        assert all(isinstance(e.t, int) and isinstance(e.type, str) and isinstance(e.data, dict) for e in events)


SEGMENTS = [{"start": 100, "end": 2000}, [3000, 4000]]
BUNDLE_EXAMPLES = ["[]", "5", '"episode_id events turns"', "[" * 5000,
                   '{"episode_id": 1, "events": [], "turns": [], "stats": [1]}',
                   json.dumps({**bundle_doc(), "live_segments": [{"start": "x", "end": 1}]}),
                   json.dumps({**bundle_doc(), "live_segments": 7})]


@fuzz(500)
@given(data=st.data())
@example(data=None)
def test_mutated_bundles(bundle_dir, data):
    """episode.json (its fields mutated, or its bytes), assistant.wav (its header and data bytes),
    frames.csv and segments.json mangled: scoring reads the bundle or refuses it with BadBundle."""
    if data is None:  # the regressions, each a crash before
        for doc in BUNDLE_EXAMPLES:
            write_bundle(bundle_dir, doc.encode(), wav(), FRAMES_CSV, None)
            read_or_refuse(bundle_dir)
        write_bundle(bundle_dir, dumps(bundle_doc()).encode(), wav(), FRAMES_CSV, b"[" * 5000)
        read_or_refuse(bundle_dir)
        return
    doc, assistant, frames = dumps(bundle_doc()).encode(), wav(), FRAMES_CSV
    segments = data.draw(st.none() | st.just(json.dumps(SEGMENTS).encode()), label="segments.json")
    target = data.draw(st.sampled_from(["doc", "doc", "doc bytes", "wav", "wav", "frames", "segments"]), label="what")
    if target == "doc":
        doc = encode(dumps(data.draw(mutated(bundle_doc()), label="episode.json"), ascii_only=data.draw(st.booleans())))
    elif target == "doc bytes":
        doc = data.draw(mangled(doc, head=len(doc)), label="episode.json bytes")
    elif target == "wav":
        assistant = data.draw(st.sampled_from([wav(), wav(10, 16_000), wav(10, channels=2), wav(0), b""])
                              .flatmap(lambda w: mangled(w) if w else st.just(w)), label="assistant.wav")
    elif target == "frames":
        frames = data.draw(mangled(frames, head=len(frames)), label="frames.csv")
    else:
        segments = encode(dumps(data.draw(mutated(SEGMENTS) | json_values | mutated({"segments": SEGMENTS}),
                                          label="segments.json")))
    write_bundle(bundle_dir, doc, assistant, frames, segments)
    read_or_refuse(bundle_dir)

