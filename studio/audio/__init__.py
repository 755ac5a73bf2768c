"""Audio core: load, clean, export, denoise. numpy in, numpy out; no Qt, no torch.

- ``io.load_audio(path)`` -> ``Audio`` (float32 mono, header checked first); ``io.probe(path)``.
- ``clean.clean_prompt(samples, rate, CleanOptions())`` -> ``CleanResult`` (16 kHz prompt + ``CleanReport``);
  ``clean.clean_file(in, out)`` writes a new file and never touches the original.
- ``export.export_take(samples, folder, name, fmt=...)`` -> ``ExportResult`` (atomic, never overwrites silently).
- ``denoise.DenoiseWorker().submit(samples, rate, callback)`` -> ``DenoiseJob`` (niced child, cancellable).
- Every failure is an ``errors.AudioError`` subclass whose message is written for the user.
"""
