"""The reference voice: import, record, clean, transcribe and save it."""
