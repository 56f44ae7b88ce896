"""Stops an embedded PostgreSQL server once the process that started it is gone.

Run as ``python -m txjoin.pg._watchdog PARENT_PID DATA_DIR``; it polls the
parent twice a second and runs ``pg_ctl stop -m immediate`` after the parent
exits, however it exits (including ``kill -9``).
"""

from __future__ import annotations

import os
import sys
import time


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    parent, data_dir = int(argv[1]), argv[2]
    while pid_alive(parent):
        time.sleep(0.5)
    from txjoin.pg.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(data_dir)
    if pg.status().running:
        pg.stop("immediate")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
