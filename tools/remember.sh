#!/usr/bin/env bash
# This clone's settings for make, kept in the file the Makefile includes (.course-local.mk, not
# committed). `remember.sh FILE NAME VALUE` keeps the one line "NAME ?= VALUE" (replacing an earlier
# NAME); `remember.sh FILE NAME` (no value) drops it; the file goes when nothing is left in it.
# The Makefile calls it: `make setup VENV=dir` remembers VENV, `make kernel` its registration.
set -eu
file=${1:?usage: remember.sh FILE NAME [VALUE]}
name=${2:?usage: remember.sh FILE NAME [VALUE]}
value=${3:-}
line="$name ?= $value"
if [ -n "$value" ] && [ -f "$file" ] && grep -qxF -- "$line" "$file"; then exit 0; fi  # unchanged
if [ -z "$value" ] && ! { [ -f "$file" ] && grep -q "^$name ?= " "$file"; }; then exit 0; fi
others=$( { [ -f "$file" ] && grep -v -e "^$name ?= " -e '^#' "$file"; } || true)
if [ -z "$others" ] && [ -z "$value" ]; then
  rm -f "$file"
else
  {
    echo "# This clone's settings, written by make (setup VENV=..., kernel). Delete the file to forget them."
    [ -n "$others" ] && printf '%s\n' "$others"
    [ -n "$value" ] && printf '%s\n' "$line"
  } > "$file.new"
  mv "$file.new" "$file"
fi
if [ -n "$value" ]; then
  echo "make: remembered $name=$value in $file: later make commands in this clone use it"
else
  echo "make: forgot $name (removed from $file)"
fi
