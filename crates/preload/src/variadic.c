/* variadic.c: the shim's entries of C-variadic type, which stable Rust cannot
 * define: execl, execle, execlp, dprintf, __dprintf_chk and syscall. Built by
 * build.rs into the shim; each is exported by a Rust function of libc's name that
 * jumps here (variadic.rs), and each calls the libc function of the same meaning by
 * name -- execv, vdprintf, open, ... -- which binds to the shim's exported wrapper.
 * So execl hands descriptors and the current directory over as execv does, and a
 * raw syscall(SYS_openat, ...) of a mount path is served by the image, never by
 * the kernel.
 *
 * Everything here is hidden: only the Rust names are exported.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* The Rust side (variadic.rs). */
extern int easyio_preload_fd_is_ours(int fd);
extern int easyio_preload_place(int dirfd, const char *path);
extern ssize_t easyio_preload_getdents(int fd, void *buf, size_t n);

extern int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap);

/* ---- exec ------------------------------------------------------------------ */

/* The arguments after `arg` up to the NULL, counted as glibc counts them (E2BIG
 * past INT_MAX). */
static long count_args(va_list ap) {
    long argc = 1;
    while (va_arg(ap, const char *) != NULL) {
        if (argc == INT_MAX) {
            errno = E2BIG;
            return -1;
        }
        argc++;
    }
    return argc;
}

HIDDEN int easyio_c_execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    long argc = count_args(ap);
    va_end(ap);
    if (argc < 0)
        return -1;
    char *argv[argc + 1];
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (long i = 1; i <= argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return execv(path, argv);
}

HIDDEN int easyio_c_execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    long argc = count_args(ap);
    va_end(ap);
    if (argc < 0)
        return -1;
    char *argv[argc + 1];
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (long i = 1; i <= argc; i++)
        argv[i] = va_arg(ap, char *);
    char **envp = va_arg(ap, char **);
    va_end(ap);
    return execve(path, argv, envp);
}

HIDDEN int easyio_c_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    long argc = count_args(ap);
    va_end(ap);
    if (argc < 0)
        return -1;
    char *argv[argc + 1];
    va_start(ap, arg);
    argv[0] = (char *)arg;
    for (long i = 1; i <= argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    return execvp(file, argv);
}

/* ---- dprintf --------------------------------------------------------------- */

HIDDEN int easyio_c_dprintf(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

HIDDEN int easyio_c_dprintf_chk(int fd, int flag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = __vdprintf_chk(fd, flag, fmt, ap);
    va_end(ap);
    return r;
}

/* ---- syscall --------------------------------------------------------------- */

typedef long (*syscall_fn)(long, ...);

/* libc's syscall, found once (at load, and again if asked before). */
static syscall_fn real_syscall;

static syscall_fn resolve_syscall(void) {
    syscall_fn f = __atomic_load_n(&real_syscall, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        void *p = dlsym(RTLD_NEXT, "syscall");
        memcpy(&f, &p, sizeof f);
        __atomic_store_n(&real_syscall, f, __ATOMIC_RELEASE);
    }
    return f;
}

__attribute__((constructor)) static void resolve_at_load(void) { (void)resolve_syscall(); }

/* A result of a libc call returning an error number (posix_fadvise) as
 * syscall's: -1 and errno. */
static long errno_result(int e) {
    if (e == 0)
        return 0;
    errno = e;
    return -1;
}

/* A path of a system call the shim does not serve: the kernel's to judge (0), or
 * refused for the mount's (-1: EOPNOTSUPP, or the shim's errno for a path it
 * refuses). */
static int refuse_mount(int dirfd, long path) {
    int p = easyio_preload_place(dirfd, (const char *)path);
    if (p > 0)
        errno = EOPNOTSUPP;
    return p == 0 ? 0 : -1;
}

/* `utimensat` of two timevals (NULL: now). */
static long utimes_at(int dirfd, const char *path, const struct timeval *tv) {
    struct timespec ts[2];
    if (tv == NULL)
        return path == NULL ? futimens(dirfd, NULL) : utimensat(dirfd, path, NULL, 0);
    for (int i = 0; i < 2; i++) {
        ts[i].tv_sec = tv[i].tv_sec;
        ts[i].tv_nsec = tv[i].tv_usec * 1000;
    }
    return path == NULL ? futimens(dirfd, ts) : utimensat(dirfd, path, ts, 0);
}

/* `struct open_how` of openat2 (<linux/openat2.h>). */
struct open_how_ {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

#define P(x) ((const char *)(x))
#define V(x) ((void *)(x))

/* The system calls on names: each as the libc call of the same meaning. Sets
 * *done when it answered. */
static long names(long n, long a, long b, long c, long d, long e, int *done) {
    *done = 1;
    switch (n) {
    case SYS_open: return open(P(a), (int)b, (mode_t)c);
    case SYS_openat: return openat((int)a, P(b), (int)c, (mode_t)d);
    case SYS_creat: return creat(P(a), (mode_t)b);
    case SYS_stat: return stat(P(a), V(b));
    case SYS_lstat: return lstat(P(a), V(b));
    case SYS_newfstatat: return fstatat((int)a, P(b), V(c), (int)d);
    case SYS_statx: return statx((int)a, P(b), (int)c, (unsigned)d, V(e));
    case SYS_access: return access(P(a), (int)b);
    case SYS_faccessat: return faccessat((int)a, P(b), (int)c, 0);
#ifdef SYS_faccessat2
    case SYS_faccessat2: return faccessat((int)a, P(b), (int)c, (int)d);
#endif
    case SYS_mkdir: return mkdir(P(a), (mode_t)b);
    case SYS_mkdirat: return mkdirat((int)a, P(b), (mode_t)c);
    case SYS_unlink: return unlink(P(a));
    case SYS_unlinkat: return unlinkat((int)a, P(b), (int)c);
    case SYS_rmdir: return rmdir(P(a));
    case SYS_rename: return rename(P(a), P(b));
    case SYS_renameat: return renameat((int)a, P(b), (int)c, P(d));
    case SYS_renameat2: return renameat2((int)a, P(b), (int)c, P(d), (unsigned)e);
    case SYS_link: return link(P(a), P(b));
    case SYS_linkat: return linkat((int)a, P(b), (int)c, P(d), (int)e);
    case SYS_symlink: return symlink(P(a), P(b));
    case SYS_symlinkat: return symlinkat(P(a), (int)b, P(c));
    case SYS_readlink: return readlink(P(a), V(b), (size_t)c);
    case SYS_readlinkat: return readlinkat((int)a, P(b), V(c), (size_t)d);
    case SYS_chmod: return chmod(P(a), (mode_t)b);
    case SYS_fchmodat: return fchmodat((int)a, P(b), (mode_t)c, 0);
#ifdef SYS_fchmodat2
    case SYS_fchmodat2: return fchmodat((int)a, P(b), (mode_t)c, (int)d);
#endif
    case SYS_chown: return chown(P(a), (uid_t)b, (gid_t)c);
    case SYS_lchown: return lchown(P(a), (uid_t)b, (gid_t)c);
    case SYS_fchownat: return fchownat((int)a, P(b), (uid_t)c, (gid_t)d, (int)e);
    case SYS_mknod: return mknod(P(a), (mode_t)b, (dev_t)c);
    case SYS_mknodat: return mknodat((int)a, P(b), (mode_t)c, (dev_t)d);
    case SYS_truncate: return truncate(P(a), (off_t)b);
    case SYS_utimensat: return utimensat((int)a, P(b), V(c), (int)d);
    case SYS_utimes: return utimes_at(AT_FDCWD, P(a), V(b));
    case SYS_futimesat: return utimes_at((int)a, P(b), V(c));
    case SYS_utime: {
        const struct utimbuf *t = V(b);
        struct timeval tv[2] = {{t ? t->actime : 0, 0}, {t ? t->modtime : 0, 0}};
        return utimes_at(AT_FDCWD, P(a), t ? tv : NULL);
    }
    case SYS_getcwd: {
        char *r = getcwd(V(a), (size_t)b);
        return r == NULL ? -1 : (long)strlen(r) + 1;
    }
    case SYS_chdir: return chdir(P(a));
    case SYS_statfs: return statfs(P(a), V(b));
    case SYS_getxattr: return getxattr(P(a), P(b), V(c), (size_t)d);
    case SYS_lgetxattr: return lgetxattr(P(a), P(b), V(c), (size_t)d);
    case SYS_setxattr: return setxattr(P(a), P(b), V(c), (size_t)d, (int)e);
    case SYS_lsetxattr: return lsetxattr(P(a), P(b), V(c), (size_t)d, (int)e);
    case SYS_listxattr: return listxattr(P(a), V(b), (size_t)c);
    case SYS_llistxattr: return llistxattr(P(a), V(b), (size_t)c);
    case SYS_removexattr: return removexattr(P(a), P(b));
    case SYS_lremovexattr: return lremovexattr(P(a), P(b));
    case SYS_execve: return execve(P(a), V(b), V(c));
#ifdef SYS_openat2
    case SYS_openat2: {
        const struct open_how_ *how = V(c);
        int p = easyio_preload_place((int)a, P(b));
        if (p < 0)
            return -1;
        if (p == 0 || how == NULL)
            break; /* the kernel's: its own checks of `how` */
        if (how->resolve != 0) {
            errno = EOPNOTSUPP;
            return -1;
        }
        return openat((int)a, P(b), (int)how->flags, (mode_t)how->mode);
    }
#endif
    /* Calls on names the file system has no answer for: refused for the mount. */
    case SYS_inotify_add_watch:
        if (refuse_mount(AT_FDCWD, b))
            return -1;
        break;
    case SYS_name_to_handle_at:
        if (refuse_mount((int)a, b))
            return -1;
        break;
    case SYS_execveat:
        if (refuse_mount((int)a, b))
            return -1;
        break;
    case SYS_chroot:
        if (refuse_mount(AT_FDCWD, a))
            return -1;
        break;
    case SYS_mount:
        if (refuse_mount(AT_FDCWD, b))
            return -1;
        break;
    case SYS_umount2:
        if (refuse_mount(AT_FDCWD, a))
            return -1;
        break;
    }
    *done = 0;
    return 0;
}

/* The system calls on descriptors. */
static long descriptors(long n, long a, long b, long c, long d, long e, long f, int *done) {
    *done = 1;
    switch (n) {
    case SYS_read: return read((int)a, V(b), (size_t)c);
    case SYS_write: return write((int)a, V(b), (size_t)c);
    case SYS_pread64: return pread((int)a, V(b), (size_t)c, (off_t)d);
    case SYS_pwrite64: return pwrite((int)a, V(b), (size_t)c, (off_t)d);
    case SYS_readv: return readv((int)a, V(b), (int)c);
    case SYS_writev: return writev((int)a, V(b), (int)c);
    case SYS_preadv: return preadv((int)a, V(b), (int)c, (off_t)d);
    case SYS_pwritev: return pwritev((int)a, V(b), (int)c, (off_t)d);
    case SYS_preadv2: return preadv2((int)a, V(b), (int)c, (off_t)d, (int)f);
    case SYS_pwritev2: return pwritev2((int)a, V(b), (int)c, (off_t)d, (int)f);
    case SYS_lseek: return lseek((int)a, (off_t)b, (int)c);
    case SYS_close: return close((int)a);
    case SYS_fstat: return fstat((int)a, V(b));
    case SYS_fstatfs: return fstatfs((int)a, V(b));
    case SYS_fsync: return fsync((int)a);
    case SYS_fdatasync: return fdatasync((int)a);
    case SYS_syncfs: return syncfs((int)a);
    case SYS_ftruncate: return ftruncate((int)a, (off_t)b);
    case SYS_fallocate: return fallocate((int)a, (int)b, (off_t)c, (off_t)d);
    case SYS_fadvise64: return errno_result(posix_fadvise((int)a, (off_t)b, (off_t)c, (int)d));
    case SYS_dup: return dup((int)a);
    case SYS_dup2: return dup2((int)a, (int)b);
    case SYS_dup3: return dup3((int)a, (int)b, (int)c);
    case SYS_fcntl: return fcntl((int)a, (int)b, V(c));
    case SYS_ioctl: return ioctl((int)a, (unsigned long)b, V(c));
    case SYS_flock: return flock((int)a, (int)b);
    case SYS_fchmod: return fchmod((int)a, (mode_t)b);
    case SYS_fchown: return fchown((int)a, (uid_t)b, (gid_t)c);
    case SYS_fchdir: return fchdir((int)a);
    case SYS_copy_file_range:
        return copy_file_range((int)a, V(b), (int)c, V(d), (size_t)e, (unsigned)f);
    case SYS_sendfile: return sendfile((int)a, (int)b, V(c), (size_t)d);
    case SYS_getdents64: return getdents64((int)a, V(b), (size_t)c);
    case SYS_getdents:
        if (easyio_preload_fd_is_ours((int)a))
            return easyio_preload_getdents((int)a, V(b), (size_t)c);
        break;
    case SYS_fgetxattr: return fgetxattr((int)a, P(b), V(c), (size_t)d);
    case SYS_fsetxattr: return fsetxattr((int)a, P(b), V(c), (size_t)d, (int)e);
    case SYS_flistxattr: return flistxattr((int)a, V(b), (size_t)c);
    case SYS_fremovexattr: return fremovexattr((int)a, P(b));
    case SYS_mmap: {
        void *p = mmap(V(a), (size_t)b, (int)c, (int)d, (int)e, (off_t)f);
        return p == MAP_FAILED ? -1 : (long)p;
    }
    /* Hints with nothing to do on the mount (every write is durable). */
    case SYS_readahead:
    case SYS_sync_file_range:
        if (easyio_preload_fd_is_ours((int)a))
            return n == SYS_readahead ? 0 : fsync((int)a);
        break;
    case SYS_fork: return fork();
    }
    *done = 0;
    return 0;
}

HIDDEN long easyio_c_syscall(long n, ...) {
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    int done;
    long r = names(n, a, b, c, d, e, &done);
    if (done)
        return r;
    r = descriptors(n, a, b, c, d, e, f, &done);
    if (done)
        return r;
    return resolve_syscall()(n, a, b, c, d, e, f);
}
