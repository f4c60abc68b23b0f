"""Checkpoints: the catalog of manifests, the loader, and the tiny-checkpoint builder."""
