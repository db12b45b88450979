"""headgeom.api's runs of the pipeline's jobs: every shard family of one model in memory.

A ``Workbench`` belongs to one ``headgeom.api.Model``. On first use it writes the model's tensor
store (the fetch's writer, ``headgeom.io.store.write_attention``) into a private temporary
results tree that lives as long as the model object; each job of the shard-family registry
(``headgeom.schedule.families.JOBS``) then runs through its registered entry point with the
wildcards and params the pipeline's rules give it (``headgeom.schedule.designs``,
``headgeom.schedule.fanout``), so a shard computed here holds the pipeline's numbers for the same
model name and settings. The activation stage's forward pass is ``headgeom.jobs.activation.forward_job``
on the model's source, or on the transformers object itself. Every job run is kept (key: job,
wildcards, params): asking again, or for a table after its shards, computes nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import weakref
from contextlib import contextmanager
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import HeadgeomError

#: the corpus name a text given to the API runs under (layout.activations, the provenance)
API_TEXT = "api-text"


def _frozen(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar (notebook widget or terminal line: tqdm.auto picks), or a silent stand-in."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled or total == 0, leave=False)


class Workbench:
    """One model's private results tree, its tensor store and the jobs run in it (see module doc)."""

    def __init__(self, model):
        self.model = model
        self._dir = None
        self._runs: dict[str, dict[str, Path]] = {}  # run key -> {family: shard path}
        self._forwards: dict[str, Path] = {}  # forward key -> the pass's directory
        self._n = 0

    # ------------------------------------------------------------------ the tree and the store

    @property
    def root(self) -> Path:
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="headgeom-api-"))
            weakref.finalize(self, shutil.rmtree, str(self._dir), True)
            self._write_store()
        return self._dir

    def manifest(self) -> Path:
        return self.root / layout.manifest(self.model.name)

    def _write_store(self) -> None:
        from headgeom.io.store import write_attention

        m, origin = self.model, self.model._origin
        out = self._dir / layout.tensors_dir(m.name)
        out.mkdir(parents=True, exist_ok=True)
        write_attention(m._att, out, m.name, m.source, origin["config"], origin["files"], origin["n_keys"],
                        log=lambda s: None)

    def _new_dir(self, what: str) -> Path:
        self._n += 1
        d = self.root / "runs" / f"{self._n:05d}-{what}"
        d.mkdir(parents=True)
        return d

    # ------------------------------------------------------------------ per-layer jobs

    def run(self, job, wildcards: dict, params: dict, inputs: dict) -> dict[str, Path]:
        """Run one job of the registry (its entry point, as a per-layer job does: headgeom.rules.scripts.per_layer_job) unless
        the same job, wildcards, params and inputs ran already; {family: shard path}."""
        from headgeom.schedule.families import run_job

        key = _frozen([job.name, wildcards, params, inputs])
        if key not in self._runs:
            d = self._new_dir(job.name)
            outputs = {f.output: str(d / f"{f.name}.parquet") for f in job.families}
            with one_thread():
                run_job(job.name, inputs, outputs, {"model": self.model.name, **wildcards}, params,
                        log=lambda *a, **k: None)
            self._runs[key] = {f.name: Path(outputs[f.output]) for f in job.families}
        return self._runs[key]

    # ------------------------------------------------------------------ forward passes

    def forward(self, section: dict, text, config: dict) -> Path:
        """The forward pass's directory for an activation section (corpus, n_windows, window)
        over ``text`` (None: the section's corpus from ``config['texts']``; a string; a list of
        strings, joined by blank lines), run once per text and window shape."""
        from headgeom.jobs.activation import forward_job
        from headgeom.schedule.families import FORWARD

        m = self.model
        act = config["activation"]
        params = {"device": act.get("device", "cpu"), "bos": act.get("bos", True),
                  "weight_rtol": act.get("weight_rtol", 1e-5), "n_windows": int(section["n_windows"]),
                  "window": int(section["window"])}
        given = None
        if text is None:
            corpus = section["corpus"]
            entry = (config.get("texts") or {}).get(corpus)
            if entry is None:
                raise HeadgeomError(f"activation corpus {corpus!r} is not under texts: in the config")
            text_key = ["corpus", corpus, entry]
        else:
            body = text_of(text)
            corpus, entry = API_TEXT, {"source": "api"}
            given = (body, {"source": "api", "chars": len(body),
                            "sha256": hashlib.sha256(body.encode()).hexdigest()})
            text_key = ["text", given[1]["sha256"]]
        key = _frozen([text_key, params])
        if key not in self._forwards:
            out = self._new_dir("forward") / "pass"
            loaded = m._loaded_model(params["device"]) if m._entry is None else None
            with one_thread(int(act.get("threads", 1))):
                forward_job(m.name, m._entry or {"architecture": m._architecture}, self.manifest().parent, corpus, entry,
                            out, params, log=lambda *a, **k: None, step=FORWARD.name, text=given, loaded=loaded)
            self._forwards[key] = out
        return self._forwards[key]


@contextmanager
def one_thread(n: int = 1):
    """BLAS (OpenBLAS, MKL: threadpoolctl) and torch on ``n`` threads while a job runs, as a
    pipeline job runs (Snakemake sets the thread variables to the rule's ``threads``: 1 for a per-layer
    job, ``activation.threads`` for the forward pass): sums are then taken in the pipeline's
    order, so the numbers are its bits (eigenvalues, for one, move in the last bits with the
    thread count)."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")  # only when something imported it already
    before = torch.get_num_threads() if torch is not None else None
    try:
        with threadpool_limits(limits=n):
            if torch is not None:
                torch.set_num_threads(n)
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def text_of(text) -> str:
    """The text an activation call runs: a string, or a list of strings joined by blank lines."""
    if isinstance(text, str):
        body = text
    elif isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text):
        body = "\n\n".join(text)
    else:
        raise HeadgeomError(f"text: a string or a list of strings (or None: the config's corpus), "
                            f"not a {type(text).__name__}")
    if not body.strip():
        raise HeadgeomError("text is empty")
    return body
