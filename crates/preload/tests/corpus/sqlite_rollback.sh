#!/bin/bash
# needs: bash sqlite3
# sqlite3 with a rollback journal, and a second process: it reads while the first
# holds a shared lock, and finds the database locked while the first holds an
# exclusive one (fcntl locks between processes).
cd "$M" || exit 1
sqlite3 db <<'SQL'
CREATE TABLE t(x);
INSERT INTO t VALUES (1), (2), (3);
BEGIN;
SELECT count(*) FROM t;
.shell sqlite3 db 'SELECT sum(x) FROM t'
COMMIT;
BEGIN EXCLUSIVE;
INSERT INTO t VALUES (4);
.shell sqlite3 db 'SELECT sum(x) FROM t'
.shell ls
COMMIT;
.shell sqlite3 db 'SELECT sum(x) FROM t'
SQL
echo "status $?"
ls
sqlite3 db 'PRAGMA integrity_check; PRAGMA journal_mode; SELECT count(*) FROM t;'
