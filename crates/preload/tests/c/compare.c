/* compare.c: one sequence of intercepted calls run twice in one process under the
 * shim — under the mount prefix (easyio) and in a tmpfs directory (the kernel, the
 * shim passing the calls on) — logging each call's return value, errno and the data
 * read back; the two logs must be equal line by line. Exit status 0 only if they are.
 *
 *   compare EASYIO_ROOT KERNEL_ROOT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

extern int __open_2(const char *, int);
extern int __openat_2(int, const char *, int);

#define MAXLOG (1 << 16)
static char logs[2][MAXLOG][160];
static int nlog[2];
static int side;
static const char *root;

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(logs[side][nlog[side]++], sizeof logs[0][0], fmt, ap);
    va_end(ap);
}

/* Logs a call's result, and errno when it failed. */
#define CHECK(expr)                                                              \
    do {                                                                         \
        errno = 0;                                                               \
        long r_ = (long)(expr);                                                  \
        say("%d %s = %ld errno %d", __LINE__, #expr, r_, r_ < 0 ? errno : 0);    \
    } while (0)

static char pbuf[8][PATH_MAX];
static int pnext;
/* root/rel, in one of a few rotating buffers. */
static const char *P(const char *rel) {
    char *b = pbuf[pnext++ % 8];
    snprintf(b, PATH_MAX, "%s/%s", root, rel);
    return b;
}

/* The length of a link's target. */
static int r_len(const char *p) {
    char b[PATH_MAX];
    ssize_t n = readlink(p, b, sizeof b);
    return n < 0 ? 0 : (int)n;
}

static void stat_fields(const char *what, int r, const struct stat *st) {
    if (r == 0)
        say("%s mode %o nlink %lu uid %u gid %u size %lld", what, st->st_mode,
            (unsigned long)(S_ISDIR(st->st_mode) ? 0 : st->st_nlink), st->st_uid, st->st_gid,
            S_ISDIR(st->st_mode) ? 0LL : (long long)st->st_size);
}

static void files(void) {
    char buf[256];
    struct stat st;
    int fd = open(P("f"), O_CREAT | O_EXCL | O_RDWR, 0640);
    say("fd %d", fd);
    CHECK(open(P("f"), O_CREAT | O_EXCL | O_RDWR, 0640));
    CHECK(open(P("missing"), O_RDONLY));
    CHECK(open(P("missing/x"), O_CREAT | O_WRONLY, 0600));
    CHECK(write(fd, "hello world", 11));
    CHECK(lseek(fd, 0, SEEK_CUR));
    CHECK(lseek(fd, -5, SEEK_END));
    CHECK(lseek(fd, -100, SEEK_SET));
    CHECK(read(fd, buf, sizeof buf));
    say("read %.5s", buf);
    CHECK(pwrite(fd, "HELLO", 5, 0));
    CHECK(pread(fd, buf, 11, 0));
    say("pread %.11s", buf);
    CHECK(pread(fd, buf, 10, 1000));
    struct iovec iov[2] = {{"ab", 2}, {"cde", 3}};
    CHECK(lseek(fd, 0, SEEK_END));
    CHECK(writev(fd, iov, 2));
    char x[3], y[4];
    struct iovec riov[2] = {{x, 3}, {y, 4}};
    CHECK(preadv(fd, riov, 2, 9));
    say("preadv %.3s %.4s", x, y);
    CHECK(pwritev(fd, iov, 2, 20));
    CHECK(preadv2(fd, riov, 2, 20, 0));
    CHECK(pwritev2(fd, iov, 1, -1, 0));
    CHECK(readv(fd, riov, 2));
    CHECK(fstat(fd, &st));
    stat_fields("fstat", 0, &st);
    CHECK(ftruncate(fd, 4));
    CHECK(ftruncate(fd, -1));
    CHECK(fsync(fd));
    CHECK(fdatasync(fd));
    CHECK(posix_fallocate(fd, 0, 8192));
    CHECK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 4096));
    CHECK(fstat(fd, &st));
    stat_fields("fallocated", 0, &st);
    CHECK(lseek(fd, 0, SEEK_DATA));
    CHECK(ftruncate(fd, 4));
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    CHECK(fcntl(fd, F_SETLK, &lk));
    lk.l_type = F_WRLCK;
    CHECK(fcntl(fd, F_GETLK, &lk));
    say("getlk type %d", lk.l_type);
    CHECK(fcntl(fd, F_GETFL));
    CHECK(fcntl(fd, F_GETFD));
    CHECK(fcntl(fd, F_SETFD, FD_CLOEXEC));
    CHECK(fcntl(fd, F_GETFD));
    int d = dup(fd);
    say("dup %d", d);
    CHECK(lseek(d, 1, SEEK_SET));
    CHECK(lseek(fd, 0, SEEK_CUR));
    CHECK(fcntl(d, F_GETFD));
    CHECK(dup2(fd, 40));
    CHECK(dup3(fd, 41, O_CLOEXEC));
    CHECK(fcntl(41, F_GETFD));
    CHECK(dup3(fd, fd, 0));
    CHECK(fcntl(fd, F_DUPFD, 50));
    CHECK(close(50));
    CHECK(close(40));
    CHECK(close(41));
    CHECK(close(d));
    CHECK(close(d));
    CHECK(close(fd));
    CHECK(read(fd, buf, 1));
    int c = creat(P("c"), 0600);
    say("creat %d", c);
    CHECK(close(c));
    c = __open_2(P("c"), O_RDONLY);
    say("__open_2 %d", c);
    CHECK(close(c));
    CHECK(truncate(P("c"), 100));
    CHECK(stat(P("c"), &st));
    stat_fields("stat c", 0, &st);
    /* A final "/." or "/" asks for a directory: ENOTDIR on a file. */
    CHECK(stat(P("c/."), &st));
    CHECK(stat(P("c/"), &st));
    CHECK(access(P("c/."), F_OK));
    CHECK(open(P("c/."), O_RDONLY));
    CHECK(truncate(P("missing"), 1));
}

static void names(void) {
    struct stat st;
    char buf[256];
    CHECK(mkdir(P("d"), 0755));
    CHECK(mkdir(P("d"), 0755));
    CHECK(mkdir(P("d/e"), 0700));
    int dfd = open(P("d"), O_RDONLY | O_DIRECTORY);
    say("dfd %d", dfd);
    CHECK(mkdirat(dfd, "e2", 0750));
    int g0 = openat(dfd, "g", O_CREAT | O_WRONLY, 0644);
    say("openat %d", g0);
    CHECK(close(g0));
    g0 = __openat_2(dfd, "g", O_RDONLY);
    say("__openat_2 %d", g0);
    CHECK(close(g0));
    CHECK(fstatat(dfd, "g", &st, 0));
    stat_fields("fstatat g", 0, &st);
    CHECK(fstatat(dfd, "", &st, AT_EMPTY_PATH));
    stat_fields("fstatat empty", 0, &st);
    struct statx sx;
    CHECK(statx(dfd, "g", 0, STATX_BASIC_STATS, &sx));
    say("statx mode %o size %llu", sx.stx_mode, (unsigned long long)sx.stx_size);
    CHECK(access(P("d/g"), F_OK));
    CHECK(access(P("d/g"), R_OK | W_OK));
    CHECK(access(P("d/nope"), F_OK));
    CHECK(faccessat(dfd, "g", X_OK, 0));
    CHECK(faccessat(dfd, "e", X_OK, 0));
    CHECK(rmdir(P("d")));
    CHECK(unlink(P("d/e")));
    CHECK(unlinkat(dfd, "e2", AT_REMOVEDIR));
    CHECK(unlinkat(dfd, "e2", AT_REMOVEDIR));
    CHECK(rename(P("d/g"), P("d/h")));
    CHECK(renameat(dfd, "h", dfd, "g"));
    CHECK(link(P("d/g"), P("d/l")));
    CHECK(linkat(dfd, "g", dfd, "l", 0));
    CHECK(stat(P("d/l"), &st));
    stat_fields("linked", 0, &st);
    CHECK(renameat2(dfd, "g", dfd, "l", RENAME_NOREPLACE));
    CHECK(renameat2(dfd, "g", dfd, "l", RENAME_EXCHANGE));
    CHECK(symlink("g", P("d/s")));
    CHECK(symlinkat("nowhere", dfd, "s2"));
    CHECK(readlink(P("d/s"), buf, sizeof buf));
    CHECK(readlinkat(dfd, "s2", buf, 3));
    say("readlink %.3s", buf);
    CHECK(symlink(P("d/g"), P("d/abs")));
    CHECK(readlink(P("d/abs"), buf, sizeof buf) - (long)strlen(root));
    buf[r_len(P("d/abs"))] = 0;
    say("absolute link %s", buf + strlen(root));
    CHECK(stat(P("d/abs"), &st));
    stat_fields("through absolute link", 0, &st);
    CHECK(unlink(P("d/abs")));
    CHECK(lstat(P("d/s"), &st));
    stat_fields("lstat", 0, &st);
    CHECK(stat(P("d/s2"), &st));
    CHECK(chmod(P("d/g"), 0600));
    CHECK(fchmodat(dfd, "l", 0604, 0));
    int g = open(P("d/g"), O_RDWR);
    CHECK(fchmod(g, 0640));
    CHECK(fchown(g, getuid(), getgid()));
    CHECK(chown(P("d/g"), -1, getgid()));
    CHECK(lchown(P("d/s"), getuid(), -1));
    CHECK(fchownat(dfd, "l", getuid(), getgid(), AT_SYMLINK_NOFOLLOW));
    struct timespec ts[2] = {{1000, 5}, {2000, 7}};
    CHECK(utimensat(dfd, "g", ts, 0));
    CHECK(stat(P("d/g"), &st));
    say("times %ld %ld %ld", (long)st.st_atime, (long)st.st_mtime, st.st_mtim.tv_nsec);
    struct timespec omit[2] = {{0, UTIME_OMIT}, {3000, 0}};
    CHECK(futimens(g, omit));
    CHECK(fstat(g, &st));
    say("times %ld %ld", (long)st.st_atime, (long)st.st_mtime);
    struct timeval tv[2] = {{10, 1}, {20, 2}};
    CHECK(utimes(P("d/g"), tv));
    CHECK(stat(P("d/g"), &st));
    say("utimes %ld %ld %ld", (long)st.st_atime, (long)st.st_mtime, st.st_mtim.tv_nsec);
    CHECK(close(g));
    CHECK(close(dfd));
}

static int cmp(const void *a, const void *b) { return strcmp(a, b); }

static void dirs(void) {
    char names[64][64];
    int n = 0;
    DIR *dir = opendir(P("d"));
    say("opendir %d", dir != NULL);
    CHECK(dirfd(dir) >= 0);
    struct dirent *e;
    while ((e = readdir(dir)) && n < 64)
        snprintf(names[n++], 64, "%.50s %d", e->d_name, e->d_type);
    qsort(names, n, 64, cmp);
    for (int i = 0; i < n; i++)
        say("entry %s", names[i]);
    rewinddir(dir);
    int again = 0;
    while (readdir(dir))
        again++;
    say("again %d", again);
    CHECK(closedir(dir));
    CHECK(opendir(P("nope")) == NULL);
    CHECK(opendir(P("d/g")) == NULL);
    int fd = open(P("d"), O_RDONLY | O_DIRECTORY);
    DIR *fdir = fdopendir(fd);
    say("fdopendir %d %d", fdir != NULL, dirfd(fdir) == fd);
    CHECK(closedir(fdir));
    CHECK(close(fd));
}

static void cwd(void) {
    char buf[PATH_MAX];
    char *saved = getcwd(NULL, 0);
    CHECK(chdir(P("d")));
    char *c = getcwd(buf, sizeof buf);
    say("getcwd %s", c ? c + strlen(root) : "(null)");
    int g = open("g", O_RDONLY);
    say("relative open %d", g);
    CHECK(close(g));
    CHECK(access("../d/g", F_OK));
    CHECK(chdir("nope"));
    CHECK(chdir("g"));
    char *rp = realpath(P("d/s"), NULL);
    say("realpath %s", rp ? rp + strlen(root) : "(null)");
    free(rp);
    CHECK(realpath(P("d/nope"), buf) == NULL);
    CHECK(getcwd(buf, 2) == NULL);
    int dfd = open(P("d"), O_RDONLY);
    CHECK(chdir(saved));
    CHECK(fchdir(dfd));
    c = getcwd(buf, sizeof buf);
    say("fchdir %s", c ? c + strlen(root) : "(null)");
    CHECK(chdir(saved));
    CHECK(close(dfd));
    free(saved);
}

static void streams(const char *host) {
    char buf[64] = {0};
    FILE *f = fopen(P("s.txt"), "w+");
    say("fopen %d", f != NULL);
    CHECK(fileno(f) >= 0);
    CHECK(fprintf(f, "line %d\n", 42));
    CHECK(fseek(f, 0, SEEK_SET));
    CHECK(fread(buf, 1, sizeof buf - 1, f));
    say("fread %s", buf);
    CHECK(ftell(f));
    CHECK(fclose(f));
    CHECK(fopen(P("nope/x"), "r") == NULL);
    f = fopen(P("s.txt"), "a");
    CHECK(fputs("more\n", f));
    CHECK(fclose(f));
    int fd = open(P("s.txt"), O_RDONLY);
    f = fdopen(fd, "r");
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    say("fdopen %s", buf);
    CHECK(fclose(f));
    /* between a kernel file and this side */
    int k = open(host, O_RDONLY);
    int o = open(P("copy"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(sendfile(o, k, NULL, 1 << 20));
    off_t off = 3;
    CHECK(copy_file_range(o, &off, k, NULL, 5, 0) >= 0);
    CHECK(off);
    CHECK(pread(o, buf, 16, 0));
    say("copied %.16s", buf);
    void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, o, 0);
    say("mmap %d %.5s", m != MAP_FAILED, m != MAP_FAILED ? (char *)m : "");
    if (m != MAP_FAILED)
        munmap(m, 4096);
    CHECK(close(k));
    CHECK(close(o));
}

static void cleanup(void) {
    const char *all[] = {"d/g", "d/l", "d/s", "d/s2", "f", "c", "s.txt", "copy"};
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++)
        CHECK(unlink(P(all[i])));
    CHECK(rmdir(P("d")));
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: compare EASYIO_ROOT KERNEL_ROOT HOST_FILE\n");
        return 2;
    }
    for (side = 0; side < 2; side++) {
        root = argv[1 + side];
        files();
        names();
        dirs();
        cwd();
        streams(argv[3]);
        cleanup();
    }
    int bad = nlog[0] != nlog[1];
    for (int i = 0; i < nlog[0] && i < nlog[1]; i++)
        if (strcmp(logs[0][i], logs[1][i])) {
            printf("easyio: %s\nkernel: %s\n", logs[0][i], logs[1][i]);
            bad = 1;
        }
    printf("%d calls compared: %s\n", nlog[0], bad ? "DIFFERENT" : "same");
    return bad;
}
