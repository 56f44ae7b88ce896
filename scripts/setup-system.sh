#!/bin/sh
# Checks the system packages txjoin needs and installs the missing ones when
# run as root on Debian; otherwise prints the exact command to run.
#   - PostgreSQL server binaries (initdb, pg_ctl, postgres): package postgresql
#   - a Java 17 or 21 runtime for Spark 4: package openjdk-17-jre-headless
#   - Python >= 3.11 with venv: packages python3, python3-venv
#   - procps (Spark's launcher scripts call ps)
set -eu

missing=""

have_pg() {
    for d in "${TXJOIN_PG_BINDIR:-}" /usr/lib/postgresql/*/bin; do
        [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && return 0
    done
    return 1
}

java_major() {
    j="java"
    [ -n "${JAVA_HOME:-}" ] && j="$JAVA_HOME/bin/java"
    command -v "$j" >/dev/null 2>&1 || { echo 0; return; }
    "$j" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1
}

have_python() {
    command -v python3 >/dev/null 2>&1 || return 1
    python3 -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null
}

have_pg || missing="$missing postgresql"
case "$(java_major)" in
    17|21) ;;
    *) missing="$missing openjdk-17-jre-headless" ;;
esac
have_python || missing="$missing python3 python3-venv"
command -v ps >/dev/null 2>&1 || missing="$missing procps"

if [ -z "$missing" ]; then
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "txjoin: installing Debian packages:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
    # The postgresql package starts a system cluster we do not use; leave it be.
    exit 0
fi

echo "txjoin: missing system packages:$missing" >&2
echo "Install them, then run make again:" >&2
echo "    sudo apt-get update && sudo apt-get install -y$missing" >&2
exit 1
