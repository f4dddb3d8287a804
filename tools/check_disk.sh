#!/usr/bin/env bash
# Before the pinned install: is there room? Called by `make setup` with the venv folder as $1.
# Measured on a clean clone (2026-11-29): the venv ends at ~13 GB (PyTorch's and OneFlow's CUDA
# libraries) and the install peaks at ~19 GB while pip holds the downloaded wheels in $TMPDIR.
# A full disk otherwise fails half-way with pip's "[Errno 28] No space left on device".
# COURSE_MIN_FREE_GB overrides the requirement (0 skips the check).
#
# `check_disk.sh --pip-dirs VENV` instead prints where pip keeps its cache and temporary files during
# the install (the Makefile puts the words in pip's environment): nothing on a machine where ~/.cache
# and /tmp share the environment's disk; on a rental whose small system disk holds ~/.cache and /tmp
# while the environment lives on the data disk, PIP_CACHE_DIR=VENV/.pip-cache and TMPDIR=VENV/.pip-tmp,
# so the ~6 GB of downloaded wheels land on the data disk too. A PIP_CACHE_DIR or TMPDIR you set is kept.
set -u
disk_of() {  # the device id of the filesystem holding $1 (or its nearest existing parent)
  local p=$1
  while [ ! -e "$p" ]; do p=$(dirname "$p"); done
  stat -c %d "$p" 2>/dev/null
}
if [ "${1:-}" = --pip-dirs ]; then
  venv=${2:?usage: check_disk.sh --pip-dirs VENV}
  venv_disk=$(disk_of "$venv")
  dirs=()
  if [ -z "${PIP_CACHE_DIR:-}" ] && [ -z "${PIP_NO_CACHE_DIR:-}" ] \
     && [ "$(disk_of "${XDG_CACHE_HOME:-$HOME/.cache}")" != "$venv_disk" ]; then
    dirs+=("PIP_CACHE_DIR=$venv/.pip-cache")
  fi
  if [ -z "${TMPDIR:-}" ] && [ "$(disk_of /tmp)" != "$venv_disk" ]; then
    dirs+=("TMPDIR=$venv/.pip-tmp")
  fi
  echo "${dirs[*]}"
  exit 0
fi
venv=${1:?usage: check_disk.sh VENV}
need_gb=${COURSE_MIN_FREE_GB:-20}
[ "$need_gb" = 0 ] && exit 0
tmp=${TMPDIR:-/tmp}
free_gb() { df -Pk "$1" 2>/dev/null | awk 'NR==2 {printf "%d", $4 / 1048576}'; }
used_gb() { du -sk "$1" 2>/dev/null | awk '{printf "%d", $1 / 1048576}'; }
# what an earlier, interrupted install already put in the venv counts towards the total
have=$(used_gb "$venv"); have=${have:-0}
# before the venv exists (make doctor), the folder it will be made in
where=$venv; while [ ! -e "$where" ]; do where=$(dirname "$where"); done
venv_free=$(free_gb "$where")
need=$(( need_gb - have ))
[ "$need" -lt 0 ] && need=0
if [ -z "$venv_free" ]; then echo "disk: cannot read free space for $venv; not checked"; exit 0; fi
same_fs=$([ "$(df -Pk "$where" | awk 'NR==2{print $1}')" = "$(df -Pk "$tmp" | awk 'NR==2{print $1}')" ] && echo 1 || echo 0)
if [ "$same_fs" = 1 ]; then
  if [ "$venv_free" -lt "$need" ]; then
    echo "ERROR: not enough free disk to install the course: about ${need} GB needed where $venv lives,"
    echo "       ${venv_free} GB free. The install peaks at ~${need_gb} GB: ~13 GB of PyTorch/OneFlow CUDA"
    echo "       libraries plus the downloaded wheels in $tmp. Free some space (old clones' .venv folders,"
    echo "       'pip cache purge'), or put the environment elsewhere: make setup VENV=/bigdisk/course-venv."
    exit 1
  fi
else
  tmp_free=$(free_gb "$tmp")
  venv_need=$(( need > 6 ? need - 6 : 0 ))  # the ~6 GB of downloaded wheels go to TMPDIR instead
  if [ "$venv_free" -lt "$venv_need" ] || [ "${tmp_free:-0}" -lt 6 ]; then
    echo "ERROR: not enough free disk: ${venv_free} GB where $venv lives (about ${venv_need} GB needed)"
    echo "       and ${tmp_free:-?} GB in TMPDIR=$tmp (about 6 GB needed for the downloaded wheels)."
    echo "       Free some space, or choose other folders: TMPDIR=/bigdisk/tmp make setup VENV=/bigdisk/venv."
    exit 1
  fi
fi
echo "disk: ${venv_free} GB free for the environment (needs ~${need_gb} GB at the install's peak): OK"
