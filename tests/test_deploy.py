"""The deployment files (deploy/) and the commands they and the docs run.

No Docker engine, cluster or SLURM here: every file is parsed, every ``nsdist``
command is parsed by the real ``nsdist`` argument parser, every ``dask
scheduler`` / ``dask worker`` command by distributed's own command-line
parser, and the compose services, operator manifests and SLURM launcher are
checked for consistency (addresses, images, shared paths, dask-jobqueue names).
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from distributed.cli.dask_scheduler import main as dask_scheduler
from distributed.cli.dask_worker import main as dask_worker

from nsdist.cli import build_parser
from nsdist.jobs import load_job
from nsdist.retrain import load_retrain_job

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
FILES = sorted(p for p in DEPLOY.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
YAML_FILES = [p for p in FILES if p.suffix in (".yml", ".yaml")]
COMPOSE = DEPLOY / "docker-compose.yml"
K8S = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
LAUNCHER = DEPLOY / "slurm" / "train_slurm.py"
SBATCH = DEPLOY / "slurm" / "train.sbatch"
DOCS = [DEPLOY / "README.md", REPO / "docs" / "scheduling.md"]

DOCKER_INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                       "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
K8S_KINDS = {("kubernetes.dask.org/v1", "DaskCluster"), ("kubernetes.dask.org/v1", "DaskJob"),
             ("batch/v1", "CronJob")}
# dask-jobqueue 0.9: SLURMCluster's keyword arguments (SLURMJob, Job and JobQueueCluster parameters)
SLURM_CLUSTER_KWARGS = {
    "queue", "account", "walltime", "job_cpu", "job_mem", "job_extra_directives", "job_directives_skip",
    "cores", "memory", "processes", "nanny", "protocol", "security", "interface", "death_timeout",
    "local_directory", "worker_extra_args", "job_script_prologue", "log_directory", "shebang", "python",
    "job_name", "config_name", "name", "n_workers", "silence_logs", "asynchronous", "scheduler_options",
    "scheduler_cls", "shared_temp_directory"}
# ... and what the launcher may use of a SLURMCluster (JobQueueCluster / distributed's Cluster API)
SLURM_CLUSTER_ATTRS = {"scale", "adapt", "job_script", "scheduler_address", "dashboard_link", "close",
                       "get_client", "wait_for_workers", "get_logs"}
SHELL_OPERATORS = re.compile(r"\s*(?:>>|\||&&|;|2>&1|\"|').*$")


# ------------------------------------------------------------------ helpers
def nsdist_args(argv: list[str]):
    """``argv`` (after ``nsdist``) parsed by the real CLI parser; fails the test with argparse's message."""
    err = io.StringIO()
    with contextlib.suppress(SystemExit), contextlib.redirect_stderr(err):
        return build_parser().parse_args(argv)
    pytest.fail(f"`nsdist {shlex.join(argv)}` is not a valid command line: {err.getvalue().strip()}")


def dask_args(command: list[str], args: list[str]) -> dict:
    """A ``dask scheduler|worker`` command line parsed by distributed's own parser (no unknown options)."""
    assert command[0] == "dask" and command[1] in ("scheduler", "worker"), command
    main = dask_scheduler if command[1] == "scheduler" else dask_worker
    params = main.make_context(" ".join(command), list(args)).params
    assert not params.get("preload_argv"), f"unknown options for {' '.join(command)}: {params['preload_argv']}"
    return params


def scheduler_of(args) -> str | None:
    """The scheduler address of a parsed ``nsdist train`` / ``nsdist retrain`` command."""
    return getattr(args, "cluster.scheduler", None) or getattr(args, "scheduler", None)


def check_job_file(args, conf_dir: str = "/conf") -> None:
    """The job file a deployed command names exists in conf/ and validates."""
    assert args.job.startswith(conf_dir + "/"), args.job
    path = REPO / "conf" / args.job.removeprefix(conf_dir + "/")
    assert path.is_file(), f"{args.job} is mounted from conf/, which has no {path.name}"
    if args.command == "retrain":
        load_retrain_job(str(path), args.overrides)
    else:
        load_job(str(path), args.overrides)


def dockerfile(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile: continuations joined, comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends in a line continuation"
    return out


def manifests() -> list[dict]:
    return [doc for path in K8S for doc in yaml.safe_load_all(path.read_text()) if doc]


def containers(doc: dict) -> list[tuple[str, dict]]:
    """``(role, container)`` of every container in a DaskCluster, DaskJob or CronJob."""
    if doc["kind"] == "CronJob":
        return [("job", c) for c in doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]]
    out = []
    if doc["kind"] == "DaskJob":
        out += [("job", c) for c in doc["spec"]["job"]["spec"]["containers"]]
    cluster = cluster_spec(doc)
    for role in ("worker", "scheduler"):
        out += [(role, c) for c in cluster[role]["spec"]["containers"]]
    return out


def cluster_spec(doc: dict) -> dict:
    return doc["spec"]["cluster"]["spec"] if doc["kind"] == "DaskJob" else doc["spec"]


# ------------------------------------------------------------ every file
def test_every_deploy_file_is_a_known_kind():
    kinds = {".yml", ".yaml", ".py", ".sbatch", ".md"}
    unknown = [p for p in FILES if p.suffix not in kinds and p.name not in ("Dockerfile", "Dockerfile.dockerignore")]
    assert not unknown, f"no check covers {unknown}"
    assert {p.name for p in FILES} >= {"Dockerfile", "docker-compose.yml", "README.md", "train_slurm.py",
                                       "train.sbatch"}


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_files_parse(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)


def test_python_and_shell_files_parse():
    for path in FILES:
        if path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")
        elif path.suffix == ".sbatch":
            subprocess.run(["bash", "-n", str(path)], check=True)


# ------------------------------------------------------------ the image
def test_dockerfile_installs_the_repo_with_its_constraints():
    steps = dockerfile((DEPLOY / "Dockerfile").read_text())
    assert {word for word, _ in steps} <= DOCKER_INSTRUCTIONS
    assert next(word for word, _ in steps if word != "ARG") == "FROM"
    copied = [src for word, args in steps if word == "COPY" for src in shlex.split(args)[:-1]]
    for src in copied:
        assert (REPO / src).exists(), f"COPY {src}: no such file in the repository (the build context)"
    pip = [args for word, args in steps if word == "RUN" and "pip install" in args]
    assert len(pip) == 1
    tokens = shlex.split(pip[0])
    assert "." in tokens and tokens[tokens.index("constraints.txt") - 1] in ("-c", "--constraint")
    assert {"constraints.txt", "pyproject.toml", "nsdist"} <= set(copied)
    entry = [json.loads(args) for word, args in steps if word == "ENTRYPOINT"]
    assert entry == [["nsdist"]]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["nsdist"] == "nsdist.cli:main"
    ignore = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*" and {f"!{src.rstrip('/')}" for src in copied} <= {i.rstrip("/") for i in ignore}


# ------------------------------------------------------------ compose
def test_compose_workers_and_job_runners_use_the_scheduler_service():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert services["scheduler"]["entrypoint"] == ["dask", "scheduler"]
    port = dask_args(["dask", "scheduler"], services["scheduler"]["command"])["port"]
    address = f"tcp://scheduler:{port}"
    worker = services["worker"]
    assert worker["deploy"]["replicas"] >= 1
    assert dask_args(worker["entrypoint"], worker["command"])["scheduler"] == address
    runners = {name: s for name, s in services.items() if "entrypoint" not in s}
    assert set(runners) == {"train", "retrain"}
    for name, service in runners.items():
        args = nsdist_args(service["command"])
        assert args.command == name
        scheduler = scheduler_of(args)
        assert scheduler == address, f"{name} runs against {scheduler}, the workers against {address}"
        check_job_file(args)
        written = [getattr(args, "output.dir", None), getattr(args, "summary", None)]
        assert all(path.startswith("/shared/") for path in written if path)
        assert set(service["depends_on"]) == {"worker"}
    for name, service in services.items():
        assert service["image"] == services["scheduler"]["image"]
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert "shared:/shared" in service["volumes"], f"{name} does not see the shared volume at /shared"
        for volume in service["volumes"]:
            source = volume.split(":")[0]
            assert source in compose["volumes"] or (DEPLOY / source).resolve().is_dir(), volume


# ------------------------------------------------------------ kubernetes
def test_kubernetes_manifests_are_dask_operator_resources():
    docs = manifests()
    assert {(d["apiVersion"], d["kind"]) for d in docs} == K8S_KINDS
    compose_image = yaml.safe_load(COMPOSE.read_text())["services"]["scheduler"]["image"]
    clusters = {d["metadata"]["name"] for d in docs if d["kind"] == "DaskCluster"}
    for doc in (d for d in docs if d["kind"] in ("DaskCluster", "DaskJob")):
        name, spec = doc["metadata"]["name"], cluster_spec(doc)
        assert spec["worker"]["replicas"] >= 1
        service = spec["scheduler"]["service"]
        assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
        (scheduler,) = spec["scheduler"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
        comm = next(p for p in service["ports"] if p["port"] == 8786)
        assert ports[comm["targetPort"]] == 8786
        for probe in ("readinessProbe", "livenessProbe"):
            assert scheduler[probe]["httpGet"]["port"] in ports
    for doc in docs:
        for role, container in containers(doc):
            assert container["image"] == compose_image
            if role != "job":
                dask_args(container["command"], container.get("args", []))
                continue
            assert "command" not in container, "job containers run the image's entrypoint, nsdist"
            args = nsdist_args(container["args"])
            check_job_file(args)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            pod = (doc["spec"]["job"]["spec"] if doc["kind"] == "DaskJob"
                   else doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes[mounts["/conf"]]["configMap"]["name"] == "nsdist-conf"
            scheduler = scheduler_of(args)
            if doc["kind"] == "DaskJob":
                assert scheduler == "$(DASK_SCHEDULER_ADDRESS)"   # injected by the operator
                assert pod["restartPolicy"] == "Never"
            else:
                assert scheduler in {f"tcp://{c}-scheduler:8786" for c in clusters}
                assert doc["spec"]["concurrencyPolicy"] == "Forbid"
            written = getattr(args, "output.dir", None) or dict(
                o.split("=", 1) for o in args.overrides).get("output.dir")
            assert written.startswith("s3://"), "pods share no disk: write the model to object storage"


# ------------------------------------------------------------ slurm
def _launcher():
    spec = importlib.util.spec_from_file_location("train_slurm", LAUNCHER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)      # imports dask_jobqueue only inside main()
    return module


def test_slurm_launcher_uses_only_real_dask_jobqueue_and_nsdist_names():
    tree = ast.parse(LAUNCHER.read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    jobqueue = [alias.name for node in imports if node.module == "dask_jobqueue" for alias in node.names]
    assert jobqueue == ["SLURMCluster"]
    assert not any(isinstance(node, ast.Import) and any(a.name.startswith("dask_jobqueue") for a in node.names)
                   for node in ast.walk(tree))
    for node in imports:
        if node.module and node.module.startswith("nsdist"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "SLURMCluster"]
    assert len(calls) == 1
    assert {kw.arg for kw in calls[0].keywords} <= SLURM_CLUSTER_KWARGS
    names = {item.optional_vars.id for node in ast.walk(tree) if isinstance(node, ast.With)
             for item in node.items if item.context_expr is calls[0]}
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id in names}
    assert names and used <= SLURM_CLUSTER_ATTRS, used - SLURM_CLUSTER_ATTRS


def test_sbatch_runs_the_launcher_with_valid_options():
    lines = SBATCH.read_text().replace("\\\n", " ").splitlines()
    body = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]
    directives = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
    assert directives and max(directives) < min(body), "#SBATCH lines must come before the first command"
    assert all(re.fullmatch(r"#SBATCH --[a-z-]+=\S+", lines[i]) for i in directives)
    (command,) = [shlex.split(line) for line in lines if line.lstrip().startswith("python ")]
    assert REPO / command[1] == LAUNCHER
    args = _launcher().build_parser().parse_args(command[2:])
    assert args.job == "$JOB" and args.out == "$OUT" and args.jobs >= 1


# ------------------------------------------------------------ the docs
def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``nsdist <subcommand> ...`` in a code block of the deployment and scheduling docs."""
    found = []
    subcommands = "ingest|train|evaluate|predict|retrain|bench"
    for path in DOCS:
        for block in re.findall(r"```[^\n]*\n(.*?)```", path.read_text(), flags=re.S):
            for match in re.finditer(rf"(?<![\w.:-])nsdist\s+(?:{subcommands})\b[^\n]*", block):
                text = SHELL_OPERATORS.sub("", match.group(0))
                found.append((f"{path.name}: {text}", shlex.split(text)[1:]))
    return found


@pytest.mark.parametrize("where,argv", documented_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_documented_commands_parse(where, argv):
    args = nsdist_args(argv)
    if args.command in ("train", "retrain") and args.job.endswith((".yaml", ".yml")):
        assert (REPO / args.job).is_file(), where
