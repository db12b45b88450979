"""The output registry: every table and figure the pipeline makes, declared where it is built.

A builder declares itself with a decorator beside its function (``headgeom.outputs.paper1``,
``headgeom.outputs.pk``: one module per topic)::

    table, figure = decorators("PK paper")

    @table("pk_table5_writing", families=("pk_within",), params={"small_angle_deg": "tables/small_angle_deg"})
    def pk_table5_writing(*, pk_within, fields, models, small_angle_deg=10.0) -> Table:
        \"\"\"**PK paper, Table 5.** Writing spaces within one layer: ...\"\"\"

The entry says what the output is (name, kind, paper), which shard families it reads (see
headgeom.schedule.families), which config keys it takes as params (param name -> config dpath) and its
caption: the builder's docstring (reST; Jinja with ``snakemake.params``). The builder takes named
keyword parameters, each given when its signature names it:

  <family>  the concatenated columns of that family's shards (``pk``, ``paper1_heads``, ...)
  data      every family at once ({family: columns}; ``data["_provs"][family]``: provenance records)
  provs     {family: the provenance records of its shards}
  fields    {model: the architecture fields of its manifest}
  models    the models the builder gets
  <param>   the output's config value of that name (absent from the config: the builder's default)

A table builder returns a ``Table`` (headgeom.outputs.formats); a figure builder a matplotlib
figure, or ``(figure, extra provenance)``. From the registry come: the ``table_*`` / ``figure_*``
rules (workflow/rules/outputs.smk, all local), the one script that builds any of them
(workflow/scripts/output.py -> headgeom.outputs.build.build_output), the ``snakemake --report``
captions and docs/outputs.md (``headgeom docs``) and ``headgeom audit``.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from headgeom import layout

KINDS = ("table", "figure")
PAPERS = ("Paper 1", "PK paper")
HEADS = "paper1_heads"  # the shards whose columns the ``choices:`` switches select (headgeom.outputs.choices)
#: keyword parameters a builder may name besides its families and params
GIVEN = ("data", "provs", "fields", "models")


@dataclass(frozen=True)
class Output:
    name: str
    kind: str  # table | figure
    paper: str  # report category: "Paper 1" | "PK paper"
    families: tuple  # shard families read
    build: Callable  # build(**named) -> Table | figure | (figure, dict)
    caption: str = ""  # reST (Jinja: snakemake.params); the builder's docstring
    params: dict = field(default_factory=dict)  # param name -> config dpath
    derived: tuple = ()  # params the rule file computes: "pairs" (declared base/instruct pairs)
    shard_models: str = "active"  # whose shards: "active", "lineages" (paper1.lineages' checkpoints) or
    #   "activation" (the models the activation stage runs for: activation.enabled / activation.models)
    builder_models: str = "active"  # the models the builder gets (same choices); an output whose
    #   shard_models list is empty (activation stage off) is not a target of `all`
    headlines: tuple = ()  # ((column, label), ...): the cells of a model's row the run summary prints
    headline_rows: Callable | None = None  # row -> (label, value): one summary line per row of the model

    def paths(self) -> dict[str, str]:
        return layout.table_files(self.name) if self.kind == "table" else layout.figure_files(self.name)

    @property
    def main(self) -> str:
        """The file `snakemake --report` shows (the table's HTML rendering / the PNG)."""
        return self.paths()["html" if self.kind == "table" else "png"]

    @property
    def module(self) -> str:
        """Where the builder is (docs/outputs.md)."""
        return getattr(self.build, "__module__", "") or ""

    def call(self, data: dict, fields: dict, models: list[str], params: dict):
        """Run the builder with the named parameters its signature asks for."""
        given = {"data": data, "provs": data.get("_provs", {}), "fields": fields, "models": list(models)}
        kwargs = {}
        for name, par in inspect.signature(self.build).parameters.items():
            if name in given:
                kwargs[name] = given[name]
            elif name in self.families:
                kwargs[name] = data.get(name, {})
            elif name in params and (name in self.params or name in self.derived):
                kwargs[name] = params[name]
            elif par.default is inspect.Parameter.empty:
                raise TypeError(f"{self.kind} {self.name!r}: the builder's parameter {name!r} is none of its "
                                f"families, params or {', '.join(GIVEN)}")
        built = self.build(**kwargs)
        if self.kind == "table":
            # one name (the registration's) and one caption (the docstring's) per table
            if built.name and built.name != self.name:
                raise ValueError(f"table {self.name!r}: its builder named it {built.name!r}")
            built.name, built.caption = self.name, self.caption_text(params, models)
        return built

    def caption_text(self, params: dict, models: list[str]) -> str:
        """The caption as plain text for the table's Markdown and LaTeX: the docstring's Jinja
        rendered as ``snakemake --report`` renders it (the output's params, the builder's
        defaults for those the config leaves out, the models), reST's ``literals`` and
        **bold** marks dropped."""
        import jinja2  # Snakemake's own template engine (its report renders the same captions)

        given = {n: p.default for n, p in inspect.signature(self.build).parameters.items()
                 if p.default is not inspect.Parameter.empty}
        given.update(params)
        given["models"] = list(models)
        try:
            text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(self.caption).render(
                snakemake=SimpleNamespace(params=SimpleNamespace(**given)))
        except jinja2.TemplateError:  # a placeholder the params cannot fill: named, not guessed
            text = re.sub(r"\{\{\s*snakemake\.params\.(\w+)[^}]*\}\}", lambda m: f"⟨{m.group(1)}⟩", self.caption)
        return text.replace("``", "").replace("**", "")


OUTPUTS: dict[tuple[str, str], Output] = {}
TABLES: dict[str, Output] = {}
FIGURES: dict[str, Output] = {}


def caption_of(fn: Callable) -> str:
    """A builder's docstring as one caption line (the report's caption, docs/outputs.md's description)."""
    return " ".join((inspect.getdoc(fn) or "").split())


def register(out: Output) -> Output:
    """Add an output (the decorators call this; tests add toy ones). Outputs reading the paper 1
    per-head shards take config ``choices:`` as a param (headgeom.outputs.choices)."""
    if out.kind not in KINDS:
        raise ValueError(f"output {out.name!r}: kind must be one of {KINDS}, not {out.kind!r}")
    if (out.kind, out.name) in OUTPUTS:
        raise ValueError(f"{out.kind} {out.name!r} is already registered")
    if HEADS in out.families and "choices" not in out.params:
        out = replace(out, params={**out.params, "choices": "choices"})
    OUTPUTS[(out.kind, out.name)] = out
    (TABLES if out.kind == "table" else FIGURES)[out.name] = out
    return out


def _decorator(kind: str, paper: str):
    if paper not in PAPERS:
        raise ValueError(f"paper must be one of {PAPERS}, not {paper!r}")

    def declare(name: str, *, families: tuple = (), params: dict | None = None, derived: tuple = (),
                shard_models: str = "active", builder_models: str = "active", headlines: tuple = (),
                headline_rows: Callable | None = None):
        def wrap(fn: Callable) -> Callable:
            register(Output(name, kind, paper, tuple(families), fn, caption_of(fn), dict(params or {}),
                            tuple(derived), shard_models, builder_models, tuple(headlines),
                            headline_rows))
            return fn
        return wrap

    declare.__doc__ = f"Register the decorated function as the builder of a {kind} of the {paper}."
    return declare


def decorators(paper: str):
    """(table, figure): the two registration decorators of one paper's module."""
    return _decorator("table", paper), _decorator("figure", paper)


def output(kind: str, name: str) -> Output:
    try:
        return OUTPUTS[(kind, name)]
    except KeyError:
        known = ", ".join(n for k, n in OUTPUTS if k == kind)
        raise KeyError(f"no {kind} {name!r} in the output registry (known: {known})") from None


def builder_file(out: Output) -> str:
    """The builder's source file relative to the repository root (docs)."""
    f = Path(inspect.getsourcefile(out.build) or "")
    parts = f.parts
    return "/".join(parts[parts.index("headgeom"):]) if "headgeom" in parts else f.name
