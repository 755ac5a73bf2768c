# The studio installs WebRTC's VAD as the "webrtcvad-wheels" distribution; the stock hook wants "webrtcvad".
from PyInstaller.utils.hooks import copy_metadata

datas = copy_metadata("webrtcvad-wheels")
