"""Playback: the audio player, the transport bar, the streamed take's preview and its waveform."""
