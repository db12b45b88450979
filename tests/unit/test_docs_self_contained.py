"""The repository's docs stand on their own: README and docs/ cite the project's own methods
document (docs/methods.md), never a document outside the repository, say nothing of how the
project was built, and the README's code map and the CLI's docstring list every subcommand."""

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
