"""The pages in real headless Chromium (Debian's ``chromium``, driven by Playwright): the marker that
skips a test without it, and a page opened in it, signed in with a token (:func:`signed_in`)."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

# Skipped without chromium, except where MPE_REQUIRE_BROWSER is set (CI): then a missing one fails.
needs_browser = pytest.mark.skipif(not Path(CHROMIUM).exists() and not os.environ.get("MPE_REQUIRE_BROWSER"),
                                   reason="needs Debian's chromium (make system)")


class Tab(NamedTuple):
    """A page in Chromium and the errors its scripts have thrown so far (``pageerror``)."""

    page: Page
    errors: list[str]


@asynccontextmanager
async def signed_in(http: str, token: str | None) -> AsyncIterator[Tab]:
    """A 1440×900 page in headless Chromium, signed in at ``http``'s sign-in page with ``token``
    (landed on the runs page); not signed in when ``token`` is None. The browser closes on leaving."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1440, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            if token is not None:
                await page.goto(f"{http}/ui/signin.html")
                await page.fill("#token", token)
                await page.keyboard.press("Enter")
                await page.wait_for_url(re.compile(r"/ui/index\.html"))
            yield Tab(page, errors)
        finally:
            await browser.close()
