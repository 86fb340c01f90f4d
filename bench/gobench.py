"""Runs our Go benchmarks for the side-by-side scripts."""
import subprocess
import sys


def benchmark_lines(binary, bench, short=False, extra=()):
    """Runs benchmarks matching bench once each (-test.benchtime 1x) from a
    flashgpu-tagged test binary of package bench, with the further flags
    extra, echoes its output to stderr, exits on failure, and returns the
    lines of its standard output."""
    cmd = [binary, "-test.run", "^$", "-test.bench", bench, "-test.benchtime", "1x", "-test.v", *extra]
    if short:
        cmd.append("-test.short")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stderr.write(out.stdout + out.stderr)
    if out.returncode != 0:
        sys.exit(f"{binary} failed with exit code {out.returncode}")
    return out.stdout.splitlines()
