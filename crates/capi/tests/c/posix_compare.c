/* posix_compare.c: one sequence of file calls run twice, on the kernel (libc calls in
 * a tmpfs directory) and on easyio (the same calls through easyio.h on a fresh
 * image), comparing every return value, errno and the data and attributes read back.
 * Exit status 0 only if all are equal.
 *
 *   posix_compare IMAGE KERNEL_DIR [SOCKET]
 *
 * With SOCKET, the easyio side is a connection to the server serving IMAGE there
 * (`easyio_connect`) instead of a mount of a new IMAGE.
 */
#define _GNU_SOURCE
#include <easyio.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* The calls the sequence makes, for one side. */
struct ops {
    int (*open)(const char *p, int flags, mode_t mode);
    int (*openat)(int dirfd, const char *p, int flags, mode_t mode);
    int (*close)(int fd);
    ssize_t (*read)(int fd, void *b, size_t n);
    ssize_t (*write)(int fd, const void *b, size_t n);
    ssize_t (*pread)(int fd, void *b, size_t n, off_t off);
    ssize_t (*pwrite)(int fd, const void *b, size_t n, off_t off);
    ssize_t (*readv)(int fd, const struct iovec *iov, int n);
    ssize_t (*writev)(int fd, const struct iovec *iov, int n);
    off_t (*lseek)(int fd, off_t off, int whence);
    int (*fstat)(int fd, struct stat *st);
    int (*stat)(const char *p, struct stat *st);
    int (*lstat)(const char *p, struct stat *st);
    int (*ftruncate)(int fd, off_t len);
    int (*truncate)(const char *p, off_t len);
    int (*fsync)(int fd);
    int (*unlink)(const char *p);
    int (*mkdir)(const char *p, mode_t mode);
    int (*rmdir)(const char *p);
    int (*rename)(const char *a, const char *b);
    int (*renameat2)(const char *a, const char *b, unsigned flags);
    int (*link)(const char *a, const char *b);
    int (*symlink)(const char *target, const char *p);
    ssize_t (*readlink)(const char *p, char *b, size_t n);
    int (*chmod)(const char *p, mode_t mode);
    int (*utimens)(const char *p, const struct timespec t[2]);
    int (*list)(const char *p, char *out, size_t n);
    void *(*buffer)(size_t n);
    int (*unbuffer)(void *b);
    /* A write started and then waited for: its result, or -1 with errno. */
    ssize_t (*submitted_pwrite)(int fd, const void *b, size_t n, off_t off);
};

/* ---- the kernel side: libc in the current directory (a tmpfs directory) ---- */
static int k_open(const char *p, int f, mode_t m) { return open(p, f, m); }
static int k_openat(int d, const char *p, int f, mode_t m) { return openat(d, p, f, m); }
static int k_stat(const char *p, struct stat *st) { return stat(p, st); }
static int k_lstat(const char *p, struct stat *st) { return lstat(p, st); }
static int k_renameat2(const char *a, const char *b, unsigned f) {
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, f);
}
static int k_utimens(const char *p, const struct timespec t[2]) {
    return utimensat(AT_FDCWD, p, t, 0);
}
static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
/* Sorted "name:type " pairs of a directory, into out. */
static int join_sorted(char **names, int n, char *out, size_t size) {
    qsort(names, (size_t)n, sizeof *names, by_name);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(out, names[i], size - strlen(out) - 1);
        strncat(out, " ", size - strlen(out) - 1);
        free(names[i]);
    }
    return n;
}
static int k_list(const char *p, char *out, size_t size) {
    DIR *d = opendir(p);
    if (!d)
        return -1;
    char *names[64];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64)
        if (asprintf(&names[n], "%s:%d", e->d_name, e->d_type) >= 0)
            n++;
    closedir(d);
    return join_sorted(names, n, out, size);
}

static void *k_buffer(size_t n) { return aligned_alloc(4096, (n + 4095) / 4096 * 4096); }
static int k_unbuffer(void *b) {
    free(b);
    return 0;
}
static ssize_t k_submitted_pwrite(int fd, const void *b, size_t n, off_t o) {
    return pwrite(fd, b, n, o);
}

static const struct ops kernel = {
    k_open, k_openat, close, read, write, pread, pwrite, readv, writev, lseek, fstat,
    k_stat, k_lstat, ftruncate, truncate, fsync, unlink, mkdir, rmdir, rename, k_renameat2,
    link, symlink, readlink, chmod, k_utimens, k_list, k_buffer, k_unbuffer, k_submitted_pwrite,
};

/* ---- the easyio side: the same calls through easyio.h ---- */
static easyio_fs *efs;
static int e_open(const char *p, int f, mode_t m) { return easyio_open(efs, p, f, m); }
static int e_openat(int d, const char *p, int f, mode_t m) {
    return easyio_openat(efs, d, p, f, m);
}
static int e_close(int fd) { return easyio_close(efs, fd); }
static ssize_t e_read(int fd, void *b, size_t n) { return easyio_read(efs, fd, b, n); }
static ssize_t e_write(int fd, const void *b, size_t n) { return easyio_write(efs, fd, b, n); }
static ssize_t e_pread(int fd, void *b, size_t n, off_t o) { return easyio_pread(efs, fd, b, n, o); }
static ssize_t e_pwrite(int fd, const void *b, size_t n, off_t o) {
    return easyio_pwrite(efs, fd, b, n, o);
}
static ssize_t e_readv(int fd, const struct iovec *v, int n) { return easyio_readv(efs, fd, v, n); }
static ssize_t e_writev(int fd, const struct iovec *v, int n) { return easyio_writev(efs, fd, v, n); }
static off_t e_lseek(int fd, off_t o, int w) { return easyio_lseek(efs, fd, o, w); }
static int e_fstat(int fd, struct stat *st) { return easyio_fstat(efs, fd, st); }
static int e_stat(const char *p, struct stat *st) { return easyio_stat(efs, p, st); }
static int e_lstat(const char *p, struct stat *st) { return easyio_lstat(efs, p, st); }
static int e_ftruncate(int fd, off_t l) { return easyio_ftruncate(efs, fd, l); }
static int e_truncate(const char *p, off_t l) { return easyio_truncate(efs, p, l); }
static int e_fsync(int fd) { return easyio_fsync(efs, fd); }
static int e_unlink(const char *p) { return easyio_unlink(efs, p); }
static int e_mkdir(const char *p, mode_t m) { return easyio_mkdir(efs, p, m); }
static int e_rmdir(const char *p) { return easyio_rmdir(efs, p); }
static int e_rename(const char *a, const char *b) { return easyio_rename(efs, a, b); }
static int e_renameat2(const char *a, const char *b, unsigned f) {
    return easyio_renameat2(efs, EASYIO_AT_ROOT, a, EASYIO_AT_ROOT, b, f);
}
static int e_link(const char *a, const char *b) { return easyio_link(efs, a, b); }
static int e_symlink(const char *t, const char *p) { return easyio_symlink(efs, t, p); }
static ssize_t e_readlink(const char *p, char *b, size_t n) { return easyio_readlink(efs, p, b, n); }
static int e_chmod(const char *p, mode_t m) { return easyio_chmod(efs, p, m); }
static int e_utimens(const char *p, const struct timespec t[2]) {
    return easyio_utimensat(efs, EASYIO_AT_ROOT, p, t, 0);
}
static int e_list(const char *p, char *out, size_t size) {
    easyio_dir *d = easyio_opendir(efs, p);
    if (!d)
        return -1;
    char *names[64];
    int n = 0;
    easyio_dirent e;
    while (easyio_readdir(d, &e) == 1 && n < 64)
        if (asprintf(&names[n], "%s:%d", e.name, e.kind) >= 0)
            n++;
    easyio_closedir(d);
    return join_sorted(names, n, out, size);
}

static void *e_buffer(size_t n) { return easyio_buffer_alloc(efs, n); }
static int e_unbuffer(void *b) { return easyio_buffer_free(efs, b); }
/* Submitted (through a server from a staging buffer: answered once committed, then
 * completed when the image's completion record says the copy is durable), then
 * waited for. */
static ssize_t e_submitted_pwrite(int fd, const void *b, size_t n, off_t o) {
    int64_t id = easyio_submit_pwrite(efs, fd, b, n, o);
    if (id < 0)
        return -1;
    easyio_completion c;
    if (easyio_wait(efs, (uint64_t)id, &c) != 0)
        return -1;
    if (c.res < 0) {
        errno = (int)-c.res;
        return -1;
    }
    return (ssize_t)c.res;
}

static const struct ops easyio = {
    e_open, e_openat, e_close, e_read, e_write, e_pread, e_pwrite, e_readv, e_writev,
    e_lseek, e_fstat, e_stat, e_lstat, e_ftruncate, e_truncate, e_fsync, e_unlink, e_mkdir,
    e_rmdir, e_rename, e_renameat2, e_link, e_symlink, e_readlink, e_chmod, e_utimens, e_list,
    e_buffer, e_unbuffer, e_submitted_pwrite,
};

/* ---- what each call answered ---- */
#define MAX_STEPS 256
struct step {
    const char *what;
    long ret;
    int err;
    char data[512];
};
struct log {
    int n;
    struct step s[MAX_STEPS];
};

/* Records a call's result: descriptors as 0 (numbers differ between the sides). */
static long record(struct log *l, const char *what, long ret, int is_fd) {
    struct step *s = &l->s[l->n++];
    s->what = what;
    s->err = ret < 0 ? errno : 0;
    s->ret = is_fd && ret >= 0 ? 0 : ret;
    s->data[0] = 0;
    return ret;
}
static void note(struct log *l, const char *fmt, const char *a, long long b, long long c,
                 long long d) {
    snprintf(l->s[l->n - 1].data, sizeof l->s[0].data, fmt, a, b, c, d);
}

#define CALL(what, expr) (errno = 0, record(l, what, (long)(expr), 0))
#define OPEN(what, expr) (errno = 0, (int)record(l, what, (long)(expr), 1))

static void attrs(struct log *l, const struct ops *o, const char *what, const char *p,
                  int follow) {
    struct stat st;
    memset(&st, 0, sizeof st);
    CALL(what, follow ? o->stat(p, &st) : o->lstat(p, &st));
    note(l, "%s size=%lld mode=%llo nlink=%lld", "", (long long)st.st_size,
         (long long)st.st_mode, (long long)st.st_nlink);
}

/* Files: create, write, read, seek, vectors, truncate, close twice. */
static void files(struct log *l, const struct ops *o) {
    char buf[128];
    CALL("mkdir d", o->mkdir("d", 0755));
    CALL("mkdir d again", o->mkdir("d", 0755));
    int fd = OPEN("open d/f O_CREAT", o->open("d/f", O_CREAT | O_RDWR, 0644));
    CALL("open d/f O_CREAT|O_EXCL", o->open("d/f", O_CREAT | O_EXCL | O_RDWR, 0644));
    CALL("write", o->write(fd, "hello world", 11));
    CALL("lseek SET 0", o->lseek(fd, 0, SEEK_SET));
    memset(buf, 0, sizeof buf);
    CALL("read", o->read(fd, buf, sizeof buf));
    note(l, "%s", buf, 0, 0, 0);
    CALL("read at the end", o->read(fd, buf, sizeof buf));
    memset(buf, 0, sizeof buf);
    CALL("pread", o->pread(fd, buf, 5, 6));
    note(l, "%s", buf, 0, 0, 0);
    CALL("pwrite past the end", o->pwrite(fd, "XY", 2, 20));
    CALL("lseek END", o->lseek(fd, 0, SEEK_END));
    CALL("lseek negative", o->lseek(fd, -100, SEEK_SET));
    CALL("lseek bad whence", o->lseek(fd, 0, 77));
    CALL("lseek DATA past the end", o->lseek(fd, 100, SEEK_DATA));
    CALL("lseek DATA 0", o->lseek(fd, 0, SEEK_DATA));
    struct iovec w[2] = {{"abc", 3}, {"defg", 4}};
    CALL("lseek SET 2", o->lseek(fd, 2, SEEK_SET));
    CALL("writev", o->writev(fd, w, 2));
    char a[4] = {0}, b[40] = {0};
    struct iovec r[2] = {{a, 3}, {b, 30}};
    CALL("lseek SET 0 again", o->lseek(fd, 0, SEEK_SET));
    CALL("readv", o->readv(fd, r, 2));
    note(l, "%s|%lld%lld%lld", a, b[0], b[10], b[19]);
    struct stat st;
    CALL("fstat", o->fstat(fd, &st));
    note(l, "%s size=%lld mode=%llo nlink=%lld", "", (long long)st.st_size,
         (long long)st.st_mode, (long long)st.st_nlink);
    CALL("ftruncate 5", o->ftruncate(fd, 5));
    CALL("fsync", o->fsync(fd));
    attrs(l, o, "stat d/f", "d/f", 1);
    CALL("close", o->close(fd));
    CALL("close again", o->close(fd));
    CALL("read closed", o->read(fd, buf, 1));
    CALL("fsync closed", o->fsync(fd));
    CALL("write -1", o->write(-1, "x", 1));
    fd = OPEN("open d/f O_RDONLY", o->open("d/f", O_RDONLY, 0));
    CALL("write on O_RDONLY", o->write(fd, "x", 1));
    CALL("ftruncate on O_RDONLY", o->ftruncate(fd, 0));
    CALL("close O_RDONLY", o->close(fd));
    fd = OPEN("open d/f O_APPEND", o->open("d/f", O_WRONLY | O_APPEND, 0));
    CALL("append", o->write(fd, "++", 2));
    CALL("lseek CUR after append", o->lseek(fd, 0, SEEK_CUR));
    CALL("close append", o->close(fd));
}

/* A checksum of n bytes that depends on their order. */
static long long sum(const unsigned char *b, int n) {
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += (long long)(i + 1) * b[i];
    return s;
}

/* I/O buffers from the side's allocator (easyio_buffer_alloc: through a server, shared
 * memory the server copies from and into): writes from one, reads into it at an
 * offset, at the position and past the end. */
static void buffers(struct log *l, const struct ops *o) {
    enum { N = 20000 };
    unsigned char *b = o->buffer(N);
    if (!b) {
        CALL("buffer", -1);
        return;
    }
    for (int i = 0; i < N; i++)
        b[i] = (unsigned char)(i * 7 % 251);
    int fd = OPEN("open big O_CREAT", o->open("big", O_CREAT | O_RDWR, 0644));
    CALL("pwrite from a buffer", o->pwrite(fd, b, N, 3));
    CALL("write from a buffer", o->write(fd, b + 100, 50));
    memset(b, 0, N);
    CALL("pread into a buffer", o->pread(fd, b, N, 0));
    note(l, "%s%lld %lld %lld", "", sum(b, N), b[3], b[N - 1]);
    CALL("lseek SET 10", o->lseek(fd, 10, SEEK_SET));
    memset(b, 0, N);
    CALL("read into a buffer", o->read(fd, b + 4096, 1000));
    note(l, "%s%lld %lld %lld", "", sum(b + 4096, 1000), b[4096], b[4096 + 999]);
    CALL("pread past the end into a buffer", o->pread(fd, b, 100, N - 20));
    for (int i = 0; i < N; i++)
        b[i] = (unsigned char)(i * 11 % 253);
    CALL("submitted pwrite from a buffer", o->submitted_pwrite(fd, b, N, 7));
    CALL("submitted pwrite from plain memory", o->submitted_pwrite(fd, "plain", 5, 2));
    CALL("submitted pwrite to a bad descriptor", o->submitted_pwrite(999, b, 10, 0));
    memset(b, 0, N);
    CALL("pread after submitted writes", o->pread(fd, b, N, 0));
    note(l, "%s%lld %lld %lld", "", sum(b, N), b[2], b[N - 1]);
    /* The other calls given such a buffer (through a server: copied, never referred to). */
    struct iovec v[2] = {{b, 10}, {b + 5000, 20}};
    CALL("writev from a buffer", o->writev(fd, v, 2));
    CALL("lseek SET 0", o->lseek(fd, 0, SEEK_SET));
    memset(b, 0, N);
    CALL("readv into a buffer", o->readv(fd, v, 2));
    note(l, "%s%lld %lld %lld", "", sum(b, 10), sum(b + 5000, 20), 0);
    struct stat *st = (struct stat *)(b + 8192);
    CALL("fstat into a buffer", o->fstat(fd, st));
    note(l, "%s%lld %lld %lld", "", (long long)st->st_size, 0, 0);
    CALL("close big", o->close(fd));
    CALL("unlink big", o->unlink("big"));
    CALL("free the buffer", o->unbuffer(b));
}

/* Names: errors of open, links, renames, modes, times, listing, removal. */
static void names(struct log *l, const struct ops *o) {
    char buf[64];
    CALL("open missing", o->open("nope", O_RDONLY, 0));
    CALL("open dir for writing", o->open("d", O_WRONLY, 0));
    CALL("open through a file", o->open("d/f/x", O_RDONLY, 0));
    CALL("open O_DIRECTORY of a file", o->open("d/f", O_RDONLY | O_DIRECTORY, 0));
    int dfd = OPEN("open d O_DIRECTORY", o->open("d", O_RDONLY | O_DIRECTORY, 0));
    int fd = OPEN("openat d, g", o->openat(dfd, "g", O_CREAT | O_WRONLY, 0600));
    CALL("close g", o->close(fd));
    CALL("symlink", o->symlink("f", "d/l"));
    CALL("symlink again", o->symlink("f", "d/l"));
    memset(buf, 0, sizeof buf);
    CALL("readlink", o->readlink("d/l", buf, sizeof buf));
    note(l, "%s", buf, 0, 0, 0);
    CALL("readlink of a file", o->readlink("d/f", buf, sizeof buf));
    attrs(l, o, "lstat d/l", "d/l", 0);
    attrs(l, o, "stat d/l", "d/l", 1);
    CALL("open O_NOFOLLOW of a link", o->open("d/l", O_RDONLY | O_NOFOLLOW, 0));
    CALL("link", o->link("d/f", "d/h"));
    CALL("link to a taken name", o->link("d/f", "d/g"));
    CALL("link a directory", o->link("d", "e"));
    attrs(l, o, "stat after link", "d/f", 1);
    CALL("rename", o->rename("d/h", "d/k"));
    attrs(l, o, "stat old name", "d/h", 1);
    CALL("rename NOREPLACE onto a name", o->renameat2("d/k", "d/f", RENAME_NOREPLACE));
    CALL("rename EXCHANGE", o->renameat2("d/k", "d/g", RENAME_EXCHANGE));
    attrs(l, o, "stat exchanged", "d/k", 1);
    CALL("rename a directory into itself", o->rename("d", "d/sub"));
    CALL("mkdir e", o->mkdir("e", 0700));
    CALL("mkdir e/x", o->mkdir("e/x", 0700));
    CALL("rename onto a non-empty directory", o->rename("d", "e"));
    CALL("rename a file onto a directory", o->rename("d/f", "e"));
    CALL("chmod", o->chmod("d/f", 0600));
    attrs(l, o, "stat after chmod", "d/f", 1);
    struct timespec t[2] = {{1000000, 5}, {2000000, 7}};
    CALL("utimensat", o->utimens("d/f", t));
    struct stat st;
    CALL("stat times", o->stat("d/f", &st));
    note(l, "%s %lld %lld %lld", "", (long long)st.st_mtim.tv_sec,
         (long long)st.st_mtim.tv_nsec, (long long)st.st_atim.tv_nsec);
    CALL("truncate", o->truncate("d/f", 100));
    attrs(l, o, "stat after truncate", "d/f", 1);
    char list[512];
    CALL("list d", o->list("d", list, sizeof list));
    note(l, "%s", list, 0, 0, 0);
    CALL("unlink a directory", o->unlink("d"));
    CALL("rmdir a non-empty directory", o->rmdir("d"));
    CALL("rmdir a file", o->rmdir("d/f"));
    CALL("unlink d/f", o->unlink("d/f"));
    CALL("unlink d/g", o->unlink("d/g"));
    CALL("unlink d/k", o->unlink("d/k"));
    CALL("unlink d/l", o->unlink("d/l"));
    CALL("unlink missing", o->unlink("d/l"));
    CALL("close d", o->close(dfd));
    CALL("rmdir d", o->rmdir("d"));
    CALL("rmdir d again", o->rmdir("d"));
    CALL("rmdir e/x", o->rmdir("e/x"));
    CALL("rmdir e", o->rmdir("e"));
    CALL("list root", o->list(".", list, sizeof list));
    note(l, "%s", list, 0, 0, 0);
}

static struct log on_kernel, on_easyio;

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s IMAGE KERNEL_DIR [SOCKET]\n", argv[0]);
        return 2;
    }
    umask(0); /* easyio's trusted context applies no umask */
    if (argc == 4) {
        /* IMAGE is served by `easyio serve` on SOCKET: the calls are the server's. */
        if (!(efs = easyio_connect(argv[3]))) {
            fprintf(stderr, "posix_compare: server %s: %s\n", argv[3], easyio_last_error());
            return 1;
        }
    } else if (easyio_mkfs(argv[1], 16u << 20) != 0 || !(efs = easyio_mount(argv[1], NULL))) {
        fprintf(stderr, "posix_compare: image %s: %s\n", argv[1], easyio_last_error());
        return 1;
    }
    if (chdir(argv[2]) != 0) {
        perror(argv[2]);
        return 1;
    }
    struct log *l = &on_kernel;
    files(l, &kernel);
    names(l, &kernel);
    buffers(l, &kernel);
    l = &on_easyio;
    files(l, &easyio);
    names(l, &easyio);
    buffers(l, &easyio);
    if (easyio_buffer_free(efs, &argc) == 0 || errno != EINVAL) {
        fprintf(stderr, "posix_compare: freeing a foreign buffer did not fail with EINVAL\n");
        return 1;
    }
    if (easyio_unmount(efs) != 0) {
        fprintf(stderr, "posix_compare: unmount: %s\n", easyio_last_error());
        return 1;
    }
    int differ = on_kernel.n != on_easyio.n;
    for (int i = 0; i < on_kernel.n && i < on_easyio.n; i++) {
        struct step *k = &on_kernel.s[i], *e = &on_easyio.s[i];
        if (k->ret != e->ret || k->err != e->err || strcmp(k->data, e->data) != 0) {
            fprintf(stderr,
                    "posix_compare: %-36s kernel %ld (%s) [%s]\n"
                    "               %-36s easyio %ld (%s) [%s]\n",
                    k->what, k->ret, k->err ? strerror(k->err) : "ok", k->data, "",
                    e->ret, e->err ? strerror(e->err) : "ok", e->data);
            differ = 1;
        }
    }
    if (differ) {
        fprintf(stderr, "posix_compare: easyio differs from the kernel\n");
        return 1;
    }
    printf("posix_compare: %d calls, each with the kernel's result, errno and data\n",
           on_kernel.n);
    return 0;
}
