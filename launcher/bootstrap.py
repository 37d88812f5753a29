"""``python -m launcher.bootstrap RUN_DIR``: the job process's public entry point.

Kept at this name because container images and users call it; the job process
itself lives in :mod:`launcher.run.bootstrap`.
"""

import sys

from launcher.run.bootstrap import main

if __name__ == "__main__":
    sys.exit(main())
