"""Live audio: devices, capture and playback streams, echo cancellation."""
