"""The settings dialog: one page per group of settings (folders, engine location, engine, transcripts,
audio); the dialog edits a copy of Settings, the window saves it and applies what changed."""

from studio.gui.settings.dialog import ENGINE_FIELDS, SettingsDialog, engine_changed

__all__ = ["ENGINE_FIELDS", "SettingsDialog", "engine_changed"]
