// The test page's audio thread: the microphone cut into frames, and a player for the frames
// that come back.

// 128-sample render quanta gathered into frames of `frameSize` samples, posted whole.
class MicFrames extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.frameSize = options.processorOptions.frameSize;
    this.frame = new Float32Array(this.frameSize);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    let read = 0;
    while (read < channel.length) {
      const take = Math.min(channel.length - read, this.frameSize - this.filled);
      this.frame.set(channel.subarray(read, read + take), this.filled);
      this.filled += take;
      read += take;
      if (this.filled === this.frameSize) {
        this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
        this.frame = new Float32Array(this.frameSize);
        this.filled = 0;
      }
    }
    return true;
  }
}

// Frames (ArrayBuffers of float32) queued and played in order; silence while none waits.
// Says how many it has started playing.
class FramePlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = [];
    this.current = null;
    this.at = 0;
    this.played = 0;
    this.port.onmessage = (e) => this.queue.push(new Float32Array(e.data));
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    for (let i = 0; i < out.length; i++) {
      if (this.current === null || this.at === this.current.length) {
        this.current = this.queue.shift() || null;
        this.at = 0;
        if (this.current === null) { out.fill(0, i); break; }
        this.played += 1;
        this.port.postMessage({ played: this.played });
      }
      out[i] = this.current[this.at++];
    }
    return true;
  }
}

registerProcessor("mic-frames", MicFrames);
registerProcessor("frame-player", FramePlayer);
