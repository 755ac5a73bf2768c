"""GPU sampling through NVML (nvidia-ml-py); Qt-free so the doctor command and the GUI share it."""
