"""Patches of third-party internals, one module each, with the versions they were written against
(``PINNED``), the upstream behaviour they work around, and a warning when the installed version differs."""
