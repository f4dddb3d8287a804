#!/usr/bin/env bash
# System packages the course needs beyond pip (Debian/Ubuntu). Idempotent; called by `make setup`.
# Without root (or apt-get) it only says what is missing: every chapter still runs, the steps that
# need a missing package print a skip line. In CI (CI=true) a package still missing at the end is a
# failure: the browser checks of the book and chapter 9's nginx front would otherwise skip silently.
set -u
PKGS=(${COURSE_SYSTEM_PACKAGES:-libb64-0d chromium chromium-driver nginx fonts-wqy-microhei})
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
  echo "      perf_analyzer, chapter 9's nginx front and the browser checks of the book need them"
  echo "      and are skipped without them."
fi
still=()
for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || still+=("$p")
done
if [ ${#still[@]} -gt 0 ] && [ "${CI:-}" = "true" ]; then
  echo "ERROR: CI needs the system packages ${still[*]} and they could not be installed" >&2
  exit 1
fi
exit 0
