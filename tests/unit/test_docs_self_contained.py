"""The repository's docs stand on their own: README and docs/ cite the project's own methods
document (docs/methods.md), never a document outside the repository, say nothing of how the
project was built, and the README's code map and the CLI's docstring list every subcommand.
They are references, not run logs: no commit ids and no dated or before/after accounts of runs
(what holds now and the command that measures it; history lives in git)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from headgeom import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTSIDE = re.compile(r"\bMETHODS\b|(?i:\.\./shared|\bissues? \d+|\bsessions?\b)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_outside_document_or_history(doc):
    hits = [f"{doc.name}:{i}: {line.strip()[:100]}" for i, line in enumerate(doc.read_text().splitlines(), 1)
            if OUTSIDE.search(line)]
    assert not hits, "\n".join(hits)


# A git commit id: 7-40 hex digits with at least one digit and one letter (so "1,093" or "deadbeef"
# in prose is not one); a digest shortened with an ellipsis ("d73c37c5…f72a") is a file's sha256.
COMMIT = re.compile(r"(?<![\w…])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w…])")
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
# Run logs: a date or a clock time of a run, or words that place a number in the project's history.
RUN_LOG = re.compile(
    r"\b20\d\d-[01]\d-[0-3]\d\b"  # an ISO date
    rf"|\b(?:{MONTHS}|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?)\s+\d{{1,2}}\b"  # December 5
    rf"|\b\d{{1,2}}\s+(?:{MONTHS})\b"  # 5 December
    r"|\b[0-2]?\d:[0-5]\d(?:\s*[–-]\s*[0-2]?\d:[0-5]\d)?\s*UTC\b"  # 12:11–12:20 UTC
    r"|(?i:\b(?:earlier|later) (?:that|the same) day\b|\bon other days\b|\bin earlier runs\b"
    r"|\b(?:at|since|before) commit\b|\bthe previous code\b|\bbefore (?:this|the) (?:change|fix)\b"
    r"|\bsuperseded\b|\bwhen this was written\b)")


def _prose(doc: Path):
    """(line number, line) outside fenced code blocks: a block shows a command's output, whose
    code versions and dates are what the command prints."""
    fenced = False
    for i, line in enumerate(doc.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield i, line


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_commit_ids_or_dated_run_logs(doc):
    hits = [f"{doc.name}:{i}: {m.group(0)!r} in {line.strip()[:100]}" for i, line in _prose(doc)
            for m in (COMMIT.search(line), RUN_LOG.search(line)) if m]
    assert not hits, "a reference states what holds now and how to measure it:\n" + "\n".join(hits)


@pytest.mark.parametrize("line", ["the run at a6760d7 took 8 min", "tests as of commit 0c3e4ca",
                                  "Latest, 2026-12-01 on 2 cores", "1,381 s on the same machine earlier that day",
                                  "make bench, 12:11–12:20 UTC", "measured on December 5", "the previous code (x) took"])
def test_the_run_log_patterns_catch_history(line):
    assert COMMIT.search(line) or RUN_LOG.search(line)


@pytest.mark.parametrize("line", ["1,093 s", "sha256 `d73c37c5…f72a`", "float64 and bf16", "Qwen2.5-7B: 3584 x 128",
                                  "cafebabe", "layer 12:30 heads", "the 1911 Britannica article", "e2e.json"])
def test_the_run_log_patterns_leave_reference_text(line):
    assert not COMMIT.search(line) and not RUN_LOG.search(line)


def test_readme_links_the_methods_document():
    assert "(docs/methods.md)" in (ROOT / "README.md").read_text()


def _subcommands() -> set[str]:
    import argparse

    seen = {}

    class Stop(Exception):
        pass

    real = argparse.ArgumentParser.parse_args

    def grab(self, *a, **k):
        for act in self._actions:
            if isinstance(act, argparse._SubParsersAction):
                seen.update(act.choices)
        raise Stop

    argparse.ArgumentParser.parse_args = grab
    try:
        cli.main(["--help"])
    except Stop:
        pass
    finally:
        argparse.ArgumentParser.parse_args = real
    return set(seen)


def test_every_subcommand_is_in_the_code_map_and_the_cli_docstring():
    cmds = _subcommands()
    assert {"audit", "check", "summary", "docs", "plan", "claims", "costs"} <= cmds
    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.strip().startswith("cli.py"))
    listed = set(re.findall(r"[a-z]+", line.split("headgeom", 1)[1]))
    assert cmds <= listed, f"README code map lacks {sorted(cmds - listed)}"
    doc = {m for m in re.findall(r"^\s+headgeom (\w+)", cli.__doc__, re.M)}
    assert cmds <= doc, f"headgeom/cli.py docstring lacks {sorted(cmds - doc)}"
