"""What the providers share: Retry-After reading and the JSON of a reply."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Mapping


def retry_after_s(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds a 429/5xx asks to wait: ``retry-after-ms`` (Anthropic, OpenAI), else ``retry-after``
    in seconds or as an HTTP date (RFC 9110 §10.2.3); None when absent or unreadable."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def parse_json_object(text: str) -> tuple[dict[str, object] | None, str | None]:
    """(the reply as a JSON object, None) or (None, why not). The whole reply must be one object
    (a surrounding Markdown code fence is allowed); nothing is guessed out of prose."""
    t = text.strip()
    if t.startswith("```"):
        t = t.split("\n", 1)[1] if "\n" in t else ""
        t = t.rsplit("```", 1)[0].strip()
    try:
        obj = json.loads(t)
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(obj, dict):
        return None, "JSON, but not an object"
    return obj, None


def short(s: str, n: int = 300) -> str:
    """An error message on one line, at most ``n`` characters."""
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"
