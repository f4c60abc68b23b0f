"""The conversation: one config, one assembler, the pipeline that wires the stages, the
desktop session's lifecycle, headless runs, and the transcript."""
