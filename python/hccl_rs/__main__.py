"""``python -m hccl_rs ARGS``: the ``hccl`` program (the same Rust code),
e.g. ``python -m hccl_rs test all_reduce -b 8K -e 64M -f 2 --transport tcp --spawn 2``.
"""

import os
import sys

from ._native import cli


def main() -> int:
    # `--spawn N` starts this interpreter again with the same arguments: a
    # venv's interpreter resolves to the base one, so say where we are.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = here if not path else here + os.pathsep + path
    os.environ.setdefault("HCCL_RS_TORCH", "0")
    sys.stdout.flush()
    return cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
