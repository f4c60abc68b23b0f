"""The audio frame every stage shares: 1920 samples of 24 kHz mono, 80 ms.

Mimi's codec fixes both numbers (one frame is one model step), so they are written once here
and everything else is derived from them. This is the lowest layer: it imports nothing from
`app`.
"""

SAMPLE_RATE = 24000  # Hz: Mimi's rate, used by capture, playback, the engine and the ASR
FRAME_SAMPLES = 1920  # samples in one frame: one model step
FRAME_S = FRAME_SAMPLES / SAMPLE_RATE  # 0.08 s
FRAME_MS = FRAME_S * 1000.0  # 80.0 ms: the real-time budget of one step
FRAME_RATE = SAMPLE_RATE / FRAME_SAMPLES  # 12.5 frames a second
