"""The echo guard: takes the cascade's own voice out of the room audio before it is heard.

Where the room echoes, the room audio holds Aria's own output again, delayed and scaled. For each
room frame the guard finds, among Aria's output of the last ``tail_ms``, the stretch that best
explains the frame (the lag with the largest least-squares gain fit, by cross-correlation) and
subtracts that scaled copy: a one-tap echo canceller. What remains (the residual) is what the room
detector and the ASR hear. A pure echo leaves next to nothing; a human talking over Aria stays
(the projection takes away only the part of the frame that looks like Aria's speech). Reverberant
rooms (many taps) are beyond it; :mod:`server.cascade.turns` adds the second guard (what arrives
while Aria talks is not transcribed unless it interrupted her).
"""

from __future__ import annotations

import numpy as np
from scipy.signal import correlate

from server.core.timebase import STREAM_RATE

ECHO_TAIL_MS = 500  # the longest echo delay the guard looks for


class EchoGuard:
    """One stream's canceller: :meth:`played` each assistant frame, :meth:`clean` each room frame."""

    def __init__(self, frame_samples: int, tail_ms: int = ECHO_TAIL_MS, rate: int = STREAM_RATE) -> None:
        if tail_ms < 0:
            raise ValueError("tail_ms must be non-negative")
        self.frame = frame_samples
        self.tail = tail_ms * rate // 1000
        self.reset()

    def reset(self) -> None:
        self._ref = np.zeros(self.tail + self.frame, dtype=np.float64)  # Aria's latest output, oldest first
        self._quiet = len(self._ref)  # trailing samples of _ref that are known silent (all of it)
        self.removed = 0.0  # energy taken out this episode (diagnostics)

    def played(self, out: np.ndarray | None) -> None:
        """Aria's output for one slot (None: silence)."""
        x = np.zeros(self.frame) if out is None else np.asarray(out, dtype=np.float64)
        self._ref = np.concatenate([self._ref[len(x):], x])
        self._quiet = min(self._quiet + len(x), len(self._ref)) if not x.any() else 0

    def clean(self, room: np.ndarray) -> np.ndarray:
        """The room frame with the best-fitting copy of Aria's recent output subtracted (int16)."""
        if self._quiet >= len(self._ref) or not room.any():
            return room
        y = room.astype(np.float64)
        c = correlate(self._ref, y, mode="valid", method="fft")  # c[k] = <ref[k:k+F], y>
        n = len(y)
        cs = np.concatenate([[0.0], np.cumsum(self._ref * self._ref)])
        energy = cs[n:] - cs[:-n]  # energy[k] = |ref[k:k+F]|^2
        fit = np.where(energy > 0, c * c / np.maximum(energy, 1e-9), 0.0)
        k = int(np.argmax(fit))
        if fit[k] <= 0:
            return room
        g = c[k] / energy[k]
        residual = y - g * self._ref[k:k + n]
        self.removed += float(fit[k])
        return np.clip(np.rint(residual), -32768, 32767).astype(np.int16)
