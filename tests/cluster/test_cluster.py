"""Cluster files: readable units, links, and errors that name the file, line and field."""

import math

import pytest

from streammap.cluster.model import cluster_from_dict, load_cluster
from streammap.errors import ClusterError
from streammap.units import parse_flops, parse_rate, parse_size, parse_time


@pytest.mark.parametrize("text,value", [
    ("80GiB", 80 * 2**30), ("512 MB", 512e6), ("1.5e9", 1.5e9), (4096, 4096.0), ("8Gb", 1e9), ("16 KiB", 16384.0),
])
def test_sizes(text, value):
    assert parse_size(text) == pytest.approx(value)


@pytest.mark.parametrize("text,value", [
    ("25 GB/s", 25e9), ("100 Gb/s", 12.5e9), ("300GiB/s", 300 * 2**30), (1, 1.0), ("12.5 GB/s", 12.5e9),
])
def test_rates(text, value):
    assert parse_rate(text) == pytest.approx(value)


def test_times_and_flops():
    assert parse_time("10us") == pytest.approx(1e-5)
    assert parse_time("3 ms") == pytest.approx(3e-3)
    assert parse_time(0) == 0.0
    assert parse_flops("19.5 TFLOP/s") == pytest.approx(19.5e12)
    assert parse_flops("2 TFLOPS") == pytest.approx(2e12)


@pytest.mark.parametrize("bad", ["lots", "-3GB", "10 parsecs", True])
def test_unreadable_sizes_say_what_to_write(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize("name", ["hetero-2x4", "mixed-vendors", "small-memory", "cholesky-node", "topcuoglu-3p"])
def test_shared_clusters_load(name, shared):
    c = load_cluster(shared / "clusters" / f"{name}.yaml")
    assert len(c.devices) >= 3
    assert all("/" in d.id for d in c.devices)


def test_links_inside_a_node_and_across_nodes(shared):
    c = load_cluster(shared / "clusters" / "hetero-2x4.yaml")
    bw, lat = c.link_matrices()
    a0, a1, v0 = c.index["a100/gpu0"], c.index["a100/gpu1"], c.index["v100/gpu0"]
    assert bw[a0, a1] == pytest.approx(300e9) and lat[a0, a1] == pytest.approx(3e-6)
    assert bw[a0, v0] == pytest.approx(12.5e9) and lat[a0, v0] == pytest.approx(1e-5)
    assert math.isinf(bw[a0, a0]) and lat[a0, a0] == 0


def test_device_constraints_match_kind_vendor_and_model():
    c = cluster_from_dict({"name": "x", "network": {"bandwidth": 1e9}, "nodes": [
        {"name": "a", "link": {"bandwidth": 1e10}, "devices": [
            {"name": "g", "kind": "gpu", "vendor": "nvidia", "model": "A100-SXM4-80GB"},
            {"name": "m", "kind": "mlu", "vendor": "cambricon", "model": "MLU370-X8"}]},
        {"name": "b", "devices": [{"name": "c", "kind": "cpu"}]}]})
    g, m, cpu = c.devices
    assert g.matches("gpu") and g.matches("nvidia") and g.matches("a100") and not g.matches("cpu")
    assert m.matches("mlu") and m.matches("gpu|mlu") and not m.matches("nvidia")
    assert cpu.matches("any") and cpu.matches(None) and math.isinf(cpu.memory)


def _write(tmp_path, text):
    p = tmp_path / "cluster.yaml"
    p.write_text(text)
    return p


def test_missing_link_between_devices_of_a_node_is_an_error(tmp_path):
    p = _write(tmp_path, "name: x\nnodes:\n  - name: n\n    devices:\n      - {name: a, kind: gpu}\n      - {name: b, kind: gpu}\n")
    with pytest.raises(ClusterError) as e:
        load_cluster(p)
    assert e.value.line == 3 and "no 'link'" in e.value.message


def test_missing_network_between_nodes_is_an_error(tmp_path):
    p = _write(tmp_path, "name: x\nnodes:\n  - name: n\n    devices: [{name: a, kind: gpu}]\n  - name: m\n    devices: [{name: a, kind: gpu}]\n")
    with pytest.raises(ClusterError, match="no 'network'"):
        load_cluster(p)


def test_duplicate_device_names_are_an_error(tmp_path):
    p = _write(tmp_path, "name: x\nnodes:\n  - name: n\n    link: {bandwidth: 1GB/s}\n    devices: [{name: a, kind: gpu}, {name: a, kind: cpu}]\n")
    with pytest.raises(ClusterError, match="appears twice"):
        load_cluster(p)


def test_bad_yaml_names_the_line(tmp_path):
    p = _write(tmp_path, "name: x\nnodes: [\n  - name\n")
    with pytest.raises(ClusterError) as e:
        load_cluster(p)
    assert e.value.line is not None and "YAML" in e.value.message


def test_negative_speed_names_the_field(tmp_path):
    p = _write(tmp_path, "name: x\nnodes:\n  - name: n\n    devices:\n      - name: a\n        kind: gpu\n        speed: -1\n")
    with pytest.raises(ClusterError) as e:
        load_cluster(p)
    assert e.value.line == 7 and "nodes[0].devices[0].speed" in e.value.message


def test_missing_file():
    with pytest.raises(ClusterError, match="not found"):
        load_cluster("/nonexistent/cluster.yaml")


@pytest.mark.parametrize("field, value, message", [
    ("memory", "9" * 401, "nodes[0].devices[0].memory"),
    ("speed", "9" * 401, "nodes[0].devices[0].speed"),
    ("index", "9" * 401, "less than or equal to 65535"),
    ("index", "-1", "greater than or equal to 0"),
    ("flops", ".nan", "expected a non-negative compute rate"),
])
def test_huge_and_odd_numbers_are_errors_naming_the_field(tmp_path, field, value, message):
    path = tmp_path / "c.yaml"
    path.write_text(f"name: a\nnodes:\n  - name: n\n    devices:\n      - {{name: g, kind: gpu, {field}: {value}}}\n")
    with pytest.raises(ClusterError, match=message.replace("[", r"\[").replace("]", r"\]")) as exc:
        load_cluster(path)
    assert exc.value.line == 5
