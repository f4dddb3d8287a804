#!/usr/bin/env bash
# Run a test command; if its process dies from a signal (a native crash, not a failed test), run it once more.
#
# Why: OneFlow 0.9.0 and PyTorch share the unit-test process, and on a 2-core CPU that process was
# seen to abort (SIGABRT inside OneFlow's nn.Graph run, no Python error) in 2 of about 40 runs of
# the OneFlow tests on 2026-11-29; it never reproduced alone (0 of 100+). A failed assertion gives
# pytest's own exit codes (1-5) and is never retried: only a death by signal (exit code > 128) is.
set -u
"$@"
rc=$?
if [ "$rc" -gt 128 ]; then
  sig=$((rc - 128))
  echo "rerun_on_crash: the test process died from signal $sig ($(kill -l "$sig" 2>/dev/null || echo '?')), not a failed test;" \
       "running the same command once more" >&2
  "$@"
  rc=$?
  [ "$rc" -gt 128 ] && echo "rerun_on_crash: it died from a signal again (exit $rc); not retrying" >&2
fi
exit "$rc"
