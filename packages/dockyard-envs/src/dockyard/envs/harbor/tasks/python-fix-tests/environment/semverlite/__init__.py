"""Semantic Versioning 2.0.0 (https://semver.org) versions: parsing, precedence, bumping."""

from semverlite.version import Version, bump, sort_versions

__all__ = ["Version", "bump", "sort_versions"]
