"""Scoring a Parquet dataset on the cluster: one output file per input part, published whole (docs/engine.md
§Scoring on the cluster).

:func:`predict_files` lists the input's parts -- its Parquet files, and the runs of row groups of a file of
more than 128 MiB, as :meth:`nsdist.data.Dataset.open` splits them, from the footers alone --, checks the
input's columns against the model once on the driver, scatters the model to the workers, and runs one task
per part: :func:`nsdist.data.scoring.write_scores`, the very function that ``nsdist predict`` runs in one
process for a single output file, streaming the part in batches and writing ``part-NNNNN.parquet`` (the
copied columns, ``score``, ``prediction``).  The parts are written into a staging directory (an object
store: into the output under its ``_nsdist.incomplete`` marker) and published by
:func:`nsdist.data.fs.staging_directory` once the manifest ``_nsdist.json`` is written last: readers see the
old output or the whole new one, and a failed job leaves a local output as it was.
"""
from __future__ import annotations

import contextlib
import json
import posixpath
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from distributed import Client

from ..data import metadata as meta
from ..data.dataset import Dataset, file_parts
from ..data.fs import access, display, forwarded_options, resolve, scrub, staging_directory
from ..data.ingestion import stream_calls
from ..data.scoring import open_sparse, score_table, sparse_input_format, unseen_message, write_scores
from ..model import LinearModel

__all__ = ["predict_files", "PREDICTIONS_FORMAT", "part_name"]

#: the ``format`` of the manifest ``_nsdist.json`` of a directory of scores
PREDICTIONS_FORMAT = "nsdist-predictions"


def part_name(i: int) -> str:
    """The output file of the input's part ``i`` (its files in sorted order, a large file's runs in order)."""
    return f"part-{i:05d}.parquet"


def _score_file(model: LinearModel, src: str, dst: str, options: dict[str, Any], how: dict[str, Any],
                part: tuple[tuple[int, int], int] | None) -> tuple[int, dict[str, list]]:
    """One input file, or a run of its row groups (``part``), scored into one part file (runs on a worker):
    :func:`write_scores` in place (the directory is published whole).  Returns its rows and the one-hot values
    the model never saw, which the driver warns of (a warning on a worker reaches no one)."""
    unseen: dict[str, list] = {}
    rows = write_scores(model, src, dst, storage_options=options, atomic=False, unseen_out=unseen, part=part, **how)
    return rows, unseen


def _check_output(src_fs, src_dir: str | None, src_files: list[str], dst: str, options: Mapping[str, Any] | None):
    """``(fs, path)`` of the output directory ``dst``, refused if it is the input (the directory ``src_dir``, else
    the files), lies inside it or holds it, or exists and is not a directory of scores that this function wrote
    (its manifest says so)."""
    fs, out = resolve(dst, options)
    inputs = [src_dir] if src_dir else src_files
    if fs.protocol == src_fs.protocol and any(out == p or out.startswith(p.rstrip("/") + "/") or
                                              p.startswith(out.rstrip("/") + "/") for p in inputs):
        raise ValueError(f"output {dst} overlaps the input {display(src_fs, inputs[0])}: name a directory "
                         "outside it")
    with access(fs, out, "read"):
        if fs.isfile(out):
            raise ValueError(f"output {dst} is a file: name a directory for the scores of a dataset, or a "
                             ".parquet / .csv file to write one file in this process")
        found = fs.find(out) if fs.isdir(out) else []
        if found:
            manifest, kind = posixpath.join(out, meta.SIDECAR), None
            if manifest in found:
                with contextlib.suppress(ValueError, AttributeError):     # not JSON, or not an object
                    kind = json.loads(fs.cat_file(manifest)).get("format")
            if kind != PREDICTIONS_FORMAT:
                raise ValueError(f"output {dst} exists and is not a directory of scores (no {meta.SIDECAR} of "
                                 f"format {PREDICTIONS_FORMAT!r}); refusing to replace it: name a new directory")
    return fs, out


def predict_files(client: Client, model: LinearModel, src: str | Dataset, dst: str, *, label_column: str = "label",
                  keep: Sequence[str] = (), drop: Sequence[str] = (), threshold: float = 0.0,
                  storage_options: Mapping[str, Any] | None = None,
                  on_file: Callable[[int, int, int], None] | None = None) -> dict[str, Any]:
    """Score every row of the Parquet input ``src`` on ``client``'s workers into the directory ``dst``.

    Parameters
    ----------
    client : distributed.Client
    model : LinearModel
    src : str or Dataset
        A Parquet file, directory or glob (dense columns, raw one-hot columns, or the sparse layout): what
        ``nsdist predict`` scores into one file; or a :class:`~nsdist.data.Dataset` (a selection of its
        partitions: those rows only).  Each file is one task, a file of more than
        :data:`~nsdist.data.dataset.SPLIT_BYTES` one task per run of its row groups, as training reads it.
    dst : str
        The output directory: ``part-NNNNN.parquet`` for the ``NNNNN``-th of those parts (files in sorted
        order), each the copied columns (the label when present, ``keep``), ``score`` and ``prediction`` (+1
        where the score exceeds ``threshold``) of that part's rows in their order, and ``_nsdist.json`` (the
        manifest: format, the parts, their inputs and rows).  An existing directory of scores is replaced;
        anything else there is refused.
    keep, drop : sequence of str
        Columns of the input copied to the output, and columns left out (neither features nor copied; never
        read): :func:`~nsdist.data.scoring.table_rows`.
    on_file : callable, optional
        Called as ``on_file(done, total, rows)`` each time a part is written (a progress bar).

    At most two tasks a worker thread are in flight (:func:`~nsdist.data.ingestion.stream_calls`): a task lost
    with a worker is run again; when one fails, no other is started, those in flight end (so that none writes
    after the staging directory is removed), and the error of the earliest failed part is raised.

    Returns
    -------
    dict
        ``rows``, ``files`` (the parts written), ``output`` and ``seconds``.

    Raises
    ------
    ValueError
        The input's columns are not the model's (checked on the driver before any task runs, naming the
        difference), a part fails on a worker (its error names the file, row and column), or ``dst`` is refused.
    """
    t0 = time.perf_counter()
    if isinstance(src, Dataset):
        options = forwarded_options(src.url, storage_options or src.fs.storage_options)
        fs, parts, path = src.fs, src.file_parts(), resolve(src.url, options)[1]
        root = path if fs.isdir(path) else ""
    else:
        options = forwarded_options(src, storage_options)
        fs, root, parts = file_parts(src, options)
        path = resolve(src, options)[1]
    urls = [display(fs, p.path) for p in parts]
    runs = [None if p.row_groups is None else (p.row_groups, p.file_row) for p in parts]
    how = dict(label_column=label_column, keep=list(keep), drop=list(drop), threshold=float(threshold),
               columns=src.schema.read_columns if isinstance(src, Dataset) else None)
    # the first file's columns, checked here before a task runs or the output is touched (a later file that
    # differs fails on its worker, naming it)
    if sparse_input_format(urls[0], options, format="parquet"):
        open_sparse(urls[0], model.n_features, label_column=label_column, keep=keep, drop=drop,
                    storage_options=options)
    else:
        next(score_table(model, urls[0], storage_options=options, format="parquet", part=runs[0], **how))
    out_fs, out = _check_output(fs, path if root == path else None, [p.path for p in parts], dst, options)
    model_future = client.scatter(model, broadcast=True, hash=False)
    done: list[int] = []

    def written(result: tuple[int, dict]) -> None:
        done.append(result[0])
        if on_file is not None:
            on_file(len(done), len(parts), sum(done))

    try:
        with staging_directory(out_fs, out, overwrite=True) as staging:
            outputs = [display(out_fs, posixpath.join(staging, part_name(i))) for i in range(len(parts))]
            # two tasks a worker thread in flight; on a failure the ones in flight end before the staging
            # directory is removed (none writes into it after), a lost one is redone (nsdist.data.ingestion)
            results = stream_calls(client, _score_file, ((model_future, u, o, options, how, r)
                                                         for u, o, r in zip(urls, outputs, runs)),
                                   on_result=written, name="predict")
            rows, unseen = [r[0] for r in results], [r[1] for r in results]
            listing = [{"path": part_name(i), "num_rows": n,
                        "input": posixpath.relpath(p.path, root) if root else posixpath.basename(p.path),
                        **({} if p.row_groups is None else {"row_groups": list(p.row_groups)})}
                       for i, (p, n) in enumerate(zip(parts, rows))]
            manifest = {"format": PREDICTIONS_FORMAT, "format_version": 1,
                        "nsdist_version": meta.library_version(),
                        "input": scrub(src.url if isinstance(src, Dataset) else str(src)), "measure": model.measure,
                        "threshold": float(threshold), "label_column": label_column, "keep": list(keep),
                        "drop": list(drop),
                        "num_rows": sum(rows), "partitions": listing}
            with access(out_fs, staging, "write"):
                out_fs.pipe_file(posixpath.join(staging, meta.SIDECAR), meta.dumps(manifest, indent=1).encode())
    finally:
        client.cancel([model_future])
    for url, found in zip(urls, unseen):
        for column, (count, example) in found.items():
            warnings.warn(unseen_message(url, column, count, example), stacklevel=3)
    return {"rows": sum(rows), "files": len(parts), "output": dst, "seconds": time.perf_counter() - t0}
