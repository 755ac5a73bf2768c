"""Audio core: load, clean, export, denoise. numpy in, numpy out; no Qt, no torch."""
