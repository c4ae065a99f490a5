"""Bulk builds pause the garbage collector and always leave it as they found it."""

import gc

import pytest

from streammap.errors import StreamMapError
from streammap.io.bulk import gc_paused
from streammap.io.importers import load_graph
from streammap.io.yamlfile import load_yaml


def test_the_collector_is_paused_inside_and_back_on_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_back_on_after_an_error():
    with pytest.raises(KeyError), gc_paused():
        raise KeyError("x")
    assert gc.isenabled()


def test_a_collector_someone_else_switched_off_stays_off():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_nested_pauses_switch_it_on_only_at_the_outermost_exit():
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_reading_a_bad_file_leaves_the_collector_on(tmp_path):
    (tmp_path / "bad.json").write_text('{"nodes": [')
    (tmp_path / "bad.yaml").write_text("a: [1\n")
    with pytest.raises(StreamMapError):
        load_graph(tmp_path / "bad.json")
    with pytest.raises(StreamMapError):
        load_yaml(tmp_path / "bad.yaml")
    assert gc.isenabled()


def test_a_structure_built_with_freeze_is_kept_out_of_later_collector_passes():
    gc.unfreeze()
    try:
        with gc_paused(freeze=True):
            graph = [{"id": i} for i in range(1000)]
        assert gc.isenabled()
        assert gc.get_freeze_count() >= len(graph)
    finally:
        gc.unfreeze()


def test_a_block_that_fails_freezes_nothing():
    gc.unfreeze()
    with pytest.raises(ValueError):
        with gc_paused(freeze=True):
            raise ValueError("bad input")
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()
