"""The README's map holds for the code as it is: every path it names exists, and each row of
"Where a change goes" names registries and functions that its files define (a rename or a move
that leaves the README behind fails here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _change_rows() -> dict[str, str]:
    section = README.split("**Where a change goes.**", 1)[1].split("\n## ", 1)[0]
    return {ln.split("|")[1].strip(): ln for ln in section.splitlines()
            if ln.startswith("| ") and not ln.startswith("| to add") and "---" not in ln}


ROWS = _change_rows()


def test_the_newcomers_path_has_its_four_changes():
    assert {"a table or figure", "a null model", "an architecture", "a config key"} <= set(ROWS)


def _files(row: str) -> list[Path]:
    """The files a row names (`headgeom/...py`, `outputs/pk/` under headgeom/, the schema)."""
    out = []
    for tok in re.findall(r"`([\w./]+/[\w./]*)`", row):
        p = ROOT / tok if (ROOT / tok).exists() else ROOT / "headgeom" / tok
        assert p.exists(), f"README names {tok}, which does not exist"
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


@pytest.mark.parametrize("what", sorted(ROWS))
def test_each_row_names_what_its_files_define(what):
    row = ROWS[what]
    files = _files(row)
    assert files, row
    text = "\n".join(f.read_text() for f in files)
    # registries (`UPPER_CASE`), decorators (`@name`), classes (`Name(...)`), functions (`snake_case`)
    names = set(re.findall(r"`([A-Z][A-Z_]+)`", row)) | set(re.findall(r"`@(\w+)", row))
    names |= set(re.findall(r"`([A-Z]\w*)\(", row)) | set(re.findall(r"`([a-z]+_[a-z_]+)`", row))
    assert names, row
    for name in sorted(names):
        assert re.search(rf"^(?:{name}\b.*=|def {name}\b|class {name}\b|\w+, {name} = |{name}, \w+ = )", text, re.M) or \
            re.search(rf"\bdef {name}\(", text) or re.search(rf"^[ ]*{name}:", text, re.M), \
            f"README row {what!r}: {name} is not defined in {[str(f.relative_to(ROOT)) for f in files]}"


def test_every_path_in_the_map_exists():
    block = README.split("## Map of the repository", 1)[1].split("```", 2)[1]
    prefix = ""
    for line in block.splitlines():
        m = re.match(r"^(\s*)([\w.]+/?)", line)
        if not m:
            continue
        indent, name = m.groups()
        if len(indent) not in (0, 2):  # a description's continuation line
            continue
        if not indent:
            prefix = name if name.endswith("/") else ""
            path = ROOT / name.rstrip(",")
        else:
            path = ROOT / prefix / name
        assert path.exists(), f"README map names {path.relative_to(ROOT)}, which does not exist"
