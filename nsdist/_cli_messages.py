"""The library's error messages in the terms of the command line (:mod:`nsdist.cli`).

An error ends a command in one line (:func:`one_line`), and the library's advice in it -- ``pass
label_column=``, ``drop=['txn']`` -- is said as the command's options or job keys (:func:`speak_cli`, from
the parser's own options, :func:`cli_names`): ``--label-column (dataset.label_column)``, ``--drop txn``.
"""
from __future__ import annotations

import argparse
import re

__all__ = ["one_line", "cli_names", "speak_cli", "JOB_KEYS"]


def one_line(exc: BaseException) -> str:
    """An error as one line without Python's class names."""
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"no such file or directory: {exc.filename}"
    text = " ".join(str(exc).split())
    if isinstance(exc, (ValueError, OSError, NotImplementedError, LookupError)):
        return text or "failed"
    return f"{text or 'failed'} (an internal error ({type(exc).__name__}); run with --debug for the traceback)"


#: API keyword -> job key, for messages of ``train`` and ``retrain`` (``pass label_column=`` ...)
JOB_KEYS = {"label_column": "dataset.label_column", "feature_columns": "dataset.feature_columns",
            "positive": "dataset.positive", "drop": "dataset.drop",
            "storage_options": "dataset.storage_options", "standardize": "dataset.standardize",
            "beta": "measure.beta", "k": "measure.k", "threshold": "measure.threshold",
            "eta": "solver.eta", "buffer_size": "solver.buffer_size", "n_passes": "solver.n_passes",
            "radius": "solver.radius", "random_state": "solver.random_state", "prefetch": "cluster.prefetch",
            "n_chains": "cluster.n_chains", "validation_fraction": "solver.validation_fraction"}


def cli_names(parser: argparse.ArgumentParser, command: str) -> dict[str, tuple[str, str | None, bool]]:
    """``{python_name: (option or job key, job key of the option, the option is given once a value)}`` for the
    options of ``command``."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    names: dict[str, tuple[str, str | None, bool]] = {}
    keys = {a.dest: (a.option_strings[-1], isinstance(a, argparse._AppendAction)) for a in sub._actions
            if a.dest.count(".")}                      # train's options of a job key (--drop: dataset.drop)
    if command in ("train", "retrain"):
        for name, key in JOB_KEYS.items():
            option, repeated = keys.get(key, (None, False))
            names[name] = (option, key, repeated) if option else (key, None, False)
    for action in sub._actions:
        for option in action.option_strings:
            if option.startswith("--") and not action.dest.count("."):
                name, repeated = option[2:].replace("-", "_"), isinstance(action, argparse._AppendAction)
                for said in (name, name + "s") if repeated else (name,):    # --feature-column: feature_columns=
                    names.setdefault(said, (option, None, repeated))
    if command in ("train", "retrain"):                 # what a dataset's message says to do at ingest
        names.setdefault("categorical", ("--categorical", None, True))
    return names


def speak_cli(text: str, names: dict[str, tuple[str, str | None, bool]]) -> str:
    """``pass overwrite=True`` -> ``pass --overwrite``, ``pass format='csv'`` -> ``pass --format 'csv'``,
    ``label_column=`` -> ``--label-column (dataset.label_column)``, ``categorical=['a', 'b']`` -> ``--categorical a
    --categorical b`` (an option given once a value), ``feature_columns=['a']`` -> ``--set
    "dataset.feature_columns=['a']"`` (a job key without an option): the library's messages in the command's
    terms."""
    def say(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        if name not in names:
            return match.group(0)
        flag, key, once_a_value = names[name]
        said = f" ({key})" if key else ""
        if not flag.startswith("--"):                # a job key without an option of its own
            return f'--set "{flag}={value}"' if value else f"--set {flag}=..."
        if value == "True":
            return flag + said
        if value.startswith("["):                    # positive=['7', '8'] -> --positive 7 8
            values = [v.strip(" '\"") for v in value.strip("[]").split(",")]
            if once_a_value:
                return " ".join(f"{flag} {v}" for v in values) + said
            value = " ".join(values)
        return (f"{flag} {value}" if value else flag) + said

    return re.sub(r"(?<![\w/.=-])([a-z][a-z_]*)=(True\b|\[[^\]]*\]|[^\s,;)]*)", say, text)
