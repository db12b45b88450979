"""Shared by the workflow scripts: send a job's output to its log file."""

import sys


def to_log(snakemake):
    fh = open(snakemake.log[0], "w", buffering=1)
    sys.stdout = sys.stderr = fh

    def log(msg):
        print(msg, file=fh, flush=True)

    return log
