#!/usr/bin/env bash
# tools/fresh_machine_check.sh: proves the README's promise on a clean Debian 12.
#
# Creates a minimal Debian 12 (bookworm) root with debootstrap, clones this repository's
# committed HEAD into it, and runs the README's `make test` and then `make demo` inside it
# with chroot, as a new user would: nothing from this machine's caches (no Python
# environment, pip or ccache cache, model or build) is visible inside. Only this machine's
# network configuration is copied in (apt sources, DNS, locally added CA certificates), so
# the root reaches the same package archives. Prints each phase's wall time and writes the
# full log beside the root. Needs root; takes about as long as a cold `make test`. Not run
# by CI.
#
#   sudo tools/fresh_machine_check.sh [--root DIR] [--keep]
#     --root DIR   where the Debian root goes (default: build-fresh/root in the clone)
#     --keep       leave the root in place afterwards (default: removed on success)
#     --no-make    stop after the clone (checks the root itself, in about a minute)
source "$(dirname "$0")/common.sh"

root_dir="$LORAKV_ROOT/build-fresh/root"
keep=0
run_make=1
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --no-make) run_make=0; shift ;;
    *) die "unknown option $1 (usage: tools/fresh_machine_check.sh [--root DIR] [--keep] [--no-make])" ;;
  esac
done
[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap and chroot); run it with sudo"
log="$(dirname "$root_dir")/fresh_machine_check.log"
mkdir -p "$(dirname "$root_dir")"
: > "$log"
exec > >(tee -a "$log") 2>&1

# The archive this machine's apt uses, so the new root reaches the same one.
mirror=$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' || true)
[ -n "$mirror" ] || mirror=$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' || true)
[ -n "$mirror" ] || die "cannot read a Debian archive from /etc/apt/sources.list(.d)"

mounts=(proc sys dev dev/pts)
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    mountpoint -q "$root_dir/${mounts[$i]}" && umount -l "$root_dir/${mounts[$i]}" || true
  done
  mountpoint -q "$root_dir/mnt/origin" && umount -l "$root_dir/mnt/origin" || true
}
trap cleanup EXIT

make_root() {
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  cleanup
  rm -rf "$root_dir"
  debootstrap --variant=minbase bookworm "$root_dir" "$mirror" >/dev/null \
    || die "debootstrap failed (its messages are above; full log $log)"
}

prepare_root() {
  mount -t proc proc "$root_dir/proc"
  mount --rbind /sys "$root_dir/sys"
  mount --bind /dev "$root_dir/dev"
  mount --bind /dev/pts "$root_dir/dev/pts"
  cp /etc/resolv.conf "$root_dir/etc/resolv.conf"
  cp /etc/apt/sources.list.d/*.sources "$root_dir/etc/apt/sources.list.d/" 2>/dev/null || true
  [ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$root_dir/etc/apt/sources.list"
  if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
    mkdir -p "$root_dir/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root_dir/usr/local/share/ca-certificates/"
  fi
  # What a user needs before the README: git to clone, make to run its two commands.
  in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git make ca-certificates && update-ca-certificates >/dev/null"
}

clone_repo() {
  mkdir -p "$root_dir/mnt/origin"
  mount --bind "$LORAKV_ROOT" "$root_dir/mnt/origin"
  mount -o remount,bind,ro "$root_dir/mnt/origin"
  in_root "git config --global --add safe.directory '*' && rm -rf /root/lorakv && git clone -q --no-local /mnt/origin /root/lorakv && git -C /root/lorakv log --oneline -1"
  umount -l "$root_dir/mnt/origin"
}

# Runs a shell command inside the root with a clean environment (no variables of this
# machine's shell, in particular no pip or cache settings).
in_root() {
  chroot "$root_dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 CI=true /bin/bash -c "$1"
}

echo "fresh-machine check: root $root_dir, log $log, HEAD $(git -C "$LORAKV_ROOT" rev-parse --short HEAD)"
[ -z "$(git -C "$LORAKV_ROOT" status --porcelain --untracked-files=no)" ] \
  || echo "note: uncommitted changes are not part of the check (it clones HEAD)"
phase "debootstrap (minimal Debian 12)" make_root
phase "prepare the root (git, make, network config)" prepare_root
phase "clone HEAD" clone_repo
if [ "$run_make" -eq 1 ]; then
  phase "make test (cold)" in_root "cd /root/lorakv && make test"
  phase "make demo" in_root "cd /root/lorakv && make demo"
fi
echo "phase times:"
grep -E '^==> .* done in ' "$log" | sed 's/^/  /'
cleanup
trap - EXIT
[ "$keep" -eq 1 ] || rm -rf "$root_dir"
echo "fresh-machine check passed"
