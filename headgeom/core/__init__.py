"""Shared foundations: errors, config checks, seeds, provenance, per-head factors, the jobs' log plumbing."""
