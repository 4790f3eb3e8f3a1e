"""Model artifacts: a linear scorer saved as plain data (docs/engine.md §Models), never pickle.

A model is a directory (local path or fsspec URL)::

    model.json              measure, parameters, feature names (a list, or for
                            generated names ``x0 .. x{d-1}`` the compact range
                            ``{"prefix": "x", "start": 0, "n": d}``) and dimension,
                            dataset fingerprint, history summary, version, time,
                            and the name + sha256 of the weights file
    weights-<sha12>.npy     float64 vector [w_1 .. w_d, b] (np.save, no pickle)

``model.json`` is the commit point: the weights file is written first under a
content-addressed name, then ``model.json`` is replaced atomically, then the
previous weights file is removed.  A reader sees the old model or the new one,
never a mix; a crash mid-save leaves the previous model loadable.

Wide models: ``n_features`` is stored, and generated names stay a
:class:`~nsdist._names.NameRange` in memory and a three-key object in JSON, so
saving and loading a 2^24-feature model costs about the time of writing and
hashing its 128 MiB of weights.  :meth:`LinearModel.decision_function` takes
dense arrays and scipy sparse matrices (CSR/CSC/COO ...).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from . import __version__
from ._names import NameRange, names_from_json, names_to_json, same_names
from .data.fs import access, atomic_write_bytes, is_there, resolve

__all__ = ["LinearModel", "load_model", "check_feature_names", "FORMAT_VERSION"]

FORMAT_VERSION = 1


@dataclass
class LinearModel:
    """A trained linear scorer ``s(x) = coef . x + intercept`` and what it was trained for.

    Attributes
    ----------
    coef : ndarray of shape (d,)
    intercept : float
    measure : str
        The measure optimised (``"pauc"``, ``"auc"``, ``"prec@k"``, ``"prbep"``, ``"f1"``).
    params : dict
        Solver and loss parameters (plain JSON values).
    feature_names : list of str or NameRange
        Default: ``NameRange("x", 0, d)``, i.e. ``x0 .. x{d-1}`` (compact).
    dataset_fingerprint : str or None
        Fingerprint of the training data.
    history : dict
        A summary of training (epochs, rows seen, seconds, final loss, ...).
    version, created : str
        Library version and UTC creation time.
    """

    coef: np.ndarray
    intercept: float
    measure: str
    params: dict = field(default_factory=dict)
    feature_names: list[str] | NameRange = field(default_factory=list)
    dataset_fingerprint: str | None = None
    history: dict = field(default_factory=dict)
    version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        self.coef = np.asarray(self.coef, dtype=np.float64).ravel()
        self.intercept = float(self.intercept)
        if isinstance(self.feature_names, dict):
            self.feature_names = names_from_json(self.feature_names, self.coef.shape[0], "feature_names")
        if len(self.feature_names) == 0:
            self.feature_names = NameRange("x", 0, self.coef.shape[0])
        elif not isinstance(self.feature_names, NameRange):
            self.feature_names = list(self.feature_names)
        if len(self.feature_names) != self.coef.shape[0]:
            raise ValueError(f"{len(self.feature_names)} feature names for {self.coef.shape[0]} weights")

    # scikit-learn style names
    @property
    def coef_(self) -> np.ndarray:
        return self.coef

    @property
    def intercept_(self) -> float:
        return self.intercept

    @property
    def n_features(self) -> int:
        return self.coef.shape[0]

    def decision_function(self, X) -> np.ndarray:
        """Scores ``X @ coef + intercept`` (float64, shape ``(n,)``).

        ``X``: a dense 2-D array or a scipy sparse matrix / array (used as CSR,
        never densified); a float32 ``X`` is multiplied in float32.
        """
        import scipy.sparse as sp

        if sp.issparse(X):
            X = _check_sparse(X)
        else:
            from ._validation import check_matrix

            X = check_matrix(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the model expects {self.n_features}")
        s = np.asarray(X @ self.coef.astype(X.dtype, copy=False)).ravel()
        return s.astype(np.float64, copy=False) + self.intercept

    def predict(self, X) -> np.ndarray:
        """Labels ``+1`` where the score is positive, else ``-1``."""
        return np.where(self.decision_function(X) > 0, 1, -1).astype(np.int8)

    def check_features(self, names: list[str], *, where: str = "the data") -> None:
        """Refuse data whose feature schema differs from the model's, naming the difference."""
        check_feature_names(names, self.feature_names, where=where)

    # ------------------------------------------------------------------ storage
    def metadata(self) -> dict[str, Any]:
        meta = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("coef", "intercept")}
        meta = json.loads(json.dumps(meta, default=_plain))   # a deep copy in plain JSON values
        meta["feature_names"] = names_to_json(self.feature_names)
        meta["n_features"] = self.n_features
        meta["format_version"] = FORMAT_VERSION
        return meta

    def save(self, url: str, storage_options: dict | None = None) -> str:
        """Save to the directory ``url`` atomically (see the module docstring); return ``url``."""
        so = storage_options or {}
        data = _npy_bytes(self.coef, self.intercept)
        digest = hashlib.sha256(data).hexdigest()
        fs, root = resolve(url, so)
        with access(fs, root, "write"):
            old = _read_json(fs, f"{root}/model.json").get("weights", {}).get("file") \
                if is_there(fs, f"{root}/model.json") else None
        weights_name = f"weights-{digest[:12]}.npy"
        atomic_write_bytes(_join(url, weights_name), data, so)
        meta = self.metadata()
        meta["weights"] = {"file": weights_name, "sha256": digest, "dtype": "float64",
                           "layout": "coef followed by intercept"}
        indent = 2 if isinstance(self.feature_names, NameRange) or self.n_features <= 10_000 else None
        atomic_write_bytes(_join(url, "model.json"), json.dumps(meta, indent=indent, sort_keys=True).encode(), so)
        if old and old != weights_name:
            try:
                fs.rm(f"{root}/{old}")
            except FileNotFoundError:
                pass
        return url

    @classmethod
    def load(cls, url: str, storage_options: dict | None = None) -> "LinearModel":
        """Load a model directory, verifying the weights' checksum and shape."""
        fs, root = resolve(url, storage_options)
        meta_path = f"{root}/model.json"
        with access(fs, root, "read"):
            found = is_there(fs, meta_path)
        if not found:
            raise ValueError(f"{url}: no model.json here — not an nsdist model directory")
        meta = _read_json(fs, meta_path)
        try:
            fmt = int(meta["format_version"])
            wmeta = meta.pop("weights")
            n = int(meta.pop("n_features"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{url}/model.json is not a valid nsdist model (missing or bad {exc})") from None
        if fmt > FORMAT_VERSION:
            raise ValueError(f"{url}: model format {fmt} is newer than this nsdist ({__version__}) reads")
        meta.pop("format_version")
        wpath = f"{root}/{wmeta['file']}"
        if "/" in wmeta["file"] or not is_there(fs, wpath):
            raise ValueError(f"{url}: weights file {wmeta['file']!r} named by model.json is missing")
        data = _read_into_array(fs, wpath)
        if hashlib.sha256(data).hexdigest() != wmeta["sha256"]:
            raise ValueError(f"{url}/{wmeta['file']}: checksum mismatch — the weights file is truncated or was modified")
        try:
            vec = _npy_vector(data)
        except (ValueError, EOFError) as exc:
            raise ValueError(f"{url}/{wmeta['file']}: not a plain .npy array ({exc})") from None
        if vec.shape != (n + 1,) or not np.all(np.isfinite(vec)):
            raise ValueError(f"{url}/{wmeta['file']}: expected {n + 1} finite values, got shape {vec.shape}")
        known = {f for f in cls.__dataclass_fields__}
        return cls(coef=vec[:n], intercept=float(vec[n]), **{k: v for k, v in meta.items() if k in known})


def _npy_bytes(coef: np.ndarray, intercept: float) -> bytearray:
    """The ``np.save`` file of the float64 vector ``[coef, intercept]``, built with one copy."""
    d = coef.shape[0]
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": (d + 1,)})
    header = head.getvalue()
    buf = bytearray(len(header) + 8 * (d + 1))
    buf[:len(header)] = header
    vec = np.frombuffer(buf, dtype="<f8", offset=len(header))
    vec[:d] = coef
    vec[d] = intercept
    return buf


def _read_into_array(fs, path: str) -> np.ndarray:
    """A file's bytes as a writeable uint8 array (read straight into it when the file allows)."""
    size = int(fs.size(path))
    buf = np.empty(size, dtype=np.uint8)
    try:
        with fs.open(path, "rb") as fh:
            got = 0
            view = memoryview(buf)
            while got < size:
                k = fh.readinto(view[got:])
                if not k:
                    break
                got += k
        if got == size:
            return buf
    except (AttributeError, NotImplementedError, io.UnsupportedOperation):
        pass
    return np.frombuffer(bytearray(fs.cat_file(path)), dtype=np.uint8)


def _npy_vector(data: np.ndarray) -> np.ndarray:
    """The 1-D array in ``.npy`` bytes, as a view (no pickles, no copy)."""
    head = io.BytesIO(data[:min(len(data), 65536 + 16)].tobytes())
    version = np.lib.format.read_magic(head)
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"unsupported .npy version {version}")
    shape, fortran, dtype = read(head)
    if dtype.hasobject or len(shape) != 1:
        raise ValueError(f"expected a 1-D numeric array, got shape {shape} of {dtype}")
    offset = head.tell()
    if len(data) - offset != shape[0] * dtype.itemsize:
        raise ValueError(f"{len(data) - offset} data bytes for {shape[0]} values of {dtype}")
    return data[offset:].view(dtype)


def _plain(obj):
    """JSON fallback for numpy scalars/arrays and name ranges in metadata."""
    if isinstance(obj, NameRange):
        return obj.to_json()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _check_sparse(X):
    """A scipy sparse matrix as float CSR with finite stored values."""
    X = X.tocsr()
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features), got shape {X.shape}")
    if not np.issubdtype(X.dtype, np.floating):
        if np.issubdtype(X.dtype, np.integer) or X.dtype == bool:
            X = X.astype(np.float64)
        else:
            raise ValueError(f"X must be numeric, got dtype {X.dtype}")
    finite = np.isfinite(X.data)
    if not finite.all():
        t = int(np.argmax(~finite))
        r = int(np.searchsorted(X.indptr, t, side="right") - 1)
        raise ValueError(f"X[{r}, {X.indices[t]}] = {X.data[t]} is not finite (row {r}, feature {X.indices[t]})")
    return X


def check_feature_names(names, expected, *, where: str = "the data") -> None:
    """Refuse feature ``names`` that differ from a model's ``expected`` ones (a list or a
    :class:`~nsdist._names.NameRange`), naming the difference: the missing and unexpected names, or the first
    position where they differ."""
    if same_names(names, expected):
        return
    if isinstance(names, NameRange) or isinstance(expected, NameRange):
        if len(names) != len(expected):
            raise ValueError(f"feature schema of {where} does not match the model: {len(names)} "
                             f"features where the model has {len(expected)}")
        first = next(i for i, (a, b) in enumerate(zip(names, expected)) if a != b)
        raise ValueError(f"feature names of {where} differ from the model's at position {first}: "
                         f"{names[first]!r} where the model has {expected[first]!r}")
    names = list(names)
    missing = [n for n in expected if n not in names]
    extra = [n for n in names if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {_few(missing)}")
        if extra:
            parts.append(f"unexpected {_few(extra)}")
        raise ValueError(f"feature schema of {where} does not match the model: " + "; ".join(parts))
    first = next(i for i, (a, b) in enumerate(zip(names, expected)) if a != b)
    raise ValueError(f"feature order of {where} differs from the model's at position {first}: "
                     f"{names[first]!r} where the model has {expected[first]!r}")


def load_model(path: str, storage_options: dict | None = None) -> LinearModel:
    """Load a model saved by :meth:`LinearModel.save` (``nsdist.load_model``)."""
    return LinearModel.load(path, storage_options)


def _read_json(fs, path: str) -> dict:
    try:
        meta = json.loads(fs.cat_file(path))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is truncated or not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return meta


def _join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def _few(names: list[str], n: int = 5) -> str:
    shown = ", ".join(repr(x) for x in names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")
