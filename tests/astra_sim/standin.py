#!/usr/bin/env python3
"""A stand-in for ASTRA-sim's binary in tests: replays a real transcript recorded by record.py.

ASTRA_STANDIN_CASE names the case (manifest.json): its transcript goes to stdout and the process
ends as the real one did (exit status, or killed by the same signal). ASTRA_STANDIN_RECORD, when
set, is a directory that receives the arguments (args.json) and a copy of every configuration
file they name. ASTRA_STANDIN_SLEEP makes it sleep that many seconds first (timeouts).
"""

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    case = os.environ["ASTRA_STANDIN_CASE"]
    record = os.environ.get("ASTRA_STANDIN_RECORD")
    if record:
        keep = Path(record)
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "args.json").write_text(json.dumps(sys.argv[1:], indent=1))
        for arg in sys.argv[1:]:
            name, _, value = arg.partition("=")
            if name != "--workload-configuration" and Path(value).is_file():
                shutil.copyfile(value, keep / Path(value).name)
    time.sleep(float(os.environ.get("ASTRA_STANDIN_SLEEP", "0")))
    sys.stdout.write((HERE / "transcripts" / f"{case}.log").read_text())
    sys.stdout.flush()
    status = json.loads((HERE / "manifest.json").read_text())[case]["exit_status"]
    if status > 128:  # the real build was killed by a signal (134: SIGABRT): end the same way
        signal.signal(status - 128, signal.SIG_DFL)
        os.kill(os.getpid(), status - 128)
    return status


if __name__ == "__main__":
    sys.exit(main())
