#!/bin/bash
# needs: bash perl
# Perl's own file calls: opendir, mkdir, rename, unlink, link, symlink, utime, -X
# tests, File::Find, File::Copy, File::Path, File::Temp.
perl -e '
use strict; use warnings;
use File::Find; use File::Copy qw(copy move); use File::Path qw(make_path remove_tree);
use File::Temp qw(tempfile tempdir);
my $m = $ENV{M};
chdir $m or die "chdir: $!";
make_path("a/b/c", "d") or die;
for my $n (qw(a/one a/b/two a/b/c/three d/four)) {
    open(my $fh, ">", $n) or die "$n: $!"; print $fh "$n\n" x 3; close $fh;
}
copy("a/one", "d/one-copy") or die "copy: $!";
move("a/b/two", "d/two") or die "move: $!";
rename("d/four", "d/FOUR") or die;
link("d/FOUR", "d/four-link") or die "link: $!";
symlink("FOUR", "d/sym") or die;
utime(1000000000, 1000000000, "d/FOUR") or die;
# (-s of a directory is left out: easyio reports 0 bytes for one, tmpfs a size.)
printf "%s %s %d %s\n", $_, (-d $_ ? "-" : -s $_), (stat $_)[3], (-d $_ ? "dir" : -l $_ ? "link" : "file")
    for qw(a a/one d/FOUR d/sym);
printf "mtime %d\n", (stat "d/four-link")[9];
opendir(my $dh, "d") or die; print join(" ", sort grep { !/^\./ } readdir $dh), "\n"; closedir $dh;
my @found; find(sub { push @found, $File::Find::name }, ".");
print join("\n", sort @found), "\n";
my ($fh, $name) = tempfile("tmpXXXXXX", DIR => $m);
print $fh "temp\n"; close $fh; rename($name, "from-temp") or die;
my $dir = tempdir("dirXXXXXX", DIR => $m, CLEANUP => 0);
open(my $t, ">", "$dir/inside") or die; close $t;
remove_tree($dir);
unlink("a/one") == 1 or die;
rmdir("a/b/c") and print "rmdir of a non-empty directory succeeded\n";
print "rmdir: $!\n";
print -e "a/b/c/three" ? "three stays\n" : "three gone\n";
open(my $ap, ">>", "log") or die; print $ap "line $_\n" for 1..3; close $ap;
open(my $rd, "<", "log") or die; my @l = <$rd>; close $rd; print scalar(@l), " lines\n";
'
echo "status $?"
