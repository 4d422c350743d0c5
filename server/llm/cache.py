"""The on-disk reply cache: one JSON file per (provider, model, whole request), by its sha256."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from server.files import atomic_write_bytes
from server.llm.types import LLMReply, LLMRequest


class ReplyCache:
    def __init__(self, root: Path | str):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> LLMReply | None:
        try:
            blob = json.loads(self._path(key).read_text("utf-8"))
            return LLMReply.model_validate(blob["reply"]).model_copy(update={"cached": True})
        except (OSError, ValueError, KeyError, TypeError, ValidationError):
            return None

    def put(self, key: str, request: LLMRequest, reply: LLMReply) -> None:
        blob = {"request": request.model_dump(mode="json"), "reply": reply.model_dump(mode="json")}
        atomic_write_bytes(self._path(key), json.dumps(blob, ensure_ascii=False, indent=1).encode("utf-8"))
