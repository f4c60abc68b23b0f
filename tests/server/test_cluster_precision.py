"""`serve --cluster --precision P`: every replica loads its speech model in P, as `serve
--precision P` does (it was refused before: the replicas never got it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("ray.serve", reason="the cluster needs Ray Serve (pip install -e '.[cluster]')")

from app.conversation.config import ConversationConfig
from app.server.cli import add_serve_parser
from app.server.cluster import ClusterSettings, EngineReplica


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16),
                                                  ("fp32", torch.float32)])
def test_a_replica_loads_the_speech_model_in_the_clusters_precision(
        tiny_folder: Path, precision: str, dtype: torch.dtype) -> None:
    speech = ConversationConfig(model_id="tiny", device="cpu", custom_folder=str(tiny_folder),
                                precision=precision)
    replica = EngineReplica(ClusterSettings(conversation=speech, gpus_per_replica=0.0))
    try:
        assert next(replica.host.checkpoint.lm.parameters()).dtype == dtype
    finally:
        replica.host.close()


def test_serve_cluster_takes_precision_from_the_command_line(monkeypatch) -> None:
    import argparse

    from app.server import cli, cluster

    given: list[ClusterSettings] = []
    monkeypatch.setattr(cluster, "run_cluster", lambda settings, _address: given.append(settings)
                        or 0)
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", "--cluster", "--model", "tiny", "--device", "cpu",
                              "--precision", "bf16", "--host", "127.0.0.1"])
    assert cli.run_serve(args) == 0
    assert [s.conversation.precision for s in given] == ["bf16"]
