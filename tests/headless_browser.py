"""Open a Snakemake report in headless Chromium and read what its viewer shows.

The report is one HTML file whose content is drawn by JavaScript from embedded data, and an HTML
result is shown in a frame only after the reader picks it. So a copy of the report gets one
script (report_probe.js) that clicks as a reader does and copies each shown frame's content into
the page; `chromium --headless --dump-dom` then prints the rendered page. The frames hold data:
URLs, which the page may read only with --disable-web-security (a throwaway profile, a local
file, no network). No DevTools protocol is needed.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("report_probe.js")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-web-security",
    # Virtual time runs the report's rendering and the probe's timers without waiting for them.
    "--virtual-time-budget=15000",
)


def chromium_or_skip() -> str:
    """The chromium binary; without it the test is skipped, except in CI (CI=true), where
    that is a failure."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium is not installed (apt-get install --no-install-recommends chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI must run the headless-browser test")
        pytest.skip(message)
    return found


class _Sections(HTMLParser):
    """From the dumped page: per <section data-table=...> in the probe, its table cells row by
    row; and the probe's error lines."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, list[list[str]]] = {}
        self.errors: list[str] = []
        self.done = False
        self._section: str | None = None
        self._cell: list[str] | None = None
        self._error: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "div" and values.get("id") == "probe":
            self.done = values.get("data-done") == "yes"
        elif tag == "section" and "data-table" in values:
            self._section = values["data-table"] or ""
            self.sections[self._section] = []
        elif tag == "p" and values.get("class") == "probe-error":
            self._error = []
        elif self._section is not None and tag == "tr":
            self.sections[self._section].append([])
        elif self._section is not None and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._section is not None:
            self.sections[self._section][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "section":
            self._section = None
        elif tag == "p" and self._error is not None:
            self.errors.append("".join(self._error))
            self._error = None

    def handle_data(self, data: str) -> None:
        for collecting in (self._cell, self._error):
            if collecting is not None:
                collecting.append(data)


def shown_tables(chromium: str, report: Path, rows: list[str]) -> dict[str, list[list[str]]]:
    """For each entry of `rows` (text that picks a table's row in the report's "Tables" list),
    the cells of every table its HTML page shows once a reader opens it in the report."""
    page = report.read_text(encoding="utf-8")
    rows_attribute = html.escape(json.dumps(rows), quote=True)
    script = f'<script data-tables="{rows_attribute}">{PROBE.read_text()}</script>'
    end = page.rindex("</body>")
    with tempfile.TemporaryDirectory() as scratch:
        probed = Path(scratch) / "report.html"
        probed.write_text(page[:end] + script + page[end:], encoding="utf-8")
        profile = Path(scratch) / "profile"
        done = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
             probed.as_uri()],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    parser = _Sections()
    parser.feed(done.stdout)
    assert parser.done and not parser.errors, parser.errors or "the probe did not finish"
    return parser.sections
