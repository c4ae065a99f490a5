"""Every YAML file is read within bounds: no aliases, bounded nesting and size, text only; and
every field keeps the line it is on, for messages."""

import pytest

from streammap.errors import StreamMapError
from streammap.io import yamlfile
from streammap.io.yamlfile import line_of, load_yaml


def load(tmp_path, text):
    path = tmp_path / "f.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return load_yaml(path)


def test_fields_keep_their_lines(tmp_path):
    data, lines = load(tmp_path, "name: a\nnodes:\n  - name: n\n    devices: [{name: g}]\n")
    assert data["nodes"][0]["devices"][0]["name"] == "g"
    assert lines[("nodes", 0, "name")] == 3 and line_of(lines, ("nodes", 0, "devices", 0, "kind")) == 4


def test_an_anchor_alone_is_fine_but_an_alias_is_refused_where_it_is_used(tmp_path):
    assert load(tmp_path, "a: &x 1\nb: 2\n")[0] == {"a": 1, "b": 2}
    with pytest.raises(StreamMapError, match="aliases") as exc:
        load(tmp_path, "a: &x [1, 2]\nb: 2\nc: *x\n")
    assert exc.value.line == 3


def test_a_self_containing_alias_is_refused(tmp_path):
    with pytest.raises(StreamMapError, match="aliases"):
        load(tmp_path, "name: &x [*x]\n")


def test_nesting_is_bounded_before_anything_is_built(tmp_path):
    deep = "a: " + "[" * (yamlfile.MAX_YAML_DEPTH + 5) + "]" * (yamlfile.MAX_YAML_DEPTH + 5) + "\n"
    with pytest.raises(StreamMapError, match="nested more than 100 levels"):
        load(tmp_path, deep)


def test_size_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(yamlfile, "MAX_YAML_BYTES", 10)
    with pytest.raises(StreamMapError, match=r"too large: 18 bytes \(limit: 10 bytes\)"):
        load(tmp_path, "name: a-long-name\n")


@pytest.mark.parametrize("raw, message", [
    (b"name: a\xff\n", "not UTF-8"),
    (b"name: a\x00\n", "not valid YAML"),
    (b"name: 2024-99-99\n", "not valid YAML"),
    (b"? [a, b]\n: 1\n", "not valid YAML"),
    (b"!!python/object:os.system x\n", "not valid YAML"),
])
def test_text_that_is_not_plain_yaml_is_a_clean_error(tmp_path, raw, message):
    with pytest.raises(StreamMapError, match=message):
        load(tmp_path, raw)


def test_a_folder_is_not_a_yaml_file(tmp_path):
    with pytest.raises(StreamMapError, match="is a folder"):
        load_yaml(tmp_path)
