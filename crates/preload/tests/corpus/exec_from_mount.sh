#!/bin/bash
# needs: bash cp chmod
# Programs and scripts that live in the mount, run by path (the kernel execs them),
# and a script run by an interpreter that reads it.
cd "$M" || exit 1
cp "$(type -P true)" mytrue
cp "$(type -P ls)" myls
./myls -d . mytrue
env ./myls -d myls
chmod 644 myls
./myls 2>/dev/null
echo "not executable: $?"
mkdir dir.d
./dir.d 2>/dev/null
echo "a directory: $?"
./mytrue
echo "./mytrue: $?"
"$M/mytrue"
echo "\$M/mytrue: $?"
printf '#!/bin/sh\necho "script in the mount: $0 $1"\n' > script.sh
chmod 755 script.sh
./script.sh arg
echo "./script.sh: $?"
sh script.sh arg
bash "$M/script.sh" arg
printf '#!/usr/bin/env bash\necho "by env: $1"\n' > envscript
chmod +x envscript
./envscript one
find . -name "*.sh" -exec ./{} found \;
python3 -c 'import subprocess; print(subprocess.run(["./script.sh", "py"], capture_output=True, text=True).stdout, end="")'
