"""Exceptions with messages meant for the person running the pipeline."""


class HeadgeomError(Exception):
    """Base class: every error the pipeline raises on bad input."""


class ConfigError(HeadgeomError):
    pass


class UnknownArchitectureError(HeadgeomError):
    pass


class CheckpointError(HeadgeomError):
    """Missing, corrupt, pickle-only or otherwise unreadable checkpoint."""


class IntegrityError(CheckpointError):
    """sha256 mismatch between a stored tensor and its manifest."""


class CorpusError(HeadgeomError):
    """A text corpus that is missing, empty, too short for its windows, or not text."""


class ModelRunError(HeadgeomError):
    """A model transformers cannot run offline here (architecture, quantization, files)."""


class TimingsError(HeadgeomError):
    """A run's logs cannot be read as a per-rule timing table (headgeom timings)."""


class DamagedFileError(HeadgeomError):
    """A file the run wrote (a shard, a table) that no longer matches its content record."""
