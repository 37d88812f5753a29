"""``python -m launcher.bootstrap RUN_DIR``: the job process's public entry point.

Kept at this name because container images and users call it; the job process
itself lives in :mod:`launcher.job.bootstrap`.
"""

import sys

from launcher.job.bootstrap import job_main, main  # noqa: F401 (main: the public name)

if __name__ == "__main__":
    sys.exit(job_main())
