"""The sections of ``make bench`` (bench/run.py), one module per topic."""
