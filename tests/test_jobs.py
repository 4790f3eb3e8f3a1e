"""Job files (nsdist.jobs): loading, overrides and one clear line per problem."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from nsdist.estimator import NonDecomposableClassifier
from nsdist.jobs import JobError, TrainJob, _section_type, load_job

REPO = Path(__file__).resolve().parents[1]
CONF = [p for p in sorted((REPO / "conf").glob("*.yaml")) if "retrain" not in yaml.safe_load(p.read_text())]

MINIMAL = {"dataset": {"url": "runs/letter/data"}}


def write(tmp_path: Path, job, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(job if isinstance(job, str) else yaml.safe_dump(job))
    return str(path)


def problems(tmp_path: Path, job, overrides=()) -> list[str]:
    with pytest.raises(JobError) as info:
        load_job(write(tmp_path, job), overrides)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


@pytest.mark.parametrize("path", CONF, ids=lambda p: p.name)
def test_every_bundled_job_file_validates(path):
    job = load_job(str(path))
    NonDecomposableClassifier(**job.estimator_params()).config()  # the estimator accepts them too
    assert job.output.dir


def test_minimal_job_defaults(tmp_path):
    job = load_job(write(tmp_path, MINIMAL, "my-job.yaml"))
    assert job.output.dir == "runs/my-job"
    assert job.measure.name == "pauc" and job.dataset.label_column == "label"
    assert job.output.checkpoint_every == 10 and job.cluster.scheduler is None
    # solver keys left out take the estimator's defaults: they are not passed at all
    assert job.estimator_params() == {"measure": "pauc"}


def test_estimator_params_map_sections(tmp_path):
    job = load_job(write(tmp_path, {**MINIMAL, "measure": {"name": "prec@k", "k": 5},
                                    "solver": {"name": "2pmb", "eta": 0.5, "n_passes": 2}}))
    assert job.estimator_params() == {"measure": "prec@k", "k": 5, "solver": "2pmb", "eta": 0.5, "n_passes": 2}
    assert isinstance(job.measure.k, int)
    assert isinstance(load_job(write(tmp_path, {**MINIMAL, "measure": {"k": 0.05}})).measure.k, float)


def test_unknown_key_names_it_and_suggests_the_nearest(tmp_path):
    (line,) = problems(tmp_path, {**MINIMAL, "solver": {"etta": 2}})
    assert line.endswith(("job.yaml: solver.etta: unknown key; did you mean 'eta'? (valid keys: name, surrogate, "
                          "eta, buffer_size, n_passes, max_passes, validation_fraction, validation_max_rows, validation_folds, "
                          "n_iter_no_change, radius, average, shuffle, random_state, fit_intercept, "
                          "alpha, max_iter, tol)"))
    (line,) = problems(tmp_path, {**MINIMAL, "solvr": {}})
    assert "solvr: unknown key; did you mean 'solver'?" in line
    (line,) = problems(tmp_path, {"dataset": {"url": "x", "holdot": 0.2}})
    assert "dataset.holdot: unknown key; did you mean 'holdout'?" in line


def test_unknown_key_without_a_near_one_lists_the_valid_keys(tmp_path):
    (line,) = problems(tmp_path, {**MINIMAL, "cluster": {"zzz": 1}})
    assert "cluster.zzz: unknown key (valid keys: scheduler, n_workers, memory_limit, prefetch, n_chains)" in line
    assert "did you mean" not in line


def test_wrong_type_names_the_path_and_the_expected_type(tmp_path):
    lines = problems(tmp_path, {**MINIMAL, "solver": {"eta": "fast", "n_passes": 1.5, "shuffle": "maybe"},
                                "dataset": {"url": "x", "feature_columns": ["a", 3]}})
    assert [line.split(": ", 1)[1] for line in lines] == [
        "dataset.feature_columns[1]: expected a string, got 3",
        "solver.eta: expected a number, got 'fast'",
        "solver.n_passes: expected an integer, got 1.5",
        "solver.shuffle: expected true or false, got 'maybe'",
    ]


def test_bounds_choices_and_sections(tmp_path):
    lines = problems(tmp_path, {**MINIMAL, "measure": {"name": "pacu", "beta": 2, "k": "a"},
                                "solver": "2pmb"})
    assert lines[0].endswith("measure.name: expected one of 'pauc', 'auc', 'prec@k', 'prbep' or 'f1', "
                             "got 'pacu'; did you mean 'pauc'?")
    assert lines[1].endswith("measure.beta: expected a value <= 1.0, got 2")
    assert lines[2].endswith("measure.k: expected an integer or a number, got 'a'")
    assert lines[3].endswith("solver: expected a mapping, got '2pmb' (a section: write it as `{name: 2pmb}` "
                             "if you meant its name)")


def test_missing_required_and_exclusive_keys(tmp_path):
    assert problems(tmp_path, {"solver": {}})[0].endswith("dataset: missing (required)")
    (line,) = problems(tmp_path, {"dataset": {"url": "x", "test_url": "y", "holdout": 0.2}})
    assert line.endswith("dataset: give either test_url or holdout, not both")


def test_yaml_errors_are_one_line(tmp_path):
    (line,) = problems(tmp_path, "dataset: {url: [x\n")
    assert "invalid YAML at line" in line and "\n" not in line
    (line,) = problems(tmp_path, "- a\n- b\n")
    assert line.endswith("a job is a mapping of sections (dataset, measure, solver, cluster, output), got a list")


def test_yaml_is_never_evaluated(tmp_path):
    (line,) = problems(tmp_path, "dataset: !!python/object/apply:os.system ['echo hacked']\n")
    assert "invalid YAML" in line


def test_set_overrides_are_parsed_as_yaml_and_validated(tmp_path):
    path = write(tmp_path, {**MINIMAL, "solver": {"eta": 1.0}})
    job = load_job(path, ["solver.eta=2", "measure.beta=0.05", "solver.name=2pmb", "cluster.scheduler=tcp://h:1",
                          "dataset.feature_columns=[a, b]", "output.dir=runs/x"])
    assert job.solver.eta == 2.0 and job.measure.beta == 0.05 and job.solver.name == "2pmb"
    assert job.cluster.scheduler == "tcp://h:1" and job.dataset.feature_columns == ["a", "b"]
    assert job.output.dir == "runs/x"
    (line,) = problems(tmp_path, MINIMAL, ["solver.etta=2"])
    assert "job.yaml with --set: solver.etta: unknown key; did you mean 'eta'?" in line
    (line,) = problems(tmp_path, MINIMAL, ["solver.eta=fast"])
    assert line.endswith("solver.eta: expected a number, got 'fast'")


@pytest.mark.parametrize("item, message", [
    ("solver.eta", "--set: 'solver.eta': expected KEY.PATH=VALUE, e.g. solver.eta=0.5"),
    ("solver..eta=1", "--set: 'solver..eta=1': expected KEY.PATH=VALUE"),
    ("solver.eta=[1", "the value is not valid YAML"),
])
def test_bad_set_syntax(tmp_path, item, message):
    (line,) = problems(tmp_path, MINIMAL, [item])
    assert message in line


def test_set_through_a_scalar_is_refused(tmp_path):
    (line,) = problems(tmp_path, {**MINIMAL, "solver": {"eta": 1.0}}, ["solver.eta.x=1"])
    assert line.endswith("--set solver.eta.x: solver.eta is float 1.0, not a section")


def leaf_keys(model=TrainJob, prefix=""):
    """Every key path of the job schema, with its description."""
    for name, field in model.model_fields.items():
        section = _section_type(field.annotation)
        if section is not None:
            yield from leaf_keys(section, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field.description


def test_every_key_is_described_in_the_schema_and_the_readme():
    readme = (REPO / "README.md").read_text()
    keys = dict(leaf_keys())
    assert len(keys) > 30
    assert not [k for k, d in keys.items() if not d]
    documented = {k.replace("dataset.test_ingest.", "dataset.ingest.") for k in keys}  # "the same keys"
    assert not [k for k in documented if f"`{k}`" not in readme]


def test_readme_states_the_estimator_defaults():
    """The `solver` table's default column is the estimator's (so the README cannot go stale)."""
    readme = (REPO / "README.md").read_text()
    defaults = NonDecomposableClassifier().get_params()
    rows = dict(re.findall(r"^\| `solver\.(\w+)` \| [^|]+ \| ([^|]+) \|", readme, flags=re.M))
    rows["solver"] = rows.pop("name")
    stated = {key: yaml.safe_load(cell.strip().strip("`")) for key, cell in rows.items()
              if cell.strip().startswith("`") and cell.strip().count("`") == 2}
    assert set(stated) >= {"solver", "surrogate", "buffer_size", "n_passes", "average", "shuffle", "random_state",
                           "fit_intercept", "alpha", "max_iter", "tol"}
    assert {key: defaults[key] for key in stated} == stated


def test_alias_bomb_and_aliases_are_refused_quickly(tmp_path):
    """A few hundred bytes of nested aliases would expand to gigabytes; the loader refuses aliases."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(JobError, match="aliases"):
        load_job(str(path))
    (tmp_path / "self.yaml").write_text("a: &a [*a]\n")
    with pytest.raises(JobError, match="aliases"):
        load_job(str(tmp_path / "self.yaml"))
    with pytest.raises(JobError, match="aliases"):
        load_job(write(tmp_path, {"dataset": {"url": "d"}}), ["solver.eta=&x 1"])


def test_non_utf8_job_file_is_a_job_error(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(JobError, match="not UTF-8"):
        load_job(str(path))


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_yaml_text = st.one_of(
    st.text(alphabet=st.sampled_from(list("abc:-[]{}&*!|>'\"#,.0123456789 \n\t")), max_size=80),
    st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8)),
                 lambda inner: st.one_of(st.lists(inner, max_size=4),
                                         st.dictionaries(st.sampled_from(
                                             ["dataset", "measure", "solver", "cluster", "output", "url", "name",
                                              "eta", "beta", "k", "dir", "x"]), inner, max_size=4)),
                 max_leaves=12).map(lambda v: yaml.safe_dump(v)),
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_yaml_text, override=st.text(max_size=30))
def test_fuzz_job_loader_raises_only_job_error(tmp_path, text, override):
    """Malformed job files and --set values only ever raise the documented JobError."""
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    for overrides in ([], [override], [f"solver.eta={override}"]):
        try:
            load_job(str(path), overrides)
        except JobError:
            pass


def test_prec_at_k_needs_k_and_a_wrongly_cased_name_gets_a_suggestion(tmp_path):
    """Issue 14 items 7 and 8: caught when the job is read (exit 2 before any cluster), saying what to write."""
    (line,) = problems(tmp_path, {**MINIMAL, "measure": {"name": "prec@k"}})
    assert line.endswith("measure: k is required for prec@k (--k): a number of rows >= 1, or a fraction of the "
                         "rows in (0, 1]")
    (line,) = problems(tmp_path, {**MINIMAL, "measure": {"name": "PAUC"}})
    assert line.endswith("got 'PAUC'; did you mean 'pauc'?")
    (line,) = problems(tmp_path, {**MINIMAL, "solver": {"name": "2PMB"}})
    assert line.endswith("got '2PMB'; did you mean '2pmb'?")
