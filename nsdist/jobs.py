"""Job files: the YAML description of a training run, validated on load.

A training job has five sections::

    dataset:  the training data (a Parquet dataset; optionally how to ingest it
              from a raw file) and the data to evaluate on (a URL or a holdout)
    measure:  the measure to optimise and report (name, beta, k, threshold)
    solver:   how to optimise it (name, eta, buffer_size, n_passes, ...)
    cluster:  where to run (a scheduler address, or the embedded cluster's size)
    output:   where the run writes its model, metrics, plot and log

Files are read with ``yaml.safe_load`` only and no value is ever evaluated.
Every problem is reported on a line of its own, naming the key path: an
unknown key with the nearest valid one, a wrong type with the expected type.
``--set a.b=value`` overrides (the value parsed as YAML) are validated the
same way.  Solver keys left out (``None``) take the defaults of
:class:`nsdist.NonDecomposableClassifier`.  Relative paths are relative to the
working directory.
"""
from __future__ import annotations

import difflib
import os
import typing
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .solvers.config import SOLVERS
from .solvers.measure import MEASURES as MEASURE_TABLE

__all__ = ["JobError", "TrainJob", "DatasetSpec", "IngestSpec", "MeasureSpec", "SolverSpec", "ClusterSpec",
           "OutputSpec", "load_job", "read_job_file", "safe_yaml", "job_from_dict", "validate", "parse_overrides",
           "apply_overrides", "default_run_dir", "with_storage_options", "parse_storage_options"]


class JobError(ValueError):
    """A job that does not validate; :attr:`problems` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = [f"{source}: {p}" for p in problems]
        super().__init__("\n".join(self.problems))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


Section = typing.TypeVar("Section", bound=BaseModel)


class IngestSpec(_Section):
    """How to build a Parquet dataset from a raw file when it does not exist yet (see ``nsdist ingest``)."""

    src: str = Field(description="raw file: CSV, svmlight/LIBSVM text (gz/bz2/xz ok) or Parquet")
    format: Literal["svmlight", "csv", "parquet"] | None = Field(None, description="None: from the file name")
    label_column: Union[str, int] = Field("label", description="CSV/Parquet label column: a name, or a 0-based "
                                          "index (CSV without header: columns are col0, col1, ...)")
    positive: Union[str, int, float, list[Union[str, int, float]], None] = Field(
        None, description="label value(s) of the positive class (None: labels are already 1/-1, 1/0 or "
                          "true/false; svmlight: > 0)")
    negative: Union[str, int, float, list[Union[str, int, float]], None] = Field(
        None, description="label value(s) of the negative class; rows with other labels are dropped "
                          "(None: every non-positive label)")
    categorical: list[Union[str, int]] = Field(default_factory=list, description="CSV or Parquet columns to one-hot "
                                               "encode")
    feature_columns: list[str] | None = Field(None, description="Parquet: the feature columns, in order (None: every "
                                              "column but the label)")
    drop: list[Union[str, int]] = Field(default_factory=list, description="CSV or Parquet: columns that are "
                                        "neither features nor the label (an id, a timestamp), left out")
    header: bool | None = Field(None, description="CSV: whether the first line names the columns (None: detect)")
    n_features: int | None = Field(None, ge=1, description="svmlight: the dimension (None: the largest index)")
    rows_per_partition: int | None = Field(None, ge=1, description="rows per Parquet partition "
                                           "(None: about 64 MiB of features)")
    shuffle: bool = Field(True, description="write the rows in a uniformly random order")
    random_state: int = Field(0, ge=0, description="seed of the shuffle")
    dtype: Literal["float32", "float64"] = Field("float64", description="feature dtype")
    layout: Literal["auto", "dense", "sparse"] = Field(
        "auto", description="dense: a column per feature; sparse: CSR-style indices/values list columns; "
                            "auto: sparse when at most half the size of dense")

    def options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`nsdist.ingest` (besides ``src`` and ``dst``)."""
        return {**self.model_dump(exclude={"src"}), "categorical": tuple(self.categorical)}


class DatasetSpec(_Section):
    """The training data and the data to evaluate on."""

    url: str = Field(description="Parquet dataset to train on (directory, glob or fsspec URL)")
    label_column: str = Field("label", description="label column of the Parquet dataset")
    positive: Union[str, int, float, list[Union[str, int, float]], None] = Field(
        None, description="label value(s) of the positive class as stored, e.g. fraud for class names; every "
                          "other label is negative (None: labels are 1/-1, 1/0 or true/false)")
    feature_columns: list[str] | None = Field(None, description="None: every other column")
    drop: list[str] = Field(default_factory=list, description="columns that are neither features nor the label "
                            "(an id, a timestamp): left out of every other column")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (credentials, "
                                            "endpoint ...) for url, test_url and the raw files to ingest; merged "
                                            "over the job's top-level storage_options")
    test_url: str | None = Field(None, description="Parquet dataset to evaluate on and draw the learning curve on")
    holdout: float | None = Field(None, gt=0, lt=1,
                                  description="instead of test_url: hold out this fraction of the partitions")
    standardize: bool = Field(True, description="train on features scaled to zero mean and unit variance "
                              "(computed in one pass; the saved model is on the raw features)")
    ingest: IngestSpec | None = Field(None, description="build url from a raw file first when it is missing")
    test_ingest: IngestSpec | None = Field(None, description="build test_url from a raw file when it is missing")

    def read_options(self) -> dict[str, Any]:
        """How to read the datasets: the keyword arguments of :func:`nsdist.api.open_dataset` besides the URL
        and its storage options."""
        return {"label_column": self.label_column, "feature_columns": self.feature_columns,
                "positive": self.positive, "drop": list(self.drop)}

    @model_validator(mode="after")
    def _one_test_source(self) -> "DatasetSpec":
        if self.test_url is not None and self.holdout is not None:
            raise ValueError("give either test_url or holdout, not both")
        if self.test_ingest is not None and self.test_url is None:
            raise ValueError("test_ingest builds test_url: give test_url too")
        return self


#: the names the schema accepts: the measure table's and the solvers' (nsdist/solvers/measure.py, config.py)
_MEASURE_NAME = Literal[tuple(MEASURE_TABLE)]
_SOLVER_NAME = Literal[SOLVERS]


class MeasureSpec(_Section):
    """The measure optimised (and reported first)."""

    name: _MEASURE_NAME = Field("pauc", description="measure to optimise")
    beta: float | None = Field(None, gt=0, le=1, description="pAUC(0, beta) (pauc only)")
    k: Union[Annotated[int, Field(ge=1)], Annotated[float, Field(gt=0, le=1)], None] = Field(
        None, description="Prec@k: a number of rows >= 1, or a fraction of the rows in (0, 1]")
    threshold: float = Field(0.0, description="score above which a row is labelled positive (F1 in the metrics)")

    @model_validator(mode="after")
    def _k_for_prec_at_k(self) -> "MeasureSpec":
        if self.name == "prec@k" and self.k is None:
            raise ValueError("k is required for prec@k (--k): a number of rows >= 1, or a fraction of the rows in (0, 1]")
        return self


class SolverSpec(_Section):
    """The optimiser; every key left out takes the estimator's default."""

    name: _SOLVER_NAME | None = Field(None, description="solver")
    surrogate: Literal["hinge", "logistic", "squared_hinge", "sigmoid"] | None = Field(
        None, description="pauc/auc surrogate (unset: chosen in the fit)")
    eta: float | None = Field(None, gt=0, description="step size (1PMB/2PMB: eta / sqrt(epoch); unset: chosen in the fit)")
    buffer_size: int | None = Field(None, ge=2, description="rows per epoch buffer (2PMB: reservoir size)")
    n_passes: int | None = Field(None, ge=1, description="passes over the data (unset: early stopping)")
    max_passes: int | None = Field(None, ge=1, description="pass budget of early stopping")
    validation_fraction: float | None = Field(None, ge=0, lt=1,
                                              description="fraction held out to choose eta/surrogate/passes")
    validation_max_rows: int | None = Field(None, ge=2, description="cap on the held-out validation rows")
    validation_folds: Union[Annotated[int, Field(ge=1)], Literal["auto"], None] = Field(
        None, description="K > 1: K-fold selection on the driver, about K times the fit; 1: one holdout; "
                          "auto: 5 folds where a holdout would hold < 100 positives and the rows fit the "
                          "validation cap (unset: auto)")
    n_iter_no_change: int | None = Field(None, ge=1, description="early stopping: checks over which the validation "
                                         "measure must gain 1/v+ (one validation positive's worth) to go on")
    radius: float | None = Field(None, gt=0, description="L2 ball radius of the projection")
    average: bool | None = Field(None, description="return the averaged iterate (else the last)")
    shuffle: bool | None = Field(None, description="randomise the stream order")
    random_state: int | None = Field(None, ge=0, description="seed of the stream order")
    fit_intercept: bool | None = Field(None, description="learn an intercept (ranking measures: the cut-off)")
    alpha: float | None = Field(None, gt=0, description="CP: regularisation lambda")
    max_iter: int | None = Field(None, ge=1, description="PSG/CP iterations, FTRL inner iterations")
    tol: float | None = Field(None, gt=0, description="CP/FTRL certified gap; the selection's full-batch candidate's relative objective decrease over n_iter_no_change passes")


class ClusterSpec(_Section):
    """Where to run: a scheduler address, or the embedded LocalCluster."""

    scheduler: str | None = Field(None, description="scheduler address; None: DASK_SCHEDULER_ADDRESS or embedded")
    n_workers: int | None = Field(None, ge=1, description="embedded cluster: worker processes (None: cores, max 4)")
    memory_limit: Union[str, int] = Field("auto", description="embedded cluster: memory per worker ('4GB', bytes)")
    prefetch: int = Field(2, ge=0, description="partitions loaded ahead of the training chain")
    n_chains: int = Field(1, ge=1, description="data-parallel mode: chains per round, averaged (1: exact sequence)")


class OutputSpec(_Section):
    """What the run writes, and where."""

    dir: str = Field(description="run directory (path or fsspec URL)")
    checkpoint_every: int = Field(10, ge=1, description="checkpoint every this many partitions")
    checkpoint_seconds: float = Field(60.0, gt=0, description="... or every this many seconds")
    curve_rows: int = Field(50_000, ge=0, description="rows of the evaluation data (whole partitions drawn by "
                            "seed) on which the learning curve measures the model as it trains; never trained or "
                            "selected on (the fit holds out its own validation rows); 0: none")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options for dir (run "
                                            "directory, checkpoint, registry); none given: the dataset's; merged "
                                            "over the job's top-level storage_options")


class TrainJob(_Section):
    """A training job (one YAML file under ``conf/``)."""

    dataset: DatasetSpec
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    solver: SolverSpec = Field(default_factory=SolverSpec)
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    output: OutputSpec
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options for every URL of "
                                            "the job (data, run directory, registry); a section's own "
                                            "storage_options are merged over them")

    def data_options(self) -> dict[str, Any]:
        """The fsspec options of the dataset's URLs: the job's, then ``dataset.storage_options``."""
        from .data.fs import merge_options

        return merge_options(self.storage_options, self.dataset.storage_options)

    def output_options(self) -> dict[str, Any]:
        """The fsspec options of ``output.dir``: the job's, then ``output.storage_options``, or the dataset's."""
        from .data.fs import merge_options

        own = self.output.storage_options or self.dataset.storage_options
        return merge_options(self.storage_options, own)

    def estimator_params(self) -> dict[str, Any]:
        """The :class:`~nsdist.NonDecomposableClassifier` parameters this job sets."""
        params: dict[str, Any] = {"measure": self.measure.name, "beta": self.measure.beta, "k": self.measure.k}
        params.update(self.solver.model_dump(exclude={"name"}))
        params["solver"] = self.solver.name
        return {key: value for key, value in params.items() if value is not None}


# --------------------------------------------------------------------- loading
def default_run_dir(name: str) -> str:
    """``runs/<name>``: the output directory of a job that names none."""
    return f"runs/{name}"


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, refusing anchors and aliases.

    A job file never needs them, and aliases let a few hundred bytes expand
    into gigabytes (the "billion laughs"): they are a ``yaml.YAMLError``.
    """
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.YAMLError(f"anchors and aliases (&, *) are not allowed in a job "
                                 f"(line {event.start_mark.line + 1})")
    return yaml.safe_load(text)


def read_job_file(path: str, what: str, storage_options: dict | None = None) -> dict:
    """The mapping in a YAML job file, read with :func:`safe_yaml` (the one loader of job files).

    ``path`` is a local path or an fsspec URL (read with ``storage_options``).

    ``what`` says what the file must hold (``"a job is a mapping of sections
    (...)"``) when it holds something else.  An empty file is ``{}``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    JobError
        For a file that is not UTF-8, not valid YAML, uses anchors or
        aliases, or is not a mapping.
    """
    try:
        if _is_url(path):
            from .data.fs import read_bytes

            text = read_bytes(path, storage_options).decode("utf-8")
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except UnicodeDecodeError as exc:
        raise JobError(path, [f"not UTF-8 text (byte {exc.start}): a job file is YAML"]) from None
    try:
        raw = safe_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise JobError(path, [f"invalid YAML{where}: {problem}"]) from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise JobError(path, [f"{what}, got {_kind(raw)}"])
    return raw


def load_job(path: str, overrides: typing.Sequence[str] = (), storage_options: dict | None = None) -> TrainJob:
    """Read, override and validate a job file.

    Parameters
    ----------
    path : str
        YAML job file: a local path or an fsspec URL (``s3://.../runs/x/job.yaml``).
    overrides : sequence of str
        ``KEY.PATH=VALUE`` strings (``--set``); each value is parsed with
        ``yaml.safe_load``.
    storage_options : dict, optional
        fsspec options (``--storage-options``): used to read ``path``, and
        merged over the job's top-level ``storage_options``.

    Returns
    -------
    TrainJob
        ``output.dir`` defaults to ``runs/<file name without extension>``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    JobError
        For invalid YAML, bad overrides, or a job that does not validate.
    """
    raw = read_job_file(path, "a job is a mapping of sections "
                              f"({', '.join(_SECTIONS)})", storage_options)
    source = path + (" with --set" if overrides else "")
    raw = apply_overrides(raw, parse_overrides(overrides), source)
    raw = with_storage_options(raw, storage_options)
    output = raw.get("output") or {}
    if isinstance(output, dict) and "dir" not in output:
        name = os.path.splitext(os.path.basename(path))[0]
        raw["output"] = {**output, "dir": default_run_dir(name)}
    return job_from_dict(raw, source)


_SECTIONS = ("dataset", "measure", "solver", "cluster", "output")


def _is_url(path: str) -> bool:
    return "://" in str(path)


def with_storage_options(raw: dict, storage_options: dict | None) -> dict:
    """``raw`` with ``storage_options`` (``--storage-options``) merged over its top-level ``storage_options``."""
    if not storage_options:
        return raw
    from .data.fs import merge_options

    current = raw.get("storage_options")
    return {**raw, "storage_options": merge_options(current if isinstance(current, dict) else {},
                                                    storage_options)}


def parse_storage_options(text: str | None) -> dict:
    """``--storage-options`` (or ``$NSDIST_STORAGE_OPTIONS``): JSON or YAML text, or ``@FILE`` holding it.

    Raises
    ------
    JobError
        If it is not a mapping (the message never repeats the text: it may hold secrets).
    """
    if not text:
        return {}
    source = "--storage-options"
    if text.startswith("@"):
        source = text[1:]
        try:
            with open(source, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise JobError("--storage-options", [f"cannot read {source}: {exc.strerror or exc}"]) from None
    try:
        value = safe_yaml(text)
    except yaml.YAMLError:
        raise JobError(source, ["storage options: not valid JSON or YAML (the text is not shown: it may hold "
                                "secrets)"]) from None
    if not isinstance(value, dict):
        raise JobError(source, [f"storage options: expected a mapping such as {{\"key\": ..., \"secret\": ...,"
                                f" \"client_kwargs\": {{\"endpoint_url\": ...}}}}, got {type(value).__name__}"])
    from .data.fs import register_secrets

    register_secrets(value)
    return value


def job_from_dict(raw: dict, source: str = "job") -> TrainJob:
    """Validate a job given as a dict (a parsed file, or command-line options)."""
    return validate(TrainJob, raw, source)


def validate(schema: type[Section], raw: Any, source: str) -> Section:
    """``raw`` as a ``schema`` instance, or a :class:`JobError` with one line per problem."""
    try:
        return schema.model_validate(raw)
    except ValidationError as exc:
        raise JobError(source, _problems(exc, schema)) from None


def parse_overrides(items: typing.Sequence[str]) -> list[tuple[list[str], Any]]:
    """Parse ``KEY.PATH=VALUE`` strings into ``(path, value)`` pairs (values as YAML)."""
    out = []
    for item in items:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise JobError("--set", [f"{item!r}: expected KEY.PATH=VALUE, e.g. solver.eta=0.5"])
        try:
            value = safe_yaml(text)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or exc
            raise JobError("--set", [f"{item!r}: the value is not valid YAML ({problem})"]) from None
        out.append((path, value))
    return out


def apply_overrides(raw: dict, overrides: list[tuple[list[str], Any]], source: str = "--set") -> dict:
    """A copy of ``raw`` with each ``(path, value)`` set, creating sections as needed."""
    raw = _copy(raw)
    for path, value in overrides:
        node = raw
        for depth, key in enumerate(path[:-1]):
            child = node.setdefault(key, {})
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                where = ".".join(path[:depth + 1])
                raise JobError(source, [f"--set {'.'.join(path)}: {where} is {_kind(child)}, not a section"])
            node = child
        node[path[-1]] = value
    return raw


def _copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _copy(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_copy(v) for v in raw]
    return raw


# --------------------------------------------------------------- error messages
_EXPECTED = {
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number",
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "bool_type": "true or false", "bool_parsing": "true or false",
    "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
           "less_than": ("<", "lt"), "less_than_equal": ("<=", "le")}


def _problems(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per problem: ``path: what is wrong`` (union alternatives merged)."""
    groups: dict[str, list[dict]] = {}
    order: list[str] = []
    for err in exc.errors(include_url=False):
        if err["type"] == "extra_forbidden":
            path, model = _walk(root, err["loc"][:-1])
            key = str(err["loc"][-1])
            full = f"{path}.{key}" if path else key
            groups[full] = [err | {"_unknown": key, "_model": model}]
            order.append(full)
            continue
        path, _ = _walk(root, err["loc"])
        if path not in groups:
            groups[path] = []
            order.append(path)
        groups[path].append(err)
    return [f"{path or 'job'}: {_describe(groups[path])}" for path in order]


def _walk(root: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """The key path of ``loc`` in ``root`` (union member tags dropped) and the model it ends in."""
    model: type[BaseModel] | None = root
    path = ""
    for item in loc:
        if isinstance(item, int):
            path += f"[{item}]"
            model = None
        elif model is not None and item in model.model_fields:
            path = f"{path}.{item}" if path else item
            model = _section_type(model.model_fields[item].annotation)
        elif model is None and item in ("str", "int", "float", "bool"):
            continue
        else:
            break
    return path, model


def _section_type(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _describe(errors: list[dict]) -> str:
    first = errors[0]
    if "_unknown" in first:
        valid = list(first["_model"].model_fields) if first["_model"] else []
        near = difflib.get_close_matches(first["_unknown"], valid, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"unknown key{hint} (valid keys: {', '.join(valid)})"
    if first["type"] == "missing":
        return "missing (required)"
    if first["type"] == "literal_error":
        expected = first["ctx"]["expected"]
        given = first["input"]
        choices = [c.strip(" '") for c in expected.replace(" or ", ", ").split(",")]
        folded = {c.lower(): c for c in choices}
        near = difflib.get_close_matches(str(given).lower(), list(folded), n=1, cutoff=0.6)
        hint = f"; did you mean {folded[near[0]]!r}?" if near else ""
        return f"expected one of {expected}, got {given!r}{hint}"
    if first["type"] == "value_error":
        return first["msg"].removeprefix("Value error, ")
    expected = []
    for err in errors:
        if err["type"] in _BOUNDS:
            symbol, key = _BOUNDS[err["type"]]
            phrase = f"a value {symbol} {err['ctx'][key]}"
        else:
            phrase = _EXPECTED.get(err["type"], err["msg"].lower())
        if phrase not in expected:
            expected.append(phrase)
    hint = ""
    if first["type"] == "model_type" and isinstance(first["input"], str):
        hint = f" (a section: write it as `{{name: {first['input']}}}` if you meant its name)"
    either = " or ".join(expected) if len(expected) < 3 else ", ".join(expected[:-1]) + " or " + expected[-1]
    return f"expected {either}, got {first['input']!r}{hint}"


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string"}.get(type(value), f"{type(value).__name__} {value!r}")
