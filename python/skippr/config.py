"""``skippr.Config()``: a project config built in Python, without a file.

Each method sets one part of the document the loader reads (the keys of docs/config.md) and
returns the builder. ``to_yaml()`` writes it as YAML; ``Session(config=cfg)`` loads it as the
CLI loads ``skippr.yml`` (relative paths against the current directory).
"""

from __future__ import annotations

import copy
import enum
import json
import os
from typing import Any, Mapping

from . import _skippr


class StorageMode(enum.Enum):
    """Where schemas are saved (``skippr.skipprd_el_storage_mode``)."""

    LOCAL = "local"
    S3 = "s3"


class Config:
    """A config document, built key by key."""

    def __init__(self) -> None:
        self._doc: dict[str, Any] = {}

    def _settings(self) -> dict[str, Any]:
        return self._doc.setdefault("skippr", {})

    def _merge(self, section: str, entries: Mapping[str, Any]) -> "Config":
        self._doc.setdefault(section, {}).update(copy.deepcopy(dict(entries)))
        return self

    def workspace(self, name: str) -> "Config":
        """``skippr.workspace``."""
        self._settings()["workspace"] = name
        return self

    def tenant(self, name: str) -> "Config":
        """``skippr.tenant``."""
        self._settings()["tenant"] = name
        return self

    def storage_mode(self, mode: StorageMode | str) -> "Config":
        """``skippr.skipprd_el_storage_mode``: ``StorageMode.LOCAL`` or ``StorageMode.S3``."""
        self._settings()["skipprd_el_storage_mode"] = StorageMode(mode).value
        return self

    def skippr_s3_bucket(self, bucket: str) -> "Config":
        """``skippr.skippr_s3_bucket``."""
        self._settings()["skippr_s3_bucket"] = bucket
        return self

    def wal_s3_bucket(self, bucket: str) -> "Config":
        """``skippr.wal_s3_bucket``."""
        self._settings()["wal_s3_bucket"] = bucket
        return self

    def store(self, type: str, name: str | None = None) -> "Config":
        """``skippr.store``: ``type`` ``sled`` or ``dynamodb`` (with the table ``name``)."""
        store: dict[str, Any] = {"type": type}
        if name is not None:
            store["name"] = name
        self._settings()["store"] = store
        return self

    def pipelines(self, pipelines: Mapping[str, Any]) -> "Config":
        """``pipelines``: merged by name."""
        return self._merge("pipelines", pipelines)

    def data_sources(self, sources: Mapping[str, Any]) -> "Config":
        """``data_sources``: merged by name."""
        return self._merge("data_sources", sources)

    def data_sinks(self, sinks: Mapping[str, Any]) -> "Config":
        """``data_sinks``: merged by name."""
        return self._merge("data_sinks", sinks)

    def deadletter_sinks(self, sinks: Mapping[str, Any]) -> "Config":
        """``deadletter_sinks``: merged by name."""
        return self._merge("deadletter_sinks", sinks)

    def schema_sinks(self, sinks: Mapping[str, Any]) -> "Config":
        """``schema_sinks``: merged by name."""
        return self._merge("schema_sinks", sinks)

    def to_dict(self) -> dict[str, Any]:
        """A copy of the document."""
        return copy.deepcopy(self._doc)

    def to_yaml(self) -> str:
        """The document as YAML (what ``save`` writes)."""
        return _skippr._config_to_yaml(json.dumps(self._doc))

    def check(self) -> "Config":
        """Load and validate it as ``Session`` would; raises ``ConfigError`` naming the key."""
        _skippr._check_config(self.to_yaml())
        return self

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write ``to_yaml()`` to ``path`` (e.g. ``skippr.yml``); returns the path."""
        path = os.fspath(path)
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_yaml())
        return path

    def __repr__(self) -> str:
        return f"skippr.Config({self._doc!r})"
