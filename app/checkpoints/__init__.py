"""Checkpoints: the catalog of manifests (catalog.py, in `models/`), their download from the
Hugging Face Hub (downloader.py), the loader (loader.py; bare release weights:
release_weights.py), and the random-weight checkpoints the project builds itself in the
real layouts (builders.py: `python main.py build NAME`)."""
