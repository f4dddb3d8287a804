#!/usr/bin/env bash
# System packages the course needs beyond pip (Debian and Ubuntu). Idempotent; called by `make setup`
# and `make restore` (after a rental instance is re-created, the system disk has lost them).
#
# Two groups, under the names each distribution uses:
# - for the chapters: libb64-0d (perf_analyzer, chapter 9) and nginx (chapter 9's reverse proxy);
# - for the book's browser test only (tests/book): Chromium with its driver and a CJK font. Debian
#   packages Chromium as `chromium` + `chromium-driver`; Ubuntu (most GPU rentals) only ships it as a
#   snap, which a container cannot run, so there the browser group is skipped with one line and the
#   browser checks skip. They are optional off CI; in CI (CI=true, Debian) every package is required.
# Each package is installed on its own, so a name the distribution lacks cannot stop the others.
# Without root (or apt-get) it only says what is missing: every chapter still runs, the steps that
# need a missing package print a skip line.
# COURSE_SYSTEM_PACKAGES="a b" replaces both groups; COURSE_OS_RELEASE names another os-release file.
set -u
os_release=${COURSE_OS_RELEASE:-/etc/os-release}
distro=$( (. "$os_release" 2>/dev/null; echo "${ID:-unknown} ${ID_LIKE:-}") )
CHAPTERS=(libb64-0d nginx)
case " $distro " in
  *" ubuntu "*) BROWSER=() ;;
  *) BROWSER=(chromium chromium-driver fonts-wqy-microhei) ;;
esac
if [ -n "${COURSE_SYSTEM_PACKAGES:-}" ]; then
  read -r -a CHAPTERS <<< "$COURSE_SYSTEM_PACKAGES"
  BROWSER=()
elif [ ${#BROWSER[@]} -eq 0 ]; then
  echo "system packages: Ubuntu's Chromium is a snap that containers cannot run: the book's browser"
  echo "      checks (tests/book) will be skipped here. They are optional; the book still builds."
fi
PKGS=("${CHAPTERS[@]}" "${BROWSER[@]}")
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && { echo "system packages: all present (${PKGS[*]})"; exit 0; }
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "system packages: installing ${missing[*]}"
  apt-get update -qq || echo "WARNING: apt-get update failed; trying with the package lists there are"
  for p in "${missing[@]}"; do
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null \
      || echo "WARNING: could not install $p; the steps that need it will print a skip line"
  done
else
  echo "NOTE: missing system packages ${missing[*]} (install with: sudo apt-get install ${missing[*]});"
  echo "      perf_analyzer and chapter 9's nginx front need the first two and are skipped without"
  echo "      them; the book's browser checks need Chromium and are skipped without it."
fi
still=()
for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
if [ ${#still[@]} -gt 0 ] && [ "${CI:-}" = "true" ]; then
  echo "ERROR: CI needs the system packages ${still[*]} and they could not be installed" >&2
  exit 1
fi
for p in "${still[@]}"; do
  case " ${BROWSER[*]} " in
    *" $p "*) echo "system packages: $p missing: the book's browser checks will be skipped (optional)" ;;
    *) echo "system packages: $p missing: the chapter steps that need it will print a skip line" ;;
  esac
done
exit 0
