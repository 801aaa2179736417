#!/bin/sh
# Creates the system user and group the election units run as.
set -e
if ! getent passwd election >/dev/null; then
  useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin election
fi
