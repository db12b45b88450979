"""Building one registered output from its shards: read the families it names, apply the
``choices:`` column selection, call its builder with the named parameters it asks for, write
the table or figure with its provenance (what workflow/scripts/output.py and
headgeom.verify.audit.rebuild_table call)."""

from __future__ import annotations

import json
from pathlib import Path

from headgeom.io.shards import read_shards
from headgeom.outputs.choices import apply
from headgeom.outputs.formats import pyplot, save
from headgeom.outputs.registry import HEADS, output


def read_inputs(inputs: dict[str, list[str]]) -> tuple[dict, list[dict]]:
    """{family: paths} -> (data, provenance records of every shard, family by family)."""
    data, provs = {"_provs": {}}, []
    for fam, paths in inputs.items():
        cols, pv = read_shards(list(paths))
        data[fam] = cols
        data["_provs"][fam] = pv
        provs += pv
    return data, provs


def manifest_fields(manifests: list[str]) -> dict[str, dict]:
    return {Path(p).parent.name: json.loads(Path(p).read_text())["fields"] for p in manifests}


class ReadLog(dict):
    """One family's columns, recording in ``log`` the name of every column a builder reads
    (``headgeom audit`` shows the shard rows and columns behind a number from it). Iterating
    over the columns counts as reading all of them."""

    def __init__(self, cols: dict, log: set):
        super().__init__(cols)
        self.log = log

    def __getitem__(self, k):
        self.log.add(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        if k in self:
            self.log.add(k)
        return super().get(k, default)

    def _all(self):
        self.log.update(super().keys())

    def __iter__(self):
        self._all()
        return super().__iter__()

    def items(self):
        self._all()
        return super().items()

    def values(self):
        self._all()
        return super().values()

    def copy(self):
        self._all()
        return dict(super().items())


def traced(data: dict, log: dict[str, set]) -> dict:
    """``data`` with each family's columns wrapped in a ReadLog writing to ``log[family]``."""
    out = dict(data)
    for fam, cols in data.items():
        if fam != "_provs" and isinstance(cols, dict):
            out[fam] = ReadLog(cols, log.setdefault(fam, set()))
    return out


def chosen(data: dict, params: dict) -> dict:
    """``data`` with the ``choices:`` column selection applied to the per-head columns."""
    if params.get("choices") and data.get(HEADS):
        data = {**data, HEADS: apply(data[HEADS], params["choices"])}
    return data


def prepare(kind: str, name: str, inputs: dict[str, list[str]], manifests: list[str], params: dict):
    """(output entry, data, provenance records, fields): what a builder is given, read from the shards."""
    out = output(kind, name)
    data, provs = read_inputs({f: inputs.get(f, []) for f in out.families})
    return out, chosen(data, params), provs, manifest_fields(manifests)


def built(kind: str, name: str, data: dict, fields: dict, models: list[str], params: dict,
          read: dict[str, set] | None = None):
    """One registered output built from shard columns in memory (``data`` as ``read_inputs``
    gives it, ``choices`` applied: ``chosen``): a Table, or a figure / (figure, extra provenance).
    ``read``: family -> the columns the builder read, filled in (tables). What ``build_output``
    writes, and what headgeom.api returns."""
    out = output(kind, name)
    made = out.call(traced(data, read) if read is not None and kind == "table" else data, fields, list(models), params)
    if kind == "table":
        made.aggregation = f"headgeom.outputs: table {name!r} ({out.module}.{out.build.__name__})"
    return made


def build_output(kind: str, name: str, inputs: dict[str, list[str]], manifests: list[str], models: list[str],
                 outputs: dict[str, str], params: dict) -> None:
    """Build one registered table or figure from its shards and write it with provenance."""
    _, data, provs, fields = prepare(kind, name, inputs, manifests, params)
    read: dict[str, set] = {}
    # a table records the shard columns its builder read (sidecar columns_read): the choice
    # sensitivity leaves a table whose builder read none of a switch's columns as it is
    made = built(kind, name, data, fields, models, params, read)
    if kind == "table":
        made.write(outputs, provs, params, columns_read={f: sorted(c) for f, c in sorted(read.items())})
        return
    fig, extra = made if isinstance(made, tuple) else (made, {})
    save(fig, outputs, {"figure": name, "params": params, "inputs": provs, **extra})
    pyplot().close(fig)
