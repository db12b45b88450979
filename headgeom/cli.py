"""The ``headgeom`` command.

    headgeom audit TABLE --row KEY=VALUE [--row ...] --column NAME [-d DIR] [--no-tensors] [--full | --json]
    headgeom audit --claim ID [-d DIR] [--no-tensors]
    headgeom diff A B | --rev REV [DIR]   [--json] [--no-shards] [--fail-on-change]
    headgeom claims [--ledger config/claims.yaml] [-d DIR] [--models m1 m2 ...] [--inventory FILE]
    headgeom plan [--configfile F ...] [--models m1 ...] [--shape M=config.json] [--cores N ...]
    headgeom costs logs/slurm/efficiency_report_<run>.csv [-d DIR] [--configfile F ...]
    headgeom check [--configfile F ...] [--config k=v ...] [-d DIR]
    headgeom verify [-d DIR] [--configfile F ...] [--config k=v ...] [--recompute K [--seed S]]
    headgeom summary [-d DIR] [--models m1 ...]
    headgeom timings [-d DIR] [--log SNAKEMAKE_LOG]
    headgeom docs [--check]

(the Python API for notebooks is ``headgeom.api``; docs/api.md)

Run from the directory the pipeline ran in (or pass -d). ``audit`` explains one number of a
table and recomputes it from its shards and from the tensors; it exits 0 when everything
matches (or NaN = NaN), 1 on any mismatch or integrity problem, 2 when the number cannot be
found. By default it prints one screen: the number, the shard rows and columns it was computed
from, rule, builder, code version, config (each key once), the inputs checked as counts with
every failure on its own line, the recomputations and the verdict. ``--full`` prints the whole
trace instead (every shard's provenance, every tensor's sha256); ``--json`` prints the audit as
one JSON object (number, rows, rule, builder, code, config, inputs with per-item status,
verdicts, integrity, verdict, ok): three views of one report (headgeom.verify.audit.audit). The
shards recomputed from the tensors are reported on stderr as they are done.
``audit --claim ID`` audits every cell a ledger entry reads (after its paper value, pipeline
value and verdict), one screen each; exit 2 when the entry reads no cell of the run (its models
were not run, or the pipeline does not compute it).
``diff`` says what moved between two runs (work directories): per table the cells whose value
changed (old, new, relative change) and the rows added or removed, the ledger entries whose
verdict changed, and the shards whose data differ; exit 0 unless --fail-on-change and something
moved (1); 2 when a directory is not a run. ``--rev REV`` compares a work directory with the
tables, shards and figures git tracks there at REV (a project that commits its results).
``claims`` prints the claims ledger beside the pipeline's values (what the ``claims`` rule
writes to results/tables/claims.*) and a coverage line: numbers in the papers (the inventory,
config/paper_numbers.yaml) / ledger entries / agrees / differs / not run / not computed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headgeom import layout


def _progress(line: str) -> None:
    """A long command's progress: on stderr, so that stdout holds only its result."""
    print(line, file=sys.stderr, flush=True)


def _audit(args) -> int:
    from headgeom.verify.audit import AuditError, audit, render

    if args.claim:
        return _audit_claim(args)
    if not args.table or not args.column:
        print("headgeom audit: give TABLE --row KEY=VALUE ... --column NAME, or --claim ID", file=sys.stderr)
        return 2
    view = "full" if args.full else "json" if args.json else "short"
    try:  # the full trace does not show the rows the number moves with: not looked for
        rep = audit(args.directory, args.table, args.row or [], args.column, tensors=not args.no_tensors,
                    configfiles=args.configfile or [], max_rows=args.rows, tmpdir=args.tmpdir,
                    find_rows=view != "full", progress=_progress)
    except AuditError as e:
        print(f"headgeom audit: {e}", file=sys.stderr)
        return 2
    for line in render(rep, view):
        print(line)
    return 0 if rep.ok else 1


def _audit_claim(args) -> int:
    from headgeom.verify.audit import AuditError
    from headgeom.verify.claim_audit import audit_claim

    if args.table or args.row or args.column or args.full or args.json:
        print("headgeom audit: --claim takes no TABLE, --row, --column, --full or --json", file=sys.stderr)
        return 2
    try:
        ok = audit_claim(args.directory, args.claim, ledger=args.ledger, tensors=not args.no_tensors,
                         configfiles=args.configfile or [], tmpdir=args.tmpdir, directory=args.directory,
                         progress=_progress)
    except AuditError as e:
        print(f"headgeom audit: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


def _diff(args) -> int:
    import tempfile

    from headgeom.core.errors import HeadgeomError
    from headgeom.verify.diff import checkout_results, diff_runs, render, render_json

    if len(args.runs) != (1 if args.rev else 2) and not (args.rev and not args.runs):
        print("headgeom diff: give two run directories A B, or --rev REV [DIR]", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="headgeom-diff-") as tmp:
            if args.rev:
                b = args.runs[0] if args.runs else "."
                a = checkout_results(b, args.rev, tmp)
            else:
                a, b = args.runs
            res = diff_runs(a, b, shards=not args.no_shards)
            if args.rev:
                res["a"] = f"{args.rev}:{b}"
    except (HeadgeomError, OSError, ValueError) as e:  # a damaged shard: DamagedFileError names it
        print(f"headgeom diff: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(render_json(res) + "\n" if args.json else render(res))
    return 1 if args.fail_on_change and res["changed"] else 0


def _timings(args) -> int:
    from headgeom.core.errors import TimingsError
    from headgeom.commands.timings import render, timings

    try:
        rows, log = timings(args.directory, args.log)
    except TimingsError as e:
        print(f"headgeom timings: {e}", file=sys.stderr)
        return 2
    print(render(rows, log), end="")
    return 0


def _claims(args) -> int:
    from headgeom.publish.claims import build_claims, load_ledger

    ledger = load_ledger(args.ledger)
    workdir = Path(args.directory)
    models = args.models
    if models is None:  # the models the tables were built for
        models = sorted({r for r in _table_models(workdir)})
    table = build_claims(ledger, workdir / layout.TABLES_DIR, models)
    sys.stdout.write(table.markdown() if args.format == "md" else table.csv())
    _coverage(args, table.rows)
    return 0


def _coverage(args, rows) -> None:
    """The coverage line under the claims table (stderr under --format csv, so the CSV stays one)."""
    from headgeom.verify.claims_coverage import coverage, coverage_line, load_inventory

    inv_path = Path(args.inventory) if args.inventory else Path(args.ledger).with_name("paper_numbers.yaml")
    inv = load_inventory(inv_path) if inv_path.exists() else None
    line = coverage_line(coverage(rows, inv))
    print(line, file=sys.stdout if args.format == "md" else sys.stderr)


def _table_models(workdir: Path):
    import csv

    for p in sorted((workdir / layout.TABLES_DIR).glob("*.csv")):
        if p.stem == "claims":
            continue
        with open(p, newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("model") and r["model"] != "pooled":
                    yield r["model"]


def _summary(args) -> int:
    from headgeom.publish.summary import summary_markdown

    workdir = Path(args.directory)
    models = args.models or list(dict.fromkeys(_table_models(workdir)))
    if not models:
        print(f"headgeom summary: no tables under {workdir / layout.TABLES_DIR}; run the pipeline first",
              file=sys.stderr)
        return 1
    print(summary_markdown(workdir, models))
    return 0


def _plan(args) -> int:
    from headgeom.core.config import load_config
    from headgeom.core.errors import HeadgeomError
    from headgeom.commands import plan as P

    try:
        shapes = dict(s.split("=", 1) for s in args.shape or [])
        cfg = load_config(args.configfile or [])
        if args.global_design:
            from headgeom.schedule.designs import global_design

            cfg = global_design(cfg)
        from headgeom.publish.choice_sensitivity import planned_jobs

        p = P.plan(cfg, args.directory, shapes, args.models, more_jobs=planned_jobs)
    except (HeadgeomError, ValueError) as e:
        print(f"headgeom plan: {e}", file=sys.stderr)
        return 2
    cores = list(args.cores or [1, 16, 64, 256, 1024])
    if args.nodes:
        cores += [n * args.cores_per_node for n in args.nodes]
    sys.stdout.write(P.render(p, sorted(set(cores))))
    return 0


def _costs(args) -> int:
    from headgeom.core.config import load_config
    from headgeom.core.errors import HeadgeomError
    from headgeom.commands import efficiency

    try:
        res = efficiency.compare(args.report, args.directory, load_config(args.configfile or []))
    except (HeadgeomError, OSError, KeyError) as e:
        print(f"headgeom costs: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(efficiency.render(res))
    return 0


def _check(args) -> int:
    """The check the workflow runs when it loads (headgeom.commands.check.check: the config
    against the schema and the registries, and the inputs): exit 0 when nothing is wrong, 2 with
    one line per problem."""
    import os

    from headgeom.core.cliguard import not_a_config_file
    from headgeom.core.errors import HeadgeomError
    from headgeom.core.config import load_config, workflow_root
    from headgeom.commands.check import check, config_file_problems, report

    files = [str(Path(f).absolute()) for f in args.configfile or []]
    bad = [ln for ln in map(not_a_config_file, args.configfile or []) if ln]
    if bad:
        for ln in bad:
            print(f"headgeom check: {ln}", file=sys.stderr)
        return 2
    root = workflow_root(args.directory)  # DIR's config/config.yaml where DIR holds one, as its workflow reads it
    found = config_file_problems([*files, root / "config" / "config.yaml"])
    if found:
        print(report(found), file=sys.stderr)
        return 2
    try:
        cfg = load_config(files, cli=args.config or [], root=root)
    except (HeadgeomError, ValueError, OSError) as e:
        print(f"headgeom check: {e}", file=sys.stderr)
        return 2
    here = os.getcwd()
    os.chdir(args.directory)  # relative paths in the config are relative to the work directory
    try:
        found = check(cfg, root)
    finally:
        os.chdir(here)
    if found:
        print(report(found), file=sys.stderr)
        return 2
    models = ", ".join(cfg["active_models"])
    print(f"headgeom check: no problems (models {models}; sources, headers, architectures, tokenizers and corpora "
          "checked; hub models are checked at fetch)")
    return 0


def _verify(args) -> int:
    """Every file the run of the config expects, and every shard found, against its record and what
    it is: exit 0 when all are sound, 1 with one line per problem (headgeom.verify.integrity)."""
    import time

    from headgeom.verify.integrity import run_problems

    t0 = time.perf_counter()
    checked, problems = run_problems(_run_config(args), args.directory)
    for p in problems:
        print(f"{p.label()}: {p.line()}", file=sys.stderr)
    print(f"headgeom verify: {checked} files checked in {time.perf_counter() - t0:.1f} s, "
          + (f"{len(problems)} problem{'s' if len(problems) != 1 else ''}" if problems else
             "all present and match their records"))
    rc = 1 if problems else 0
    if args.recompute is not None:
        rc = max(rc, _verify_recompute(args))
    return rc


def _run_config(args) -> dict:
    """The config a ``snakemake --configfile ... --config ...`` run in the directory sees, its
    schema defaults filled in as the workflow fills them."""
    from snakemake.utils import validate

    from headgeom.core.config import load_config, schema_path, workflow_root

    root = workflow_root(args.directory)
    cfg = load_config(args.configfile or (), cli=args.config or (), root=root, checked=True)
    validate(cfg, schema_path(root))
    return cfg


def _verify_recompute(args) -> int:
    """``verify --recompute K``: a seeded sample of shards recomputed from the tensors
    (headgeom.verify.spot_check); exit 1 when one differs or cannot be recomputed, 2 for a K
    that is not a size."""
    import time

    from headgeom.verify.spot_check import render, spot_check

    t0 = time.perf_counter()
    try:
        res = spot_check(args.directory, args.recompute, seed=args.seed, progress=_progress)
    except ValueError as e:
        print(f"headgeom verify: {e}", file=sys.stderr)
        return 2
    summary, problems = render(res, args.recompute, time.perf_counter() - t0)
    for ln in problems:
        print(f"recomputed: {ln}", file=sys.stderr)
    for ln in summary:
        print(ln)
    return 1 if problems else 0


def _docs(args) -> int:
    from headgeom.publish import docs

    if args.check:
        stale = docs.stale()
        for p in stale:
            print(f"stale: {p} (run `headgeom docs`)", file=sys.stderr)
        return 1 if stale else 0
    for p in docs.write():
        print(f"wrote {p}")
    return 0


class _Renamed(argparse.Action):
    """An option that was renamed: using it is an error naming the new one (the old one is not read)."""

    def __init__(self, option_strings, dest, new: str, **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was renamed: write {self.new}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="headgeom", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("audit", help="explain one number of a table and recompute it",
                       description="Explain one number of a table (the shard rows behind it, its aggregation, "
                                   "provenance, tensors, rule) and recompute it from the shards and from the "
                                   "tensors. One screen by default; --full for the whole trace, --json for tools.")
    a.add_argument("table", nargs="?",
                   help="table name (p1_table2_strong_tail, pk_table4_null_summary, ...) or path to its CSV")
    a.add_argument("--row", action="append", metavar="KEY=VALUE",
                   help="select the row: column KEY equals VALUE (repeat until one row is left)")
    a.add_argument("--column", help="the column of the number")
    a.add_argument("--claim", metavar="ID",
                   help="instead of TABLE/--row/--column: a ledger entry's id (results/tables/claims.csv, column "
                        "id); audits every cell the entry reads, one screen each")
    a.add_argument("--ledger", help="with --claim: the ledger (default: the one the run's claims table was built from)")
    a.add_argument("-d", "--directory", default=".", help="directory the pipeline ran in (default: .)")
    a.add_argument("--no-tensors", action="store_true", help="skip recomputing from the tensors")
    a.add_argument("--configfile", nargs="+", help="config files the pipeline ran with (added to the printed commands)")
    a.add_argument("--rows", type=int, default=5, help="with --full: shard rows to print per shard (default 5)")
    v = a.add_mutually_exclusive_group()
    v.add_argument("--full", action="store_true",
                   help="the whole trace: every shard with its provenance, every tensor with its sha256")
    v.add_argument("--json", action="store_true",
                   help="one JSON object on stdout (number, rows, rule, builder, code, config, inputs with "
                        "per-item status, verdicts, integrity, verdict, ok)")
    a.add_argument("--tmpdir", help="keep the recomputed shards and tables here (default: a temporary directory)")
    a.set_defaults(func=_audit)

    d = sub.add_parser("diff", help="what moved between two runs: table cells, rows, ledger verdicts, shards",
                       description="Compare two work directories of the pipeline: per table the cells whose value "
                                   "changed (old, new, relative change) and the rows added or removed, the ledger "
                                   "entries whose verdict changed, the figures redrawn, and the shards whose data "
                                   "differ (bitwise). Compact text by default; --json for tools.")
    d.add_argument("runs", nargs="*", metavar="A B",
                   help="the two runs' work directories (old, new); with --rev one, the new (default: .)")
    d.add_argument("--rev", help="compare with the outputs git tracks in the work directory at this revision "
                                 "(for a project that commits its results/tables)")
    d.add_argument("--json", action="store_true", help="the whole diff as one JSON object")
    d.add_argument("--no-shards", action="store_true", help="compare tables and the ledger only")
    d.add_argument("--fail-on-change", action="store_true", help="exit 1 when anything differs (for CI)")
    d.set_defaults(func=_diff)

    c = sub.add_parser("claims", help="the papers' reported numbers beside the pipeline's",
                       description="Print the claims ledger beside the pipeline's values.")
    c.add_argument("--ledger", default=str(Path(__file__).resolve().parent.parent / "config" / "claims.yaml"))
    c.add_argument("-d", "--directory", default=".")
    c.add_argument("--models", nargs="*", help="models counted as run (default: those in the tables)")
    c.add_argument("--format", choices=("md", "csv"), default="md")
    c.add_argument("--inventory", help="inventory of the papers' printed numbers (default: paper_numbers.yaml beside the ledger)")
    c.set_defaults(func=_claims)

    p = sub.add_parser("plan", help="job counts, core-hours, memory and wall-clock of a config, before fetching",
                       description="Per rule: job count, core-hours, peak memory per job, the largest job; and the "
                                   "wall-clock on N cores, from the cost models the rules use (docs/cluster.md). "
                                   "Needs no weights: shapes come from fetched manifests, --shape, a local "
                                   "checkpoint's config.json, or the model registry's shape: entries.")
    p.add_argument("--configfile", nargs="+", help="config files merged over config/config.yaml (as snakemake)")
    p.add_argument("--models", nargs="+", help="models to plan (default: the config's active_models)")
    p.add_argument("--shape", action="append", metavar="MODEL=FILE", help="a manifest.json or HF config.json")
    p.add_argument("-d", "--directory", default=".", help="work directory (fetched manifests; default: .)")
    p.add_argument("--cores", nargs="+", type=int, help="core counts to estimate wall-clock for")
    p.add_argument("--nodes", nargs="+", type=int, help="node counts (x --cores-per-node)")
    p.add_argument("--cores-per-node", type=int, default=64)
    p.add_argument("--unscoped", action=_Renamed, new="--global-design", help=argparse.SUPPRESS)
    p.add_argument("--global-design", dest="global_design", action="store_true",
                   help="ignore the config's per-model designs: the global design on every model and layer "
                        "(e.g. the full null suite on every Qwen3-235B layer, which the PK paper could not afford)")
    p.set_defaults(func=_plan)

    k = sub.add_parser("costs", help="the SLURM efficiency report beside the cost model",
                       description="Per rule: measured elapsed time and MaxRSS (the SLURM plugin's efficiency "
                                   "report CSV) beside the runtime and mem_mb the cost model requested.")
    k.add_argument("report", help="efficiency_report_<run>.csv (slurm-efficiency-report; logs/slurm/)")
    k.add_argument("-d", "--directory", default=".", help="work directory of the run (its manifests)")
    k.add_argument("--configfile", nargs="+", help="config files the run used (merged over config/config.yaml)")
    k.set_defaults(func=_costs)

    s = sub.add_parser("summary", help="the run's headline numbers per model and where its outputs are",
                       description="Print the summary the workflow writes to results/summary.md: per model "
                                   "the headline numbers (strong heads, median P and its wrong-V control, mean "
                                   "ρ against d/D, null verdicts, natural-return medians), each with its "
                                   "table and column, and where the tables, figures and report are.")
    s.add_argument("-d", "--directory", default=".", help="work directory of the run")
    s.add_argument("--models", nargs="+", help="models to summarize (default: every model in the tables)")
    s.set_defaults(func=_summary)

    q = sub.add_parser("check", help="every problem of a config's inputs, before any job (as the workflow checks)",
                       description="The check the workflow runs when it loads (the same function): the config "
                                   "against the schema and the registries (null types, layers and figure layer "
                                   "indices against each model's layer count), then every active model's "
                                   "source (path, config.json, safetensors / GGUF headers, installed package, hub "
                                   "repo and revision), its architecture for each stage it runs, its tokenizer "
                                   "for the activation stage, and each corpus. One line per problem; exit 2 if "
                                   "there is any, 0 otherwise.")
    q.add_argument("--configfile", nargs="+", help="config files merged over config/config.yaml (as snakemake)")
    q.add_argument("--config", nargs="+", metavar="KEY=VALUE", help="config values (as snakemake --config)")
    q.add_argument("-d", "--directory", default=".", help="work directory (relative paths in the config; default: .)")
    q.set_defaults(func=_check)

    v = sub.add_parser("verify", help="every shard, table, figure, tensor store and forward pass against its record",
                       description="Check every file the run of the config expects (tensor stores, shards, forward "
                                   "passes, sensitivity rows, tables and figures with their sidecars) and every shard "
                                   "found against its content record and what it is (shards: the record and identity "
                                   "in their footer; tables and figures: their sidecar; tensor stores: their manifest; "
                                   "forward passes and rows: their record), and list every missing, damaged or "
                                   "misplaced file with the command that rebuilds it. Exit 1 if there is any.")
    v.add_argument("-d", "--directory", default=".", help="work directory of the run")
    v.add_argument("--configfile", nargs="+", help="the run's config files, merged over config/config.yaml (as snakemake)")
    v.add_argument("--config", nargs="+", metavar="KEY=VALUE", help="the run's config values (as snakemake --config)")
    v.add_argument("--recompute", metavar="K",
                   help="also recompute K shards drawn at random (a count, a fraction such as 0.1, or 10%%) from "
                        "the tensors and compare them with the stored values (docs/usage.md)")
    v.add_argument("--seed", type=int, help="with --recompute: the seed of the sample (printed; default: a fresh one)")
    v.set_defaults(func=_verify)

    t = sub.add_parser("timings", help="per rule: job count, wall time, work and start-up, from the run's logs",
                       description="Read the Snakemake log of a run (default: the latest under .snakemake/log) "
                                   "and each job's log, and print per rule the jobs, their summed and mean wall "
                                   "time, the job functions' own time (work) and the rest (start-up), as a "
                                   "Markdown table (headgeom/commands/timings.py).")
    t.add_argument("-d", "--directory", default=".", help="work directory of the run")
    t.add_argument("--log", help="a Snakemake run log (default: the latest in DIR/.snakemake/log)")
    t.set_defaults(func=_timings)

    g = sub.add_parser("docs", help="write docs/outputs.md, docs/config.md and the report captions",
                       description="Write the generated docs from the registries and the config schema: "
                                   "docs/outputs.md, docs/config.md, workflow/report/captions/*.rst.")
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 if any generated file is stale")
    g.set_defaults(func=_docs)

    for p in sub.choices.values():  # --config is not --configfile: no option by a prefix of its name
        p.allow_abbrev = False
    args = ap.parse_args(argv)
    from headgeom.core.errors import ConfigError
    from headgeom.schedule.families import load_plugins

    try:
        load_plugins()  # the HEADGEOM_PLUGINS jobs, before any command reads the registry
    except ConfigError as e:
        print(f"headgeom: {e}", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
