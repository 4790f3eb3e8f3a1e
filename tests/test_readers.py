"""Streaming svmlight / CSV readers: real files, every error named, fuzzing."""
from __future__ import annotations

import bz2
import csv
import gzip
import lzma
import re

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from nsdist.data import read_csv, read_svmlight
from nsdist.data.fs import DataNotFoundError


def _csr(chunks):
    """Concatenate SvmlightRows chunks into (labels, dense matrix)."""
    labels = np.concatenate([c.labels for c in chunks])
    d = max(c.max_index for c in chunks)
    return labels, np.vstack([c.to_dense(d) for c in chunks])


def _write(path, text: str | bytes, opener=open):
    data = text.encode() if isinstance(text, str) else text
    with opener(path, "wb") as f:
        f.write(data)
    return str(path)


# ----------------------------------------------------------------------------- svmlight


def test_svmlight_xz_matches_sklearn_in_bounded_chunks(shared_data):
    path = shared_data / "a9a" / "a9a.xz"
    chunks = list(read_svmlight(str(path), chunk_rows=5000))
    assert all(len(c.labels) <= 5000 for c in chunks) and len(chunks) == 7
    assert [int(c.lines[0]) for c in chunks] == [1 + 5000 * k for k in range(7)]
    y, X = _csr(chunks)
    with lzma.open(path) as f:
        X_ref, y_ref = load_svmlight_file(f)
    np.testing.assert_array_equal(X, X_ref.toarray())
    np.testing.assert_array_equal(y, np.where(y_ref > 0, 1, -1))
    assert (y > 0).sum() == 7841


def test_svmlight_details(tmp_path):
    text = ("# header comment\n"
            "+1 qid:3 1:0.5 3:-2 # trailing comment\r\n"
            "\n"
            "-1\n"
            "2.5 2:1e3\n")
    path = _write(tmp_path / "small.svm.gz", text, gzip.open)
    (rows,) = list(read_svmlight(path))
    np.testing.assert_array_equal(rows.labels, [1, -1, 1])
    np.testing.assert_array_equal(rows.lines, [2, 4, 5])
    np.testing.assert_array_equal(rows.to_dense(3), [[0.5, 0, -2], [0, 0, 0], [0, 1000, 0]])


def test_svmlight_positive_and_negative(tmp_path):
    path = _write(tmp_path / "multi.svm", "1 1:1\n2 1:2\n3 1:3\n2.0 1:4\n")
    (rows,) = list(read_svmlight(path, positive=2))
    np.testing.assert_array_equal(rows.labels, [-1, 1, -1, 1])
    (rows,) = list(read_svmlight(path, positive=2, negative=[3]))
    np.testing.assert_array_equal(rows.labels, [1, -1, 1])
    np.testing.assert_array_equal(rows.to_dense(1)[:, 0], [2, 3, 4])
    assert rows.dropped == 1


@pytest.mark.parametrize("line, message", [
    ("1 3:1 2:1", "line 3: feature index 2 follows 3; indices must be strictly increasing"),
    ("1 2:1 2:1", "line 3: feature index 2 follows 2"),
    ("1 0:1", "line 3: feature index 0 is not a positive integer (svmlight indices are 1-based)"),
    ("1 a:1", "line 3: feature index 'a' is not an integer"),
    ("1 2:x", "line 3: feature value 'x' is not a number"),
    ("1 2:nan", "line 3: feature value 'nan' is not finite"),
    ("1 2:inf", "line 3: feature value 'inf' is not finite"),
    ("x 1:1", "line 3: label 'x' is not valid"),
    ("nan 1:1", "line 3: label 'nan' is not valid"),
    ("1 2", "line 3: '2' is not an index:value pair"),
    ("1 9:1", "line 3: feature index 9 exceeds n_features = 5"),
])
def test_svmlight_errors_name_file_and_line(tmp_path, line, message):
    path = _write(tmp_path / "bad.svm", f"1 1:1\n-1 2:1\n{line}\n1 3:1\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        list(read_svmlight(path, n_features=5))


def test_missing_file_and_bad_compression(tmp_path):
    with pytest.raises(DataNotFoundError, match="nope.svm: no such file"):
        list(read_svmlight(str(tmp_path / "nope.svm")))
    path = _write(tmp_path / "broken.svm.xz", lzma.compress(b"1 1:1\n" * 1000)[:-40])
    with pytest.raises(ValueError, match=re.escape(f"{path}: cannot read the file after line")):
        list(read_svmlight(path))
    path = _write(tmp_path / "latin1.svm", b"1 1:1\n1 2:\xe9\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: line 2: not valid UTF-8")):
        list(read_svmlight(path))


# ----------------------------------------------------------------------------- CSV


def test_csv_quoted_labels_mammography(shared_data):
    path = shared_data / "mammography" / "mammography.csv"
    chunks = list(read_csv(str(path), label_column=-1, chunk_rows=4000))
    assert [len(c.labels) for c in chunks] == [4000, 4000, 3183]
    y = np.concatenate([c.labels for c in chunks])
    X = np.vstack([c.numeric for c in chunks])
    assert len(y) == 11183 and (y > 0).sum() == 260
    with open(path, newline="") as f:
        reference = [[float(v) for v in row[:-1]] for row in csv.reader(f)]
    np.testing.assert_array_equal(X, reference)


def test_csv_letter_positive_letter(repo_data):
    chunks = list(read_csv(str(repo_data / "letter" / "letter-recognition.data"), label_column=0,
                           positive="N", chunk_rows=1000))
    assert len(chunks) == 20 and all(len(c.labels) == 1000 for c in chunks)
    y = np.concatenate([c.labels for c in chunks])
    assert (y > 0).sum() == 783
    assert chunks[0].numeric.shape == (1000, 16)


def test_csv_header_categorical_and_compression(tmp_path):
    text = 'colour,size,"label"\n"red",1.5,1\n\nblue, 2 ,0\n\'red\',3,0\n'
    plain = _write(tmp_path / "t.csv", text)
    for path in (plain, _write(tmp_path / "t.csv.bz2", text, bz2.open),
                 _write(tmp_path / "t.csv.xz", text, lzma.open)):
        (rows,) = list(read_csv(path, categorical=["colour"]))
        np.testing.assert_array_equal(rows.labels, [1, -1, -1])
        np.testing.assert_array_equal(rows.lines, [2, 4, 5])
        np.testing.assert_array_equal(rows.numeric[:, 0], [1.5, 2, 3])
        assert rows.categorical[0].to_pylist() == ["red", "blue", "red"]


def test_csv_header_detection_and_override(tmp_path):
    path = _write(tmp_path / "n.csv", "5,6,1\n3,4,0\n")
    (rows,) = list(read_csv(path, label_column="col2"))
    assert len(rows.labels) == 2
    (rows,) = list(read_csv(path, label_column="1", header=True))
    assert len(rows.labels) == 1 and rows.lines[0] == 2


@pytest.mark.parametrize("line, message", [
    ("1,2", "line 3: expected 3 fields, found 2"),
    ("1,2,3,1", "line 3: expected 3 fields, found 4"),
    ("1,nan,1", "line 3, column 'b': value 'nan' is not finite"),
    ("1,-inf,1", "line 3, column 'b': value '-inf' is not finite"),
    ("1,abc,1", "line 3, column 'b': value 'abc' is not a number"),
    ("1,,1", "line 3, column 'b': value '' is not a number"),
    ("1,2,7", "line 3: label '7' is not valid"),
    ("1,2,", "line 3: label is missing"),
    ('1,"2,1', "line 3: malformed CSV"),
])
def test_csv_errors_name_file_line_and_column(tmp_path, line, message):
    path = _write(tmp_path / "bad.csv", f"a,b,label\n1,2,1\n{line}\n4,5,0\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        list(read_csv(path))


def test_csv_text_in_number_columns_names_them_all_as_categories_to_encode(tmp_path):
    """Columns of categories left unnamed fail at their first text with every such column named, in the
    option that one-hot encodes them; passing it reads the rows."""
    path = _write(tmp_path / "cat.csv", "a,proto,b,service,label\n1,tcp,2,http,1\n3,udp,4,ftp,0\n5,tcp,6,smtp,0\n")
    message = (f"{path}: line 2, column 'proto': value 'tcp' is not a number (2 columns of categories? one-hot "
               "encode them: categorical=['proto', 'service'])")
    with pytest.raises(ValueError, match=re.escape(message)):
        list(read_csv(path))
    (rows,) = list(read_csv(path, categorical=["proto", "service"]))
    assert rows.numeric.shape == (3, 2) and [c.to_pylist() for c in rows.categorical] == [
        ["tcp", "udp", "tcp"], ["http", "ftp", "smtp"]]


def test_csv_bad_options(tmp_path):
    path = _write(tmp_path / "x.csv", "a,b,label\n1,2,1\n")
    with pytest.raises(ValueError, match="label_column 'y' is not a column; the columns are"):
        list(read_csv(path, label_column="y"))
    with pytest.raises(ValueError, match="label_column 5 is out of range for 3 columns"):
        list(read_csv(path, label_column=5))
    with pytest.raises(ValueError, match="the label column 'label' cannot be categorical"):
        list(read_csv(path, categorical=["label"]))
    with pytest.raises(ValueError, match="duplicate column names"):
        list(read_csv(_write(tmp_path / "d.csv", "a,a,label\n1,2,1\n")))
    with pytest.raises(ValueError, match="has no data lines"):
        list(read_csv(_write(tmp_path / "e.csv", "\n\n")))
    with pytest.raises(ValueError, match="negative= needs positive="):
        list(read_csv(path, negative=0))


# ----------------------------------------------------------------------------- fuzzing

_SVM_ALPHABET = st.sampled_from(list("0123456789:.-+e #qidnaf\n\t\r") + ["1:1 ", "\n1 ", "qid:"])
_CSV_ALPHABET = st.sampled_from(list("0123456789,.-+e\"' nafx\n\r\t") + [",1\n", "\"\"", "1,2,1\n"])


def _only_value_errors(data: bytes, name: str, read) -> None:
    """Write ``data`` to a memory file, read it all: it parses, or raises ValueError."""
    url = f"memory://nsdist-fuzz/{name}"
    with fsspec.open(url, "wb") as f:
        f.write(data)
    try:
        for chunk in read(url):
            assert np.isin(chunk.labels, [-1, 1]).all()
    except ValueError:
        pass
    finally:
        fsspec.filesystem("memory").rm(url)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_SVM_ALPHABET, max_size=60).map("".join), raw=st.binary(max_size=40))
def test_fuzz_svmlight_raises_only_value_error(text, raw):
    for data in (text.encode(), raw):
        _only_value_errors(data, "f.svm", lambda url: read_svmlight(url, chunk_rows=3))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(_CSV_ALPHABET, max_size=60).map("".join), raw=st.binary(max_size=40),
       label=st.sampled_from([0, -1]), header=st.sampled_from([None, True, False]))
def test_fuzz_csv_raises_only_value_error(text, raw, label, header):
    for data in (text.encode(), raw):
        _only_value_errors(data, "f.csv",
                           lambda url: read_csv(url, label_column=label, header=header, chunk_rows=3))
