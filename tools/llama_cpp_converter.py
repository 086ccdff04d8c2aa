#!/usr/bin/env python3
"""llama.cpp's own LoRA converter (convert_lora_to_gguf.py), taken from llama-cpp-python's sdist.

The parity tests convert a PEFT adapter to a GGUF LoRA with llama.cpp's converter itself,
not with a copy of its Q/K permutation, so a mistake shared by lorakv and a copy cannot
pass. The converter ships in llama-cpp-python's source distribution (vendor/llama.cpp/),
at the version tools/requirements.lock pins: this module downloads that sdist once with the
environment's pip into the cache (${LORAKV_CACHE_DIR:-~/.cache/lorakv}/sdists, as
tools/common.sh names it), checks its sha256, and extracts only the converter's files
(convert_lora_to_gguf.py, convert_hf_to_gguf.py, conversion/, gguf-py/, LICENSE) into a
build folder. The converter runs with its bundled gguf-py (its own default), so a pinned
gguf package that lags behind it cannot change the result.

usage (also importable: convert_lora()):
  llama_cpp_converter.py --work-dir DIR --base HF_DIR --adapter PEFT_DIR --out FILE.gguf
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = os.path.join(HERE, "requirements.lock")
PACKAGE = "llama_cpp_python"
# sha256 of each sdist version the lock may pin (a registry file never changes once uploaded).
SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
MEMBERS = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")


def pinned_version() -> str:
    with open(LOCK) as f:
        for line in f:
            name, _, version = line.strip().partition("==")
            if name.replace("-", "_").lower() == PACKAGE:
                return version
    sys.exit(f"llama_cpp_converter: {LOCK} pins no {PACKAGE}")


def cache_dir() -> str:
    base = os.environ.get("LORAKV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "lorakv")
    return os.path.join(base, "sdists")


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_sdist(version: str) -> str:
    """The cached sdist of `version`, downloaded with this Python's pip the first time."""
    expected = SDIST_SHA256.get(version)
    if expected is None:
        sys.exit(f"llama_cpp_converter: no known sha256 for {PACKAGE}-{version}.tar.gz; add it to SDIST_SHA256 "
                 f"in {os.path.relpath(__file__)}")
    folder = cache_dir()
    path = os.path.join(folder, f"{PACKAGE}-{version}.tar.gz")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        print(f"llama_cpp_converter: downloading the {PACKAGE}=={version} sdist (about 75 MB, once)", file=sys.stderr)
        rc = subprocess.call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                              f"{PACKAGE.replace('_', '-')}=={version}", "-d", folder])
        if rc != 0 or not os.path.exists(path):
            sys.exit(f"llama_cpp_converter: pip could not download the {PACKAGE}=={version} sdist (its message is "
                     f"above); place {os.path.basename(path)} (sha256 {expected}) in {folder}")
    actual = sha256_of(path)
    if actual != expected:
        os.remove(path)
        sys.exit(f"llama_cpp_converter: sha256 mismatch for {path}: expected {expected}, got {actual}; removed it "
                 "(rerun to download again)")
    return path


def extract_converter(work_dir: str) -> str:
    """Extracts the converter's files once per version; returns convert_lora_to_gguf.py's path."""
    version = pinned_version()
    root = os.path.join(work_dir, f"llama.cpp-{version}")
    script = os.path.join(root, "convert_lora_to_gguf.py")
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker):
        return script
    sdist = fetch_sdist(version)
    prefix = f"{PACKAGE}-{version}/vendor/llama.cpp/"
    with tarfile.open(sdist, "r:gz") as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name[len(prefix):] if m.name.startswith(prefix) else None
            if rel and (m.isfile() or m.isdir()) and any(rel == p or rel.startswith(p) for p in MEMBERS):
                m.name = rel
                members.append(m)
        missing = [p for p in MEMBERS if not any(m.name == p or m.name.startswith(p) for m in members)]
        if missing:
            sys.exit(f"llama_cpp_converter: {sdist} has no vendor/llama.cpp/{', '.join(missing)}")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(root, members=members, **kwargs)
    with open(marker, "w") as f:
        f.write(version + "\n")
    return script


def convert_lora(work_dir: str, base_dir: str, adapter_dir: str, out_path: str) -> None:
    """Runs llama.cpp's convert_lora_to_gguf.py (float32 output) on a PEFT adapter directory."""
    script = extract_converter(work_dir)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env.pop("NO_LOCAL_GGUF", None)  # the converter's own gguf-py, beside it
    cmd = [sys.executable, script, "--base", base_dir, "--outtype", "f32", "--outfile", out_path + ".partial",
           adapter_dir]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        sys.exit(f"llama_cpp_converter: convert_lora_to_gguf.py failed (exit {proc.returncode}) on {adapter_dir}")
    os.replace(out_path + ".partial", out_path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", required=True, help="build folder for the extracted converter")
    ap.add_argument("--base", required=True, help="HF directory with the base model's config.json")
    ap.add_argument("--adapter", required=True, help="PEFT adapter directory")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    convert_lora(args.work_dir, args.base, args.adapter, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
