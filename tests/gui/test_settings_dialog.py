"""Settings edited in the dialog are saved, survive a restart, and a changed engine knob restarts the engine."""

from __future__ import annotations

import pytest

from studio.gui.settings import SettingsDialog, engine_changed
from studio.request import FAST_FIRST_HOP_TOKENS
from studio.settings import Settings, load_settings

pytestmark = pytest.mark.gui


def test_dialog_edits_are_persisted_and_applied(qtbot, tmp_path, monkeypatch):
    from studio.gui.app import create_window

    window = create_window(Settings(model_dir=""))
    qtbot.addWidget(window)
    restarts = []
    monkeypatch.setattr(window, "restart_engine", lambda: restarts.append(True))
    dialog = SettingsDialog(window.settings, window)
    dialog.backend.setCurrentIndex(dialog.backend.findData("pytorch"))
    dialog.max_num_seqs.setValue(64)
    dialog.output_dir.setText(str(tmp_path / "my takes"))
    dialog.export_rate.setCurrentIndex(dialog.export_rate.findData(48000))
    dialog.export_loudness.setValue(-18.0)
    new = dialog.result_settings()
    assert engine_changed(window.settings, new)
    window.apply_settings(new)

    saved = load_settings()
    assert (saved.backend, saved.max_num_seqs, saved.output_dir) == (
        "pytorch",
        64,
        str(tmp_path / "my takes"),
    )
    assert window.store.folder == tmp_path / "my takes" and window.takes_panel.store is window.store
    assert (saved.export_sample_rate, saved.export_loudness) == (48000, -18.0)
    assert window.takes_panel.mastering == (48000, -18.0)  # the takes' exports use them
    dialog.export_loudness.setValue(dialog.export_loudness.minimum())
    assert (
        dialog.export_loudness.text() == "loudness as made"
        and dialog.result_settings().export_loudness is None
    )
    assert restarts == []  # no model yet: nothing to restart
    assert not engine_changed(saved, dialog.result_settings())
    # "Start playing sooner" reaches each take's request, without restarting the engine
    assert window.takes.first_hop() == 0
    dialog.fast_first_audio.setChecked(True)
    faster = dialog.result_settings()
    assert not engine_changed(saved, faster)
    window.apply_settings(faster)
    assert load_settings().fast_first_audio and window.takes.first_hop() == FAST_FIRST_HOP_TOKENS
    window.shutdown()


def test_without_a_gpu_the_gpu_options_are_hidden_and_keep_their_values(qtbot):
    settings = Settings(backend="vllm", fp16=True, gpu_memory_utilization=0.35)
    dialog = SettingsDialog(settings, gpus=([], "the NVIDIA driver reports no GPU"))
    qtbot.addWidget(dialog)
    dialog.show()
    assert "No NVIDIA GPU found" in dialog.gpu_note.text() and "reports no GPU" in dialog.gpu_note.toolTip()
    assert not dialog.option_shown("fp16") and not dialog.option_shown("gpu_memory_utilization")
    assert not dialog.option_shown("enforce_eager") and dialog.option_shown("max_num_seqs")
    dialog.backend.setCurrentIndex(dialog.backend.findData("pytorch"))
    assert not dialog.option_shown("max_num_seqs")  # vLLM's knobs only with the vLLM backend
    kept = dialog.result_settings()
    assert kept.fp16 and kept.gpu_memory_utilization == 0.35  # hidden, not reset


def test_with_a_gpu_its_name_and_options_are_shown(qtbot):
    dialog = SettingsDialog(Settings(backend="vllm"), gpus=(["NVIDIA GeForce RTX 5090"], ""))
    qtbot.addWidget(dialog)
    dialog.show()
    assert "RTX 5090" in dialog.gpu_note.text()
    assert dialog.option_shown("fp16") and dialog.option_shown("gpu_memory_utilization")


def test_the_engine_can_live_on_a_server(qtbot):
    dialog = SettingsDialog(Settings(), gpus=([], "none"))
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.engine_url.isHidden()  # this computer: no URL to type
    dialog.engine_where.setCurrentIndex(dialog.engine_where.findData("server"))
    assert not dialog.engine_url.isHidden() and not dialog.engine_key.isHidden()
    dialog.engine_url.setText("http://gpu-box:8080")
    dialog.engine_key.setText("secret")
    new = dialog.result_settings()
    assert (new.engine_url, new.engine_key) == ("http://gpu-box:8080", "secret")
    assert engine_changed(Settings(), new)  # switching place restarts the engine
    dialog.engine_where.setCurrentIndex(0)
    assert dialog.result_settings().engine_url == ""
    with pytest.raises(ValueError, match="http"):
        Settings(engine_url="gpu-box:8080")


def test_the_model_folder_row_names_the_folders_family(qtbot, tmp_path, tiny_model_dir, tiny_cosyvoice3_dir):
    dialog = SettingsDialog(Settings(model_dir=str(tiny_cosyvoice3_dir)))
    qtbot.addWidget(dialog)
    kind = dialog.pages[0].model_kind
    assert kind.text() == "A CosyVoice3 folder (Fun-CosyVoice3-0.5B)"
    dialog.model_dir.setText(str(tiny_model_dir))
    assert kind.text() == "A CosyVoice2 folder (CosyVoice2-0.5B)"
    (tmp_path / "cosyvoice3.yaml").write_text("{}")
    dialog.model_dir.setText(str(tmp_path))
    assert kind.text().startswith("An incomplete CosyVoice3 folder") and "llm.pt" in kind.text()
    dialog.model_dir.setText(str(tmp_path / "nowhere"))
    assert kind.text() == "Not a folder"
