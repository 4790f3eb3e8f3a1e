"""Runnable pipelines: ``python -m pipelines.demo`` (``make demo``) and thin wrappers of the ``nsdist`` CLI."""
