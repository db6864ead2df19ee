"""Run `et-convert ARGS` in this process and print the CPU time and peak RSS of this process
(the client) apart from its worker processes (--jobs, --cluster local:N), as one JSON line on
stderr. Used by benchmark 7: a child's usage counts once the child has ended and been waited for,
which both kinds of workers are before the command returns.

    python benchmarks/client_and_workers.py logs/ --to chakra --jobs 2 -o out/w
"""

from __future__ import annotations

import json
import resource
import sys

from converters.cli import run


def usage(who: int) -> dict:
    u = resource.getrusage(who)
    return {"cpu_s": round(u.ru_utime + u.ru_stime, 2), "peak_rss_mb": round(u.ru_maxrss / 1024)}


def main() -> None:
    sys.argv = ["et-convert", *sys.argv[1:]]
    code = 0
    try:
        run()
    except SystemExit as e:
        code = e.code or 0
    print(json.dumps({"client": usage(resource.RUSAGE_SELF), "workers": usage(resource.RUSAGE_CHILDREN)}),
          file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
