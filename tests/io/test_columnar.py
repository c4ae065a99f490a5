"""Named 1-D arrays in an ``.npz``: strings as UTF-8 bytes and offsets, nothing that needs pickle."""

import numpy as np
import pytest

from streammap.errors import StreamMapError
from streammap.io.columnar import decode_strings, encode_strings, read_columns, write_columns


def test_strings_of_any_length_and_script_round_trip():
    values = ["t0", "", "bandpass[3]@fm_radio.py:21", "ü→λ" * 50]
    utf8, off = encode_strings(values)
    assert off.size == len(values) + 1
    assert decode_strings(utf8, off) == values


def test_offsets_that_do_not_cut_the_bytes_are_refused():
    utf8, off = encode_strings(["ab", "cd"])
    with pytest.raises(StreamMapError, match="offsets do not cut"):
        decode_strings(utf8, off[:-1])


def test_columns_round_trip_and_only_numeric_1d_arrays_are_written(tmp_path):
    cols = {"a": np.arange(5), "b": np.linspace(0, 1, 3), "c": np.array([True, False])}
    write_columns(tmp_path / "x.npz", cols)
    back = read_columns(tmp_path / "x.npz")
    assert set(back) == set(cols) and all((back[k] == cols[k]).all() for k in cols)
    with pytest.raises(ValueError):
        write_columns(tmp_path / "y.npz", {"s": np.array(["text"])})
    assert not (tmp_path / "y.npz").exists()


def test_a_file_that_is_not_an_npz_is_a_clear_error(tmp_path):
    (tmp_path / "x.npz").write_text("hello")
    with pytest.raises(StreamMapError, match="not a readable file"):
        read_columns(tmp_path / "x.npz")
