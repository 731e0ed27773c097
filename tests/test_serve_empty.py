"""`serve` with no transcripts: one WARNING at start naming where it looked; the page says so."""

from __future__ import annotations

from pathlib import Path

from bench.screenshot import dump_dom
from tests.support.process import Serve
from tests.support.wait import poll


def test_serve_without_transcripts_warns_once_and_the_page_says_so(tmp_path: Path) -> None:
    """An empty data dir: one no_transcripts WARNING naming it, none per rescan, a page note."""
    data, state = tmp_path / "claude", tmp_path / "state"
    (data / "projects").mkdir(parents=True)
    serve = Serve(data, state, "--poll", "--rescan-seconds", "0.2")
    try:
        poll(lambda: serve.health()[1].get("passes", 0) >= 4, 30, "four rescans")
        warned = [e for e in serve.events() if e.get("event") == "no_transcripts"]
        assert len(warned) == 1, serve.log()
        assert warned[0]["level"] == "warning"
        assert str(data) in " ".join(map(str, warned[0]["dirs"]))
        html, messages = dump_dom(serve.url + "/")
        assert messages == []
        assert 'data-note="no-transcripts"' in html and "No Claude Code transcripts" in html
        assert str(data) in html
    finally:
        assert serve.stop() == 0
