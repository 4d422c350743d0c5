"""Suite manifests (server/suite.py) and the suite behind ``mpe demo`` (server/demo_suite.py: the
built-in ``mini`` suite). Every validation rule has its failing fixture in test_dataset_validate.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from server.benchmarks.mpe.dataset import builtin as builtin_mod
from server.benchmarks.mpe.demo_suite import build_demo_suite
from server.benchmarks.mpe.duty import DUTY_TEXT
from server.benchmarks.mpe.suite import (
    LABELS,
    Preamble,
    Scenario,
    Suite,
    SuiteError,
    SuiteMeta,
    Turn,
    content_hash_of,
    validate_suite,
    write_suite,
)
from server.engine import suitebuild
from server.tts import DEFAULT_VOICES, INSTALL_HINT, TTSUnavailable
from tests.support.suites import CountingEngine, link_tree

RATE = 24_000


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def demo(demo_build) -> Suite:
    return Suite.load(demo_build["path"])


def _tone(seconds: float, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(round(seconds * RATE))) / RATE
    return (0.2 * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def make_tiny_suite(root: Path) -> Suite:
    """A valid one-pair suite with tone clips; needs no TTS."""
    labels = ["N2", "N1", "T", "N4Q", "N4R", "N3"]
    speakers = ["A", "B", "C", "A", "B", "C"]
    clips_written: dict[str, float] = {}

    def clip(rel: str, seconds: float) -> float:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        audio = _tone(seconds)
        sf.write(str(p), audio, RATE, subtype="PCM_16")
        clips_written[rel] = round(len(audio) / RATE, 3)
        return clips_written[rel]

    scenarios = []
    for cond in ("explicit", "implicit"):
        turns = []
        for i, (lab, spk) in enumerate(zip(labels, speakers)):
            rel = f"clips/p1/{cond}/{i:03d}.wav"
            text = "Aria, what time is it?" if (lab == "T" and cond == "explicit") else f"line {i}"
            turns.append(Turn(idx=i, speaker=spk, label=lab, text=text, clip=rel, duration_s=clip(rel, 0.5 + 0.1 * i)))
        scenarios.append(
            Scenario(
                scenario_id="s1", pair_id="p1", condition=cond, n_speakers=3, t_bucket="middle",
                attributes={"setting": "kitchen"}, gold_answer="Noon.", answer_keys=[["noon", "12"]],
                turns=turns,
            )
        )
    meta = SuiteMeta(
        name="tiny", version="1", generator="test", seed=1, voices=dict(DEFAULT_VOICES),
        preamble=Preamble(text="You are Aria.", clip="clips/preamble.wav", duration_s=clip("clips/preamble.wav", 1.0)),
    )
    write_suite(root, meta, scenarios)
    return Suite.load(root)


@pytest.fixture
def tiny(tmp_path) -> Suite:
    return make_tiny_suite(tmp_path / "tiny")


# ------------------------------------------------------------- the demo suite


def test_demo_suite_is_valid(demo, demo_build):
    assert validate_suite(demo, strict=True) == []
    assert demo.meta.name == "mini" and demo.meta.version == "1"
    assert demo.meta.generator == "procedural" and demo.meta.seed == 7
    assert demo.meta.voices == DEFAULT_VOICES
    assert demo.meta.model_extra["audio"]["engine"] == "piper"
    assert demo_build["path"] == demo_build["data_dir"] / "suites" / "mini"


def test_demo_suite_content(demo):
    pairs = demo.pairs()
    assert len(pairs) == 10 and all(set(p) == {"explicit", "implicit"} for p in pairs.values())
    all_labels: set[str] = set()
    n4_after_t = False
    for sc in demo.scenarios:
        assert 8 <= len(sc.turns) <= 16
        assert sc.n_speakers in (3, 4)
        assert sc.answer_keys and sc.gold_answer
        t = sc.t_index
        assert 0 < t < len(sc.turns) - 1
        t_text = sc.turns[t].text.lower()
        if sc.condition == "explicit":
            assert "aria" in t_text
        else:
            assert "aria" not in t_text
        labels = sc.labels
        all_labels |= set(labels)
        n4_after_t |= "N4Q" in labels[t + 1 :]
        for turn in sc.turns:
            assert 0.4 <= turn.duration_s <= 12.0, (sc.scenario_id, turn.idx, turn.duration_s)
            if turn.label == "N1":
                assert "aria" in turn.text.lower()
        # explicit and implicit differ in T and at most the turn just before it
        other = pairs[sc.pair_id]["implicit" if sc.condition == "explicit" else "explicit"]
        diffs = [i for i, (a, b) in enumerate(zip(sc.turns, other.turns)) if a.text != b.text]
        assert t in diffs and set(diffs) <= {t - 1, t}
        # a turn that is the same in both conditions is one shared clip
        for a, b in zip(sc.turns, other.turns):
            assert (a.clip == b.clip) == (a.text == b.text)
    assert all_labels == LABELS
    assert n4_after_t
    # the duty preamble: the paper's duty instruction, verbatim (Aria, spelled out)
    pre = demo.meta.preamble
    assert pre.text == DUTY_TEXT and "Aria, that is A R I A, Aria." in pre.text
    assert 15 <= pre.duration_s <= 30
    assert pre.clip == "clips/preamble.wav"


def test_demo_clips_are_24k_mono_16bit_wav(demo):
    for rel in [demo.meta.preamble.clip] + [t.clip for sc in demo.scenarios for t in sc.turns]:
        info = sf.info(str(demo.clip_path(rel)))
        assert (info.format, info.subtype, info.samplerate, info.channels) == ("WAV", "PCM_16", RATE, 1)
    audio = demo.load_clip(demo.scenarios[0].turns[0].clip)
    assert audio.dtype == np.int16 and audio.ndim == 1
    assert len(audio) / RATE == pytest.approx(demo.scenarios[0].turns[0].duration_s, abs=0.001)


def test_shared_clips_are_synthesised_once(demo_build, demo):
    calls = demo_build["engine"].calls
    unique = {(demo.meta.voices[t.speaker], t.text) for sc in demo.scenarios for t in sc.turns}
    assert len(calls) == len(set(calls)) == len(unique) + 1  # + the preamble
    # fewer distinct clip files than turn slots: both conditions share the unchanged turns
    files = {t.clip for sc in demo.scenarios for t in sc.turns}
    assert len(files) < sum(len(sc.turns) for sc in demo.scenarios)
    assert demo_build["progress"][-1][0] == demo_build["progress"][-1][1] == len(unique) + 1


def test_rebuild_reuses_the_cache_and_the_suite(tmp_path, demo_build, piper_engine):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    link_tree(demo_build["data_dir"] / "tts-cache", data_dir / "tts-cache")

    # Fresh data dir with a warm clip cache: the whole suite comes from the cache.
    engine = CountingEngine(piper_engine)
    path = build_demo_suite(data_dir, engine=engine)
    assert engine.calls == []
    assert validate_suite(Suite.load(path)) == []
    first_hash = Suite.load(path).content_hash()
    stat = (path / "suite.json").stat()

    # Second build: the complete suite is reused as is (no synthesis, no rewrite).
    progress: list[tuple[int, int]] = []
    assert build_demo_suite(data_dir, engine=engine, progress=lambda d, n: progress.append((d, n))) == path
    assert engine.calls == []
    assert (path / "suite.json").stat().st_ino == stat.st_ino
    assert len(progress) == 1 and progress[0][0] == progress[0][1]

    # Incomplete suite (a clip lost): rebuilt from the cache, still no synthesis.
    lost = Suite.load(path).scenarios[3].turns[2].clip
    (path / lost).unlink()
    build_demo_suite(data_dir, engine=engine)
    assert engine.calls == []
    rebuilt = Suite.load(path)
    assert validate_suite(rebuilt) == [] and rebuilt.content_hash() == first_hash

    # Edited manifest (content hash no longer matches the build stamp): rebuilt.
    (path / "scenarios.jsonl").write_text("garbage\n")
    build_demo_suite(data_dir, engine=engine)
    assert Suite.load(path).content_hash() == first_hash
    assert not [p for p in (data_dir / "suites").iterdir() if p.name.startswith(".mini.build-")]


def test_a_build_of_another_duty_text_is_rebuilt(tmp_path, demo_build, piper_engine, monkeypatch):
    """The duty text is part of a built-in suite's definition: a complete build made with
    another one is stale (rebuilt from the clip cache), so a new text reaches every data dir."""
    data_dir = tmp_path / "data"
    (data_dir / "suites").mkdir(parents=True)
    link_tree(demo_build["data_dir"] / "tts-cache", data_dir / "tts-cache")
    link_tree(demo_build["path"], data_dir / "suites" / "mini")
    engine = CountingEngine(piper_engine)
    before = (data_dir / "suites" / "mini" / "suite.json").stat().st_ino
    assert build_demo_suite(data_dir, engine=engine) == data_dir / "suites" / "mini"
    assert (data_dir / "suites" / "mini" / "suite.json").stat().st_ino == before  # complete: reused
    monkeypatch.setattr(builtin_mod, "PREAMBLE_TEXT", "An earlier duty text.")  # as if built before a change
    path = build_demo_suite(data_dir, engine=engine)
    assert (path / "suite.json").stat().st_ino != before and engine.calls == []
    assert Suite.load(path).meta.preamble.text == DUTY_TEXT


def test_reuse_without_engine_and_error_when_nothing_built(tmp_path, demo_build, monkeypatch):
    def unavailable(name="piper", **kw):
        raise TTSUnavailable(f"piper missing; install it with: {INSTALL_HINT}")

    monkeypatch.setattr(suitebuild, "get_engine", unavailable)
    data_dir = tmp_path / "data"
    (data_dir / "suites").mkdir(parents=True)
    link_tree(demo_build["path"], data_dir / "suites" / "mini")
    assert build_demo_suite(data_dir) == data_dir / "suites" / "mini"  # complete: reused

    with pytest.raises(TTSUnavailable, match="duplex-mpe"):
        build_demo_suite(tmp_path / "empty")


def test_corrupt_audio_file_reports_problem(demo, tmp_path):
    root = tmp_path / "copy"
    link_tree(demo.root, root)
    rel = demo.scenarios[0].turns[2].clip
    (root / rel).unlink()
    sf.write(str(root / rel), _tone(1.0)[:16000], 16_000, subtype="PCM_16")
    pre = root / demo.meta.preamble.clip
    pre.unlink()
    pre.write_bytes(b"RIFF broken")
    problems = validate_suite(Suite.load(root))
    assert any("16000 Hz" in p and "turn 2" in p and "[clip-format]" in p for p in problems), problems
    assert any("preamble" in p and "not readable" in p for p in problems), problems
    assert validate_suite(Suite.load(root), check_audio=False) == []


# ------------------------------------------------------------- manifest I/O


def test_tiny_suite_is_valid(tiny):
    assert validate_suite(tiny) == []
    assert tiny.scenario("s1", "implicit").condition == "implicit"
    with pytest.raises(SuiteError):
        tiny.scenario("s1", "other")
    with pytest.raises(SuiteError):
        tiny.scenario("nope", "explicit")


def test_suite_error_is_a_value_error():
    assert issubclass(SuiteError, ValueError)


@pytest.mark.parametrize(
    "rel",
    ["../x.wav", "clips/../../x.wav", "/etc/passwd", "C:\\x.wav", "\\\\host\\share\\x.wav", "", "clips/\x00.wav"],
)
def test_clip_path_traversal_is_rejected(tiny, rel):
    with pytest.raises(SuiteError):
        tiny.clip_path(rel)
    with pytest.raises(SuiteError):
        tiny.load_clip(rel)


def test_symlink_out_of_root_is_rejected(tiny, tmp_path):
    outside = tmp_path / "outside.wav"
    sf.write(str(outside), _tone(0.5), RATE, subtype="PCM_16")
    (tiny.root / "clips" / "evil.wav").symlink_to(outside)
    (tiny.root / "clips" / "evil_dir").symlink_to(tmp_path)
    with pytest.raises(SuiteError, match="outside"):
        tiny.clip_path("clips/evil.wav")
    with pytest.raises(SuiteError, match="outside"):
        tiny.load_clip("clips/evil_dir/outside.wav")
    # a link that stays inside the suite is fine
    (tiny.root / "clips" / "alias.wav").symlink_to(tiny.root / "clips" / "preamble.wav")
    assert tiny.load_clip("clips/alias.wav").shape == tiny.load_clip("clips/preamble.wav").shape


def test_load_clip_checks_format(tiny):
    audio = tiny.load_clip("clips/p1/explicit/000.wav")
    assert audio.dtype == np.int16 and audio.ndim == 1 and len(audio) == RATE // 2
    sf.write(str(tiny.root / "clips" / "rate.wav"), _tone(0.5), 16_000, subtype="PCM_16")
    sf.write(str(tiny.root / "clips" / "stereo.wav"), np.stack([_tone(0.5)] * 2, axis=1), RATE, subtype="PCM_16")
    sf.write(str(tiny.root / "clips" / "ok.flac"), _tone(0.5), RATE, format="FLAC", subtype="PCM_16")
    with pytest.raises(SuiteError, match="24000 Hz"):
        tiny.load_clip("clips/rate.wav")
    with pytest.raises(SuiteError, match="mono"):
        tiny.load_clip("clips/stereo.wav")
    with pytest.raises(SuiteError, match="not found"):
        tiny.load_clip("clips/missing.wav")
    assert len(tiny.load_clip("clips/ok.flac")) == RATE // 2


def test_bad_json_names_file_and_line(tiny):
    path = tiny.root / "scenarios.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:40]  # truncate the second scenario
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError, match=r"scenarios\.jsonl:2:\d+: invalid JSON"):
        Suite.load(tiny.root)


def test_schema_error_names_file_line_and_field(tiny):
    path = tiny.root / "scenarios.jsonl"
    lines = path.read_text().splitlines()
    obj = json.loads(lines[1])
    del obj["gold_answer"]
    obj["condition"] = "sideways"
    lines[1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError, match=r"scenarios\.jsonl:2: schema error") as exc:
        Suite.load(tiny.root)
    assert "gold_answer" in str(exc.value) and "condition" in str(exc.value)


def test_bad_suite_json_names_line(tiny):
    (tiny.root / "suite.json").write_text('{\n  "name": "tiny",\n  "version": \n}\n')
    with pytest.raises(SuiteError, match=r"suite\.json:4:1: invalid JSON"):
        Suite.load(tiny.root)
    (tiny.root / "suite.json").write_text('{"name": "tiny"}')
    with pytest.raises(SuiteError, match=r"suite\.json: schema error.*voices"):
        Suite.load(tiny.root)


def test_missing_suite_dir(tmp_path):
    with pytest.raises(SuiteError, match="not found"):
        Suite.load(tmp_path / "nowhere")


def test_load_accepts_suite_json_path(tiny):
    assert Suite.load(tiny.root / "suite.json").root == tiny.root


def test_write_suite_is_byte_deterministic(tiny, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_suite(a, tiny.meta, tiny.scenarios)
    write_suite(b, tiny.meta, tiny.scenarios)
    for name in ("suite.json", "scenarios.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes() == (tiny.root / name).read_bytes()
    # load -> write round trip gives the same bytes; one line per scenario with sorted keys
    reloaded = Suite.load(a)
    write_suite(b, reloaded.meta, reloaded.scenarios)
    assert (b / "scenarios.jsonl").read_bytes() == (a / "scenarios.jsonl").read_bytes()
    lines = (a / "scenarios.jsonl").read_text().splitlines()
    assert len(lines) == 2
    keys = list(json.loads(lines[0]))
    assert keys == sorted(keys)
    assert (a / "suite.json").read_text().startswith('{\n  "benchmark": "duplex-mpe",\n  "name": "tiny"')  # suites name their benchmark
    assert not [p for p in a.iterdir() if p.name.endswith(".tmp")]


def test_content_hash_identifies_the_version(tiny, tmp_path):
    h = tiny.content_hash()
    assert h == content_hash_of((tiny.root / "suite.json").read_bytes(), (tiny.root / "scenarios.jsonl").read_bytes())
    assert len(h) == 64 and Suite.load(tiny.root).content_hash() == h
    sc = [s.model_copy(deep=True) for s in tiny.scenarios]
    sc[0].gold_answer = "Midday."
    write_suite(tmp_path / "v2", tiny.meta, sc)
    assert Suite.load(tmp_path / "v2").content_hash() != h


def test_extra_fields_are_preserved(tiny, tmp_path):
    meta = tiny.meta.model_copy(deep=True)
    scs = [s.model_copy(deep=True) for s in tiny.scenarios]
    meta_obj = meta.model_dump() | {"license": "CC0"}
    meta = SuiteMeta.model_validate(meta_obj)
    scs[0] = Scenario.model_validate(scs[0].model_dump() | {"difficulty": "hard"})
    t0 = scs[0].model_dump()
    t0["turns"][0]["emotion"] = "tired"
    scs[0] = Scenario.model_validate(t0)
    write_suite(tmp_path / "x", meta, scs)
    back = Suite.load(tmp_path / "x")
    assert back.meta.model_extra == {"license": "CC0"}
    assert back.scenarios[0].model_extra == {"difficulty": "hard"}
    assert back.scenarios[0].turns[0].model_extra == {"emotion": "tired"}
    write_suite(tmp_path / "y", back.meta, back.scenarios)
    for name in ("suite.json", "scenarios.jsonl"):
        assert (tmp_path / "x" / name).read_bytes() == (tmp_path / "y" / name).read_bytes()


def test_validate_lists_voice_and_answer_key_problems(tiny):
    meta = tiny.meta.model_copy(deep=True)
    meta.voices = {k: v for k, v in meta.voices.items() if k != "C"}
    scs = [s.model_copy(deep=True) for s in tiny.scenarios]
    scs[0].answer_keys = [["noon"], []]
    problems = validate_suite(Suite(tiny.root, meta, scs))
    assert any("speaker C has no voice" in p for p in problems), problems
    assert any("answer_keys[1]" in p for p in problems), problems
