"""The takes panel lists stored takes newest first and renames, deletes and exports the selection."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from studio.gui.take.takes_panel import TakesPanel, describe_stats
from studio.takes import TakeStore

pytestmark = pytest.mark.gui


def test_list_rename_delete_and_export_many(qtbot, tmp_path):
    store = TakeStore(tmp_path / "takes")
    audio = (0.2 * np.sin(np.arange(12000) * 0.05)).astype(np.float32)
    first = store.add(audio, 24000, text="first take", stats={"first_chunk_latency": 0.25, "rtf": 0.4})
    second = store.add(audio, 24000, text="second take")
    panel = TakesPanel(store)
    qtbot.addWidget(panel)
    items = [panel.tree.topLevelItem(i) for i in range(panel.tree.topLevelItemCount())]
    assert [item.text(0) for item in items] == ["second take", "first take"]
    assert (items[1].text(2), items[1].text(3)) == ("250 ms", "0.40")

    panel.rename(first.id, "Best")
    assert store.get(first.id).name == "Best"
    panel.tree.selectAll()
    panel.export_format.setCurrentIndex(panel.export_format.findData("flac"))
    out = tmp_path / "out"
    out.mkdir()
    with qtbot.waitSignal(panel.sig_exported, timeout=5000):
        written = panel.export_selected(folder=out)
    assert sorted(p.name for p in written) == ["Best.flac", "second take.flac"]
    assert all(sf.info(p).samplerate == 24000 for p in written)

    panel.set_denoise_pending(second.id, True)
    assert panel.tree.topLevelItem(0).text(4) == "…"
    panel.set_denoise_pending(second.id, False)
    panel.refresh(select=second.id)
    panel.delete_selected(confirm=False)
    assert [t.id for t in store.list()] == [first.id]
    assert panel.tree.topLevelItemCount() == 1


def test_a_latency_of_a_second_or_more_fits_its_column_in_seconds(qtbot, tmp_path):
    store = TakeStore(tmp_path / "takes")
    take = store.add(
        np.zeros(2400, dtype=np.float32),
        24000,
        text="Slow first audio.",
        stats={"first_chunk_latency": 1.209, "rtf": 0.2},
    )
    assert describe_stats(take)[0] == "1.2 s"
    panel = TakesPanel(store)
    qtbot.addWidget(panel)
    panel.resize(420, 400)
    panel.show()
    item = panel.tree.topLevelItem(0)
    shown = panel.tree.fontMetrics().horizontalAdvance(item.text(2))
    assert shown <= panel.tree.header().sectionSize(2) - 8  # not elided ("1209…")
