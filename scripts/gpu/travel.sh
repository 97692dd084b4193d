#!/usr/bin/env bash
# What one device call sends: the device tool copies this checkout's working tree (tracked and
# untracked-not-ignored files, and the paths named in its `carry`), at most 64 MiB in all, and the
# tracked tree alone is more (73 MiB on 2026-11-29, most of it test fixtures). So before a call the
# working tree is cut down to what that call reads, on a detached commit, and put back after:
#   scripts/gpu/travel.sh keep PATH...   # keep only scripts/, .gitignore and the tracked files under PATH...
#   scripts/gpu/travel.sh home           # back to the branch (or commit) it left
#   scripts/gpu/travel.sh size [CARRY...] # what would travel now, with these carried paths
# `keep` needs a clean working tree; the files it drops come back with `home`. Nothing ignored
# (target/, .gpu/, models/smollm2-135m-instruct/) is touched. scripts/gpu/device-calls.md says which
# paths each part of the runbook reads.
set -euo pipefail
cd "$(dirname "$0")/../.."
from=.git/tessera-travel-from
[ -f .git ] && from=$(git rev-parse --git-dir)/tessera-travel-from
limit=$((64 * 1024 * 1024))

size() { # bytes of the tracked and untracked-not-ignored files, and of the carried paths
  {
    git ls-files -z --cached --others --exclude-standard
    for c in "$@"; do [ ! -e "$c" ] || find "$c" -type f -print0; done
  } | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}'
}
report() {
  local bytes
  bytes=$(size "$@")
  awk -v b="$bytes" -v l="$limit" 'BEGIN {printf "travels: %.1f MiB of %.0f MiB%s\n", b / 1048576, l / 1048576, (b > l ? " -- TOO LARGE" : "")}'
  [ "$bytes" -le "$limit" ]
}

case "${1:-}" in
  keep)
    shift
    [ $# -gt 0 ] || { echo "usage: $0 keep PATH..." >&2; exit 2; }
    git diff --quiet HEAD && [ -z "$(git ls-files --others --exclude-standard)" ] \
      || { echo "$0: the working tree has changes: commit or stash them first" >&2; exit 1; }
    if [ ! -f "$from" ]; then
      git symbolic-ref -q --short HEAD >"$from" || git rev-parse HEAD >"$from"
    fi
    git checkout -q --detach "$(cat "$from")"
    keep=(.gitignore scripts "$@") # .gitignore: what it ignores must not start travelling
    drop=$(git ls-files | grep -v -E "^($(printf '%s|' "${keep[@]}" | sed 's/[.]/\\./g; s/|$//'))(/|$)" || true)
    [ -z "$drop" ] || printf '%s\n' "$drop" | tr '\n' '\0' | xargs -0 git rm -q --
    git -c user.name=travel -c user.email=travel@localhost commit -q --allow-empty -m "travel: scripts $*"
    report .gpu
    ;;
  home)
    [ -f "$from" ] || { echo "$0: not travelling" >&2; exit 0; }
    git checkout -q "$(cat "$from")"
    rm -f "$from"
    echo "back on $(git symbolic-ref -q --short HEAD || git rev-parse --short HEAD)"
    ;;
  size)
    shift
    report "$@"
    ;;
  *)
    echo "usage: $0 keep PATH... | home | size [CARRY...]" >&2
    exit 2
    ;;
esac
