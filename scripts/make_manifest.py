"""Write ``simulator/data/device/MANIFEST.json``: the size and SHA-256 of every recorded file
of that folder.

``simulator.io.read_npz`` / ``read_json`` check a listed file against it, so an altered
recording fails as corrupt data (exit 2) instead of as an emulator regression, and a test
fails when a listed file no longer matches. Run it after copying new recordings into the
folder:

    python scripts/make_manifest.py           # rewrite the manifest
    python scripts/make_manifest.py --check   # exit 1, naming the files, when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.io import (  # noqa: E402
    DEVICE_DATA_DIR,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    manifest_entries,
    read_manifest,
    write_json_atomic,
)


def stale(folder: Path) -> list[str]:
    """One line per difference between the folder's files and its manifest."""
    listed = read_manifest(folder) or {}
    now = manifest_entries(folder)
    lines = [f"{name}: not listed" for name in sorted(set(now) - set(listed))]
    lines += [f"{name}: listed but missing" for name in sorted(set(listed) - set(now))]
    lines += [f"{name}: sha256 differs" for name in sorted(set(now) & set(listed))
              if now[name]["sha256"] != listed[name]["sha256"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", type=Path, default=DEVICE_DATA_DIR,
                    help="folder of recordings (default: simulator/data/device)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when stale")
    args = ap.parse_args(argv)
    if args.check:
        lines = stale(args.folder)
        for line in lines:
            print(f"{args.folder / MANIFEST_NAME}: {line}")
        if not lines:  # say so: a silent success reads like nothing ran
            print(f"{args.folder / MANIFEST_NAME}: current ({len(read_manifest(args.folder) or {})} "
                  "files)")
        return 1 if lines else 0
    files = manifest_entries(args.folder)
    write_json_atomic(args.folder / MANIFEST_NAME, {
        "format": MANIFEST_FORMAT,
        "description": "bytes and SHA-256 of each recorded file of this folder; "
                       "simulator.io.read_npz / read_json refuse a listed file that differs",
        "regenerate": "python scripts/make_manifest.py",
        "files": files,
    })
    print(f"wrote {args.folder / MANIFEST_NAME}: {len(files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
