"""The README's test command on a busy machine: a loop per core (`python -c "while True: pass"`) keeps every core at
work from before the tests start until they end, whatever their outcome; then the loops are stopped.

    python tests/busy_run.py                 # python -m pytest beside the loops
    python tests/busy_run.py -m "not slow"   # arguments go to pytest

Exits with pytest's status and prints how long the run took."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    started = time.monotonic()
    try:
        status = subprocess.run([sys.executable, "-m", "pytest", *argv], cwd=ROOT).returncode
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    minutes = (time.monotonic() - started) / 60
    print(f"python -m pytest {' '.join(argv)}: exit status {status} after {minutes:.1f} min beside {len(loops)} "
          f"busy loops", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
