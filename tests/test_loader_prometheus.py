"""The trainer's loader metrics over HTTP (`fm_loader.prometheus.serve`), as Prometheus scrapes
them: a real loader over a shard set, scraped on loopback before and after it hands batches out.
"""

from __future__ import annotations

import itertools
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fm_loader import make_dataset, make_loader
from fm_loader.prometheus import serve
from tests.shard_sets import build, synthetic_docs


def scrape(port: int) -> dict[str, float]:
    """`name{labels}` -> value of every sample the endpoint serves."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


@pytest.fixture
def loader_and_port(tmp_path: Path) -> Iterator[tuple[Any, int]]:
    built = build(tmp_path / "set", synthetic_docs(200), 64, size_limit_bytes=8 << 10)
    loader = make_loader(make_dataset(str(built.directory)), batch_size=4)
    server = serve(loader.metrics, port=0, addr="127.0.0.1", rank=3)
    try:
        yield loader, server.server_port
    finally:
        server.shutdown()
        server.server_close()


def test_a_scrape_follows_the_loader_and_measures_the_trainers_wait(
    loader_and_port: tuple[Any, int],
) -> None:
    loader, port = loader_and_port
    before = scrape(port)
    assert before['fm_loader_batches_total{rank="3"}'] == 0
    for _batch in itertools.islice(loader, 10):
        time.sleep(0.002)  # the trainer's own step
    after = scrape(port)
    assert after['fm_loader_batches_total{rank="3"}'] == 10
    assert after['fm_loader_samples_total{rank="3"}'] == 40
    assert after['fm_loader_tokens_total{rank="3"}'] > 0
    waited = after['fm_loader_wait_seconds_total{rank="3"}']
    elapsed = after['fm_loader_elapsed_seconds_total{rank="3"}']
    # What the stall alert divides: the wait is part of the wall time, and the gauge agrees.
    assert 0 < waited < elapsed
    stall = after['fm_loader_stall_fraction{rank="3"}']
    assert stall == pytest.approx(waited / elapsed, rel=0.5)
    assert after['fm_loader_trainer_seconds_total{rank="3"}'] >= 9 * 0.002
