/* mmap.c: shared memory maps of a file, as the shim serves them and as the kernel does.
 *
 *   mmap basic DIR              maps DIR/f in every way and logs what it sees; the
 *                               log under the mount must equal the log on tmpfs
 *   mmap create FILE            makes FILE one page of zeros
 *   mmap exec FILE              stores into a shared map of FILE, then execs `head`
 *                               on FILE with nothing unmapped nor synced
 *   mmap hold FILE              stores into a shared map of FILE, says "held" and
 *                               waits to be killed
 *   mmap pingpong FILE a|b N    two processes map FILE and take N turns: `a` stores
 *                               i and waits to see `b` store i back, through the
 *                               mapping only (no msync, no read): coherent at once
 *
 * Exit status 0 only if every step could be made; what a step saw is printed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long pg;

static void die(const char *what) {
    printf("FAILED %s: %s\n", what, strerror(errno));
    exit(1);
}

/* FNV-1a of a buffer: a short name for its contents. */
static uint64_t hash(const unsigned char *b, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* The whole file, read through a new descriptor. */
static void show_file(const char *path, const char *when) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("open to read back");
    struct stat st;
    fstat(fd, &st);
    unsigned char *b = malloc(st.st_size + 1);
    ssize_t n = pread(fd, b, st.st_size, 0);
    printf("%s: size %lld read %zd hash %016llx\n", when, (long long)st.st_size, n,
           (unsigned long long)hash(b, n > 0 ? n : 0));
    free(b);
    close(fd);
}

static int same(const unsigned char *a, const unsigned char *b, size_t n) {
    return memcmp(a, b, n) == 0;
}

static void basic(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/f", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 3 * pg) != 0)
        die("create");
    unsigned char *p = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        die("mmap shared writable");
    for (long i = 0; i < 3 * pg; i++)
        p[i] = (unsigned char)(i * 7 + 3);
    unsigned char *b = malloc(8 * pg);
    /* A read of the file sees the stores, before any msync. */
    printf("pread sees stores: %d\n", pread(fd, b, 3 * pg, 0) == 3 * pg && same(b, p, 3 * pg));
    printf("msync: %d\n", msync(p, 3 * pg, MS_SYNC));
    /* A write of the file is seen through the mapping. */
    printf("pwrite: %zd\n", pwrite(fd, "HELLO", 5, 100));
    printf("mapping sees pwrite: %d\n", memcmp(p + 100, "HELLO", 5) == 0);
    lseek(fd, pg + 10, SEEK_SET);
    printf("write: %zd\n", write(fd, "world", 5));
    printf("mapping sees write: %d\n", memcmp(p + pg + 10, "world", 5) == 0);
    /* The file grows and the mapping with it. */
    printf("ftruncate: %d\n", ftruncate(fd, 5 * pg));
    unsigned char *q = mremap(p, 3 * pg, 5 * pg, MREMAP_MAYMOVE);
    if (q == MAP_FAILED)
        die("mremap");
    printf("grown part is zeros: %d\n", q[3 * pg] == 0 && q[5 * pg - 1] == 0);
    memcpy(q + 4 * pg + 1, "grown", 5);
    printf("read sees the grown part: %d\n",
           pread(fd, b, 5, 4 * pg + 1) == 5 && memcmp(b, "grown", 5) == 0);
    /* Unmapping a page in the middle writes it back and leaves the others. */
    q[pg + 20] = 'M';
    printf("munmap middle: %d\n", munmap(q + pg, pg));
    q[2 * pg] = 'Z';
    printf("munmap rest: %d\n", munmap(q, 5 * pg));
    close(fd);
    show_file(path, "after munmap");

    /* A mapping at an offset, through a second descriptor. */
    fd = open(path, O_RDWR);
    p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * pg);
    if (p == MAP_FAILED)
        die("mmap at an offset");
    printf("offset map sees the file: %d\n", p[0] == 'Z');
    memcpy(p + 1, "offset", 6);
    close(fd); /* the mapping keeps the file */
    printf("munmap after close: %d\n", munmap(p, pg));
    show_file(path, "after the offset map");

    /* Two mappings of one file in one process are the same pages. */
    fd = open(path, O_RDWR);
    p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    q = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED || q == MAP_FAILED)
        die("two maps");
    p[7] = 'x';
    printf("second map sees the first: %d\n", q[7] == 'x');
    /* A write from a shared mapping to another file, a read back into it, and a
     * vector write from it (the shim copies such memory, which other processes may
     * store into, and refers to it never). */
    char other[4096];
    snprintf(other, sizeof other, "%s/g", dir);
    int g = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
    printf("write from a mapping: %zd\n", write(g, p, 64));
    struct iovec v[2] = {{p + 7, 3}, {q + 100, 5}};
    printf("writev from a mapping: %zd\n", writev(g, v, 2));
    printf("pread into a mapping: %zd\n", pread(g, p + 200, 72, 0));
    printf("mapping holds what was read: %d\n", same(p + 200, p, 64) && p[264] == 'x' &&
                                                      same(p + 267, (unsigned char *)"HELLO", 5));
    close(g);
    /* A private map is a copy of what the file holds now: its stores stay in it. */
    unsigned char *r = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (r == MAP_FAILED)
        die("private map");
    printf("private map sees the shared stores: %d\n", r[7] == 'x');
    r[8] = 'y';
    printf("private store stays private: %d\n", p[8] != 'y');
    munmap(r, pg);
    /* A child of fork shares the mapping. */
    pid_t c = fork();
    if (c == 0) {
        p[9] = 'c';
        exit(0);
    }
    int status;
    waitpid(c, &status, 0);
    printf("child's store seen: %d (exit %d)\n", p[9] == 'c', WEXITSTATUS(status));
    munmap(p, pg);
    munmap(q, pg);
    close(fd);
    show_file(path, "after two maps and a child");

    /* Access: a read-only descriptor maps shared read-only, not writable. */
    fd = open(path, O_RDONLY);
    p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("writable shared map of a read-only descriptor: %d errno %d\n", p != MAP_FAILED,
           p == MAP_FAILED ? errno : 0);
    p = mmap(NULL, pg, PROT_READ, MAP_SHARED, fd, 0);
    printf("read-only shared map: %d sees %.5s\n", p != MAP_FAILED, p != MAP_FAILED ? (char *)p + 100 : "");
    if (p != MAP_FAILED)
        munmap(p, pg);
    p = mmap(NULL, pg, PROT_READ, MAP_SHARED, fd, 1);
    printf("unaligned offset: %d errno %d\n", p != MAP_FAILED, p == MAP_FAILED ? errno : 0);
    close(fd);

    /* Shrinking the file while mapped; then the file as it ends. */
    fd = open(path, O_RDWR);
    p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("ftruncate down: %d\n", ftruncate(fd, pg + 100));
    p[pg + 50] = 's';
    printf("fsync: %d\n", fsync(fd));
    munmap(p, 2 * pg);
    close(fd);
    show_file(path, "at the end");
    free(b);
}

static void create(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, pg) != 0)
        die("create");
    close(fd);
}

static void exec_head(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 16) != 0)
        die("create");
    char *p = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        die("mmap");
    memcpy(p, "before exec\n", 12);
    char *argv[] = {"head", "-c", "12", (char *)path, NULL};
    execv("/usr/bin/head", argv);
    die("execv");
}

static void hold(const char *path) {
    int fd = open(path, O_RDWR);
    char *p = fd < 0 ? MAP_FAILED : mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        die("mmap");
    memcpy(p, "stale", 5);
    printf("held\n");
    for (;;)
        pause();
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Waits until *w == v; fails after 30 s. */
static void await(volatile uint64_t *w, uint64_t v, const char *who) {
    double start = now();
    while (__atomic_load_n(w, __ATOMIC_ACQUIRE) != v) {
        if (now() - start > 30) {
            printf("FAILED %s waited 30 s for %llu, sees %llu\n", who, (unsigned long long)v,
                   (unsigned long long)*w);
            exit(1);
        }
        sched_yield();
    }
}

static void pingpong(const char *path, const char *role, long rounds) {
    int fd = open(path, O_RDWR);
    if (fd < 0)
        die("open");
    volatile uint64_t *w = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED)
        die("mmap");
    close(fd);
    int a = strcmp(role, "a") == 0;
    if (!a)
        __atomic_store_n(&w[2], 1, __ATOMIC_RELEASE); /* b is there */
    else
        await(&w[2], 1, "a");
    for (long i = 1; i <= rounds; i++) {
        if (a) {
            __atomic_store_n(&w[0], i, __ATOMIC_RELEASE);
            await(&w[1], i, "a");
        } else {
            await(&w[0], i, "b");
            __atomic_store_n(&w[1], i, __ATOMIC_RELEASE);
        }
    }
    if (a)
        await(&w[3], 1, "a"); /* b has seen the last turn */
    else
        __atomic_store_n(&w[3], 1, __ATOMIC_RELEASE);
    printf("%s took %ld turns\n", role, rounds);
    munmap((void *)w, pg);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pg = sysconf(_SC_PAGESIZE);
    if (argc == 3 && strcmp(argv[1], "basic") == 0)
        basic(argv[2]);
    else if (argc == 3 && strcmp(argv[1], "create") == 0)
        create(argv[2]);
    else if (argc == 3 && strcmp(argv[1], "exec") == 0)
        exec_head(argv[2]);
    else if (argc == 3 && strcmp(argv[1], "hold") == 0)
        hold(argv[2]);
    else if (argc == 5 && strcmp(argv[1], "pingpong") == 0)
        pingpong(argv[2], argv[3], atol(argv[4]));
    else {
        fprintf(stderr, "usage: mmap basic DIR | create FILE | exec FILE | hold FILE | pingpong FILE a|b N\n");
        return 2;
    }
    return 0;
}
