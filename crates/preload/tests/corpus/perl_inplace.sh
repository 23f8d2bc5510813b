#!/bin/bash
# needs: bash perl
# perl -pi (rename the original away, write a new file under its name), with and
# without a backup suffix, -n, $. line numbers.
cd "$M" || exit 1
printf 'abc\nxyz\naxa\n' > f
cp f g
printf 'hello\nworld\n' > h
chmod 600 h
perl -pi -e 's/a/A/g' f g
perl -pi.orig -e 'tr/a-z/A-Z/' h
perl -ni -e 'print if /x/' g
perl -i -pe '$_ = "$.: $_"' f
cat f g h h.orig
stat -c '%n %a' h h.orig
perl -pi -e 's/1/one/' "$M/f"
cat f
perl -pi -e 1 missing
echo "status $?"
ls
