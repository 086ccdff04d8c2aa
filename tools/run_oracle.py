#!/usr/bin/env python3
"""tools/run_oracle.py: runs a Python oracle only when its inputs changed.

CTest runs each oracle as a fixture before the tests that read its output. An oracle takes
minutes (it loads transformers, PEFT or llama.cpp), so it is skipped when a stamp beside its
output says it already ran on the same inputs: the oracle script, the files and folders it
reads (the model, adapters, data), the Python version and the pinned package versions
(tools/requirements.lock), and its arguments. The stamp is written only after the oracle
succeeds, so a failed or interrupted run is never trusted.

  run_oracle.py --stamp OUT/.stamp --input FILE_OR_DIR ... -- python oracle.py ARGS...
Set LORAKV_ORACLE_FORCE=1 to run every oracle regardless of its stamp.
"""
import argparse
import hashlib
import os
import subprocess
import sys


def hash_path(digest, path):
    """Feeds a file's bytes, or every file under a folder (sorted, with relative names)."""
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                full = os.path.join(root, name)
                digest.update(os.path.relpath(full, path).encode() + b"\0")
                hash_path(digest, full)
    elif os.path.isfile(path):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    else:
        sys.exit(f"run_oracle.py: input {path} does not exist")


def main():
    if "--" not in sys.argv:
        sys.exit("usage: run_oracle.py --stamp FILE --input PATH... -- COMMAND...")
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("--stamp", required=True)
    parser.add_argument("--input", action="append", default=[])
    args = parser.parse_args(sys.argv[1:split])
    command = sys.argv[split + 1:]

    digest = hashlib.sha256()
    digest.update(sys.version.encode() + b"\0")
    for part in command:
        digest.update(part.encode() + b"\0")
    for path in args.input:
        digest.update(os.path.abspath(path).encode() + b"\0")
        hash_path(digest, path)
    key = digest.hexdigest()

    force = os.environ.get("LORAKV_ORACLE_FORCE", "") not in ("", "0")
    try:
        with open(args.stamp) as f:
            if not force and f.read().strip() == key:
                print(f"oracle up to date ({args.stamp}); LORAKV_ORACLE_FORCE=1 reruns it")
                return 0
    except FileNotFoundError:
        pass
    if os.path.exists(args.stamp):
        os.remove(args.stamp)
    rc = subprocess.call(command)
    if rc != 0:
        return rc
    os.makedirs(os.path.dirname(os.path.abspath(args.stamp)), exist_ok=True)
    with open(args.stamp, "w") as f:
        f.write(key + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
