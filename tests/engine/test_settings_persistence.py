"""Settings: JSON round trip in STUDIO_CONFIG_DIR, atomic write, bad files give defaults and a warning."""

from __future__ import annotations

import dataclasses
import json

import pytest

from studio.settings import (
    Settings,
    SettingsWarning,
    config_dir,
    data_dir,
    load_settings,
    save_settings,
    settings_path,
)


def test_round_trip_in_the_overridden_config_dir(isolated_dirs):
    changed = dataclasses.replace(
        Settings(),
        model_dir="/models/cv2",
        backend="pytorch",
        fp16=True,
        max_num_seqs=4,
        gpu_memory_utilization=0.5,
        audio_output_device="null",
    )
    path = save_settings(changed)
    assert path == isolated_dirs / "config" / "settings.json"
    assert load_settings() == changed
    assert not [p for p in path.parent.iterdir() if p.name != "settings.json"]  # no temp file left


def test_missing_file_gives_defaults_silently(recwarn):
    assert load_settings() == Settings()
    assert not [w for w in recwarn if issubclass(w.category, SettingsWarning)]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "", "\x00\x01"])
def test_corrupt_file_gives_defaults_and_a_warning(content):
    config_dir(create=True)
    settings_path().write_text(content)
    with pytest.warns(SettingsWarning, match="corrupt"):
        assert load_settings() == Settings()


def test_bad_fields_fall_back_one_by_one():
    config_dir(create=True)
    settings_path().write_text(
        json.dumps(
            {
                "fp16": True,
                "backend": "tensorrt",
                "max_num_seqs": "many",
                "gpu_memory_utilization": 1,
                "mystery": 3,
            }
        )
    )
    with pytest.warns(SettingsWarning) as record:
        settings = load_settings()
    message = str(record[0].message)
    assert "mystery" in message and "backend" in message and "max_num_seqs" in message
    assert settings.fp16 is True and settings.gpu_memory_utilization == 1.0
    assert settings.backend == Settings().backend and settings.max_num_seqs == Settings().max_num_seqs


def test_validation_and_vllm_options():
    with pytest.raises(ValueError, match="backend"):
        Settings(backend="onnx")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        Settings(gpu_memory_utilization=0)
    options = Settings(enforce_eager=True, max_model_len=2048).vllm_options()
    assert options["enforce_eager"] is True and options["max_model_len"] == 2048


def test_data_dir_override_and_output_dir(isolated_dirs):
    assert data_dir() == isolated_dirs / "data"
    assert Settings().resolved_output_dir() == isolated_dirs / "data" / "takes"
    assert Settings(output_dir="/x/y").resolved_output_dir().as_posix() == "/x/y"


def test_reading_settings_creates_no_folder_and_saving_names_an_unusable_one(tmp_path, monkeypatch):
    from studio.atomic_files import DiskError

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for config in (tmp_path / "gone" / "config", blocker / "config"):
        monkeypatch.setenv("STUDIO_CONFIG_DIR", str(config))
        assert load_settings() == Settings() and settings_path().parent == config
        assert not config.exists()
    with pytest.raises(DiskError, match="a-file"):
        save_settings(Settings())
