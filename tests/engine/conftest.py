"""Engine tests: every test gets its own config and data folders (the engine process inherits them)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch, offline_hub):
    monkeypatch.setenv("STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    return tmp_path
