"""Remove from an installed botocore the service models the runner never loads.

Run by runner-image/Dockerfile once botocore is installed; safe to run again. Why: every
client botocore makes first lists the services it knows, and that walks each service's directory
under botocore/data (about 450 of them, a listdir and several stats each) before it reads S3's
model. The runner makes one S3 client per trial, so the walk is part of every trial's start-up:
about a fifth of the time boto3's import and the client take (`python
benchmarks/runner_overhead.py --slim-botocore` measures it).

The runner talks to S3 only. What stays: `s3`; `sts`, `sso`, `sso-oidc` and `signin`, which
botocore's credential chain may call (IRSA's web identity, an assumed role, an SSO or a login
profile); and the files at the top of botocore/data (endpoints, partitions, retry and default
settings), which every client reads.

    python runner-image/slim_botocore.py [--data-dir DIR]

Without --data-dir it prunes the data directory of the botocore that this Python imports.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

KEPT_SERVICES = frozenset({"s3", "sts", "sso", "sso-oidc", "signin"})
REQUIRED_SERVICES = frozenset({"s3", "sts"})
"""Kept services that every botocore the runner supports has (signin is recent)."""


def prune(data_dir: Path) -> list[str]:
    """Delete every service directory of `data_dir` but KEPT_SERVICES; the names removed."""
    missing = sorted(name for name in REQUIRED_SERVICES if not (data_dir / name).is_dir())
    if missing:
        # Not botocore's data directory, or a botocore without a service the runner needs.
        raise SystemExit(f"{data_dir} has no service directory {', '.join(missing)}")
    removed = []
    for entry in sorted(data_dir.iterdir()):
        if entry.is_dir() and entry.name not in KEPT_SERVICES:
            shutil.rmtree(entry)
            removed.append(entry.name)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="botocore's data directory")
    args = parser.parse_args(argv)
    data_dir = args.data_dir
    if data_dir is None:
        import botocore

        data_dir = Path(botocore.__file__).parent / "data"
    removed = prune(data_dir)
    kept = sorted(entry.name for entry in data_dir.iterdir() if entry.is_dir())
    print(f"{data_dir}: removed {len(removed)} service models, kept {', '.join(kept)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
