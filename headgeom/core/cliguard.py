"""A target written after ``--configfile`` is named in one line, before Snakemake reads it.

``snakemake -c2 --configfile my.yaml results/tables/p1_table2_strong_tail.csv``: ``--configfile`` takes
every word up to the next option, so Snakemake reads the CSV as a second config file and stops
with "Config file must be given as JSON or YAML with keys at top level" (not naming the file), a
UnicodeDecodeError (a PNG or Parquet file) or a FileNotFoundError traceback (a target not built
yet) — all before the Snakefile runs. ``make .venv/.installed`` writes a one-line ``.pth`` file
into the venv that calls ``check_argv`` when the ``snakemake`` command starts; it reads only the
``--configfile`` words of the command line, and exits with one line when one of them is not a
config file. Anything it cannot judge is left to Snakemake.
"""

from __future__ import annotations

import os
import sys

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
#: what the pipeline writes (tables, figures, shards, the report): never a config file
RESULT_SUFFIXES = (".csv", ".md", ".tex", ".png", ".pdf", ".svg", ".html", ".parquet", ".safetensors", ".log",
                   ".txt", ".zip")
FLAGS = ("--configfile", "--configfiles")
HINT = "a target after --configfile is read as one; put targets before --configfile"


def configfile_words(argv: list[str]) -> list[str]:
    """The words argparse gives --configfile(s): every word after it up to the next option."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if any(a.startswith(f + "=") for f in FLAGS):
            out.append(a.split("=", 1)[1])
        elif a in FLAGS:
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                out.append(argv[i])
                i += 1
            continue
        i += 1
    return out


def _results_like(path: str) -> bool:
    """A name the pipeline writes: a results suffix, or a .json under results/ or logs/."""
    parts = path.replace(os.sep, "/").split("/")
    name = parts[-1].lower()
    if name.endswith(RESULT_SUFFIXES) or name.endswith(".prov.json"):
        return True
    return name.endswith(".json") and any(p in ("results", "logs") for p in parts[:-1])


def not_a_config_file(path: str) -> str | None:
    """One line when ``path`` (a --configfile word) is not a config file, else None."""
    exists = os.path.isfile(path)
    if _results_like(path):
        return f"{path} is not a config file: {HINT}"
    if not exists:
        if os.path.isdir(path):
            return f"{path} is a directory, not a config file: {HINT}"
        if not path.lower().endswith(CONFIG_SUFFIXES):
            return f"{path} is not a config file (no such file): {HINT}"
        return None  # a missing .yaml: Snakemake names it
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except UnicodeDecodeError:
        return f"{path} is not a config file (not UTF-8 text): {HINT}"
    except yaml.YAMLError as e:
        if path.lower().endswith(CONFIG_SUFFIXES):
            mark = getattr(e, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            return f"config file {path} is not valid YAML{where}: {getattr(e, 'problem', None) or e}"
        return f"{path} is not a config file (not YAML): {HINT}"
    except OSError:
        return None
    if doc is None or isinstance(doc, dict):
        return None
    if path.lower().endswith(CONFIG_SUFFIXES):
        return f"config file {path} holds a YAML {type(doc).__name__}, not a mapping of config keys"
    return f"{path} is not a config file (YAML {type(doc).__name__}, not a mapping of keys): {HINT}"


def check_argv(argv: list[str] | None = None) -> None:
    """Exit 1 with one line per --configfile word that is not a config file (the snakemake
    command; never raises otherwise). It runs while the interpreter imports ``site``, where a
    SystemExit is a fatal error, so it ends the process with ``os._exit``."""
    try:
        argv = list(sys.argv if argv is None else argv)
        lines = [ln for ln in map(not_a_config_file, configfile_words(argv[1:])) if ln]
    except Exception:  # never stand in Snakemake's way over a problem of this check itself
        return
    if lines:
        for ln in lines:
            print(f"headgeom: {ln}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)


#: the .pth line (`make .venv/.installed`): runs at interpreter start, costs one string test
PTH_LINE = ("import sys; sys.argv[:1] and sys.argv[0].endswith('snakemake') and "
            "__import__('headgeom.core.cliguard', fromlist=['check_argv']).check_argv()\n")


def install() -> str:
    """Write the .pth file into this interpreter's site-packages (`make .venv/.installed`)."""
    import sysconfig
    from pathlib import Path

    path = Path(sysconfig.get_paths()["purelib"]) / "headgeom-cliguard.pth"
    path.write_text(PTH_LINE)
    return str(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["--install"]:
        print(f"wrote {install()}")
