"""Train an nsdist job on a SLURM cluster: Dask workers as SLURM jobs (dask-jobqueue).

The driver (this script; ``train.sbatch`` runs it as a small SLURM job) starts
a Dask scheduler in its own process, submits ``--jobs`` SLURM jobs of Dask
workers with :class:`dask_jobqueue.SLURMCluster`, waits for them, and runs the
job file on them exactly as ``nsdist train JOB --scheduler ADDRESS --out DIR``
would (:func:`nsdist.run.run_train`: ingest if needed, train, evaluate, write
the run directory ``DIR/model``, ``metrics.json``, ``learning_curve.png``,
``run.log``).  Every path must be on storage that the driver and all workers
see: a shared filesystem (``/scratch``, ``$HOME``) or an fsspec URL (``s3://``).

    python deploy/slurm/train_slurm.py conf/letter-pauc.yaml --out runs/letter-pauc \\
        --jobs 4 --cores 8 --memory 32GB --walltime 02:00:00 --queue normal --account myproject

Needs ``pip install dask-jobqueue`` beside nsdist, in the environment that the
worker jobs activate (``--prologue``).
"""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

log = logging.getLogger("nsdist")


def build_parser() -> argparse.ArgumentParser:
    """The launcher's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("job", help="nsdist job file (YAML; see conf/)")
    p.add_argument("--out", required=True, help="run directory on shared storage (path or fsspec URL)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a job key, e.g. solver.eta=2 (repeatable)")
    p.add_argument("--jobs", type=int, default=2, help="SLURM jobs of workers (default 2)")
    p.add_argument("--cores", type=int, default=8, help="cores per SLURM job; one single-threaded Dask worker "
                   "process per core (default 8)")
    p.add_argument("--memory", default="32GB", help="memory per SLURM job (default 32GB)")
    p.add_argument("--walltime", default="02:00:00", help="walltime of each worker job (default 02:00:00)")
    p.add_argument("--queue", help="SLURM partition (#SBATCH -p)")
    p.add_argument("--account", help="SLURM account (#SBATCH -A)")
    p.add_argument("--interface", help="network interface of the workers and the scheduler, e.g. ib0")
    p.add_argument("--local-directory", default="$TMPDIR", help="node-local scratch of the workers")
    p.add_argument("--log-directory", default="slurm-logs", help="where the worker jobs write their logs")
    p.add_argument("--prologue", action="append", default=[], metavar="COMMAND",
                   help="shell command run before each worker starts, e.g. 'source ~/venvs/nsdist/bin/activate' "
                   "(repeatable)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Submit the worker jobs, run the training job on them; return the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from dask_jobqueue import SLURMCluster
    from distributed import Client

    from nsdist.run import run_train
    from nsdist.jobs import load_job

    with SLURMCluster(queue=args.queue, account=args.account, cores=args.cores, processes=args.cores,
                      memory=args.memory, walltime=args.walltime, interface=args.interface,
                      job_name="nsdist-worker", local_directory=args.local_directory,
                      log_directory=args.log_directory, job_script_prologue=args.prologue) as cluster:
        log.info("worker job script:\n%s", cluster.job_script())
        cluster.scale(jobs=args.jobs)
        with Client(cluster) as client:
            client.wait_for_workers(args.jobs * args.cores, timeout=1800)
            job = load_job(args.job, [*args.overrides, f"output.dir={args.out}",
                                      f"cluster.scheduler={cluster.scheduler_address}"])
            result = run_train(job, progress=False)
    log.info("run directory %s: %s = %.4f", args.out, result.metrics["measure"]["key"],
             result.metrics["measure"]["value"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
