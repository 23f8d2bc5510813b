#!/bin/bash
# needs: bash make gcc ar
# make -j2 of a small C project in the mount: gcc (cc1, as, collect2, ld) reading
# sources and writing objects, dependency files, a static library and the program.
cd "$M" || exit 1
mkdir proj
cd proj || exit 1
cat > util.h <<'C'
int add(int a, int b);
int mul(int a, int b);
C
cat > add.c <<'C'
#include "util.h"
int add(int a, int b) { return a + b; }
C
cat > mul.c <<'C'
#include "util.h"
int mul(int a, int b) { return a * b; }
C
cat > main.c <<'C'
#include <stdio.h>
#include "util.h"
int main(void) { printf("%d\n", add(2, mul(3, 4))); return 0; }
C
cat > Makefile <<'MK'
CFLAGS = -O1 -MMD
prog: main.o libutil.a
	$(CC) -o $@ main.o -L. -lutil
libutil.a: add.o mul.o
	$(AR) rcs $@ $^
clean:
	rm -f *.o *.d *.a prog
-include *.d
MK
touch -d @1000000000 *.c *.h Makefile
make -j2 -s && echo built
make -q; echo "make -q: $?"
make -j2
cat main.d
touch -d @1200000000 *.o *.d *.a prog
touch -d @1500000000 util.h
make -q; echo "make -q after touching util.h: $?"
make -j2 -s && echo rebuilt
make -s clean
ls
make -j2 -s -C "$M/proj" && echo "built again with -C"
ls
