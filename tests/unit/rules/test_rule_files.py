"""No rule file reads a name another rule file (or the Snakefile) defines.

Snakemake executes the Snakefile and every file it includes in one global namespace, so a rule
file can silently use a helper another file defined, as long as that file was included first (and
a name two files define is the later one's). Here every file is translated to Python as Snakemake
translates it (snakemake.parser.parse) and its scopes are read with ``symtable``: each name a file
reads from its global namespace must be bound in that file itself (an import, an assignment, a
def), a Python builtin, or one of the names Snakemake itself puts there (``workflow``, ``config``,
``checkpoints``, ``lookup``, ``report``, ...; read from Snakemake's own source below). A name
bound in two files fails too, unless both bind it by importing the same object."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import symtable
from pathlib import Path

import pytest
import snakemake.ioflags
import snakemake.ioutils
from snakemake.parser import parse

ROOT = Path(__file__).resolve().parents[3]


def rule_files(root: Path = ROOT) -> list[Path]:
    return [root / "Snakefile", *sorted((root / "workflow" / "rules").glob("*.smk"))]


class _Source:
    """What snakemake.parser reads a file through (a sourcecache.SourceFile's one method it calls)."""

    def __init__(self, path: Path):
        self.path = path

    def get_path_or_uri(self, secret_free: bool = False) -> str:
        return str(self.path)


class _Workflow:
    class sourcecache:
        @staticmethod
        def open(source):
            return open(source.path, encoding="utf-8")


def compiled(path: Path) -> str:
    """The Python Snakemake runs for a rule file."""
    return parse(_Source(path), _Workflow(), {})[0]


def snakemake_globals() -> set[str]:
    """The names Snakemake puts in a Snakefile's namespace for it: the ``snakemake.io`` helpers the
    workflow module imports for rule files, every ``_globals[...]`` it sets, the functions the
    translated directives call, the ioutils/ioflags helpers it registers, and ``config`` / ``rules``."""
    tree = ast.parse(Path(importlib.util.find_spec("snakemake.workflow").origin).read_text())
    names = {"config", "rules"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "snakemake.io":
            names |= {a.asname or a.name for a in node.names}
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "_globals"
              and isinstance(node.slice, ast.Constant)):
            names.add(node.slice.value)
    # the functions the parser's translation of run directives calls (script:, shell:, notebook:, ...)
    parser = ast.parse(Path(importlib.util.find_spec("snakemake.parser").origin).read_text())
    names |= {node.value.value for node in ast.walk(parser) if isinstance(node, ast.Assign)
              and [getattr(t, "id", None) for t in node.targets] == ["end_func"]
              and isinstance(node.value, ast.Constant)}
    registered: dict = {}
    snakemake.ioutils.register_in_globals(registered)
    snakemake.ioflags.register_in_globals(registered)
    return names | set(registered)


ALLOWED = set(dir(builtins)) | snakemake_globals()


def _generated(name: str) -> bool:
    return name.startswith("__")  # the parser's own functions (__rule_fetch, ...) and dunders


def bindings(code: str, path: str) -> tuple[dict[str, str], set[str]]:
    """(names the file binds in its global namespace -> how: ``import a.b`` or ``def``; names it
    reads from there). Reads in nested scopes (rule bodies, input functions, lambdas) count."""
    top = symtable.symtable(code, path, "exec")
    imports: dict[str, str] = {}
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.col_offset == 0:
            imports.update({a.asname or a.name: f"import {node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import) and node.col_offset == 0:
            imports.update({(a.asname or a.name).split(".")[0]: f"import {a.name}" for a in node.names})
    bound: dict[str, str] = {}
    for s in top.get_symbols():
        if s.is_imported() or s.is_assigned() or s.is_namespace():
            bound[s.get_name()] = imports.get(s.get_name(), "def") if s.is_imported() else "def"
    read = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    stack = list(top.get_children())
    while stack:
        t = stack.pop()
        stack += t.get_children()
        for s in t.get_symbols():
            if s.is_declared_global() and s.is_assigned():
                bound[s.get_name()] = "def"
            if s.is_global() and s.is_referenced():
                read.add(s.get_name())
    return ({k: v for k, v in bound.items() if not _generated(k)}, {n for n in read if not _generated(n)})


def cross_file_names(files: list[Path], root: Path = ROOT) -> list[str]:
    """One line per name a file reads without binding it (naming the file that does, if any) and
    per name two files bind (other than by importing the same object)."""
    seen = {}
    for f in files:
        rel = f.relative_to(root).as_posix()
        seen[rel] = bindings(compiled(f), rel)
    out = []
    for rel, (bound, read) in seen.items():
        for name in sorted(read - set(bound) - ALLOWED):
            owners = [o for o, (b, _) in seen.items() if name in b]
            where = f"defined in {', '.join(owners)}" if owners else "defined in no rule file"
            out.append(f"{rel} reads {name!r}, which it does not define ({where}); import it by name")
    owners: dict[str, list[tuple[str, str]]] = {}
    for rel, (bound, _) in seen.items():
        for name, how in bound.items():
            owners.setdefault(name, []).append((rel, how))
    for name, where in sorted(owners.items()):
        if len(where) > 1 and not (len({how for _, how in where}) == 1 and where[0][1] != "def"):
            out.append(f"{name!r} is defined in {len(where)} files ({', '.join(r for r, _ in where)}); "
                       "the later include would win")
    return out


def test_no_rule_file_reads_a_name_another_defines():
    bad = cross_file_names(rule_files())
    assert bad == [], "\n".join(bad)


def test_no_rule_file_reads_the_command_line():
    """The command line's modes are read once, in headgeom.rules.start (or come from Snakemake)."""
    bad = [f.name for f in rule_files() if "argv" in compiled(f)]
    assert bad == []


def test_the_rule_files_are_one_per_stage():
    names = {p.name for p in rule_files()}
    assert not [n for n in names if n.endswith("_common.smk")]
    assert {"fetch.smk", "jobs.smk", "outputs.smk", "activation.smk", "claims.smk", "sensitivity.smk",
            "summary.smk"} <= names


def test_snakemakes_own_names_are_known():
    """The allowed names come from Snakemake's source: the ones rule files use are among them."""
    assert {"workflow", "config", "checkpoints", "rules", "lookup", "report", "directory", "unpack",
            "expand", "temp", "script", "shell"} <= ALLOWED
    assert not {"re", "Path", "json", "sys", "os"} & ALLOWED  # imported by workflow.py, not for rule files


def _copy(tmp_path: Path) -> list[Path]:
    out = []
    for f in rule_files():
        dst = tmp_path / f.relative_to(ROOT)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(f.read_text())
        out.append(dst)
    return out


@pytest.mark.parametrize("edit, expected", [
    # a helper one file defines, used by another (the shape of the old common.smk)
    (("workflow/rules/claims.smk", "\nLEDGER_AGAIN = CHOICE_ALTS\n"),
     "workflow/rules/claims.smk reads 'CHOICE_ALTS', which it does not define (defined in "
     "workflow/rules/sensitivity.smk)"),
    # read inside a function (an input function), not at the top level
    (("workflow/rules/summary.smk", "\ndef f(wc):\n    return CLAIMS_LEDGER\n"),
     "workflow/rules/summary.smk reads 'CLAIMS_LEDGER', which it does not define (defined in "
     "workflow/rules/claims.smk)"),
    # a module another file imported (re from nowhere: Snakemake's namespace has it, by accident)
    (("workflow/rules/fetch.smk", "\nX_PATTERN = re.escape('a')\n"),
     "workflow/rules/fetch.smk reads 're', which it does not define (defined in no rule file)"),
    # the same name defined twice: the later include wins
    (("workflow/rules/summary.smk", "\nCHOICE_ALTS = {}\n"), "'CHOICE_ALTS' is defined in 2 files"),
    # the same name imported from two places
    (("workflow/rules/summary.smk", "\nfrom headgeom.rules.claims import claims_ledger as layout\n"),
     "'layout' is defined in"),
])
def test_the_check_sees_a_cross_file_name_put_back(tmp_path, edit, expected):
    files = _copy(tmp_path)
    assert cross_file_names(files, tmp_path) == []
    target = tmp_path / edit[0]
    target.write_text(target.read_text() + edit[1])
    bad = cross_file_names(files, tmp_path)
    assert any(expected in line for line in bad), bad


def test_importing_the_same_object_in_two_files_is_fine(tmp_path):
    files = _copy(tmp_path)
    target = tmp_path / "workflow/rules/summary.smk"
    target.write_text(target.read_text() + "\nfrom headgeom.rules.fetch import cache_on\n")
    assert cross_file_names(files, tmp_path) == []
