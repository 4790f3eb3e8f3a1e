"""Model artifacts: a linear scorer saved as plain data (SPEC §6), never pickle.

A model is a directory (local path or fsspec URL)::

    model.json              measure, parameters, feature names and dimension,
                            dataset fingerprint, history summary, version, time,
                            and the name + sha256 of the weights file
    weights-<sha12>.npy     float64 vector [w_1 .. w_d, b] (np.save, no pickle)

``model.json`` is the commit point: the weights file is written first under a
content-addressed name, then ``model.json`` is replaced atomically, then the
previous weights file is removed.  A reader sees the old model or the new one,
never a mix; a crash mid-save leaves the previous model loadable.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec
import numpy as np

from . import __version__

__all__ = ["LinearModel", "load_model", "atomic_write_bytes", "FORMAT_VERSION"]

FORMAT_VERSION = 1


def atomic_write_bytes(url: str, data: bytes, storage_options: dict | None = None) -> None:
    """Write ``data`` to ``url`` so that readers see the old or the new content, never a part.

    Local files: a temporary sibling, ``fsync``, ``os.replace``.  Object stores
    (``s3://`` ...) publish a ``put`` atomically already.
    """
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if "file" in protocols:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    parent = path.rsplit("/", 1)[0]
    if parent and parent != path:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "wb") as fh:
        fh.write(data)


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
    feature_names : list of str
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
    feature_names: list[str] = field(default_factory=list)
    dataset_fingerprint: str | None = None
    history: dict = field(default_factory=dict)
    version: str = __version__
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def __post_init__(self) -> None:
        self.coef = np.asarray(self.coef, dtype=np.float64).ravel()
        self.intercept = float(self.intercept)
        if not self.feature_names:
            self.feature_names = [f"x{i}" for i in range(self.coef.shape[0])]
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
        """Scores ``X @ coef + intercept``."""
        from ._validation import check_matrix

        X = check_matrix(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the model expects {self.n_features}")
        return X @ self.coef.astype(X.dtype, copy=False) + self.intercept

    def predict(self, X) -> np.ndarray:
        """Labels ``+1`` where the score is positive, else ``-1``."""
        return np.where(self.decision_function(X) > 0, 1, -1).astype(np.int8)

    def check_features(self, names: list[str], *, where: str = "the data") -> None:
        """Refuse data whose feature schema differs from the model's, naming the difference."""
        names = list(names)
        if names == self.feature_names:
            return
        missing = [n for n in self.feature_names if n not in names]
        extra = [n for n in names if n not in self.feature_names]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing {_few(missing)}")
            if extra:
                parts.append(f"unexpected {_few(extra)}")
            raise ValueError(f"feature schema of {where} does not match the model: " + "; ".join(parts))
        first = next(i for i, (a, b) in enumerate(zip(names, self.feature_names)) if a != b)
        raise ValueError(f"feature order of {where} differs from the model's at position {first}: "
                         f"{names[first]!r} where the model has {self.feature_names[first]!r}")

    # ------------------------------------------------------------------ storage
    def metadata(self) -> dict[str, Any]:
        meta = asdict(self)
        meta.pop("coef")
        meta.pop("intercept")
        meta["n_features"] = self.n_features
        meta["format_version"] = FORMAT_VERSION
        return meta

    def save(self, url: str, storage_options: dict | None = None) -> str:
        """Save to the directory ``url`` atomically (see the module docstring); return ``url``."""
        so = storage_options or {}
        buf = io.BytesIO()
        np.save(buf, np.append(self.coef, self.intercept), allow_pickle=False)
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        fs, root = fsspec.core.url_to_fs(url, **so)
        old = _read_json(fs, f"{root}/model.json").get("weights", {}).get("file") if fs.exists(f"{root}/model.json") else None
        weights_name = f"weights-{digest[:12]}.npy"
        atomic_write_bytes(_join(url, weights_name), data, so)
        meta = self.metadata()
        meta["weights"] = {"file": weights_name, "sha256": digest, "dtype": "float64",
                           "layout": "coef followed by intercept"}
        atomic_write_bytes(_join(url, "model.json"), json.dumps(meta, indent=2, sort_keys=True).encode(), so)
        if old and old != weights_name:
            try:
                fs.rm(f"{root}/{old}")
            except FileNotFoundError:
                pass
        return url

    @classmethod
    def load(cls, url: str, storage_options: dict | None = None) -> "LinearModel":
        """Load a model directory, verifying the weights' checksum and shape."""
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        meta_path = f"{root}/model.json"
        if not fs.exists(meta_path):
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
        if "/" in wmeta["file"] or not fs.exists(wpath):
            raise ValueError(f"{url}: weights file {wmeta['file']!r} named by model.json is missing")
        data = fs.cat_file(wpath)
        if hashlib.sha256(data).hexdigest() != wmeta["sha256"]:
            raise ValueError(f"{url}/{wmeta['file']}: checksum mismatch — the weights file is truncated or was modified")
        try:
            vec = np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as exc:
            raise ValueError(f"{url}/{wmeta['file']}: not a plain .npy array ({exc})") from None
        if vec.shape != (n + 1,) or not np.all(np.isfinite(vec)):
            raise ValueError(f"{url}/{wmeta['file']}: expected {n + 1} finite values, got shape {vec.shape}")
        known = {f for f in cls.__dataclass_fields__}
        return cls(coef=vec[:n], intercept=float(vec[n]), **{k: v for k, v in meta.items() if k in known})


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
