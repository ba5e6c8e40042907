"""Beam's SDK worker process, for the local runner's multi_processing mode, with its output redacted.

The launcher's own output goes through urls.redact_output; a worker process is a fresh interpreter that writes to
the same terminal (Beam's warning that lists the pipeline's flags, a library's log line with a URL, a traceback).
The local runner starts this module instead of apache_beam.runners.worker.sdk_worker_main (options.py)."""
from __future__ import annotations

import sys

from pipeline.urls import redact_output

if __name__ == "__main__":
    redact_output()  # before Beam sets up its logging: its handlers write to the redacted streams
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)
