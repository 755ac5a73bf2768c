"""The Qt GUI (PySide6 + pyqtgraph). Never imports torch, vllm or studio.tts."""
