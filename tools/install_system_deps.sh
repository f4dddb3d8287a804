#!/usr/bin/env bash
# System packages the course needs beyond pip (Debian/Ubuntu). Idempotent; called by `make setup`.
# Without root (or apt-get) it only says what is missing: every chapter still runs, the steps that
# need a missing package print a skip line.
set -u
PKGS=(${COURSE_SYSTEM_PACKAGES:-libb64-0d chromium chromium-driver})
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "system packages: all present (${PKGS[*]})"; exit 0; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system packages: installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || echo "WARNING: could not install ${missing[*]}; the steps that need them will print a skip line"
else
  echo "NOTE: missing system packages ${missing[*]} (install with: sudo apt-get install ${missing[*]});"
  echo "      perf_analyzer and the browser checks of the book need them and are skipped without them."
fi
exit 0
