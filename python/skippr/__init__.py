"""skipprd from Python: ``Session`` runs doctor/discover/sync and reads rows as Arrow.

See docs/python.md. Every method calls the same engine as the ``skipprd`` CLI.
"""

from ._skippr import (
    ArrowStream,
    ConfigError,
    DiscoverError,
    QueryError,
    Session,
    SkipprError,
    SyncError,
    __version__,
)
from .config import Config, StorageMode

__all__ = [
    "ArrowStream",
    "Config",
    "ConfigError",
    "DiscoverError",
    "QueryError",
    "Session",
    "SkipprError",
    "StorageMode",
    "SyncError",
    "__version__",
]
