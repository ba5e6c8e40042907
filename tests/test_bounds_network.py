"""Issue 27 F15: no network unless asked. Beam's DirectRunner (the default) first tried the Prism runner, which
downloads a binary from github.com, in every Beam stage; hardpos now pins the runner it actually ran on, the
FnApiRunner, so a stage runs with every socket to anything but this machine blocked, and tries none."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from apache_beam.options.pipeline_options import StandardOptions

from pipeline.run import parse
from tests.conftest import ARO_SAMPLE, REPO, SAMPLES, VL_SAMPLE, report

STAGES = {"eval_sets": [f"--vl_checklist_root={VL_SAMPLE}", f"--aro_vga={ARO_SAMPLE}"],
          "order_eval": [f"--coco_captions={SAMPLES / 'coco' / 'captions_sample.json'}"]}

# Loaded by the child interpreter at start-up (site imports sitecustomize from sys.path): every name lookup and
# connection to a host other than loopback raises, and is written to $BLOCKED_LOG.
SITECUSTOMIZE = textwrap.dedent('''
    import ipaddress
    import os
    import socket

    LOG = os.environ["BLOCKED_LOG"]


    def note(line):
        with open(LOG, "a") as f:
            f.write(line + "\\n")


    def local(host):
        host = host.decode() if isinstance(host, bytes) else host
        if host in (None, "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return False


    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect


    def getaddrinfo(host, *args, **kwargs):
        if not local(host):
            note(f"getaddrinfo {host}")
            raise socket.gaierror(socket.EAI_NONAME, f"network blocked by the test: {host}")
        return real_getaddrinfo(host, *args, **kwargs)


    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not local(address[0]):
            note(f"connect {address[0]}")
            raise OSError(101, f"network blocked by the test: {address[0]}")
        return real_connect(self, address)


    socket.getaddrinfo, socket.socket.connect = getaddrinfo, connect
    note("blocking")
''')


@pytest.mark.parametrize("stage", STAGES)
def test_f15_a_stage_runs_with_the_network_blocked_and_tries_nothing(stage, tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    home, log, out = tmp_path / "home", tmp_path / "blocked.log", tmp_path / "out"
    home.mkdir()
    # A fresh HOME: no Prism binary cached by an earlier run, so trying Prism would mean downloading it.
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "BLOCKED_LOG": str(log), "HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "pipeline.run", f"--stage={stage}", *STAGES[stage],
                             f"--output_dir={out}", "--progress_seconds=0"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert all(section["balanced"] for section in report(out)["tables"].values())
    assert log.read_text().splitlines() == ["blocking"]  # the block was in place, and nothing was tried
    assert not (home / ".apache_beam").exists()  # where Prism keeps the binary it downloads


def test_f15_the_runner_used_is_pinned_and_recorded(tmp_path):
    args = ["--stage=eval_sets", f"--aro_vga={ARO_SAMPLE}", f"--output_dir={tmp_path}"]
    for runner in ([], ["--runner=DirectRunner"]):
        options, _ = parse(args + runner)
        assert options.view_as(StandardOptions).runner == "pipeline.options.FnApiDirectRunner"
    options, _ = parse(args + ["--runner=PrismRunner"])  # asked for by name: used as asked
    assert options.view_as(StandardOptions).runner == "PrismRunner"
