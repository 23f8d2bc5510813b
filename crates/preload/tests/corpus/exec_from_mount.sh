#!/bin/bash
# needs: bash cp chmod
# Programs and scripts that live in the mount, run by path (the kernel execs them),
# and a script run by an interpreter that reads it.
cd "$M" || exit 1
cp "$(command -v true)" mytrue
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
