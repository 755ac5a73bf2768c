"""Engine process, protocol and Qt-free client. Never imports Qt."""
