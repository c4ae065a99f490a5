"""Every YAML file is read within bounds: no aliases, bounded nesting and size, text only; and
every field keeps the line it is on, for messages."""

import json
import random

import pytest
import yaml

from streammap import plan as plan_module
from streammap.compiler import compile as compile_plan
from streammap.errors import StreamMapError
from streammap.io import yamlfile
from streammap.io.yamlfile import PureSafeDumper, dump_yaml, line_of, load_yaml


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


# ---------------------------------------------------------------------- writing

def _pure(data, **options):
    """What PyYAML's pure-Python safe dumper writes: the reference for every byte (its representer
    but for strings holding U+0085, which it writes double-quoted: see the NEL test below)."""
    return yaml.dump(data, Dumper=PureSafeDumper, **options)


WRITTEN = [
    {"name": "plan", "tasks": [{"id": "t0", "device": "gpu0", "start": 0.0, "finish": 1.5e-06, "args": []},
                               {"id": "t1", "deps": ["t0"], "kwargs": {}, "ok": True, "site": None}]},
    {"floats": [0.1, -0.0, 1e20, 1e-300, 123456789.123, float("inf"), float("-inf"), float("nan")],
     "ints": [0, -1, 2**70], "bools": [True, False], "nothing": None},
    {"strings": ["", "yes", "no", "null", "~", "1.0", "0x1F", "2024-01-01", "a: b", "- x", "#c", " pad ", "é ✓",
                 "line\nbreak", "tab\there", "x" * 250, "'quoted'", '"dq"', "&anchor", "*alias", "!tag",
                 "trailing ", "word " * 60, "\x85next", "\u2028sep", "ctl\x07", "\ufeffbom", "%percent", "@at",
                 "`tick", "? q", "{b}", "[s]", "true", "off", "1_000", ".5", "1e3", "+1", "0o17", "=", "<<"]},
    {"nested": {"deep": {"deeper": [[1, 2], [], {}, [{"k": [1, {"z": None}]}]]}}, 1: "int key", "b": {"a": 1}},
    [],
    "a bare scalar",
    3.0,
]


@pytest.mark.parametrize("data", WRITTEN, ids=range(len(WRITTEN)))
@pytest.mark.parametrize("options", [
    dict(sort_keys=False, default_flow_style=None, width=100, allow_unicode=True),     # plans
    dict(sort_keys=True, default_flow_style=False, width=120),                         # cluster files
    dict(sort_keys=False, default_flow_style=True),
])
def test_dump_yaml_writes_the_bytes_the_pure_python_dumper_writes(data, options):
    assert dump_yaml(data, **options) == _pure(data, **options)


def test_dump_yaml_with_either_emitter_writes_the_same_bytes():
    options = dict(sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)
    for data in WRITTEN:
        assert dump_yaml(data, dumper=PureSafeDumper, **options) == _pure(data, **options)


def test_every_character_is_written_as_the_pure_python_dumper_writes_it():
    options = dict(sort_keys=False, default_flow_style=None, width=100, allow_unicode=True)
    chars = [chr(c) for c in [*range(0x250), *range(0x2000, 0x2100), 0xd7ff, 0xe000, 0xfeff, 0xfffd, 0xfffe,
                              0xffff, 0x10000, 0x1f600]]
    for ch in chars:
        for text in (ch, f"x{ch}y", "word " * 30 + ch + " end" * 20, ch + " "):
            data = {"a": [text, "k"], "b": text}
            assert dump_yaml(data, **options) == _pure(data, **options), hex(ord(ch))


def test_shared_containers_and_other_types_are_written_as_pyyaml_writes_them():
    shared = [1, 2]
    for data in ({"a": shared, "b": shared}, {"t": (1, 2)}, {"mixed keys": {1: "a", "b": 2}}):
        assert dump_yaml(data, sort_keys=True) == _pure(data, sort_keys=True)
    assert "&id001" in dump_yaml({"a": shared, "b": shared})     # the anchor PyYAML writes, kept


def test_written_yaml_reads_back_as_the_same_data(tmp_path):
    data = WRITTEN[0] | {"floats": [0.1, 1e20, -0.0]}
    path = tmp_path / "w.yaml"
    path.write_text(dump_yaml(data, sort_keys=False, default_flow_style=None))
    assert load_yaml(path)[0] == data


def test_a_compiled_plan_is_written_byte_for_byte_as_the_pure_python_dumper_writes_it(samples, monkeypatch):
    plan = compile_plan(samples / "fm_radio.py", samples / "clusters" / "tiny-gpus.yaml")
    fast = plan.to_yaml()
    monkeypatch.setattr(plan_module, "dump_mapping_yaml",
                        lambda data, long_key, width: _pure(data, **PLAN_OPTIONS, width=width))
    assert fast == plan.to_yaml()


def test_a_workflow_plan_has_its_task_list_written_directly_and_byte_for_byte(samples, tmp_path, monkeypatch):
    """A workflow's task ids are bare words: the task list takes the direct path, same bytes."""
    graph = {"graph": {"name": "w"}, "edges": [{"source": f"t{i}", "target": f"t{j}", "bytes": 1e6}
                                               for i in range(40) for j in (i + 1, i + 7) if j < 40],
             "nodes": [{"id": f"t{i}", "kernel": f"k{i % 3}", "times": {"gpu": 1e-3 * (1 + i % 5)}}
                       for i in range(40)]}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(graph))
    plan = compile_plan(path, samples / "clusters" / "tiny-gpus.yaml")
    data = plan._yaml_data()
    assert yamlfile.block_sequence_text(data["tasks"], width=100) is not None      # the direct path ran
    fast = plan.to_yaml()
    monkeypatch.setattr(plan_module, "dump_mapping_yaml",
                        lambda data, long_key, width: _pure(data, **PLAN_OPTIONS, width=width))
    assert fast == plan.to_yaml()


PLAN_OPTIONS = dict(sort_keys=False, default_flow_style=None, allow_unicode=True)
WORDS = ["t1", "a_b", "node0/d1", "x.y-z", "K", "_", "long" * 30, "step_12"]
ODD = ["yes", "a b", "1a", "tile[1,0]@p.py:7", "", "é", "a:b", "Null"]


def _random_value(r, depth):
    c = r.random()
    if depth > 3 or c < 0.5:
        return r.choice([r.choice(WORDS), r.random() * 10 ** r.randint(-8, 8), r.randint(-5, 10**6), True, None,
                         1e-5, float("inf")])
    if c < 0.75:
        return [_random_value(r, depth + 1) for _ in range(r.randint(0, 30))]
    return {r.choice(WORDS + ["args", "deps"]): _random_value(r, depth + 1) for _ in range(r.randint(0, 5))}


@pytest.mark.parametrize("odd", [False, True])
def test_a_list_written_directly_has_the_bytes_pyyaml_writes_or_is_left_to_it(odd):
    """Random task-like lists (flow lists past the line width, nested block and flow collections):
    where the direct path writes the list, it writes PyYAML's bytes, as a top-level list and as the
    value of a key; where it gives up (odd strings), the caller writes it with PyYAML. Giving up is
    one path (the direct writer returns None, PyYAML writes the list): 40 lists show it."""
    written = 0
    for seed in range(40 if odd else 150):
        r = random.Random(seed)
        items = [{"id": r.choice(WORDS), "deps": [r.choice(WORDS[:5]) for _ in range(r.randint(0, 40))],
                  "v": _random_value(r, 0)} for _ in range(r.randint(1, 4))]
        if odd:
            items[-1]["deps"].append(r.choice(ODD))
        for width in (100, 80):
            text = yamlfile.block_sequence_text(items, width=width)
            whole = {"head": {"a": 1}, "tasks": items, "tail": {"b": [1]}}
            assert yamlfile.dump_mapping_yaml(whole, long_key="tasks", width=width) == \
                _pure(whole, **PLAN_OPTIONS, width=width)
            if text is None:
                continue
            written += 1
            assert text + "\n" == _pure(items, **PLAN_OPTIONS, width=width)
    assert (written == 0) if odd else (written > 75)


def test_a_list_that_holds_one_container_twice_is_left_to_pyyaml():
    shared = ["t1", "t2"]
    items = [{"id": "a", "deps": shared}, {"id": "b", "deps": shared}]
    assert yamlfile.block_sequence_text(items, width=100) is None
    data = {"h": {"x": shared}, "tasks": [{"id": "a", "deps": shared}]}
    assert yamlfile.dump_mapping_yaml(data, long_key="tasks", width=100) == _pure(data, **PLAN_OPTIONS, width=100)


# ---------------------------------------------------------------------- reading, as PyYAML reads

READ = [
    "a: 1\nb: -0x1F\nc: 0o17\nd: 017\ne: 1_000\nf: 1:30\ng: +12\n",
    "a: 1.5\nb: .inf\nc: -.Inf\nd: .NaN\ne: 1e3\nf: 6.8523015e+5\ng: 190:20:30.15\nh: 1_0.5\n",
    "a: yes\nb: No\nc: on\nd: OFF\ne: true\nf: ~\ng: null\nh:\ni: ''\nj: 'yes'\nk: \"1\"\n",
    "when: 2024-01-02\nat: 2001-12-14t21:59:43.10-05:00\nraw: !!binary aGVsbG8=\nset: !!set {a, b}\n",
    "pairs: !!omap [a: 1, b: 2]\nmerged: {<<: {a: 1, b: 2}, b: 3}\nstr: !!str 12\nint: !!int '7'\n",
    "nested: {a: [1, {b: [c, {d: e}]}], 2: two, 3.5: x, null: n, true: t}\n",
    "- plain\n- [flow, list]\n- {flow: map}\n- |\n  literal\n  block\n- >\n  folded\n  text\n",
    "just a scalar\n",
]


@pytest.mark.parametrize("text", READ, ids=range(len(READ)))
def test_load_yaml_builds_what_pyyaml_safe_load_builds(tmp_path, text):
    assert load(tmp_path, text)[0] == yaml.safe_load(text)


def test_an_unhashable_key_is_a_yaml_error_at_its_line(tmp_path):
    with pytest.raises(StreamMapError, match="unhashable") as exc:
        load(tmp_path, "a: 1\n? [x, y]\n: 2\n")
    assert exc.value.line == 2


# ---------------------------------------------------------------------- reading a plan's task list back

def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (the writer writes ``.nan``; NaN != NaN)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _load_both(path):
    fast = load_yaml(path, long_list="tasks")
    slow = load_yaml(path)
    return fast, slow


@pytest.mark.parametrize("width", [100, 80])
def test_a_task_list_the_writer_wrote_reads_back_as_the_loader_reads_it(tmp_path, width):
    """Random task-like lists (wrapped flow lists, nested block and flow collections, floats,
    bools, nulls): read directly, the same data and the same line of every field as the loader's."""
    read_directly = 0
    for seed in range(150):
        r = random.Random(seed)
        items = [{"id": r.choice(WORDS), "deps": [r.choice(WORDS[:5]) for _ in range(r.randint(0, 40))],
                  "v": _random_value(r, 0)} for _ in range(r.randint(1, 4))]
        whole = {"head": {"a": 1}, "tasks": items, "tail": {"b": [1]}}
        path = tmp_path / "p.yaml"
        path.write_text(yamlfile.dump_mapping_yaml(whole, long_key="tasks", width=width))
        (data, lines), (want, want_lines) = _load_both(path)
        assert _same(data, want) and _same(data, whole)
        assert dict(lines) == want_lines
        if yamlfile.block_sequence_text(items, width=width) is not None:
            read_directly += 1
            assert isinstance(lines, yamlfile._LinesOnDemand)             # the direct reader read it
            head, _, body = path.read_text().partition("\ntasks:\n")
            assert _same(yamlfile.read_block_list(body.partition("\ntail:")[0] + "\n"), items)
    assert read_directly > 40


@pytest.mark.parametrize("body", [
    "- {id: 'quoted'}\n",                 # quotes
    "- id: a  # a comment\n",
    "- id: &x a\n- id: b\n",              # an anchor
    "- id: yes\n",                        # YAML 1.1 reads a bool
    "- id: 017\n",                        # octal
    "- id: 1_000\n",
    "- id: 1:30\n",                       # sexagesimal
    "- id: a\n  deps: [a,b]\n",           # flow items without the writer's space
    "- id: a\n  deps: [a, , b]\n",
    "- id: a\n  deps: [a,\n    b, c\n    d]\n",
    "- id: a\n\tdeps: []\n",              # a tab
    "- id: a\r\n",
    "- id: a\n  id: b\n",                 # a repeated key
    "- id: a\n   x: 1\n",                 # odd indentation
    "- id:\n",                            # an empty value
    "- id: é\n",
])
def test_a_task_list_the_writer_would_not_write_is_left_to_the_loader(tmp_path, body):
    """The direct reader takes only what the writer writes; anything else reads as the loader
    reads it, errors included."""
    assert yamlfile.read_block_list(body) is None
    path = tmp_path / "p.yaml"
    path.write_bytes(f"name: p\ntasks:\n{body}tail: 1\n".encode())
    assert_read_as_the_loader_reads(path)


@pytest.mark.parametrize("text", [
    "tasks:\n- a\n",                                  # the key on the first line: not looked for
    "x: 1\ntasks:\n- a\ntasks: [b]\n",                # a repeated key: the loader keeps the last
    "x: {y: 1,\ntasks:\n- a\n}\n",                    # inside a flow mapping
    "x: 1\ntasks:\n- a\n\n- b\n",                     # a blank line in the list
    "- x\n- y\ntasks:\n- a\n",                        # not a mapping
])
def test_a_file_around_the_task_list_is_read_as_the_loader_reads_it(tmp_path, text):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert_read_as_the_loader_reads(path)


def test_an_error_in_a_plan_read_directly_names_its_line(samples, tmp_path):
    """Lines are found only for a message, and then they are the loader's."""
    plan = compile_plan(samples / "fm_radio.py", samples / "clusters" / "tiny-gpus.yaml")
    path = tmp_path / "p.yaml"
    plan_module.write_plan(plan, path)
    text = path.read_text()
    task = plan.tasks[3]
    moved = text.replace(f"- id: {task.id}\n  kernel: {task.kernel}\n  device: {task.device}\n",
                         f"- id: {task.id}\n  kernel: {task.kernel}\n  device: nowhere\n")
    assert moved != text
    path.write_text(moved)
    line = moved.splitlines().index(f"- id: {task.id}") + 1
    with pytest.raises(plan_module.PlanError, match="nowhere") as info:
        plan_module.read_plan(path)
    assert info.value.line == line


def test_repeated_rows_read_into_containers_of_their_own():
    """Rows that repeat from task to task are read once, but no two tasks share a list or a dict."""
    items = yamlfile.read_block_list("- id: a\n  deps: [s]\n  args:\n  - {ref: s}\n"
                                     "- id: b\n  deps: [s]\n  args:\n  - {ref: s}\n")
    assert items == [{"id": "a", "deps": ["s"], "args": [{"ref": "s"}]},
                     {"id": "b", "deps": ["s"], "args": [{"ref": "s"}]}]
    assert items[0]["deps"] is not items[1]["deps"] and items[0]["args"][0] is not items[1]["args"][0]


def assert_read_as_the_loader_reads(path):
    """Reading ``path`` with the direct task-list reader gives the loader's data and lines, or
    the loader's error at the same line."""
    try:
        want = load_yaml(path)
    except StreamMapError as exc:
        with pytest.raises(StreamMapError) as info:
            load_yaml(path, long_list="tasks")
        assert (info.value.message, info.value.line) == (exc.message, exc.line)
    else:
        data, lines = load_yaml(path, long_list="tasks")
        assert data == want[0] and dict(lines) == want[1]



@pytest.mark.parametrize("text", ["\x85", "a\x85b", "next\x85", "word " * 30 + "\x85 end"])
@pytest.mark.parametrize("options", [dict(sort_keys=False, default_flow_style=None, width=100, allow_unicode=True),
                                     dict(sort_keys=True, default_flow_style=False, width=120)])
def test_a_string_with_a_next_line_character_reads_back_as_written(tmp_path, text, options):
    # PyYAML's own emitter writes U+0085 (NEL) inside single quotes, where its reader folds it to
    # a space: a plan's string param came back changed, and its params digest refused the plan
    # the compiler had just written. Such a string is written double-quoted ("\N").
    path = tmp_path / "nel.yaml"
    plain = {"params": {"S": text}, "list": [text, "k"]}
    path.write_text(dump_yaml(plain, **options), encoding="utf-8")
    assert load_yaml(path)[0] == plain
    shared = [text]                          # an alias: written by PyYAML's own path
    path.write_text(dump_yaml({"a": shared, "b": shared}, **options), encoding="utf-8")
    assert yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader) == {"a": shared, "b": shared}
