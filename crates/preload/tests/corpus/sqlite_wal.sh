#!/bin/bash
# needs: bash sqlite3
# sqlite3 in WAL mode (the -wal file and the -shm index mapped shared), with a second
# sqlite3 process reading while the first holds the database open (.shell), before,
# during and after a transaction.
cd "$M" || exit 1
sqlite3 db <<'SQL'
PRAGMA journal_mode=WAL;
CREATE TABLE t(x INTEGER PRIMARY KEY, v TEXT);
INSERT INTO t(v) VALUES ('one'), ('two');
.shell sqlite3 db 'SELECT count(*) FROM t'
BEGIN;
INSERT INTO t(v) VALUES ('three');
.shell sqlite3 db 'SELECT count(*) FROM t'
COMMIT;
.shell sqlite3 db 'SELECT count(*) FROM t; PRAGMA journal_mode;'
.shell ls
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 2000)
INSERT INTO t(v) SELECT 'row ' || i FROM c;
PRAGMA wal_checkpoint(TRUNCATE);
SELECT count(*), max(v) FROM t;
SQL
echo "status $?"
ls
sqlite3 db 'PRAGMA integrity_check; SELECT count(*) FROM t; PRAGMA journal_mode;'
