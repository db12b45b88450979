"""The environment of a subprocess that loads the toy plugin family (tests/helpers/toy_family.py):
the package and tests/helpers importable, HEADGEOM_PLUGINS naming it. Tests run the plugin in
subprocesses only, so that it never joins the session's own registry."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def plugin_env(plugins: str = "toy_family", *extra_paths) -> dict:
    path = os.pathsep.join(filter(None, (*map(str, extra_paths), str(ROOT), str(ROOT / "tests" / "helpers"),
                                         os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, "HEADGEOM_PLUGINS": plugins}
