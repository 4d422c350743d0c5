"""The episode bundle's ``episode.json`` as one versioned model (DESIGN §7): what export writes is what
scoring reads, old bundles without a version read as version 1, and a bad document is refused with a
message that names the file and the field."""

from __future__ import annotations

import json

import pytest

from server.engine.bundles import BUNDLE_VERSION, EPISODE_FILE, EpisodeBundle
from server.scoring.errors import BadBundle
from server.scoring.loading import read_bundle

DOC = {"episode_id": "ep1", "attempt_id": "at1", "benchmark": "duplex-mpe",
       "events": [{"t": 0, "t_s": 0.0, "type": "episode.end", "data": {}}],
       "turns": [{"idx": 0, "label": "T"}], "gold_answer": "nine", "stats": {"detector": "x"}}


def _write(tmp_path, doc) -> None:
    (tmp_path / EPISODE_FILE).write_text(json.dumps(doc), encoding="utf-8")


def test_what_export_writes_scoring_reads_back(tmp_path):
    bundle = EpisodeBundle.model_validate({"bundle_version": BUNDLE_VERSION, **DOC})
    bundle.write(tmp_path)
    back = read_bundle(tmp_path)
    assert back == bundle and back.document() == {"bundle_version": BUNDLE_VERSION, **DOC}
    assert back.gold_answer == "nine"  # a benchmark's own fields are kept as written


def test_a_bundle_without_a_version_is_version_1(tmp_path):
    _write(tmp_path, {**DOC, "episode_id": 7})
    bundle = read_bundle(tmp_path)
    assert bundle.bundle_version == 1 and bundle.episode_id == "7"


@pytest.mark.parametrize("change, message", [
    ({"bundle_version": BUNDLE_VERSION + 1}, "bundle_version: Input should be less than or equal to"),
    ({"events": {"t": 0}}, "events: Input should be a valid list"),
    ({"events": [3]}, "events.0: Input should be a valid dictionary"),
    ({"turns": None}, "turns: Input should be a valid list"),
    ({"attempt_id": ["a"]}, "attempt_id: Input should be a valid string"),
])
def test_a_bad_document_is_refused_naming_the_field(tmp_path, change, message):
    _write(tmp_path, {**DOC, **change})
    with pytest.raises(BadBundle, match=f"{EPISODE_FILE}: not an episode bundle: {message}"):
        read_bundle(tmp_path)


def test_a_missing_field_and_a_missing_file(tmp_path):
    _write(tmp_path, {k: v for k, v in DOC.items() if k != "episode_id"})
    with pytest.raises(BadBundle, match="episode_id: Field required"):
        read_bundle(tmp_path)
    with pytest.raises(BadBundle, match=f"{EPISODE_FILE} missing"):
        read_bundle(tmp_path / "nowhere")
