"""Live audio: devices, capture and playback streams, echo cancellation, the user's
leveller, and the sources that stand in for a microphone (a file, silence)."""
